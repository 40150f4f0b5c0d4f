"""Produce and consume throughput of a strom broker under confluent-kafka load, beside two ceilings.

``python -m benchmarks.run [--quick] [--producers N] [--output BENCHMARKS.md]``

What is measured, in one run, on 127.0.0.1 only:

- strom produce: N producer processes (confluent-kafka, acks=1, no compression, linger 5 ms, 1 MiB
  batches) each send their share of the records to a fresh topic; the time is from the moment all
  start to the moment the last one's flush() returns (every record acknowledged).
- strom consume: as many confluent-kafka consumer processes as producers (at most one per
  partition), each assigned its share of the partitions from offset 0, ``consume(num_messages=100000)``
  with the cyclic garbage collector off, until every record was read.
- broker CPU: user + system time of the broker process during each case, per record, and the
  records per second one CPU of broker time handles at that cost — the broker's own capacity, apart
  from what the Python load generators sharing the 2 CPUs can offer.
- raw TCP ceiling: an asyncio sink that accepts a stream and appends it to a file, fed the same
  number of payload bytes over loopback in 1 MiB writes; what any broker on this machine could do at
  best when it does nothing but receive and write.
- client ceiling: the rate of confluent-kafka ``produce()`` calls into a producer that has no broker
  (its queue only fills), per process: what the load generator itself can offer.

Each case runs once after a warm-up (first touch of memory, page cache, JIT-free Python paths).

``--baseline REV`` measures the brokers of two versions side by side in one run instead: the
package of git revision REV (exported with ``git archive`` into a temporary directory) and this
working tree, each on its own port and data directory, every case run on both in alternating order
(``--rounds`` times; the median of each is shown). It writes the "broker-baseline" section: what a
change to the hot path costs, in throughput and in broker CPU per record.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import gc
import io
import multiprocessing
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]  # re-exported untyped

from benchmarks.harness import Broker, cpu_seconds
from benchmarks.report import replace_section

MIB = 1024 * 1024
RECORD_SIZES_BYTES = (100, 1024)
PARTITION_COUNTS = (1, 6)
CASE_TIMEOUT_S = 300.0
SINK_CHUNK_BYTES = MIB


@dataclass
class Result:
    label: str
    records: int
    record_bytes: int
    seconds: float
    broker_cpu_s: float = 0.0  # CPU time the broker process used during the case

    @property
    def broker_cpu_us_per_record(self) -> float:
        return self.broker_cpu_s / self.records * 1e6

    @property
    def broker_capacity_per_cpu(self) -> float:
        """Records per second one CPU of broker time handles at this cost."""
        return self.records / self.broker_cpu_s if self.broker_cpu_s else 0.0

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.records * self.record_bytes / self.seconds / 1e6


# -- the broker -------------------------------------------------------------------------------------


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    futures[topic].result(30)


# -- produce ----------------------------------------------------------------------------------------

PRODUCER_CONFIG = {
    "acks": 1,
    "linger.ms": 5,
    "batch.size": MIB,
    "batch.num.messages": 100_000,
    "queue.buffering.max.messages": 1_000_000,
    "queue.buffering.max.kbytes": 1024 * 1024,
    "compression.type": "none",
    "enable.idempotence": False,
    "message.timeout.ms": int(CASE_TIMEOUT_S * 1000),
}


def _produce_worker(
    bootstrap: str,
    topic: str,
    partitions: int,
    count: int,
    record_bytes: int,
    start: object,
    out: object,
    config: dict[str, object],
) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER_CONFIG, **config})
    producer.list_topics(topic, timeout=30)  # metadata in hand before the clock starts
    value = os.urandom(record_bytes)
    produce = producer.produce
    poll = producer.poll
    start.wait()  # type: ignore[attr-defined]
    started = time.time()
    # Round-robin by explicit partition: no key hashing in the client's hot loop.
    for index in range(count):
        try:
            produce(topic, value, partition=index % partitions)
        except BufferError:
            poll(0.01)
            produce(topic, value, partition=index % partitions)
        if index % 10_000 == 0:
            poll(0)
    remaining = producer.flush(CASE_TIMEOUT_S)
    out.put((started, time.time(), remaining))  # type: ignore[attr-defined]


def measure_produce(
    broker: Broker,
    topic: str,
    partitions: int,
    count: int,
    record_bytes: int,
    producers: int,
    config: dict[str, object] | None = None,
) -> Result:
    """``config``: producer settings over ``PRODUCER_CONFIG`` (``compression.type``, say)."""
    bootstrap = broker.bootstrap
    context = multiprocessing.get_context("fork")
    start = context.Event()
    out = context.Queue()
    share = count // producers
    workers = [
        context.Process(
            target=_produce_worker,
            args=(bootstrap, topic, partitions, share, record_bytes, start, out, config or {}),
        )
        for _ in range(producers)
    ]
    for worker in workers:
        worker.start()
    time.sleep(1.0)  # every worker connected and holding metadata
    cpu_before = cpu_seconds(broker.process.pid)
    start.set()
    reports = [out.get(timeout=CASE_TIMEOUT_S) for _ in workers]
    cpu_used = cpu_seconds(broker.process.pid) - cpu_before
    for worker in workers:
        worker.join(30)
    assert all(remaining == 0 for _, _, remaining in reports), f"undelivered records: {reports}"
    seconds = max(end for _, end, _ in reports) - min(begin for begin, _, _ in reports)
    return Result(f"produce {partitions}p", share * producers, record_bytes, seconds, cpu_used)


def _client_ceiling_worker(count: int, record_bytes: int, out: object) -> None:
    # No broker at this address (port 9 on loopback, discard, closed): records only queue up.
    producer = Producer(
        {
            "bootstrap.servers": "127.0.0.1:9",
            **PRODUCER_CONFIG,
            "queue.buffering.max.messages": count + 1,
            "log_level": 0,  # its connection failures are expected; keep the output readable
        }
    )
    value = os.urandom(record_bytes)
    produce = producer.produce
    started = time.perf_counter()
    for index in range(count):
        produce("ceiling", value, partition=index % 6)
    out.put(time.perf_counter() - started)  # type: ignore[attr-defined]
    producer.purge()
    producer.flush(0)


def measure_client_ceiling(count: int, record_bytes: int) -> Result:
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    worker = context.Process(target=_client_ceiling_worker, args=(count, record_bytes, out))
    worker.start()
    seconds = out.get(timeout=CASE_TIMEOUT_S)
    worker.join(30)
    return Result("client produce() ceiling, 1 process", count, record_bytes, seconds)


# -- consume ----------------------------------------------------------------------------------------


CONSUMER_CONFIG = {
    "group.id": "strom-benchmark",  # never joined: manual assignment, no commits
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "fetch.max.bytes": 64 * MIB,
    "max.partition.fetch.bytes": 4 * MIB,
    # librdkafka stops fetching for fetch.queue.backoff.ms (default 1 s) whenever its local queue
    # holds more than queued.min.messages; one 16 MiB fetch of 100-byte records overfills the
    # default 100,000 and the consumer then idles a second per fetch.
    "queued.min.messages": 2_000_000,
    "queued.max.messages.kbytes": 1024 * 1024,
    "fetch.queue.backoff.ms": 10,
    "fetch.wait.max.ms": 100,
}


def _consume_worker(
    bootstrap: str, topic: str, partitions: list[int], count: int, start: object, out: object
) -> None:
    # Each consumed record is a Python object; the cyclic collector walking 100,000 of them per
    # consume() call is the largest cost of the load generator itself, so it is off here.
    gc.disable()
    consumer = Consumer({"bootstrap.servers": bootstrap, **CONSUMER_CONFIG})
    consumer.list_topics(topic, timeout=30)
    start.wait()  # type: ignore[attr-defined]
    started = time.time()
    consumer.assign([TopicPartition(topic, partition, 0) for partition in partitions])
    read = errors = 0
    deadline = time.monotonic() + CASE_TIMEOUT_S
    while read < count and time.monotonic() < deadline:
        messages = consumer.consume(num_messages=100_000, timeout=1.0)
        for message in messages:
            if message.error() is None:
                read += 1
            else:
                errors += 1
        del messages
    ended = time.time()
    consumer.close()
    out.put((started, ended, read, errors))  # type: ignore[attr-defined]


def measure_consume(
    broker: Broker, topic: str, partitions: int, count: int, record_bytes: int, consumers: int
) -> Result:
    """``consumers`` processes, each assigned its share of the partitions, read everything."""
    consumers = max(1, min(consumers, partitions))
    context = multiprocessing.get_context("fork")
    start = context.Event()
    out = context.Queue()
    shares = [list(range(partitions))[index::consumers] for index in range(consumers)]
    # Records were produced round-robin over the partitions, so each share's count is known.
    expected = [
        sum(count // partitions + (1 if p < count % partitions else 0) for p in share) for share in shares
    ]
    workers = [
        context.Process(target=_consume_worker, args=(broker.bootstrap, topic, share, wanted, start, out))
        for share, wanted in zip(shares, expected, strict=True)
    ]
    for worker in workers:
        worker.start()
    time.sleep(1.0)
    cpu_before = cpu_seconds(broker.process.pid)
    start.set()
    reports = [out.get(timeout=CASE_TIMEOUT_S + 30) for _ in workers]
    cpu_used = cpu_seconds(broker.process.pid) - cpu_before
    for worker in workers:
        worker.join(30)
    read = sum(report[2] for report in reports)
    assert read == count, f"read {read} of {count} records ({sum(r[3] for r in reports)} errors)"
    seconds = max(report[1] for report in reports) - min(report[0] for report in reports)
    return Result(f"consume {partitions}p", count, record_bytes, seconds, cpu_used)


# -- the raw ceiling ------------------------------------------------------------------------------


async def _sink_and_feed(total_bytes: int, path: Path) -> float:
    done = asyncio.Event()

    async def sink(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received = 0
        with path.open("ab") as file:
            while received < total_bytes:
                data = await reader.read(SINK_CHUNK_BYTES)
                if not data:
                    break
                file.write(data)
                received += len(data)
        writer.write(b"\x01")  # "all appended": the sender's clock stops here
        await writer.drain()
        writer.close()
        done.set()

    server = await asyncio.start_server(sink, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    chunk = os.urandom(SINK_CHUNK_BYTES)
    started = time.perf_counter()
    sent = 0
    while sent < total_bytes:
        piece = chunk[: min(SINK_CHUNK_BYTES, total_bytes - sent)]
        writer.write(piece)
        await writer.drain()
        sent += len(piece)
    await reader.readexactly(1)
    seconds = time.perf_counter() - started
    writer.close()
    await done.wait()
    server.close()
    await server.wait_closed()
    return seconds


def measure_raw_ceiling(count: int, record_bytes: int, work_dir: Path) -> Result:
    path = work_dir / f"sink-{record_bytes}.bin"
    seconds = asyncio.run(_sink_and_feed(count * record_bytes, path))
    path.unlink()
    return Result("raw TCP -> file ceiling", count, record_bytes, seconds)


# -- the report -----------------------------------------------------------------------------------


def machine_description() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{cpu}, {os.cpu_count()} CPUs, {memory_gib:.0f} GiB RAM, Linux {platform.release()}, Python {platform.python_version()}"


def run(quick: bool, producers: int) -> tuple[list[tuple[str, Result, Result]], list[Result], str]:
    import confluent_kafka

    counts = {100: 400_000 if quick else 2_000_000, 1024: 100_000 if quick else 500_000}
    rows: list[tuple[str, Result, Result]] = []
    ceilings: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="strom-bench-") as temp:
        work_dir = Path(temp)
        broker = Broker(work_dir)
        try:
            # Warm-up: touch the broker's buffers, the page cache and both client paths.
            create_topic(broker.bootstrap, "warmup", 1)
            measure_produce(broker, "warmup", 1, 200_000, 100, producers)
            measure_consume(broker, "warmup", 1, 200_000, 100, producers)
            measure_raw_ceiling(200_000, 100, work_dir)
            for record_bytes in RECORD_SIZES_BYTES:
                count = counts[record_bytes]
                raw = measure_raw_ceiling(count, record_bytes, work_dir)
                client = measure_client_ceiling(count, record_bytes)
                ceilings += [raw, client]
                for partitions in PARTITION_COUNTS:
                    topic = f"bench-{record_bytes}b-{partitions}p"
                    create_topic(broker.bootstrap, topic, partitions)
                    produced = measure_produce(broker, topic, partitions, count, record_bytes, producers)
                    consumed = measure_consume(
                        broker, topic, partitions, produced.records, record_bytes, producers
                    )
                    rows.append((f"{record_bytes} B, {partitions} partition(s)", produced, consumed))
                    print(
                        f"{record_bytes:>5} B {partitions}p: produce {produced.records_per_s:>10,.0f} rec/s "
                        f"{produced.mb_per_s:7.1f} MB/s | consume {consumed.records_per_s:>10,.0f} rec/s "
                        f"{consumed.mb_per_s:7.1f} MB/s | raw {raw.records_per_s:>12,.0f} rec/s "
                        f"| client {client.records_per_s:>10,.0f} rec/s",
                        flush=True,
                    )
        finally:
            broker.stop()
    versions = f"confluent-kafka {confluent_kafka.version()}, librdkafka {confluent_kafka.libversion()[0]}"
    return rows, ceilings, versions


def render(
    rows: list[tuple[str, Result, Result]], ceilings: list[Result], versions: str, producers: int
) -> str:
    raw_by_size = {result.record_bytes: result for result in ceilings if result.label.startswith("raw")}
    client_by_size = {result.record_bytes: result for result in ceilings if result.label.startswith("client")}
    lines = [
        "## Broker throughput (`python -m benchmarks.run`)",
        "",
        f"Run: {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z} with `python -m benchmarks.run`.",
        f"Machine: {machine_description()}.",
        f"Clients: {versions}; {producers} producer process(es); broker, clients and sink share the machine.",
        "",
        "| case | produce rec/s | produce MB/s | consume rec/s | consume MB/s | raw TCP->file rec/s (MB/s) "
        "| produce / raw | consume / raw | produce() ceiling rec/s, 1 process "
        "| broker CPU µs/record produce | consume | broker rec/s per CPU produce | consume |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, produced, consumed in rows:
        raw = raw_by_size[produced.record_bytes]
        client = client_by_size[produced.record_bytes]
        lines.append(
            f"| {label} | {produced.records_per_s:,.0f} | {produced.mb_per_s:,.1f} | {consumed.records_per_s:,.0f} "
            f"| {consumed.mb_per_s:,.1f} | {raw.records_per_s:,.0f} ({raw.mb_per_s:,.0f}) "
            f"| {produced.records_per_s / raw.records_per_s:.3f} | {consumed.records_per_s / raw.records_per_s:.3f} "
            f"| {client.records_per_s:,.0f} "
            f"| {produced.broker_cpu_us_per_record:.2f} | {consumed.broker_cpu_us_per_record:.2f} "
            f"| {produced.broker_capacity_per_cpu:,.0f} | {consumed.broker_capacity_per_cpu:,.0f} |"
        )
    lines += [
        "",
        "Bars the project set (100-byte records): produce >= 500,000 rec/s, consume >= 1,000,000 rec/s.",
        "",
        "How measured: see the docstring of `benchmarks/run.py`. Payload bytes only (no keys, no headers);",
        "MB = 10^6 bytes of record values. The raw ceiling moves the same number of value bytes through",
        "loopback into a file with a plain asyncio sink; the client ceiling is confluent-kafka `produce()`",
        "into a producer with no reachable broker (enqueue cost only).",
    ]
    return "\n".join(lines) + "\n"


# -- before / after ---------------------------------------------------------------------------------


def export_source(revision: str, destination: Path) -> Path:
    """The ``src`` directory of git ``revision``, written under ``destination``; returns its path."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", revision, "src"],
        check=True,
        capture_output=True,
        cwd=Path(__file__).resolve().parent.parent,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(destination, filter="data")
    return destination / "src"


