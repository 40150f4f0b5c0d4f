"""``strom bench produce | consume | end-to-end``: throughput and latency, with strom's client or
confluent-kafka (librdkafka), like Kafka's perf-test tools.

What is measured is the client, not the tool: the send loop is a plain loop over ``send()`` with
one shared delivery callback (a counter), as an application that wants to know its records were
delivered writes it; progress and the throughput timeline are sampled by a separate thread every
100 ms instead of being updated per record. Produce latency (send -> acknowledgement) is taken
from every ``LATENCY_SAMPLE_EVERY``-th record, whose callback also carries its send time: a
per-record closure on every record costs the loop about a third of its rate in Python.
End-to-end latency (send -> the consumer has it) is measured on every record: the producer writes
a marker and the send time (this process's monotonic clock, which the consumer in the same
process shares) into the first bytes of each value.

``--processes N`` runs N producers (or consumers) in N processes started together, each with its
share of the records (or of the partitions), and adds up what they did: one Python process is
bound by one core.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import multiprocessing
import queue
import struct
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.sharedctypes import Synchronized
from pathlib import Path
from typing import IO, Any

from strom.cli.bench_stats import BenchSummary, LatencySummary, ThroughputTimeline, format_rate_line
from strom.cli.common import (
    add_command,
    add_command_group,
    check_client_config,
    client_settings,
    common_client_config,
    given_client_config,
    open_admin,
)
from strom.cli.output import CliError, Report, Table, UsageError, write_report
from strom.cli.produce import ACKS_CHOICES, COMPRESSION_CHOICES, acks_setting

__all__ = [
    "LATENCY_SAMPLE_EVERY",
    "DeliveryRecorder",
    "Progress",
    "Throttle",
    "make_value",
    "read_send_time_ns",
    "register",
    "split_evenly",
    "summary_report",
]

CLIENTS = ("strom", "confluent")
# End-to-end values start with this marker and the send time in ns (big-endian uint64).
E2E_MARKER = b"STRM"
E2E_HEADER = struct.Struct(">4sQ")
# A TTY progress line is redrawn this often; otherwise a line is printed every --report-interval-ms.
TTY_REFRESH_S = 0.5
# The throughput timeline (and the progress) is sampled this often by the monitor thread.
TIMELINE_WINDOW_S = 0.1
# How long a consume or end-to-end run may go without a record before it gives up.
DEFAULT_IDLE_TIMEOUT_MS = 10_000
FLUSH_TIMEOUT_S = 120.0
# Produce latency is measured on one record in this many (the first of each run of them).
LATENCY_SAMPLE_EVERY = 16
# One process per core is the most that helps; more only measures the scheduler.
PROCESSES_MAX = 64
# How long the processes of a run may take to start and connect before the run is abandoned.
PROCESS_START_TIMEOUT_S = 120.0


def register(commands: Any) -> None:
    subcommands = add_command_group(commands, "bench", help_text="measure throughput and latency")
    for name, help_text, run, client in (
        (
            "produce",
            "produce records as fast as allowed; latency is send to acknowledgement",
            _bench_produce,
            "producer",
        ),
        ("consume", "consume records from the beginning of a topic", _bench_consume, "consumer"),
        (
            "end-to-end",
            "produce and consume at once; latency is send to receipt",
            _bench_end_to_end,
            "producer",
        ),
    ):
        parser = add_command(subcommands, name, help_text=help_text, run=run, client=client)
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
        if name != "end-to-end":
            parser.add_argument(
                "--processes",
                type=int,
                default=1,
                metavar="N",
                help="run N clients in N processes, each with its share of the records (produce) or "
                "of the partitions (consume), and add up the results (default 1)",
            )
        if name != "consume":
            parser.add_argument(
                "--throughput",
                type=float,
                default=-1,
                metavar="RECORDS_PER_S",
                help="throttle to this many records/s in all (default -1: unlimited)",
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


def split_evenly(total: int, parts: int) -> list[int]:
    """``total`` in ``parts`` shares that differ by at most one (the first ones larger)."""
    assert parts >= 1, "at least one part"
    share, extra = divmod(total, parts)
    return [share + (1 if index < extra else 0) for index in range(parts)]


class Throttle:
    """Holds a sender to ``records_per_s`` (<= 0: unlimited) by sleeping when it is ahead."""

    def __init__(self, records_per_s: float, sleep: Callable[[float], None] = time.sleep) -> None:
        self.records_per_s = records_per_s
        self._sleep = sleep

    @property
    def limited(self) -> bool:
        return self.records_per_s > 0

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
    """The live progress line: redrawn in place on a terminal, printed every interval otherwise;
    ``finish`` replaces it with the final count, so no stale line is left behind."""

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
        self._write(format_rate_line(records, self.total_records, elapsed_s, rate, self.record_bytes))

    def _write(self, line: str) -> None:
        self.stream.write("\r\033[K" + line if self.is_tty else line + "\n")
        self.stream.flush()
        self.lines_written += 1

    def finish(self, records: int, elapsed_s: float) -> None:
        """The last line: the final count and the average rate (after any periodic line)."""
        if not self.lines_written:
            return
        rate = records / elapsed_s if elapsed_s > 0 else 0.0
        self._write(
            format_rate_line(records, self.total_records, elapsed_s, rate, self.record_bytes, final=True)
        )
        if self.is_tty:
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
    if summary.processes > 1:
        rows.insert(0, ["processes", summary.processes])
    latency = summary.latency
    if latency is not None:
        rows += [
            ["latency samples", latency.count],
            ["latency avg ms", f"{latency.average_ms:.3f}"],
            ["latency p50 ms", f"{latency.p50_ms:.3f}"],
            ["latency p95 ms", f"{latency.p95_ms:.3f}"],
            ["latency p99 ms", f"{latency.p99_ms:.3f}"],
            ["latency max ms", f"{latency.max_ms:.3f}"],
        ]
    title = f"bench {summary.mode} ({summary.client} client, {summary.record_bytes}-byte records)"
    return Report(value, [Table(["METRIC", "VALUE"], rows, title=title)])


# -- what the clients report -------------------------------------------------------------------------


class DeliveryRecorder:
    """Acknowledgements counted by one shared callback, and (send, acknowledgement) times of the
    sampled records. Written only by the thread that runs delivery callbacks (strom's producer
    thread, or confluent's poll in the sending thread), read by the monitor: no lock needed."""

    def __init__(self) -> None:
        self.done = 0
        self.errors = 0
        self.first_error: str | None = None
        self.latencies_ms: list[float] = []

    def on_delivery(self, error: object, metadata: object) -> None:
        if error is None:
            self.done += 1
        else:
            self.errors += 1
            if self.first_error is None:
                self.first_error = str(error)

    def on_sampled_delivery(self, sent_ns: int, error: object, metadata: object) -> None:
        self.on_delivery(error, metadata)
        if error is None:
            self.latencies_ms.append((time.perf_counter_ns() - sent_ns) / 1e6)


# -- one client's run (in this process or in a child) -------------------------------------------------


@dataclass
class Job:
    """Everything one process needs for its part of a run (picklable: sent to child processes)."""

    mode: str  # "produce" | "consume"
    client: str
    topic: str
    records: int
    record_bytes: int
    settings: dict[str, Any]  # strom client settings, or confluent-kafka's
    throughput: float = -1.0
    partitions: list[tuple[int, int]] = field(default_factory=list)  # consume: (partition, start offset)
    idle_timeout_ms: int = DEFAULT_IDLE_TIMEOUT_MS


@dataclass
class JobResult:
    done: int
    errors: int
    first_error: str | None
    latencies_ms: list[float]


def _strom_produce(job: Job, recorder: DeliveryRecorder, stamp_values: bool) -> None:
    from strom.client.producer import Producer

    with Producer(job.settings) as producer:
        _produce_loop(job, producer.send, recorder, stamp_values)
        producer.flush(FLUSH_TIMEOUT_S)


def _produce_loop(
    job: Job, send: Callable[..., object], recorder: DeliveryRecorder, stamp_values: bool
) -> None:
    """The send loop: one ``send`` per record and nothing else per record, apart from the sampled
    record's callback (and, end to end, the stamped value)."""
    topic = job.topic
    counted = recorder.on_delivery
    sampled = recorder.on_sampled_delivery
    clock = time.perf_counter_ns
    throttle = Throttle(job.throughput)
    plain_value = make_value(job.record_bytes)
    started = time.perf_counter()
    sent = 0
    while sent < job.records:
        run = min(LATENCY_SAMPLE_EVERY, job.records - sent)
        if throttle.limited:
            throttle.wait(sent, time.perf_counter() - started)
        if stamp_values:
            for _ in range(run):
                send(topic, make_value(job.record_bytes, clock()), callback=counted)
        else:
            send(topic, plain_value, callback=functools.partial(sampled, clock()))
            for _ in range(run - 1):
                send(topic, plain_value, callback=counted)
        sent += run


def _confluent_produce(job: Job, recorder: DeliveryRecorder, stamp_values: bool) -> None:
    from confluent_kafka import Producer

    producer = Producer(job.settings)
    produce, poll = producer.produce, producer.poll

    def send(topic: str, value: bytes, callback: Callable[[object, object], None]) -> None:
        while True:
            try:
                produce(topic, value, on_delivery=callback)
                break
            except BufferError:  # librdkafka's queue is full: serve deliveries, then retry
                poll(0.05)
        poll(0)

    _produce_loop(job, send, recorder, stamp_values)
    if producer.flush(FLUSH_TIMEOUT_S) > 0:
        raise CliError(f"confluent producer: records undelivered after {FLUSH_TIMEOUT_S} s")


def _strom_consumer(job: Job) -> Any:
    from strom.client.consumer import Consumer

    consumer = Consumer(job.settings)
    consumer.assign([(job.topic, partition) for partition, _ in job.partitions])
    for partition, offset in job.partitions:
        consumer.seek((job.topic, partition), offset)
    return consumer


class _ConfluentConsumer:
    def __init__(self, job: Job) -> None:
        from confluent_kafka import Consumer, TopicPartition

        self._consumer = Consumer(job.settings)
        self._consumer.assign(
            [TopicPartition(job.topic, partition, offset) for partition, offset in job.partitions]
        )

    def poll(self, timeout_ms: int) -> list[Any]:
        messages = self._consumer.consume(num_messages=1000, timeout=timeout_ms / 1000)
        return [message for message in messages if message.error() is None]  # not partition EOFs

    def close(self) -> None:
        self._consumer.close()


def _consume_loop(
    job: Job,
    poll: Callable[[int], list[Any]],
    take: Callable[[int], int],
    latencies_ms: list[float] | None,
) -> int:
    """Poll until ``take`` says the run has its records (or nothing came for the idle timeout).
    ``take(n)`` counts n more records and answers how many of them belong to the run."""
    idle_timeout_ns = job.idle_timeout_ms * 1_000_000
    last_record_ns = time.perf_counter_ns()
    read = 0
    while True:
        records = poll(100)
        now_ns = time.perf_counter_ns()
        if not records:
            if take(0) < 0 or now_ns - last_record_ns > idle_timeout_ns:
                return read
            continue
        last_record_ns = now_ns
        wanted = take(len(records))
        if latencies_ms is not None:
            for record in records[: max(wanted, 0)]:
                sent_ns = read_send_time_ns(_value_of(record))
                if sent_ns is not None:
                    latencies_ms.append((now_ns - sent_ns) / 1e6)
        read += max(wanted, 0)
        if wanted < len(records):
            return read


def _value_of(record: Any) -> bytes | None:
    value = record.value
    data = value() if callable(value) else value  # confluent's Message.value is a method
    return data if isinstance(data, bytes) else None


def _consume(job: Job, take: Callable[[int], int], latencies_ms: list[float] | None = None) -> int:
    if job.client == "confluent":
        consumer = _ConfluentConsumer(job)
        try:
            return _consume_loop(job, consumer.poll, take, latencies_ms)
        finally:
            consumer.close()
    strom_consumer = _strom_consumer(job)
    try:
        return _consume_loop(job, lambda timeout_ms: strom_consumer.poll(timeout_ms), take, latencies_ms)
    finally:
        strom_consumer.close()


class _Quota:
    """How many records a consume run still wants, shared by its consumers (a lock, or a shared
    counter between processes): ``take(n)`` answers how many of n are the run's; -1 once full."""

    def __init__(self, records: int, shared: Synchronized[int] | None = None) -> None:
        self.records = records
        self._shared = shared
        self._lock = threading.Lock()
        self._taken = 0

    @property
    def taken(self) -> int:
        return self._shared.value if self._shared is not None else self._taken

    def take(self, count: int) -> int:
        lock = self._shared.get_lock() if self._shared is not None else self._lock
        with lock:
            taken = self.taken
            if taken >= self.records:
                return -1
            granted = min(count, self.records - taken)
            if self._shared is not None:
                self._shared.value = taken + granted
            else:
                self._taken = taken + granted
            return granted


def run_job(
    job: Job, done_counter: Synchronized[int] | None = None, quota: _Quota | None = None
) -> JobResult:
    """One client's part of the run; ``done_counter`` (another process's view) is kept current."""
    if job.mode == "consume":
        assert quota is not None, "a consume job takes from a quota"
        read = _consume(job, quota.take)
        return JobResult(read, 0, None, [])
    recorder = DeliveryRecorder()
    stop = threading.Event()

    def publish() -> None:
        while not stop.wait(TIMELINE_WINDOW_S / 2):
            if done_counter is not None:
                done_counter.value = recorder.done

    publisher = threading.Thread(target=publish, name="strom-bench-publish", daemon=True)
    publisher.start()
    try:
        if job.client == "confluent":
            _confluent_produce(job, recorder, stamp_values=False)
        else:
            _strom_produce(job, recorder, stamp_values=False)
    finally:
        stop.set()
        publisher.join()
        if done_counter is not None:
            done_counter.value = recorder.done
    return JobResult(recorder.done, recorder.errors, recorder.first_error, recorder.latencies_ms)


def _child(
    job: Job,
    start: Any,
    done_counter: Synchronized[int],
    quota_counter: Synchronized[int],
    quota_records: int,
    results: Any,
) -> None:
    """A child process: wait for the start signal, run, send the result (or the error) back."""
    try:
        if not start.wait(PROCESS_START_TIMEOUT_S):
            raise CliError("the run did not start")
        result = run_job(job, done_counter, _Quota(quota_records, quota_counter))
        results.put(("ok", result))
    except BaseException as error:
        results.put(("error", f"{type(error).__name__}: {error}"))


# -- the monitor: progress and timeline, off the send path --------------------------------------------


class Monitor:
    """Samples a running count every ``TIMELINE_WINDOW_S`` on its own thread: the throughput
    timeline for the plot and the progress line, without touching the send loop."""

    def __init__(self, count: Callable[[], int], progress: Progress) -> None:
        self._count = count
        self.progress = progress
        self.timeline = ThroughputTimeline(window_s=TIMELINE_WINDOW_S)
        self.started = time.perf_counter()
        self._stop = threading.Event()
        self._last = 0
        self._last_at_s = 0.0
        self._thread = threading.Thread(target=self._run, name="strom-bench-monitor", daemon=True)

    def start(self) -> None:
        self.started = time.perf_counter()
        self._thread.start()

    def _sample(self, elapsed_s: float, count: int) -> None:
        self.timeline.add_interval(self._last_at_s, elapsed_s, count - self._last)
        self._last, self._last_at_s = count, elapsed_s

    def _run(self) -> None:
        while not self._stop.wait(TIMELINE_WINDOW_S):
            elapsed_s = time.perf_counter() - self.started
            count = self._count()
            self._sample(elapsed_s, count)
            self.progress.update(count, elapsed_s)

    def stop(self, final_count: int) -> float:
        """Stop sampling; the elapsed time of the run. The timeline gets the last records."""
        elapsed_s = time.perf_counter() - self.started
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self._sample(elapsed_s, final_count)
        self.progress.finish(final_count, elapsed_s)
        return elapsed_s


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
    processes = getattr(arguments, "processes", 1)
    if not 1 <= processes <= PROCESSES_MAX:
        raise UsageError(f"--processes must be 1 to {PROCESSES_MAX}, not {processes}")
    if processes > arguments.records:
        raise UsageError(f"--processes {processes} is more than --records {arguments.records}")
    if arguments.plot is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise CliError(
                "--plot needs matplotlib: pip install matplotlib (or, in a clone of strom, "
                "pip install -e '.[plot]')"
            ) from None
    if arguments.client == "strom":
        from strom.client.config import ConsumerConfig, ProducerConfig

        check_client_config(arguments, ConsumerConfig if arguments.run is _bench_consume else ProducerConfig)


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

    with open_admin(arguments, passthrough=False) as admin:
        if arguments.topic in admin.list_topics():
            return
        with contextlib.suppress(TopicAlreadyExistsError):  # created meanwhile by someone else: fine
            admin.create_topics([NewTopic(arguments.topic, arguments.partitions, 1)])


def _partition_offsets(arguments: argparse.Namespace, spec: str) -> dict[int, int]:
    from strom.client.cluster import TopicPartition

    with open_admin(arguments, passthrough=False) as admin:
        description = admin.describe_topics([arguments.topic])[arguments.topic]
        partitions = [TopicPartition(arguments.topic, p.partition) for p in description.partitions]
        found = admin.list_offsets(dict.fromkeys(partitions, spec))
    return {tp.partition: (answer.offset if answer is not None else 0) for tp, answer in found.items()}


def _producer_settings(arguments: argparse.Namespace) -> dict[str, Any]:
    extra = dict(arguments.client_config)
    if arguments.client == "confluent":
        client_settings(arguments)  # the reachability check
        settings: dict[str, Any] = {
            "bootstrap.servers": arguments.bootstrap_server,
            "acks": "all" if arguments.acks in ("all", "-1") else arguments.acks,
            "enable.idempotence": arguments.acks in ("all", "-1"),
            "compression.type": arguments.compression,
            "linger.ms": arguments.linger_ms,
        }
        # librdkafka takes the same names (security's among them): the file's settings as they are.
        settings.update(given_client_config(arguments)[0])
    else:
        settings = client_settings(arguments)
        settings.update(acks_setting(arguments.acks))
        settings["compression.type"] = arguments.compression
        settings["linger.ms"] = arguments.linger_ms
    settings.update(extra)
    return settings


def _consumer_settings(arguments: argparse.Namespace) -> dict[str, Any]:
    extra = dict(arguments.client_config)
    if arguments.client == "confluent":
        client_settings(arguments)  # the reachability check
        settings: dict[str, Any] = {
            "bootstrap.servers": arguments.bootstrap_server,
            "group.id": "strom-bench",  # required by librdkafka; assign() does not join it
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
        settings.update(given_client_config(arguments)[0])
    else:
        settings = client_settings(arguments)
        settings["auto.offset.reset"] = "earliest"
    settings.update(extra)
    return settings


def _run_processes(
    jobs: list[Job], arguments: argparse.Namespace, quota_records: int
) -> tuple[list[JobResult], float, Monitor]:
    """Start one process per job, release them together, and wait for every result."""
    context = multiprocessing.get_context("spawn")
    start = context.Event()
    results: Any = context.Queue()
    counters = [context.Value("q", 0) for _ in jobs]
    quota_counter = context.Value("q", 0)
    children = [
        context.Process(
            target=_child,
            args=(job, start, counter, quota_counter, quota_records, results),
            name=f"strom-bench-{index}",
            daemon=True,
        )
        for index, (job, counter) in enumerate(zip(jobs, counters))
    ]
    for child in children:
        child.start()
    if jobs[0].mode == "consume":
        monitor = Monitor(lambda: int(quota_counter.value), _progress(arguments))
    else:
        monitor = Monitor(lambda: sum(int(counter.value) for counter in counters), _progress(arguments))
    gathered: list[JobResult] = []
    failures: list[str] = []
    try:
        start.set()
        monitor.start()
        while len(gathered) + len(failures) < len(children):
            try:
                outcome, value = results.get(timeout=1.0)
            except queue.Empty:
                if not any(child.is_alive() for child in children):
                    failures.append("a bench process exited without a result")
                    break
                continue
            if outcome == "ok":
                gathered.append(value)
            else:
                failures.append(value)
    finally:
        total = sum(result.done for result in gathered)
        elapsed_s = monitor.stop(total)
        for child in children:
            child.join(5)
            if child.is_alive():
                child.kill()
                child.join()
    if failures:
        raise CliError(f"bench process failed: {failures[0]}")
    return gathered, elapsed_s, monitor


def _run_in_process(job: Job, arguments: argparse.Namespace) -> tuple[JobResult, float, Monitor]:
    if job.mode == "consume":
        quota = _Quota(job.records)
        monitor = Monitor(lambda: quota.taken, _progress(arguments))
        monitor.start()
        try:
            read = _consume(job, quota.take)
        finally:
            elapsed_s = monitor.stop(quota.taken)
        return JobResult(read, 0, None, []), elapsed_s, monitor
    recorder = DeliveryRecorder()
    monitor = Monitor(lambda: recorder.done, _progress(arguments))
    monitor.start()
    try:
        if job.client == "confluent":
            _confluent_produce(job, recorder, stamp_values=False)
        else:
            _strom_produce(job, recorder, stamp_values=False)
    finally:
        elapsed_s = monitor.stop(recorder.done)
    return (
        JobResult(recorder.done, recorder.errors, recorder.first_error, recorder.latencies_ms),
        elapsed_s,
        monitor,
    )


def _finish(
    arguments: argparse.Namespace,
    mode: str,
    results: list[JobResult],
    elapsed_s: float,
    timeline: ThroughputTimeline,
    latency: bool,
) -> int:
    done = sum(result.done for result in results)
    errors = sum(result.errors for result in results)
    latencies_ms = [sample for result in results for sample in result.latencies_ms]
    summary = BenchSummary(
        mode=mode,
        client=arguments.client,
        records=done,
        record_bytes=arguments.record_size,
        elapsed_s=elapsed_s,
        latency=LatencySummary.from_samples(latencies_ms) if latency else None,
        errors=errors,
        processes=getattr(arguments, "processes", 1),
    )
    write_report(summary_report(summary), arguments.output)
    if arguments.plot is not None:
        from strom.cli.bench_plot import draw_plot

        draw_plot(arguments.plot, summary, timeline, latencies_ms if latency else [])
        print(f"plot written to {arguments.plot}", file=sys.stderr)
    if errors:
        first = next((result.first_error for result in results if result.first_error), None)
        raise CliError(f"{errors} records failed" + (f": {first}" if first else ""))
    if done < arguments.records:
        raise CliError(f"only {done} of {arguments.records} records within the time allowed")
    return 0


def _bench_produce(arguments: argparse.Namespace) -> int:
    _check(arguments)
    settings = _producer_settings(arguments)
    _ensure_topic(arguments)
    shares = split_evenly(arguments.records, arguments.processes)
    rate = arguments.throughput / arguments.processes if arguments.throughput > 0 else -1.0
    jobs = [
        Job(
            "produce",
            arguments.client,
            arguments.topic,
            share,
            arguments.record_size,
            settings,
            throughput=rate,
        )
        for share in shares
    ]
    if len(jobs) == 1:
        result, elapsed_s, monitor = _run_in_process(jobs[0], arguments)
        results = [result]
    else:
        results, elapsed_s, monitor = _run_processes(jobs, arguments, arguments.records)
    return _finish(arguments, "produce", results, elapsed_s, monitor.timeline, latency=True)


def _bench_consume(arguments: argparse.Namespace) -> int:
    _check(arguments)
    settings = _consumer_settings(arguments)
    offsets = sorted(_partition_offsets(arguments, "earliest").items())
    if arguments.processes > len(offsets):
        raise UsageError(
            f"--processes {arguments.processes} is more than the topic's {len(offsets)} partitions"
        )
    jobs = [
        Job(
            "consume",
            arguments.client,
            arguments.topic,
            arguments.records,
            arguments.record_size,
            settings,
            partitions=offsets[index :: arguments.processes],
            idle_timeout_ms=arguments.timeout_ms,
        )
        for index in range(arguments.processes)
    ]
    if len(jobs) == 1:
        result, elapsed_s, monitor = _run_in_process(jobs[0], arguments)
        results = [result]
    else:
        results, elapsed_s, monitor = _run_processes(jobs, arguments, arguments.records)
    return _finish(arguments, "consume", results, elapsed_s, monitor.timeline, latency=False)


def _bench_end_to_end(arguments: argparse.Namespace) -> int:
    _check(arguments, minimum_record_bytes=E2E_HEADER.size)
    producer_settings = _producer_settings(arguments)
    # -X settings are the producer's; the consumer takes those every client knows (security's).
    consumer_arguments = argparse.Namespace(
        **{
            **vars(arguments),
            "client_config": list(common_client_config(arguments).items()),
            "command_config": None,
        }
    )
    consumer_settings = _consumer_settings(consumer_arguments)
    _ensure_topic(arguments)
    # Start where the log ends now, so earlier records are not counted and none of ours is missed.
    offsets = sorted(_partition_offsets(arguments, "latest").items())
    produce_job = Job(
        "produce",
        arguments.client,
        arguments.topic,
        arguments.records,
        arguments.record_size,
        producer_settings,
        throughput=arguments.throughput,
    )
    consume_job = Job(
        "consume",
        arguments.client,
        arguments.topic,
        arguments.records,
        arguments.record_size,
        consumer_settings,
        partitions=offsets,
        idle_timeout_ms=arguments.timeout_ms,
    )
    recorder = DeliveryRecorder()
    failures: list[BaseException] = []

    def produce() -> None:
        try:
            if arguments.client == "confluent":
                _confluent_produce(produce_job, recorder, stamp_values=True)
            else:
                _strom_produce(produce_job, recorder, stamp_values=True)
        except BaseException as error:  # shown by the main thread
            failures.append(error)

    quota = _Quota(arguments.records)
    latencies_ms: list[float] = []
    monitor = Monitor(lambda: quota.taken, _progress(arguments))
    sender = threading.Thread(target=produce, name="strom-bench-producer", daemon=True)
    monitor.start()
    sender.start()
    try:
        read = _consume(consume_job, quota.take, latencies_ms)
    finally:
        sender.join()
        elapsed_s = monitor.stop(quota.taken)
    if failures:
        raise failures[0]
    result = JobResult(read, recorder.errors, recorder.first_error, latencies_ms)
    return _finish(arguments, "end-to-end", [result], elapsed_s, monitor.timeline, latency=True)
