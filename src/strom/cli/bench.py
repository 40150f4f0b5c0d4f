"""``strom bench produce | consume | end-to-end``: throughput and latency, with strom's client or
confluent-kafka (librdkafka), like Kafka's perf-test tools.

Latency of produce is send -> delivery acknowledgement. End-to-end latency is send -> the consumer
has the record: the producer writes a marker and the send time (this process's monotonic clock,
which the consumer in the same process shares) into the first bytes of each value.
"""

from __future__ import annotations

import argparse
import contextlib
import struct
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any, Protocol

from strom.cli.bench_stats import BenchSummary, LatencySummary, ThroughputTimeline, format_rate_line
from strom.cli.common import add_command, add_command_group, client_settings, open_admin
from strom.cli.output import CliError, Report, Table, UsageError, write_report
from strom.cli.produce import ACKS_CHOICES, COMPRESSION_CHOICES, acks_setting

__all__ = ["Progress", "Throttle", "make_value", "read_send_time_ns", "register", "summary_report"]

CLIENTS = ("strom", "confluent")
# End-to-end values start with this marker and the send time in ns (big-endian uint64).
E2E_MARKER = b"STRM"
E2E_HEADER = struct.Struct(">4sQ")
# A TTY progress line is redrawn this often; otherwise a line is printed every --report-interval-ms.
TTY_REFRESH_S = 0.5
# How long a consume or end-to-end run may go without a record before it gives up.
DEFAULT_IDLE_TIMEOUT_MS = 10_000
FLUSH_TIMEOUT_S = 120.0

DeliveryReport = Callable[[bool], None]


def register(commands: Any) -> None:
    subcommands = add_command_group(commands, "bench", help_text="measure throughput and latency")
    for name, help_text, run in (
        ("produce", "produce records as fast as allowed; latency is send to acknowledgement", _bench_produce),
        ("consume", "consume records from the beginning of a topic", _bench_consume),
        ("end-to-end", "produce and consume at once; latency is send to receipt", _bench_end_to_end),
    ):
        parser = add_command(subcommands, name, help_text=help_text, run=run)
        parser.add_argument("--topic", default="strom-bench", help="topic (default strom-bench)")
        parser.add_argument(
            "--records", type=int, default=100_000, metavar="N", help="records (default 100000)"
        )
        parser.add_argument(
            "--record-size", type=int, default=100, metavar="BYTES", help="bytes per value (default 100)"
        )
        parser.add_argument(
            "--client", choices=CLIENTS, default="strom", help="client library (default strom)"
        )
        parser.add_argument("--plot", type=Path, default=None, metavar="FILE.png", help="draw the results")
        parser.add_argument(
            "--report-interval-ms",
            type=int,
            default=5_000,
            metavar="MS",
            help="progress line period when stderr is not a terminal (default 5000)",
        )
        if name != "consume":
            parser.add_argument(
                "--throughput",
                type=float,
                default=-1,
                metavar="RECORDS_PER_S",
                help="throttle to this many records/s (default -1: unlimited)",
            )
            parser.add_argument("--acks", choices=ACKS_CHOICES, default="all", help="acks (default all)")
            parser.add_argument(
                "--compression",
                choices=COMPRESSION_CHOICES,
                default="none",
                help="compression (default none)",
            )
            parser.add_argument(
                "--linger-ms", type=int, default=5, metavar="MS", help="producer linger (default 5)"
            )
            parser.add_argument(
                "--partitions",
                type=int,
                default=1,
                metavar="N",
                help="partitions when the topic has to be created (default 1)",
            )
        if name != "produce":
            parser.add_argument(
                "--timeout-ms",
                type=int,
                default=DEFAULT_IDLE_TIMEOUT_MS,
                metavar="MS",
                help=f"give up after this long without a record (default {DEFAULT_IDLE_TIMEOUT_MS})",
            )


# -- pure helpers ------------------------------------------------------------------------------------