# The baseline commit's subject is shown up to this long.
DESCRIPTION_CHARS_MAX = 80


@dataclass
class Comparison:
    label: str
    produced: dict[str, list[Result]]  # by broker: "before", "after"
    consumed: dict[str, list[Result]]


def _median_rate(results: list[Result]) -> float:
    return statistics.median(result.records_per_s for result in results)


def _median_cpu_us(results: list[Result]) -> float:
    return statistics.median(result.broker_cpu_us_per_record for result in results)


def run_comparison(
    quick: bool, producers: int, baseline: str, rounds: int
) -> tuple[list[Comparison], str, str]:
    import confluent_kafka

    counts = {100: 400_000 if quick else 2_000_000, 1024: 100_000 if quick else 500_000}
    comparisons: list[Comparison] = []
    with tempfile.TemporaryDirectory(prefix="strom-bench-") as temp:
        work_dir = Path(temp)
        source = export_source(baseline, work_dir / "baseline")
        (work_dir / "before").mkdir()
        (work_dir / "after").mkdir()
        brokers = {
            "before": Broker(work_dir / "before", source_dir=source),
            "after": Broker(work_dir / "after"),
        }
        try:
            for broker in brokers.values():
                create_topic(broker.bootstrap, "warmup", 1)
                measure_produce(broker, "warmup", 1, 200_000, 100, producers)
                measure_consume(broker, "warmup", 1, 200_000, 100, producers)
            for record_bytes in RECORD_SIZES_BYTES:
                count = counts[record_bytes]
                for partitions in PARTITION_COUNTS:
                    label = f"{record_bytes} B, {partitions} partition(s)"
                    comparison = Comparison(label, {"before": [], "after": []}, {"before": [], "after": []})
                    for round_index in range(rounds):
                        # Alternate which broker goes first, so neither always gets the warmer machine.
                        order = ["before", "after"] if round_index % 2 == 0 else ["after", "before"]
                        for name in order:
                            broker = brokers[name]
                            topic = f"bench-{record_bytes}b-{partitions}p-{round_index}"
                            create_topic(broker.bootstrap, topic, partitions)
                            produced = measure_produce(
                                broker, topic, partitions, count, record_bytes, producers
                            )
                            consumed = measure_consume(
                                broker, topic, partitions, produced.records, record_bytes, producers
                            )
                            comparison.produced[name].append(produced)
                            comparison.consumed[name].append(consumed)
                            print(
                                f"{label} round {round_index + 1} {name:>6}: produce"
                                f" {produced.records_per_s:>10,.0f} rec/s"
                                f" ({produced.broker_cpu_us_per_record:.2f} µs CPU/rec) | consume"
                                f" {consumed.records_per_s:>10,.0f} rec/s"
                                f" ({consumed.broker_cpu_us_per_record:.2f} µs CPU/rec)",
                                flush=True,
                            )
                    comparisons.append(comparison)
        finally:
            for broker in brokers.values():
                broker.stop()
    versions = f"confluent-kafka {confluent_kafka.version()}, librdkafka {confluent_kafka.libversion()[0]}"
    return comparisons, versions, baseline


