"""Transactions beside the idempotent producer, and read_committed beside read_uncommitted.

``python -m benchmarks.transactions [--records N] [--rounds R] [--output BENCHMARKS.md] [--no-write]``

One ``strom broker`` on 127.0.0.1. Producers: confluent-kafka (librdkafka), 100-byte values, 6
partitions of a fresh topic per case, linger 5 ms, 1 MiB batches, at most 5 requests in flight,
one producer process (a transactional id is one producer):

- idempotent: ``enable.idempotence`` on, no transactions;
- transactional, 10,000 records per transaction: ``begin_transaction``, the records,
  ``commit_transaction``, again;
- transactional, 100 records per transaction (each commit waits for its EndTxn and its markers:
  the round trips dominate).

The time runs from the first ``produce`` to the last acknowledgement (``flush`` / the last
commit). Consumers: one confluent-kafka process reading the 10,000-per-transaction topic from the
start to its end, with ``isolation.level`` read_uncommitted, then read_committed (the markers and
the last stable offset are on the read_committed path). Each round runs every case once; the table
has the median of the rounds. Broker CPU per record beside each figure.

The results replace the section between ``<!-- transactions:start -->`` and
``<!-- transactions:end -->`` in the output file.
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import confluent_kafka
from confluent_kafka import Consumer, Producer, TopicPartition

from benchmarks.harness import Broker, cpu_seconds
from benchmarks.report import replace_section
from benchmarks.run import create_topic, machine_description

RECORD_BYTES = 100
PARTITIONS = 6
CASE_TIMEOUT_S = 600.0
PRODUCER_CONFIG: dict[str, object] = {
    "linger.ms": 5,
    "batch.size": 1024 * 1024,
    "queue.buffering.max.messages": 1_000_000,
    "queue.buffering.max.kbytes": 1024 * 1024,
    "max.in.flight.requests.per.connection": 5,
    "compression.type": "none",
    "enable.idempotence": True,
}
PER_TRANSACTION = (10_000, 100)
IDEMPOTENT = "idempotent producer"
BAR_TRANSACTIONAL_SHARE = 0.8
BAR_READ_COMMITTED_SHARE = 0.9


def case_name(per_transaction: int | None) -> str:
    return (
        IDEMPOTENT
        if per_transaction is None
        else f"transactional, {per_transaction:,} records per transaction"
    )


def _produce(bootstrap: str, topic: str, count: int, per_transaction: int | None, out: object) -> None:
    config = {"bootstrap.servers": bootstrap, **PRODUCER_CONFIG}
    if per_transaction is not None:
        config["transactional.id"] = f"bench-{topic}"
    producer = Producer(config)
    producer.list_topics(topic, timeout=30)
    if per_transaction is not None:
        producer.init_transactions(60)
    value = os.urandom(RECORD_BYTES)
    produce, poll = producer.produce, producer.poll
    started = time.time()
    in_transaction = 0
    for index in range(count):
        if per_transaction is not None and in_transaction == 0:
            producer.begin_transaction()
        try:
            produce(topic, value, partition=index % PARTITIONS)
        except BufferError:
            poll(0.01)
            produce(topic, value, partition=index % PARTITIONS)
        if index % 10_000 == 0:
            poll(0)
        if per_transaction is not None:
            in_transaction += 1
            if in_transaction == per_transaction:
                producer.commit_transaction(60)
                in_transaction = 0
    if per_transaction is not None and in_transaction:
        producer.commit_transaction(60)
    remaining = producer.flush(CASE_TIMEOUT_S)
    out.put((started, time.time(), remaining))  # type: ignore[attr-defined]


def _consume(bootstrap: str, topic: str, count: int, isolation: str, out: object) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{isolation}-{time.time()}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "fetch.max.bytes": 50 * 1024 * 1024,
            "max.partition.fetch.bytes": 10 * 1024 * 1024,
        }
    )
    consumer.list_topics(topic, timeout=30)
    started = time.time()
    consumer.assign([TopicPartition(topic, partition, 0) for partition in range(PARTITIONS)])
    read = 0
    deadline = time.monotonic() + CASE_TIMEOUT_S
    while read < count and time.monotonic() < deadline:
        for message in consumer.consume(num_messages=100_000, timeout=1.0):
            if message.error() is None:
                read += 1
    ended = time.time()
    consumer.close()
    out.put((started, ended, read))  # type: ignore[attr-defined]


@dataclass
class Figure:
    case: str
    records: int
    seconds: float
    broker_cpu_s: float

    @property
    def per_s(self) -> float:
        return self.records / self.seconds

    @property
    def cpu_us(self) -> float:
        return self.broker_cpu_s / self.records * 1e6


def _run(target: object, args: tuple[object, ...], broker: Broker) -> tuple[tuple[object, ...], float]:
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    worker = context.Process(target=target, args=(*args, out))
    cpu_before = cpu_seconds(broker.process.pid)
    worker.start()
    result = out.get(timeout=CASE_TIMEOUT_S)
    cpu = cpu_seconds(broker.process.pid) - cpu_before
    worker.join(30)
    return result, cpu


def produce_case(broker: Broker, topic: str, count: int, per_transaction: int | None) -> Figure:
    create_topic(broker.bootstrap, topic, PARTITIONS)
    (started, ended, remaining), cpu = _run(
        _produce, (broker.bootstrap, topic, count, per_transaction), broker
    )
    assert remaining == 0, f"{remaining} records undelivered"
    return Figure(case_name(per_transaction), count, ended - started, cpu)


def consume_case(broker: Broker, topic: str, count: int, isolation: str) -> Figure:
    (started, ended, read), cpu = _run(_consume, (broker.bootstrap, topic, count, isolation), broker)
    assert read == count, f"read {read} of {count}"
    return Figure(f"consume, {isolation}", count, ended - started, cpu)


def run(count: int, small_count: int, rounds: int) -> dict[str, list[Figure]]:
    figures: dict[str, list[Figure]] = {}
    with tempfile.TemporaryDirectory(prefix="strom-bench-txn-") as temp:
        broker = Broker(Path(temp))
        try:
            produce_case(broker, "warmup-idempotent", count // 4, None)
            produce_case(broker, "warmup-transactional", count // 4, PER_TRANSACTION[0])
            for round_index in range(rounds):
                for per_transaction in (None, *PER_TRANSACTION):
                    records = small_count if per_transaction == PER_TRANSACTION[1] else count
                    topic = f"t-{round_index}-{per_transaction or 0}"
                    figure = produce_case(broker, topic, records, per_transaction)
                    figures.setdefault(figure.case, []).append(figure)
                    print(f"round {round_index + 1} {figure.case}: {figure.per_s:,.0f} rec/s", flush=True)
                committed_topic = f"t-{round_index}-{PER_TRANSACTION[0]}"
                for isolation in ("read_uncommitted", "read_committed"):
                    figure = consume_case(broker, committed_topic, count, isolation)
                    figures.setdefault(figure.case, []).append(figure)
                    print(f"round {round_index + 1} {figure.case}: {figure.per_s:,.0f} rec/s", flush=True)
        finally:
            broker.stop()
    return figures


def median_figure(figures: list[Figure]) -> Figure:
    return sorted(figures, key=lambda figure: figure.per_s)[len(figures) // 2]


def render(
    figures: dict[str, list[Figure]], count: int, small_count: int, rounds: int, loads: tuple[str, str]
) -> str:
    def median_rate(case: str) -> float:
        return statistics.median(f.per_s for f in figures[case])

    idempotent = median_rate(IDEMPOTENT)
    big = median_rate(case_name(PER_TRANSACTION[0]))
    small = median_rate(case_name(PER_TRANSACTION[1]))
    uncommitted = median_rate("consume, read_uncommitted")
    committed = median_rate("consume, read_committed")
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "## Transactions (`python -m benchmarks.transactions`)",
        "",
        f"Run: {now}. Machine: {machine_description()}; load average {loads[0]} at the start and"
        f" {loads[1]} at the end (the machine is shared: the figures are compared within this run).",
        f"Clients: confluent-kafka {confluent_kafka.version()}, librdkafka {confluent_kafka.libversion()[0]};"
        f" one producer process, {RECORD_BYTES} B records, {PARTITIONS} partitions, linger 5 ms, 1 MiB batches,"
        f" 5 requests in flight; {count:,} records per case ({small_count:,} at 100 per transaction);"
        f" median of {rounds} round(s).",
        "",
        "| case | records/s (median) | every round | broker CPU µs/record | vs idempotent / read_uncommitted |",
        "|---|---:|---|---:|---:|",
    ]
    baselines = {
        IDEMPOTENT: idempotent,
        case_name(PER_TRANSACTION[0]): idempotent,
        case_name(PER_TRANSACTION[1]): idempotent,
        "consume, read_uncommitted": uncommitted,
        "consume, read_committed": uncommitted,
    }
    for case, baseline in baselines.items():
        rows = figures[case]
        middle = median_figure(rows)
        every = ", ".join(f"{f.per_s:,.0f}" for f in rows)
        lines.append(
            f"| {case} | {median_rate(case):,.0f} | {every} | {middle.cpu_us:.2f} | {median_rate(case) / baseline:.2f} |"
        )
    lines += [
        "",
        f"Bars: 10,000 records per transaction ≥ {BAR_TRANSACTIONAL_SHARE:.0%} of the idempotent producer:"
        f" {big / idempotent:.0%}, **{'met' if big / idempotent >= BAR_TRANSACTIONAL_SHARE else 'not met'}**;"
        f" 100 records per transaction (reported): {small / idempotent:.0%};"
        f" read_committed ≥ {BAR_READ_COMMITTED_SHARE:.0%} of read_uncommitted on the same data:"
        f" {committed / uncommitted:.0%}, **{'met' if committed / uncommitted >= BAR_READ_COMMITTED_SHARE else 'not met'}**.",
        "",
        "How measured: see the docstring of `benchmarks/transactions.py`.",
    ]
    return "\n".join(lines) + "\n"


def load_average() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=1_000_000, help="records per case (default 1,000,000)")
    parser.add_argument("--small-records", type=int, default=100_000, help="records at 100 per transaction")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--output", default="BENCHMARKS.md")
    parser.add_argument("--no-write", action="store_true")
    arguments = parser.parse_args()
    start_load = load_average()
    figures = run(arguments.records, arguments.small_records, arguments.rounds)
    text = render(
        figures, arguments.records, arguments.small_records, arguments.rounds, (start_load, load_average())
    )
    print(text)
    if not arguments.no_write:
        replace_section(Path(arguments.output), "transactions", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
