"""strom's Python client beside confluent-kafka, kafka-python and aiokafka, measured in one run.

``python -m benchmarks.clients [--records N] [--rounds R] [--value-bytes B] [--only NAMES] [--before REV]
[--output BENCHMARKS.md] [--no-write]``

One local strom broker (started and stopped here, 127.0.0.1 only) serves every case. Each case runs
in a fresh process (spawned, so no client's threads or memory linger into the next one):

- produce: N records of 100-byte values to a fresh 1-partition topic, acks=1, linger 5 ms, no
  compression, 1 MiB batches; the clock runs from the first send to the return of the flush that
  leaves every record acknowledged. The producer first sends a warm-up topic's worth of records.
- consume: the same N records read back from offset 0 with manual assignment (strom ``poll``,
  confluent ``consume(num_messages=...)`` with ``queued.min.messages`` raised, kafka-python ``poll``,
  aiokafka ``getmany``); the clock runs from ``assign`` to the N-th record. The consumer first reads
  the warm-up topic.

Cases are interleaved (round 1: every client once, round 2: every client again in another order...)
so that the noise of a shared 2-core machine falls on all clients alike; the table shows the median
of the rounds and every round's figure. The results go into ``BENCHMARKS.md`` between the markers
``<!-- clients:start -->`` and ``<!-- clients:end -->`` (added at the end when absent); the rest of
the file is left as it is.

``--before REV`` adds a case "strom REV": strom's client from ``src`` of git revision REV (exported
with ``git archive``) against the same broker, interleaved with the others, to compare a change to
the client with what it was in the same run. ``--value-bytes`` changes the record size (default 100).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.run import Broker, create_topic, machine_description
from benchmarks.validation import export_source

MIB = 1024 * 1024
VALUE_BYTES = 100
RECORDS_DEFAULT = 300_000
WARM_UP_RECORDS = 30_000
ROUNDS_DEFAULT = 3
BATCH_BYTES = MIB
LINGER_MS = 5
CONSUME_CHUNK_RECORDS = 10_000
CASE_TIMEOUT_S = 300.0
START_MARKER = "<!-- clients:start -->"
END_MARKER = "<!-- clients:end -->"

# -- producers (each returns the seconds the measured part took) ----------------------------------


def _produce_strom(bootstrap: str, topics: tuple[str, str], count: int, value: bytes) -> float:
    from strom.client.producer import Producer

    producer = Producer(
        bootstrap_servers=bootstrap,
        acks=1,
        linger_ms=LINGER_MS,
        batch_size=BATCH_BYTES,
        max_request_size=4 * MIB,
        compression_type="none",
        enable_idempotence=False,  # as for the other clients
    )
    try:
        seconds = 0.0
        for topic, records in ((topics[0], WARM_UP_RECORDS), (topics[1], count)):
            producer.partitions_for(topic)  # metadata in hand before the clock starts
            send = producer.send
            started = time.perf_counter()
            for _ in range(records):
                send(topic, value)
            producer.flush(CASE_TIMEOUT_S)
            seconds = time.perf_counter() - started
        return seconds
    finally:
        producer.close()


_CONFLUENT_PRODUCER = {
    "acks": 1,
    "linger.ms": LINGER_MS,
    "batch.size": BATCH_BYTES,
    "batch.num.messages": 100_000,
    "queue.buffering.max.messages": 2_000_000,
    "queue.buffering.max.kbytes": 1024 * 1024,
    "compression.type": "none",
    "enable.idempotence": False,
}


def _confluent_producer(bootstrap: str) -> Any:
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": bootstrap, **_CONFLUENT_PRODUCER})


def _produce_confluent(bootstrap: str, topics: tuple[str, str], count: int, value: bytes) -> float:
    producer = _confluent_producer(bootstrap)
    seconds = 0.0
    for topic, records in ((topics[0], WARM_UP_RECORDS), (topics[1], count)):
        producer.list_topics(topic, timeout=30)
        produce = producer.produce
        poll = producer.poll
        started = time.perf_counter()
        for index in range(records):
            try:
                produce(topic, value)
            except BufferError:
                poll(0.01)
                produce(topic, value)
            if index % 10_000 == 0:
                poll(0)
        remaining = producer.flush(CASE_TIMEOUT_S)
        seconds = time.perf_counter() - started
        assert remaining == 0, f"{remaining} records undelivered"
    return seconds


def _produce_confluent_batch(bootstrap: str, topics: tuple[str, str], count: int, value: bytes) -> float:
    producer = _confluent_producer(bootstrap)
    seconds = 0.0
    chunk = 10_000
    for topic, records in ((topics[0], WARM_UP_RECORDS), (topics[1], count)):
        producer.list_topics(topic, timeout=30)
        started = time.perf_counter()
        sent = 0
        while sent < records:
            size = min(chunk, records - sent)
            # A fresh list of dicts per call: produce_batch marks failed entries in place, and
            # building the messages is part of what an application pays.
            queued = producer.produce_batch(topic, [{"value": value} for _ in range(size)])
            sent += queued
            producer.poll(0)
            if queued < size:
                producer.poll(0.01)
        remaining = producer.flush(CASE_TIMEOUT_S)
        seconds = time.perf_counter() - started
        assert remaining == 0, f"{remaining} records undelivered"
    return seconds


def _produce_kafka_python(bootstrap: str, topics: tuple[str, str], count: int, value: bytes) -> float:
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        acks=1,
        linger_ms=LINGER_MS,
        batch_size=BATCH_BYTES,
        max_request_size=4 * MIB,
        compression_type=None,
    )
    try:
        seconds = 0.0
        for topic, records in ((topics[0], WARM_UP_RECORDS), (topics[1], count)):
            producer.partitions_for(topic)
            send = producer.send
            started = time.perf_counter()
            for _ in range(records):
                send(topic, value)
            producer.flush(CASE_TIMEOUT_S)
            seconds = time.perf_counter() - started
        return seconds
    finally:
        producer.close(10)


def _produce_aiokafka(bootstrap: str, topics: tuple[str, str], count: int, value: bytes) -> float:
    async def run() -> float:
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            acks=1,
            linger_ms=LINGER_MS,
            max_batch_size=BATCH_BYTES,
            max_request_size=4 * MIB,
            compression_type=None,
        )
        await producer.start()
        try:
            seconds = 0.0
            for topic, records in ((topics[0], WARM_UP_RECORDS), (topics[1], count)):
                await producer.partitions_for(topic)
                send = producer.send
                started = time.perf_counter()
                # send() awaits only when its batch is full; the futures resolve on flush.
                for _ in range(records):
                    await send(topic, value)
                await producer.flush()
                seconds = time.perf_counter() - started
            return seconds
        finally:
            await producer.stop()

    return asyncio.run(run())


# -- consumers ------------------------------------------------------------------------------------


def _consume_strom(bootstrap: str, topic: str, count: int) -> float:
    from strom.client.consumer import Consumer

    consumer = Consumer(
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=4 * MIB,
        fetch_max_bytes=64 * MIB,
        max_poll_records=CONSUME_CHUNK_RECORDS,
    )
    try:
        consumer.beginning_offsets([(topic, 0)])  # metadata in hand before the clock starts
        poll = consumer.poll
        started = time.perf_counter()
        consumer.assign([(topic, 0)])
        consumer.seek((topic, 0), 0)
        read = 0
        deadline = started + CASE_TIMEOUT_S
        while read < count and time.perf_counter() < deadline:
            read += len(poll(1000))
        seconds = time.perf_counter() - started
        assert read == count, f"read {read} of {count}"
        return seconds
    finally:
        consumer.close()


def _consume_confluent(bootstrap: str, topic: str, count: int) -> float:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "strom-client-benchmark",  # never joined: manual assignment, no commits
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "fetch.max.bytes": 64 * MIB,
            "max.partition.fetch.bytes": 4 * MIB,
            # Without these librdkafka pauses fetching for a second whenever one large fetch of
            # small records overfills its local queue (see BENCHMARKS.md, "How measured").
            "queued.min.messages": 2_000_000,
            "queued.max.messages.kbytes": 1024 * 1024,
            "fetch.queue.backoff.ms": 10,
            "fetch.wait.max.ms": 100,
        }
    )
    try:
        consumer.list_topics(topic, timeout=30)
        consume = consumer.consume
        started = time.perf_counter()
        consumer.assign([TopicPartition(topic, 0, 0)])
        read = 0
        deadline = started + CASE_TIMEOUT_S
        while read < count and time.perf_counter() < deadline:
            for message in consume(num_messages=CONSUME_CHUNK_RECORDS, timeout=1.0):
                if message.error() is None:
                    read += 1
        seconds = time.perf_counter() - started
        assert read == count, f"read {read} of {count}"
        return seconds
    finally:
        consumer.close()


def _consume_kafka_python(bootstrap: str, topic: str, count: int) -> float:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=4 * MIB,
        fetch_max_bytes=64 * MIB,
        max_poll_records=CONSUME_CHUNK_RECORDS,
    )
    try:
        consumer.partitions_for_topic(topic)
        started = time.perf_counter()
        partition = TopicPartition(topic, 0)
        consumer.assign([partition])
        consumer.seek(partition, 0)
        read = 0
        deadline = started + CASE_TIMEOUT_S
        while read < count and time.perf_counter() < deadline:
            for batch in consumer.poll(1000, max_records=CONSUME_CHUNK_RECORDS).values():
                read += len(batch)
        seconds = time.perf_counter() - started
        assert read == count, f"read {read} of {count}"
        return seconds
    finally:
        consumer.close()


def _consume_aiokafka(bootstrap: str, topic: str, count: int) -> float:
    async def run() -> float:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=4 * MIB,
            fetch_max_bytes=64 * MIB,
        )
        await consumer.start()
        try:
            consumer.partitions_for_topic(topic)  # plain method in aiokafka
            started = time.perf_counter()
            partition = TopicPartition(topic, 0)
            consumer.assign([partition])
            consumer.seek(partition, 0)
            read = 0
            deadline = started + CASE_TIMEOUT_S
            while read < count and time.perf_counter() < deadline:
                fetched = await consumer.getmany(timeout_ms=1000, max_records=CONSUME_CHUNK_RECORDS)
                for batch in fetched.values():
                    read += len(batch)
            seconds = time.perf_counter() - started
            assert read == count, f"read {read} of {count}"
            return seconds
        finally:
            await consumer.stop()

    return asyncio.run(run())


def _consume_warm(consume: ConsumeFunction, bootstrap: str, topics: tuple[str, str], count: int) -> float:
    """Read the warm-up topic, then the measured one with a new client in the same process (a
    client reassigned from a caught-up partition may first wait out that partition's long poll)."""
    consume(bootstrap, topics[0], WARM_UP_RECORDS)
    return consume(bootstrap, topics[1], count)


ProduceFunction = Callable[[str, tuple[str, str], int, bytes], float]
ConsumeFunction = Callable[[str, str, int], float]


@dataclass(frozen=True)
class ClientCase:
    name: str
    produce: ProduceFunction
    consume: ConsumeFunction | None
    # strom's ``src`` of another revision to import in the case's process (None: this tree's).
    source: str | None = None


CLIENTS = (
    ClientCase("strom", _produce_strom, _consume_strom),
    ClientCase("confluent-kafka", _produce_confluent, _consume_confluent),
    ClientCase("confluent-kafka produce_batch", _produce_confluent_batch, None),
    ClientCase("kafka-python", _produce_kafka_python, _consume_kafka_python),
    ClientCase("aiokafka", _produce_aiokafka, _consume_aiokafka),
)


# -- running ----------------------------------------------------------------------------------------


def _in_child(
    function: Callable[..., float], arguments: tuple[Any, ...], source: str | None, out: Any
) -> None:
    if source:
        sys.path.insert(0, source)  # another revision's strom, imported first
    try:
        out.put(("ok", function(*arguments)))
    except BaseException as error:  # reported to the parent, which fails the run
        out.put(("error", repr(error)))


def run_isolated(function: Callable[..., float], *arguments: Any, source: str | None = None) -> float:
    """Run ``function(*arguments)`` in a fresh spawned process (importing strom from ``source``
    when given) and return its seconds."""
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    child = context.Process(target=_in_child, args=(function, arguments, source, out))
    child.start()
    try:
        status, answer = out.get(timeout=CASE_TIMEOUT_S * 2)
    finally:
        child.join(30)
        if child.is_alive():
            child.kill()
    if status != "ok":
        raise RuntimeError(f"{function.__name__} failed: {answer}")
    return float(answer)


@dataclass
class Figures:
    produce_rates: dict[str, list[float]] = field(default_factory=dict)
    consume_rates: dict[str, list[float]] = field(default_factory=dict)


def measure(
    records: int, rounds: int, clients: tuple[ClientCase, ...], value_bytes: int = VALUE_BYTES
) -> Figures:
    figures = Figures()
    value = os.urandom(value_bytes)
    with tempfile.TemporaryDirectory(prefix="strom-client-bench-") as work_dir:
        broker = Broker(Path(work_dir))
        try:
            for round_index in range(rounds):
                # Rotate the order each round so no client always runs first or last.
                shift = round_index % len(clients)
                for case in clients[shift:] + clients[:shift]:
                    slug = case.name.replace(" ", "-")
                    topics = (f"warm-{slug}-{round_index}", f"bench-{slug}-{round_index}")
                    for topic in topics:
                        create_topic(broker.bootstrap, topic, 1)
                    seconds = run_isolated(
                        case.produce, broker.bootstrap, topics, records, value, source=case.source
                    )
                    rate = records / seconds
                    figures.produce_rates.setdefault(case.name, []).append(rate)
                    line = f"round {round_index + 1}: {case.name:<30} produce {rate:>11,.0f} rec/s"
                    if case.consume is not None:
                        seconds = run_isolated(
                            _consume_warm, case.consume, broker.bootstrap, topics, records, source=case.source
                        )
                        rate = records / seconds
                        figures.consume_rates.setdefault(case.name, []).append(rate)
                        line += f"   consume {rate:>11,.0f} rec/s"
                    print(line, flush=True)
        finally:
            broker.stop()
    return figures


def _versions() -> str:
    from importlib.metadata import version

    import confluent_kafka

    return (
        f"confluent-kafka {version('confluent-kafka')} (librdkafka {confluent_kafka.libversion()[0]}),"
        f" kafka-python {version('kafka-python')}, aiokafka {version('aiokafka')}"
    )


def _ratio(numerator: list[float] | None, denominator: list[float] | None) -> str:
    if not numerator or not denominator:
        return "-"
    return f"{statistics.median(numerator) / statistics.median(denominator):.2f}"


def render(
    figures: Figures,
    records: int,
    rounds: int,
    clients: tuple[ClientCase, ...] = CLIENTS,
    value_bytes: int = VALUE_BYTES,
) -> str:
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [
        "## Python clients side by side",
        "",
        f"Run: {when} with `python -m benchmarks.clients` ({records:,} records of {value_bytes} B per case,"
        f" {rounds} interleaved rounds, median shown, each round in brackets).",
        f"Machine: {machine_description()}. Clients: {_versions()}.",
        "",
        "| client | produce rec/s | consume rec/s |",
        "|---|---:|---:|",
    ]

    def cell(rates: list[float] | None) -> str:
        if not rates:
            return "-"
        each = ", ".join(f"{rate / 1000:,.0f}k" for rate in rates)
        return f"{statistics.median(rates):,.0f} ({each})"

    for case in clients:
        if case.name not in figures.produce_rates:
            continue
        lines.append(
            f"| {case.name} | {cell(figures.produce_rates.get(case.name))} |"
            f" {cell(figures.consume_rates.get(case.name))} |"
        )
    produce, consume = figures.produce_rates, figures.consume_rates
    lines += [
        "",
        "| strom / other (medians) | produce | consume |",
        "|---|---:|---:|",
    ]
    others = [case.name for case in clients if case.name != "strom"]
    for other in others:
        if other in produce:
            lines.append(
                f"| strom / {other} | {_ratio(produce.get('strom'), produce.get(other))} |"
                f" {_ratio(consume.get('strom'), consume.get(other))} |"
            )
    lines += [
        "",
        "How measured: one strom broker on 127.0.0.1 shared by every case; each case in a fresh",
        f"process; 1-partition topics; acks=1, linger {LINGER_MS} ms, no compression, {BATCH_BYTES // MIB} MiB",
        f"batches, {value_bytes}-byte values without keys. Produce: from the first send to the return of the",
        "flush after which every record is acknowledged (strom `send()`, confluent `produce()` with",
        "`poll(0)` every 10,000, or `produce_batch` of 10,000 dicts; kafka-python `send()` + `flush()`;",
        "aiokafka `await send()` + `flush()`). Consume: from `assign` at offset 0 until every record is",
        "in the application's hands (strom `poll`, confluent `consume(num_messages=10000)` with",
        "`queued.min.messages` raised, kafka-python `poll`, aiokafka `getmany`). Every process first",
        f"produces or reads a warm-up topic of {WARM_UP_RECORDS:,} records. The broker and the client",
        "share the machine's CPUs.",
    ]
    return "\n".join(lines) + "\n"


def write_section(path: Path, section: str) -> None:
    """Replace the text between the markers in ``path`` (adding them at the end when absent)."""
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    block = f"{START_MARKER}\n{section}{END_MARKER}\n"
    start = text.find(START_MARKER)
    end = text.find(END_MARKER, start + 1) if start >= 0 else -1
    if start >= 0 and end >= 0:
        text = text[:start] + block + text[end + len(END_MARKER) :].lstrip("\n")
    else:
        if text and not text.endswith("\n"):
            text += "\n"
        text += ("\n" if text else "") + block
    path.write_text(text, encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=RECORDS_DEFAULT, help="records per case")
    parser.add_argument("--rounds", type=int, default=ROUNDS_DEFAULT, help="interleaved rounds")
    parser.add_argument("--only", default="", help="comma-separated client names to run (default: all)")
    parser.add_argument("--value-bytes", type=int, default=VALUE_BYTES, help="bytes per record value")
    parser.add_argument("--before", default="", help="also measure strom's client of this git revision")
    parser.add_argument("--output", default="BENCHMARKS.md", help="the file whose section is rewritten")
    parser.add_argument("--no-write", action="store_true", help="print only")
    arguments = parser.parse_args()
    wanted = {name.strip() for name in arguments.only.split(",") if name.strip()}
    clients = tuple(case for case in CLIENTS if not wanted or case.name in wanted)
    with tempfile.TemporaryDirectory(prefix="strom-client-before-") as before_dir:
        if arguments.before:
            source = export_source(arguments.before, Path(before_dir))
            strom = next(case for case in CLIENTS if case.name == "strom")
            clients += (ClientCase(f"strom {arguments.before}", strom.produce, strom.consume, str(source)),)
        figures = measure(arguments.records, arguments.rounds, clients, arguments.value_bytes)
    section = render(figures, arguments.records, arguments.rounds, clients, arguments.value_bytes)
    print(section)
    if not arguments.no_write:
        write_section(Path(arguments.output), section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