def render_comparison(
    comparisons: list[Comparison], versions: str, baseline: str, producers: int, rounds: int, quick: bool
) -> str:
    described = subprocess.run(
        ["git", "log", "-1", "--format=%h %s", baseline], capture_output=True, text=True, check=False
    ).stdout.strip()
    if len(described) > DESCRIPTION_CHARS_MAX:
        described = described[: DESCRIPTION_CHARS_MAX - 3] + "..."
    command = f"python -m benchmarks.run --baseline {baseline} --rounds {rounds}" + (
        " --quick" if quick else ""
    )
    lines = [
        "## Before / after on the hot path (`python -m benchmarks.run --baseline REV`)",
        "",
        f"Run: {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z} with `{command}`.",
        f"Before: `{described or baseline}`; after: this tree. Machine: {machine_description()}.",
        f"Clients: {versions}; {producers} producer process(es); both brokers, clients and the rest of the"
        " machine's load share it. Medians of the rounds; each round runs both brokers in alternating order.",
        "",
        "| case | produce rec/s before | after | after / before | consume rec/s before | after "
        "| after / before | broker CPU µs/record produce before | after | consume before | after |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for comparison in comparisons:
        produce_before = _median_rate(comparison.produced["before"])
        produce_after = _median_rate(comparison.produced["after"])
        consume_before = _median_rate(comparison.consumed["before"])
        consume_after = _median_rate(comparison.consumed["after"])
        lines.append(
            f"| {comparison.label} | {produce_before:,.0f} | {produce_after:,.0f} "
            f"| {produce_after / produce_before:.3f} | {consume_before:,.0f} | {consume_after:,.0f} "
            f"| {consume_after / consume_before:.3f} "
            f"| {_median_cpu_us(comparison.produced['before']):.2f} | {_median_cpu_us(comparison.produced['after']):.2f} "
            f"| {_median_cpu_us(comparison.consumed['before']):.2f} | {_median_cpu_us(comparison.consumed['after']):.2f} |"
        )
    lines += [
        "",
        "How measured: the cases of the table above (see the docstring of `benchmarks/run.py`), each run",
        "on both brokers in one process tree; broker CPU is user + system time of the broker process",
        "during the case, per record.",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer records (a smoke run, noisier figures)")
    parser.add_argument("--producers", type=int, default=2, help="producer processes (default 2)")
    parser.add_argument(
        "--output", default="BENCHMARKS.md", help="where to write the table (default BENCHMARKS.md)"
    )
    parser.add_argument("--no-write", action="store_true", help="print only, do not write the output file")
    parser.add_argument(
        "--baseline",
        metavar="REV",
        help="compare this tree's broker with the one of git revision REV, side by side in one run",
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds per case with --baseline (default 3)")
    arguments = parser.parse_args()
    if arguments.baseline:
        comparisons, versions, baseline = run_comparison(
            arguments.quick, arguments.producers, arguments.baseline, arguments.rounds
        )
        text = render_comparison(
            comparisons, versions, baseline, arguments.producers, arguments.rounds, arguments.quick
        )
        print(text)
        if not arguments.no_write:
            replace_section(Path(arguments.output), "broker-baseline", text)
        return 0
    rows, ceilings, versions = run(arguments.quick, arguments.producers)
    text = render(rows, ceilings, versions, arguments.producers)
    print(text)
    if not arguments.no_write:
        replace_section(Path(arguments.output), "broker", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