def make_value(record_bytes: int, send_time_ns: int | None = None) -> bytes:
    """A value of ``record_bytes``; with a send time, it starts with the end-to-end header."""
    if send_time_ns is None:
        return b"x" * record_bytes
    header = E2E_HEADER.pack(E2E_MARKER, send_time_ns)
    return header + b"x" * (record_bytes - len(header))


def read_send_time_ns(value: bytes | None) -> int | None:
    """The send time in an end-to-end value, or None if the value is not one of ours."""
    if value is None or len(value) < E2E_HEADER.size:
        return None
    marker, send_time_ns = E2E_HEADER.unpack_from(value)
    return int(send_time_ns) if marker == E2E_MARKER else None


class Throttle:
    """Holds a sender to ``records_per_s`` (<= 0: unlimited) by sleeping when it is ahead."""

    def __init__(self, records_per_s: float, sleep: Callable[[float], None] = time.sleep) -> None:
        self.records_per_s = records_per_s
        self._sleep = sleep

    def delay_s(self, records_sent: int, elapsed_s: float) -> float:
        """How long to wait before the next record so the average stays at the rate."""
        if self.records_per_s <= 0:
            return 0.0
        return max(0.0, records_sent / self.records_per_s - elapsed_s)

    def wait(self, records_sent: int, elapsed_s: float) -> None:
        delay = self.delay_s(records_sent, elapsed_s)
        if delay > 0:
            self._sleep(delay)


class Progress:
    """The live progress line: redrawn in place on a terminal, printed every interval otherwise."""

    def __init__(
        self, total_records: int, record_bytes: int, stream: IO[str], is_tty: bool, interval_s: float
    ) -> None:
        self.total_records = total_records
        self.record_bytes = record_bytes
        self.stream = stream
        self.is_tty = is_tty
        self.interval_s = TTY_REFRESH_S if is_tty else interval_s
        self._last_at_s = 0.0
        self._last_records = 0
        self.lines_written = 0

    def update(self, records: int, elapsed_s: float) -> None:
        if elapsed_s - self._last_at_s < self.interval_s:
            return
        rate = (records - self._last_records) / (elapsed_s - self._last_at_s)
        self._last_at_s, self._last_records = elapsed_s, records
        line = format_rate_line(records, self.total_records, elapsed_s, rate, self.record_bytes)
        if self.is_tty:
            self.stream.write("\r\033[K" + line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
        self.lines_written += 1

    def finish(self) -> None:
        if self.is_tty and self.lines_written:
            self.stream.write("\n")
            self.stream.flush()


def summary_report(summary: BenchSummary) -> Report:
    value = summary.to_json()
    rows: list[Sequence[object]] = [
        ["records", summary.records],
        ["errors", summary.errors],
        ["elapsed s", f"{summary.elapsed_s:.3f}"],
        ["records/s", f"{summary.records_per_s:.1f}"],
        ["MB/s", f"{summary.megabytes_per_s:.3f}"],
    ]
    latency = summary.latency
    if latency is not None:
        rows += [
            ["latency avg ms", f"{latency.average_ms:.3f}"],
            ["latency p50 ms", f"{latency.p50_ms:.3f}"],
            ["latency p95 ms", f"{latency.p95_ms:.3f}"],
            ["latency p99 ms", f"{latency.p99_ms:.3f}"],
            ["latency max ms", f"{latency.max_ms:.3f}"],
        ]
    title = f"bench {summary.mode} ({summary.client} client, {summary.record_bytes}-byte records)"
    return Report(value, [Table(["METRIC", "VALUE"], rows, title=title)])


# -- clients -----------------------------------------------------------------------------------------


class BenchProducer(Protocol):
    def send(self, value: bytes, on_delivery: DeliveryReport) -> None: ...
    def flush(self) -> None: ...
    def close(self) -> None: ...


class BenchConsumer(Protocol):
    def poll_values(self, timeout_ms: int) -> list[bytes | None]: ...
    def close(self) -> None: ...


class _StromProducer:
    def __init__(self, arguments: argparse.Namespace) -> None:
        from strom.client.producer import Producer

        settings = client_settings(arguments)
        settings.update(acks_setting(arguments.acks))
        settings["compression.type"] = arguments.compression
        settings["linger.ms"] = arguments.linger_ms
        self._producer = Producer(settings)
        self._topic = arguments.topic

    def send(self, value: bytes, on_delivery: DeliveryReport) -> None:
        self._producer.send(self._topic, value, callback=lambda error, _: on_delivery(error is None))

    def flush(self) -> None:
        self._producer.flush(FLUSH_TIMEOUT_S)

    def close(self) -> None:
        self._producer.close()


class _ConfluentProducer:
    def __init__(self, arguments: argparse.Namespace) -> None:
        from confluent_kafka import Producer

        self._producer = Producer(
            {
                "bootstrap.servers": arguments.bootstrap_server,
                "acks": "all" if arguments.acks in ("all", "-1") else arguments.acks,
                "enable.idempotence": arguments.acks in ("all", "-1"),
                "compression.type": arguments.compression,
                "linger.ms": arguments.linger_ms,
            }
        )
        self._topic = arguments.topic

    def send(self, value: bytes, on_delivery: DeliveryReport) -> None:
        while True:
            try:
                self._producer.produce(
                    self._topic, value, on_delivery=lambda error, _: on_delivery(error is None)
                )
                break
            except BufferError:  # librdkafka's queue is full: serve deliveries, then retry
                self._producer.poll(0.05)
        self._producer.poll(0)

    def flush(self) -> None:
        if self._producer.flush(FLUSH_TIMEOUT_S) > 0:
            raise CliError(f"confluent producer: records undelivered after {FLUSH_TIMEOUT_S} s")

    def close(self) -> None:
        self._producer.flush(FLUSH_TIMEOUT_S)


class _StromConsumer:
    def __init__(self, arguments: argparse.Namespace, start_offsets: dict[int, int]) -> None:
        from strom.client.consumer import Consumer

        self._consumer = Consumer(client_settings(arguments), auto_offset_reset="earliest")
        partitions = [(arguments.topic, partition) for partition in start_offsets]
        self._consumer.assign(partitions)
        for partition, offset in start_offsets.items():
            self._consumer.seek((arguments.topic, partition), offset)

    def poll_values(self, timeout_ms: int) -> list[bytes | None]:
        return [record.value for record in self._consumer.poll(timeout_ms)]

    def close(self) -> None:
        self._consumer.close()


class _ConfluentConsumer:
    def __init__(self, arguments: argparse.Namespace, start_offsets: dict[int, int]) -> None:
        from confluent_kafka import Consumer, TopicPartition

        self._consumer = Consumer(
            {
                "bootstrap.servers": arguments.bootstrap_server,
                "group.id": "strom-bench",  # required by librdkafka; assign() does not join it
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
            }
        )
        self._consumer.assign(
            [
                TopicPartition(arguments.topic, partition, offset)
                for partition, offset in start_offsets.items()
            ]
        )

    def poll_values(self, timeout_ms: int) -> list[bytes | None]:
        messages = self._consumer.consume(num_messages=1000, timeout=timeout_ms / 1000)
        values: list[bytes | None] = []
        for message in messages:
            if message.error() is not None:
                continue  # partition EOF and the like: not records
            values.append(message.value())
        return values

    def close(self) -> None:
        self._consumer.close()


def _producer_for(arguments: argparse.Namespace) -> BenchProducer:
    return _ConfluentProducer(arguments) if arguments.client == "confluent" else _StromProducer(arguments)


def _consumer_for(arguments: argparse.Namespace, start_offsets: dict[int, int]) -> BenchConsumer:
    if arguments.client == "confluent":
        return _ConfluentConsumer(arguments, start_offsets)
    return _StromConsumer(arguments, start_offsets)


# -- runs --------------------------------------------------------------------------------------------


def _check(arguments: argparse.Namespace, minimum_record_bytes: int = 0) -> None:
    if arguments.records < 1:
        raise UsageError(f"--records must be at least 1, not {arguments.records}")
    if arguments.record_size < max(minimum_record_bytes, 0):
        raise UsageError(
            f"--record-size must be at least {minimum_record_bytes}, not {arguments.record_size}"
        )
    if arguments.report_interval_ms <= 0:
        raise UsageError(f"--report-interval-ms must be positive, not {arguments.report_interval_ms}")
    if arguments.plot is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise CliError("--plot needs matplotlib: pip install 'strom[plot]'") from None


def _progress(arguments: argparse.Namespace) -> Progress:
    return Progress(
        arguments.records,
        arguments.record_size,
        sys.stderr,
        sys.stderr.isatty(),
        arguments.report_interval_ms / 1000,
    )


def _ensure_topic(arguments: argparse.Namespace) -> None:
    from strom.client.admin import NewTopic
    from strom.client.errors import TopicAlreadyExistsError

    with open_admin(arguments) as admin:
        if arguments.topic in admin.list_topics():
            return
        with contextlib.suppress(TopicAlreadyExistsError):  # created meanwhile by someone else: fine
            admin.create_topics([NewTopic(arguments.topic, arguments.partitions, 1)])


def _partition_offsets(arguments: argparse.Namespace, spec: str) -> dict[int, int]:
    from strom.client.cluster import TopicPartition

    with open_admin(arguments) as admin:
        description = admin.describe_topics([arguments.topic])[arguments.topic]
        partitions = [TopicPartition(arguments.topic, p.partition) for p in description.partitions]
        found = admin.list_offsets(dict.fromkeys(partitions, spec))
    return {tp.partition: (answer.offset if answer is not None else 0) for tp, answer in found.items()}


class _Recorder:
    """Acknowledged or received records: counts, latencies and the timeline, from any thread."""

    def __init__(self, started_ns: int) -> None:
        self.started_ns = started_ns
        self.lock = threading.Lock()
        self.done = 0
        self.errors = 0
        self.latencies_ms: list[float] = []
        self.timeline = ThroughputTimeline()

    def record(self, ok: bool, sent_ns: int | None, now_ns: int) -> None:
        with self.lock:
            if not ok:
                self.errors += 1
                return
            self.done += 1
            self.timeline.add((now_ns - self.started_ns) / 1e9)
            if sent_ns is not None:
                self.latencies_ms.append((now_ns - sent_ns) / 1e6)


def _acknowledgement(recorder: _Recorder, sent_ns: int) -> DeliveryReport:
    return lambda ok: recorder.record(ok, sent_ns, time.perf_counter_ns())


def _produce_all(
    arguments: argparse.Namespace,
    producer: BenchProducer,
    recorder: _Recorder | None,
    progress: Progress | None,
    stamp_values: bool,
) -> None:
    """Send ``--records`` values under the throttle; ``recorder`` gets the acknowledgements."""
    throttle = Throttle(arguments.throughput)
    plain_value = make_value(arguments.record_size)
    started = time.perf_counter()
    for sent in range(arguments.records):
        throttle.wait(sent, time.perf_counter() - started)
        sent_ns = time.perf_counter_ns()
        value = make_value(arguments.record_size, sent_ns) if stamp_values else plain_value
        if recorder is None:
            producer.send(value, lambda ok: None)
        else:
            producer.send(value, _acknowledgement(recorder, sent_ns))
        if progress is not None and recorder is not None:
            progress.update(recorder.done, time.perf_counter() - started)
    producer.flush()


def _finish(
    arguments: argparse.Namespace, mode: str, recorder: _Recorder, elapsed_s: float, latency: bool
) -> int:
    summary = BenchSummary(
        mode=mode,
        client=arguments.client,
        records=recorder.done,
        record_bytes=arguments.record_size,
        elapsed_s=elapsed_s,
        latency=LatencySummary.from_samples(recorder.latencies_ms) if latency else None,
        errors=recorder.errors,
    )
    write_report(summary_report(summary), arguments.output)
    if arguments.plot is not None:
        from strom.cli.bench_plot import draw_plot

        draw_plot(arguments.plot, summary, recorder.timeline, recorder.latencies_ms if latency else [])
        print(f"plot written to {arguments.plot}", file=sys.stderr)
    if recorder.errors:
        raise CliError(f"{recorder.errors} records failed")
    if recorder.done < arguments.records:
        raise CliError(f"only {recorder.done} of {arguments.records} records within the time allowed")
    return 0


def _bench_produce(arguments: argparse.Namespace) -> int:
    _check(arguments)
    _ensure_topic(arguments)
    producer = _producer_for(arguments)
    progress = _progress(arguments)
    recorder = _Recorder(time.perf_counter_ns())
    try:
        _produce_all(arguments, producer, recorder, progress, stamp_values=False)
    finally:
        producer.close()
        progress.finish()
    elapsed_s = (time.perf_counter_ns() - recorder.started_ns) / 1e9
    return _finish(arguments, "produce", recorder, elapsed_s, latency=True)


def _consume_into(
    arguments: argparse.Namespace,
    consumer: BenchConsumer,
    recorder: _Recorder,
    progress: Progress,
    stamped: bool,
) -> None:
    last_record_ns = time.perf_counter_ns()
    while recorder.done < arguments.records:
        values = consumer.poll_values(100)
        now_ns = time.perf_counter_ns()
        if not values:
            if (now_ns - last_record_ns) / 1e6 > arguments.timeout_ms:
                return
            continue
        last_record_ns = now_ns
        for value in values[: arguments.records - recorder.done]:
            recorder.record(True, read_send_time_ns(value) if stamped else None, now_ns)
        progress.update(recorder.done, (now_ns - recorder.started_ns) / 1e9)


def _bench_consume(arguments: argparse.Namespace) -> int:
    _check(arguments)
    consumer = _consumer_for(arguments, _partition_offsets(arguments, "earliest"))
    progress = _progress(arguments)
    recorder = _Recorder(time.perf_counter_ns())
    try:
        _consume_into(arguments, consumer, recorder, progress, stamped=False)
    finally:
        consumer.close()
        progress.finish()
    elapsed_s = (time.perf_counter_ns() - recorder.started_ns) / 1e9
    return _finish(arguments, "consume", recorder, elapsed_s, latency=False)


def _bench_end_to_end(arguments: argparse.Namespace) -> int:
    _check(arguments, minimum_record_bytes=E2E_HEADER.size)
    _ensure_topic(arguments)
    # Start where the log ends now, so earlier records are not counted and none of ours is missed.
    consumer = _consumer_for(arguments, _partition_offsets(arguments, "latest"))
    producer = _producer_for(arguments)
    progress = _progress(arguments)
    recorder = _Recorder(time.perf_counter_ns())
    failures: list[BaseException] = []

    def produce() -> None:
        try:
            _produce_all(arguments, producer, None, None, stamp_values=True)
        except BaseException as error:  # shown by the main thread
            failures.append(error)

    sender = threading.Thread(target=produce, name="strom-bench-producer", daemon=True)
    sender.start()
    try:
        _consume_into(arguments, consumer, recorder, progress, stamped=True)
    finally:
        sender.join()
        producer.close()
        consumer.close()
        progress.finish()
    if failures:
        raise failures[0]
    elapsed_s = (time.perf_counter_ns() - recorder.started_ns) / 1e9
    return _finish(arguments, "end-to-end", recorder, elapsed_s, latency=True)
