"""Latency and the cost of a small request: end-to-end latency at fixed rates, broker CPU per request,
and the broker's ceilings under a load generator written in C.

``python -m benchmarks.latency [--rates 1000,10000,50000] [--seconds S] [--before REV] [--rounds N]
[--output BENCHMARKS.md] [--no-write]``

Everything runs on 127.0.0.1, brokers started and stopped here by PID.

(a) End to end. A producer process sends 100-byte records to a fresh one-partition topic at a
fixed rate; a consumer process (started first, assigned the partition from offset 0) reads them.
Each value carries a sequence number and ``CLOCK_MONOTONIC`` read just before the record is
handed to the client's send call; the consumer reads the clock again when its application holds
the record (``poll()`` returned it), and the difference is the record's latency. The first second
of records is a warm-up: checked for loss and duplicates, left out of the percentiles. Missing
records (a sequence number never seen) and duplicates (seen twice) are counted. The producer paces
itself by the clock (records due so far are sent, then it sleeps until the next is due), so a
slow client or broker shows as latency, not as a lower rate. Cases: confluent-kafka producer and
consumer with ``linger.ms`` 0 and 1, and strom's own Producer and Consumer with ``linger_ms`` 0;
acks=1, no compression, everything else at the clients' defaults. Beside the latencies: the CPU
share of the producer and the consumer process (all their threads), and the broker's CPU time per
request and per record during the case (requests counted by the broker's own metrics).

(b) Broker CPU per small request. ``benchmarks/loadgen.c`` (built here with gcc against Debian's
librdkafka-dev) keeps pre-encoded request frames in flight over 4 connections at C speed, two
windows of 64 per connection: a one-record Produce (acks=1, v9, what librdkafka sends at
``linger.ms=0``), a Fetch that returns one record (v12, max wait 0), and a Heartbeat (v4) of a
member of a stable group. The figure is the broker's CPU time (user + system) over answers
counted after a warm-up, with the load generator taking almost none of the machine. Then the
same requests one at a time (``loadgen paced``): one connection, one request sent every 1/10,000 s
by the clock whether or not the last was answered, as a client at ``linger.ms=0`` sends records;
the broker's CPU per request, and each request's round trip (its send to its whole answer read).
A request that finds the broker idle costs it several times what the same request costs back
to back (most likely the caches and CPU state an idle process loses between requests; the notes
in BENCHMARKS.md give the measurements).

(c) Broker ceilings with the C load: two ``loadgen produce`` processes (librdkafka, acks=1,
linger 5 ms, 1 MiB batches) write 1 KiB records to one partition; one ``loadgen consume`` reads
100-byte records back. MB/s and records/s as achieved on the shared machine, and the broker's CPU
per record (the rate one CPU of broker time sustains). Twice the produced bytes are written to a
file and deleted first, so that the page cache the broker writes into is memory touched before
(on a fresh virtual machine a first touch is slow: the same 600 MB produce ran at 308 MB/s into
never-touched memory and at ~1,080 MB/s once the memory had been used).

With ``--before REV`` every broker-side figure is taken twice in the same run, interleaved: from
this tree and from ``src`` of REV (exported with ``git archive``); the strom-client case of (a)
then runs REV's client against REV's broker too.
"""

from __future__ import annotations

import argparse
import array
import datetime
import multiprocessing
import os
import re
import resource
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.harness import Broker, cpu_seconds, free_port, touch_page_cache
from benchmarks.report import replace_section
from benchmarks.run import create_topic, machine_description
from benchmarks.validation import export_source

RECORD_BYTES = 100
RATES_DEFAULT = (1_000, 10_000, 50_000)
MEASURE_S_DEFAULT = 10.0
WARM_UP_S = 1.0
# After the last record is sent the consumer has this long to read the rest before they count as missing.
DRAIN_S = 10.0
CASE_TIMEOUT_S = 180.0
# The producer sleeps at most this long between bursts (and at least until the next record is due).
PACE_SLEEP_S_MAX = 0.001
# How long each producer process paces a send that does nothing first, to measure the pacing alone.
PACING_PROBE_S = 1.0
STAMP = struct.Struct(">QQ")  # sequence number, CLOCK_MONOTONIC in ns just before the send call
PERCENTILES = (50.0, 90.0, 99.0, 99.9)
# (b): a window of frames per connection, two windows in flight.
FRAMES_WINDOW = 64
FRAMES_CONNECTIONS = 4
FRAMES_WARM_UP_S = 1.0
FRAMES_MEASURE_S = 4.0
# (b), one request at a time: the rate of the end-to-end bar's records (one request each at linger.ms=0).
PACED_RATE = 10_000
PRODUCE_VERSION = 9
FETCH_VERSION = 12
HEARTBEAT_VERSION = 4
# (c)
CEILING_PRODUCE_RECORD_BYTES = 1024
CEILING_PRODUCE_RECORDS = 300_000  # per producer process
CEILING_PRODUCERS = 2
CEILING_CONSUME_RECORD_BYTES = 100
CEILING_CONSUME_RECORDS = 3_000_000
BAR_BROKER_CPU_US = 15.0
BAR_P50_MS = 0.5
BAR_P99_MS = 1.0
BAR_P99_FAST_MS = 5.0
BAR_PRODUCER_CPU_SHARE = 0.30
LOADGEN_SOURCE = Path(__file__).with_name("loadgen.c")


# -- (a) end to end -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClientCase:
    name: str
    client: str  # "confluent" or "strom"
    linger_ms: int


CLIENT_CASES = (
    ClientCase("confluent-kafka, linger.ms=0", "confluent", 0),
    ClientCase("confluent-kafka, linger.ms=1", "confluent", 1),
    ClientCase("strom, linger_ms=0", "strom", 0),
)


def _use_source(source_dir: str | None) -> None:
    """In a child process: import strom from ``source_dir`` (another revision) when given."""
    if source_dir:
        sys.path.insert(0, source_dir)


def _process_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _paced_send(send: Callable[[bytes], None], after_burst: Callable[[], None], rate: int, total: int) -> int:
    """Send ``total`` stamped records at ``rate`` per second; returns the ns the sending took."""
    padding = bytes(RECORD_BYTES - STAMP.size)
    pack = STAMP.pack
    clock = time.monotonic_ns
    sleep = time.sleep
    started = clock()
    interval_ns = 1e9 / rate
    sent = 0
    while sent < total:
        due = min(total, int((clock() - started) / interval_ns) + 1)
        while sent < due:
            send(pack(sent, clock()) + padding)
            sent += 1
        after_burst()
        wait_s = (started + sent * interval_ns - clock()) / 1e9
        if wait_s > 0:
            sleep(min(wait_s, PACE_SLEEP_S_MAX))
    return clock() - started


def _pacing_cpu_share(rate: int) -> float:
    """The share of a core that ``_paced_send`` itself takes at ``rate`` (a send that does nothing),
    measured in the calling process: at 10,000/s it sleeps between every two records, and each
    sleep and wake-up costs the producer's process CPU that no client is responsible for."""
    cpu_before = _process_cpu_s()
    sending_ns = _paced_send(lambda _value: None, lambda: None, rate, int(rate * PACING_PROBE_S))
    return (_process_cpu_s() - cpu_before) / (sending_ns / 1e9)


def _produce_child(
    case: ClientCase,
    bootstrap: str,
    topic: str,
    rate: int,
    total: int,
    source: str | None,
    ready: Any,
    start: Any,
    out: Any,
) -> None:
    _use_source(source)
    try:
        if case.client == "confluent":
            from confluent_kafka import Producer

            producer = Producer(
                {
                    "bootstrap.servers": bootstrap,
                    "acks": 1,
                    "linger.ms": case.linger_ms,
                    "compression.type": "none",
                }
            )
            producer.list_topics(topic, timeout=30)
            produce = producer.produce

            poll = producer.poll

            def send(value: bytes) -> None:
                while True:
                    try:
                        produce(topic, value, partition=0)
                        return
                    except BufferError:  # librdkafka's queue is full: the broker is behind
                        poll(0.001)

            def finish() -> int:
                return int(producer.flush(30))

            after_burst: Callable[[], None] = lambda: producer.poll(0)  # noqa: E731  # delivery reports
        else:
            from strom.client.producer import Producer as StromProducer

            strom_producer = StromProducer(
                bootstrap_servers=bootstrap, acks=1, linger_ms=case.linger_ms, compression_type="none"
            )
            strom_producer.partitions_for(topic)
            strom_send = strom_producer.send

            def send(value: bytes) -> None:
                strom_send(topic, value, partition=0)

            def finish() -> int:
                strom_producer.flush(30)
                strom_producer.close()
                return 0

            after_burst = lambda: None  # noqa: E731
        pacing_share = _pacing_cpu_share(rate)
        ready.set()
        start.wait()
        cpu_before = _process_cpu_s()
        sending_ns = _paced_send(send, after_burst, rate, total)
        cpu_used = _process_cpu_s() - cpu_before
        undelivered = finish()
        out.put(
            (
                "producer",
                {
                    "seconds": sending_ns / 1e9,
                    "cpu_s": cpu_used,
                    "pacing_cpu_share": pacing_share,
                    "undelivered": undelivered,
                },
            )
        )
    except BaseException as error:  # reported to the parent, which fails the case
        out.put(("producer", {"error": repr(error)}))


def _consume_child(
    client: str,
    bootstrap: str,
    topic: str,
    total: int,
    warm_up: int,
    source: str | None,
    ready: Any,
    out: Any,
) -> None:
    _use_source(source)
    try:
        latencies = array.array("q")
        seen = bytearray(total)
        duplicates = 0
        received = 0
        clock = time.monotonic_ns
        unpack = STAMP.unpack_from
        deadline: float | None = None
        if client == "confluent":
            from confluent_kafka import Consumer, TopicPartition

            consumer = Consumer(
                {
                    "bootstrap.servers": bootstrap,
                    "group.id": "strom-latency",  # never joined: the partition is assigned
                    "enable.auto.commit": False,
                    "enable.auto.offset.store": False,
                }
            )
            consumer.assign([TopicPartition(topic, 0, 0)])
            consumer.poll(0.5)
            poll = consumer.poll

            def take() -> list[bytes]:
                message = poll(0.1)
                if message is None or message.error() is not None:
                    return []
                return [message.value()]

            close = consumer.close
        else:
            from strom.client.consumer import Consumer as StromConsumer

            strom_consumer = StromConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
            strom_consumer.assign([(topic, 0)])
            strom_consumer.seek((topic, 0), 0)
            strom_consumer.poll(500)
            strom_poll = strom_consumer.poll

            def take() -> list[bytes]:
                return [record.value for record in strom_poll(100)]

            close = strom_consumer.close
        cpu_before = _process_cpu_s()
        ready.set()
        while received < total:
            values = take()
            now = clock()
            for value in values:
                sequence, stamp = unpack(value)
                if seen[sequence]:
                    duplicates += 1
                    continue
                seen[sequence] = 1
                received += 1
                if sequence >= warm_up:
                    latencies.append(now - stamp)
            if deadline is None and _sending_done():
                deadline = time.monotonic() + DRAIN_S
            if deadline is not None and time.monotonic() > deadline:
                break
        cpu_used = _process_cpu_s() - cpu_before
        close()
        out.put(
            (
                "consumer",
                {
                    "latencies": latencies.tobytes(),
                    "missing": total - received,
                    "duplicates": duplicates,
                    "cpu_s": cpu_used,
                },
            )
        )
    except BaseException as error:
        out.put(("consumer", {"error": repr(error)}))


_SENDING_DONE_PATH: str | None = None


def _sending_done() -> bool:
    """The parent touches a file when the producer has finished sending (the consumer's drain starts)."""
    return _SENDING_DONE_PATH is not None and os.path.exists(_SENDING_DONE_PATH)


def _consume_child_entry(done_path: str, *arguments: Any) -> None:
    global _SENDING_DONE_PATH
    _SENDING_DONE_PATH = done_path
    _consume_child(*arguments)


@dataclass
class EndToEnd:
    case: str
    rate: int
    variant: str  # "after" (this tree) or "before"
    latencies_ms: list[float]
    missing: int
    duplicates: int
    producer_cpu_share: float
    pacing_cpu_share: float  # of the producer's process, what the pacing loop alone takes
    consumer_cpu_share: float
    achieved_rate: float
    broker_cpu_share: float
    broker_cpu_us_per_request: float
    broker_cpu_us_per_record: float
    requests_per_record: float

    def percentile(self, percent: float) -> float:
        if not self.latencies_ms:
            return float("nan")
        ordered = self.latencies_ms
        index = min(len(ordered) - 1, max(0, round(percent / 100 * len(ordered) + 0.5) - 1))
        return ordered[index]


def scrape_requests(metrics_port: int) -> dict[str, int]:
    """Requests handled so far by API name, from the broker's Prometheus page."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    totals: dict[str, int] = {}
    for match in re.finditer(
        r'^kafka_network_requestmetrics_requests_total\{request="([^"]+)",version="\d+"\} (\d+)$', text, re.M
    ):
        totals[match.group(1)] = totals.get(match.group(1), 0) + int(match.group(2))
    return totals


@dataclass
class RunningBroker:
    broker: Broker
    metrics_port: int
    source: str | None  # the src directory of the revision, None for this tree


def start_broker(work_dir: Path, source: Path | None) -> RunningBroker:
    metrics_port = free_port()
    broker = Broker(work_dir, source_dir=source, arguments=["--metrics-port", str(metrics_port)])
    return RunningBroker(broker, metrics_port, str(source) if source else None)


def measure_end_to_end(
    running: RunningBroker, case: ClientCase, rate: int, seconds: float, variant: str, work_dir: Path
) -> EndToEnd:
    broker = running.broker
    slug = re.sub(r"[^a-z0-9]+", "-", f"{case.name}-{rate}-{variant}-{time.monotonic_ns()}".lower())
    topic = f"e2e-{slug}"
    create_topic(broker.bootstrap, topic, 1)
    total = int(rate * (WARM_UP_S + seconds))
    warm_up = int(rate * WARM_UP_S)
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    ready = context.Event()
    producer_ready = context.Event()
    start = context.Event()
    done_path = work_dir / f"{slug}.sent"
    consumer = context.Process(
        target=_consume_child_entry,
        args=(
            str(done_path),
            case.client,
            broker.bootstrap,
            topic,
            total,
            warm_up,
            running.source,
            ready,
            out,
        ),
    )
    producer = context.Process(
        target=_produce_child,
        args=(case, broker.bootstrap, topic, rate, total, running.source, producer_ready, start, out),
    )
    consumer.start()
    producer.start()
    reports: dict[str, dict[str, Any]] = {}
    try:
        if not ready.wait(60):
            raise RuntimeError(f"{case.name}: the consumer did not start")
        if not producer_ready.wait(60):  # its metadata fetched and its pacing measured alone
            raise RuntimeError(f"{case.name}: the producer did not start")
        requests_before = scrape_requests(running.metrics_port)
        cpu_before = cpu_seconds(broker.process.pid)
        started = time.monotonic()
        start.set()
        while len(reports) < 2:
            kind, report = out.get(timeout=CASE_TIMEOUT_S)
            if "error" in report:
                raise RuntimeError(f"{case.name} at {rate}/s: the {kind} failed: {report['error']}")
            reports[kind] = report
            if kind == "producer":
                done_path.touch()
        elapsed = time.monotonic() - started
        cpu_used = cpu_seconds(broker.process.pid) - cpu_before
        requests_after = scrape_requests(running.metrics_port)
    finally:
        for process in (producer, consumer):
            process.join(30)
            if process.is_alive():
                process.kill()
    requests = sum(requests_after.values()) - sum(requests_before.values())
    produced, consumed = reports["producer"], reports["consumer"]
    latencies = array.array("q")
    latencies.frombytes(consumed["latencies"])
    latencies_ms = sorted(value / 1e6 for value in latencies)
    return EndToEnd(
        case=case.name,
        rate=rate,
        variant=variant,
        latencies_ms=latencies_ms,
        missing=consumed["missing"],
        duplicates=consumed["duplicates"],
        producer_cpu_share=produced["cpu_s"] / produced["seconds"],
        pacing_cpu_share=produced["pacing_cpu_share"],
        consumer_cpu_share=consumed["cpu_s"] / elapsed,
        achieved_rate=total / produced["seconds"],
        broker_cpu_share=cpu_used / elapsed,
        broker_cpu_us_per_request=cpu_used / max(requests, 1) * 1e6,
        broker_cpu_us_per_record=cpu_used / total * 1e6,
        requests_per_record=requests / total,
    )


# -- the C load generator ---------------------------------------------------------------------------


def build_loadgen(work_dir: Path) -> Path:
    """Compile ``loadgen.c`` (gcc, librdkafka-dev: ``make bench-deps`` installs them)."""
    binary = work_dir / "loadgen"
    if shutil.which("gcc") is None:
        raise SystemExit("gcc is needed to build benchmarks/loadgen.c (make bench-deps)")
    if not Path("/usr/include/librdkafka/rdkafka.h").exists():
        raise SystemExit("librdkafka-dev is needed to build benchmarks/loadgen.c (make bench-deps)")
    subprocess.run(["gcc", "-O2", "-Wall", "-o", str(binary), str(LOADGEN_SOURCE), "-lrdkafka"], check=True)
    return binary


# -- (b) broker CPU per small request ------------------------------------------------------------


def _one_record_batch(source: str | None) -> bytes:
    _use_source(source)
    from strom.protocol.records import Record, build_batch

    return build_batch(
        [Record(offset_delta=0, timestamp_delta=0, key=None, value=bytes(RECORD_BYTES))],
        base_timestamp=int(time.time() * 1000),
    )


def request_frames(kind: str, topic: str, port: int) -> bytes:
    """A window of request frames of one ``kind``: produce, fetch or heartbeat (this tree's codec;
    the wire format is the same for every revision)."""
    from strom.protocol.headers import encode_request
    from strom.protocol.messages.fetch import FetchRequest
    from strom.protocol.messages.produce import ProduceRequest

    if kind == "produce":
        request: Any = ProduceRequest(
            acks=1,
            timeout_ms=30_000,
            topic_data=[
                ProduceRequest.TopicProduceData(
                    name=topic,
                    partition_data=[
                        ProduceRequest.PartitionProduceData(index=0, records=_one_record_batch(None))
                    ],
                )
            ],
        )
        version = PRODUCE_VERSION
    elif kind == "fetch":
        request = FetchRequest(
            replica_id=-1,
            max_wait_ms=0,
            min_bytes=1,
            max_bytes=1 << 20,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=[
                FetchRequest.FetchTopic(
                    topic=topic,
                    partitions=[
                        FetchRequest.FetchPartition(
                            partition=0, fetch_offset=0, partition_max_bytes=1 << 20, log_start_offset=-1
                        )
                    ],
                )
            ],
        )
        version = FETCH_VERSION
    else:
        request, version = _heartbeat_request(topic, port), HEARTBEAT_VERSION
    body = request.encode(version)
    return b"".join(
        encode_request(request.API_KEY, version, correlation_id, "loadgen", body)
        for correlation_id in range(FRAMES_WINDOW)
    )


def _heartbeat_request(topic: str, port: int) -> Any:
    from benchmarks.rebalance import join_raw_member
    from strom.protocol.messages.heartbeat import HeartbeatRequest

    group = f"latency-heartbeat-{topic}"
    connection, generation, member_id = join_raw_member(port, group, topic)
    connection.sock.close()  # the member stays for its session timeout
    return HeartbeatRequest(group_id=group, generation_id=generation, member_id=member_id)


@dataclass
class RequestCost:
    kind: str
    variant: str
    per_s: float
    cpu_us: float  # broker CPU (user + system) per answer
    user_us: float
    paced_rate: int = 0  # 0: pipelined (``loadgen frames``); else one at a time at this rate
    round_trip_us: tuple[float, float, float] = (0.0, 0.0, 0.0)  # paced: p50, p99, max


def _user_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / os.sysconf("SC_CLK_TCK")


def _request_frames_file(running: RunningBroker, kind: str, variant: str, work_dir: Path) -> Path:
    """A fresh topic for ``kind`` (with the one record a fetch returns) and the file of its frames."""
    broker = running.broker
    topic = f"cost-{kind}-{variant}-{time.monotonic_ns()}"
    create_topic(broker.bootstrap, topic, 1)
    if kind == "fetch":  # one record to fetch, again and again
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": 1})
        producer.produce(topic, bytes(RECORD_BYTES), partition=0)
        assert producer.flush(30) == 0
    frames_path = work_dir / f"{topic}.frames"
    frames_path.write_bytes(request_frames(kind, topic, broker.port))
    return frames_path


def _measure_loadgen_window(
    loadgen: Path, mode: str, running: RunningBroker, kind: str, variant: str, work_dir: Path, load: int
) -> tuple[list[str], float, float]:
    """Run ``loadgen frames`` (``load`` connections) or ``loadgen paced`` (``load`` requests a
    second) with requests of ``kind`` on a fresh topic; its final line's fields and the broker's
    CPU and user seconds between its "measuring" line and that one."""
    frames_path = _request_frames_file(running, kind, variant, work_dir)
    command = [
        str(loadgen),
        mode,
        "127.0.0.1",
        str(running.broker.port),
        str(frames_path),
        str(load),
        str(FRAMES_WARM_UP_S),
        str(FRAMES_MEASURE_S),
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline().strip()
        if line != "measuring":
            raise RuntimeError(f"loadgen {mode}: {line!r}")
        pid = running.broker.process.pid
        cpu_before, user_before = cpu_seconds(pid), _user_seconds(pid)
        fields = process.stdout.readline().split()
        cpu_used, user_used = cpu_seconds(pid) - cpu_before, _user_seconds(pid) - user_before
    finally:
        process.wait(30)
    return fields, cpu_used, user_used


def measure_request_cost(
    loadgen: Path, running: RunningBroker, kind: str, variant: str, work_dir: Path
) -> RequestCost:
    fields, cpu_used, user_used = _measure_loadgen_window(
        loadgen, "frames", running, kind, variant, work_dir, FRAMES_CONNECTIONS
    )
    answers, seconds = int(fields[0]), float(fields[1])
    return RequestCost(kind, variant, answers / seconds, cpu_used / answers * 1e6, user_used / answers * 1e6)


def measure_paced_cost(
    loadgen: Path, running: RunningBroker, kind: str, variant: str, work_dir: Path, rate: int
) -> RequestCost:
    """The broker's CPU per request, and the requests' round trips, when they come one at a time
    at ``rate`` per second over one connection (a client at linger.ms=0 sending that many)."""
    fields, cpu_used, user_used = _measure_loadgen_window(
        loadgen, "paced", running, kind, variant, work_dir, rate
    )
    answers, seconds = int(fields[0]), float(fields[1])
    p50_us, p99_us, max_us = (float(value) for value in fields[2:5])
    return RequestCost(
        kind,
        variant,
        answers / seconds,
        cpu_used / answers * 1e6,
        user_used / answers * 1e6,
        paced_rate=rate,
        round_trip_us=(p50_us, p99_us, max_us),
    )


# -- (c) ceilings -------------------------------------------------------------------------------------


@dataclass
class Ceiling:
    kind: str  # "produce 1 KiB" or "consume 100 B"
    variant: str
    records: int
    record_bytes: int
    seconds: float
    broker_cpu_s: float

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.records * self.record_bytes / self.seconds / 1e6

    @property
    def cpu_us_per_record(self) -> float:
        return self.broker_cpu_s / self.records * 1e6


def _run_loadgen(
    loadgen: Path, arguments: Sequence[str], processes: int, pid: int
) -> tuple[int, float, float]:
    """Run ``processes`` loadgen processes at once; (records, seconds of the slowest, broker CPU s)."""
    cpu_before = cpu_seconds(pid)
    started = time.monotonic()
    children = [
        subprocess.Popen([str(loadgen), *arguments], stdout=subprocess.PIPE, text=True)
        for _ in range(processes)
    ]
    outputs = [child.communicate(timeout=CASE_TIMEOUT_S * 2)[0] for child in children]
    seconds = time.monotonic() - started
    cpu_used = cpu_seconds(pid) - cpu_before
    records = 0
    for output in outputs:
        done, _, errors = output.split()
        if int(errors):
            raise RuntimeError(f"loadgen {arguments[0]}: {errors} errors")
        records += int(done)
    return records, seconds, cpu_used


def measure_ceilings(loadgen: Path, running: RunningBroker, variant: str) -> list[Ceiling]:
    broker = running.broker
    pid = broker.process.pid
    touch_page_cache(
        broker.log_path.parent, 2 * CEILING_PRODUCERS * CEILING_PRODUCE_RECORDS * CEILING_PRODUCE_RECORD_BYTES
    )
    stamp = time.monotonic_ns()
    produce_topic = f"ceiling-produce-{variant}-{stamp}"
    create_topic(broker.bootstrap, produce_topic, 1)
    records, seconds, cpu_used = _run_loadgen(
        loadgen,
        [
            "produce",
            broker.bootstrap,
            produce_topic,
            "0",
            str(CEILING_PRODUCE_RECORDS),
            str(CEILING_PRODUCE_RECORD_BYTES),
        ],
        CEILING_PRODUCERS,
        pid,
    )
    produced = Ceiling("produce 1 KiB", variant, records, CEILING_PRODUCE_RECORD_BYTES, seconds, cpu_used)
    consume_topic = f"ceiling-consume-{variant}-{stamp}"
    create_topic(broker.bootstrap, consume_topic, 1)
    _run_loadgen(
        loadgen,
        [
            "produce",
            broker.bootstrap,
            consume_topic,
            "0",
            str(CEILING_CONSUME_RECORDS // 2),
            str(CEILING_CONSUME_RECORD_BYTES),
        ],
        2,
        pid,
    )
    records, seconds, cpu_used = _run_loadgen(
        loadgen, ["consume", broker.bootstrap, consume_topic, "0", str(CEILING_CONSUME_RECORDS)], 1, pid
    )
    consumed = Ceiling("consume 100 B", variant, records, CEILING_CONSUME_RECORD_BYTES, seconds, cpu_used)
    return [produced, consumed]


# -- running and the report -------------------------------------------------------------------------


@dataclass
class Figures:
    end_to_end: list[EndToEnd] = field(default_factory=list)
    costs: list[RequestCost] = field(default_factory=list)
    ceilings: list[Ceiling] = field(default_factory=list)
    load_averages: list[float] = field(default_factory=list)


def _note_load(figures: Figures) -> None:
    figures.load_averages.append(os.getloadavg()[0])


def run(arguments: argparse.Namespace) -> Figures:
    figures = Figures()
    rates = [int(rate) for rate in arguments.rates.split(",")]
    with tempfile.TemporaryDirectory(prefix="strom-latency-") as temp:
        work_dir = Path(temp)
        loadgen = build_loadgen(work_dir)
        variants: dict[str, Path | None] = {"after": None}
        if arguments.before:
            variants = {"before": export_source(arguments.before, work_dir / "before-src"), "after": None}
        brokers: dict[str, RunningBroker] = {}
        try:
            for variant, source in variants.items():
                (work_dir / variant).mkdir()
                brokers[variant] = start_broker(work_dir / variant, source)
            for round_index in range(arguments.rounds):
                order = list(brokers.items())
                if round_index % 2:
                    order.reverse()
                if not arguments.skip_costs:
                    for kind in ("produce", "fetch", "heartbeat"):
                        for variant, running in order:
                            _note_load(figures)
                            cost = measure_request_cost(loadgen, running, kind, variant, work_dir)
                            figures.costs.append(cost)
                            print(
                                f"{variant:>6} {kind:<9}: {cost.per_s:>9,.0f}/s, broker {cost.cpu_us:6.1f} µs (user {cost.user_us:.1f})",
                                flush=True,
                            )
                    for kind in ("produce", "fetch", "heartbeat"):
                        for variant, running in order:
                            _note_load(figures)
                            cost = measure_paced_cost(loadgen, running, kind, variant, work_dir, PACED_RATE)
                            figures.costs.append(cost)
                            p50_us, p99_us, _max_us = cost.round_trip_us
                            print(
                                f"{variant:>6} {kind:<9} alone at {PACED_RATE:,}/s: broker {cost.cpu_us:6.1f} µs"
                                f" (user {cost.user_us:.1f}), round trip p50 {p50_us:.0f} p99 {p99_us:.0f} µs",
                                flush=True,
                            )
                if not arguments.skip_e2e:
                    for rate in rates:
                        for case in CLIENT_CASES:
                            for variant, running in order:
                                _note_load(figures)
                                result = measure_end_to_end(
                                    running, case, rate, arguments.seconds, variant, work_dir
                                )
                                figures.end_to_end.append(result)
                                print(
                                    f"{variant:>6} {case.name:<30} {rate:>6}/s: p50 {result.percentile(50):7.3f} "
                                    f"p99 {result.percentile(99):8.3f} max {result.latencies_ms[-1] if result.latencies_ms else float('nan'):8.3f} ms, "
                                    f"missing {result.missing}, dup {result.duplicates}, producer {result.producer_cpu_share:.0%} "
                                    f"(pacing alone {result.pacing_cpu_share:.0%}), "
                                    f"broker {result.broker_cpu_us_per_request:.1f} µs/request",
                                    flush=True,
                                )
                if not arguments.skip_ceilings:
                    for variant, running in order:
                        _note_load(figures)
                        for ceiling in measure_ceilings(loadgen, running, variant):
                            figures.ceilings.append(ceiling)
                            print(
                                f"{variant:>6} {ceiling.kind}: {ceiling.records_per_s:,.0f} rec/s {ceiling.mb_per_s:,.0f} MB/s, "
                                f"broker {ceiling.cpu_us_per_record:.2f} µs/record",
                                flush=True,
                            )
        finally:
            for running in brokers.values():
                running.broker.stop()
    return figures


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def render(figures: Figures, arguments: argparse.Namespace) -> str:
    import confluent_kafka

    variants = ["before", "after"] if arguments.before else ["after"]
    loads = figures.load_averages
    lines = [
        "## Latency and small requests (`python -m benchmarks.latency`)",
        "",
        f"Run: {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}. Machine: {machine_description()}.",
        f"confluent-kafka {confluent_kafka.version()} (librdkafka {confluent_kafka.libversion()[0]}); the C load"
        " generator links Debian's librdkafka. "
        + (
            f"Load average (1 min) during the run: {min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} CPUs."
            if loads
            else ""
        ),
    ]
    if arguments.before:
        lines.append(
            f"before = `{arguments.before}` (broker and strom client from its `src`), after = this tree;"
            f" both brokers ran at once, measured in turn, {arguments.rounds} round(s), medians."
        )
    if figures.costs:
        lines += [
            "",
            f"(b) Broker CPU per small request (C load generator, {FRAMES_CONNECTIONS} connections,"
            f" {2 * FRAMES_WINDOW} requests in flight each):",
            "",
            *_cost_table_head(variants, "answers/s"),
        ]
        labels = {
            "produce": f"Produce v{PRODUCE_VERSION}, one 100 B record, acks=1",
            "fetch": f"Fetch v{FETCH_VERSION} returning one record",
            "heartbeat": f"Heartbeat v{HEARTBEAT_VERSION}",
        }
        for kind, label in labels.items():
            cells = []
            rates_cells = []
            for variant in variants:
                mine = [
                    cost
                    for cost in figures.costs
                    if cost.kind == kind and cost.variant == variant and not cost.paced_rate
                ]
                cells.append(
                    f"{_median([c.cpu_us for c in mine]):.1f} ({_median([c.user_us for c in mine]):.1f})"
                )
                rates_cells.append(f"{_median([c.per_s for c in mine]):,.0f}")
            lines.append(f"| {label} | " + " | ".join(cells) + " | " + " | ".join(rates_cells) + " |")
        paced = [cost for cost in figures.costs if cost.paced_rate]
        if paced:
            lines += [
                "",
                f"The same requests one at a time, {PACED_RATE:,} per second over one connection (`loadgen"
                " paced`: what a client at linger.ms=0 sending that many records does to the broker): broker"
                " CPU per request, and each request's round trip from its send to its whole answer read:",
                "",
                *_cost_table_head(variants, "round trip p50 / p99 / max µs"),
            ]
            for kind, label in labels.items():
                cells = []
                trips = []
                for variant in variants:
                    mine = [cost for cost in paced if cost.kind == kind and cost.variant == variant]
                    cells.append(
                        f"{_median([c.cpu_us for c in mine]):.1f} ({_median([c.user_us for c in mine]):.1f})"
                    )
                    trips.append(
                        " / ".join(f"{_median([c.round_trip_us[i] for c in mine]):,.0f}" for i in range(3))
                    )
                lines.append(f"| {label} | " + " | ".join(cells) + " | " + " | ".join(trips) + " |")
        after_costs = {
            kind: _median(
                [
                    c.cpu_us
                    for c in figures.costs
                    if c.kind == kind and c.variant == "after" and not c.paced_rate
                ]
            )
            for kind in ("produce", "heartbeat")
        }
        met = all(value <= BAR_BROKER_CPU_US for value in after_costs.values())
        lines += [
            "",
            f"Bar: ≤ {BAR_BROKER_CPU_US:.0f} µs of broker CPU per one-record Produce and per Heartbeat: "
            f"**{'met' if met else 'not met'}** (produce {after_costs['produce']:.1f}, heartbeat {after_costs['heartbeat']:.1f}).",
        ]
    if figures.end_to_end:
        percentile_heads = " | ".join(f"p{p:g} ms" for p in PERCENTILES)
        lines += [
            "",
            f"(a) End to end, 100 B records at a fixed rate, {arguments.seconds:g} s after {WARM_UP_S:g} s of warm-up,"
            " producer and consumer in separate processes (medians over rounds where there are several):",
            "",
            f"| client | rate/s | variant | {percentile_heads} | max ms | missing | dup | producer CPU "
            "| of it pacing | consumer CPU | broker CPU | broker µs/request | requests/record |",
            "|---|---:|---|" + "---:|" * (len(PERCENTILES) + 10),
        ]
        for rate in sorted({result.rate for result in figures.end_to_end}):
            for case in CLIENT_CASES:
                for variant in variants:
                    mine = [
                        r
                        for r in figures.end_to_end
                        if r.rate == rate and r.case == case.name and r.variant == variant
                    ]
                    if not mine:
                        continue
                    cells = " | ".join(f"{_median([r.percentile(p) for r in mine]):.3f}" for p in PERCENTILES)
                    lines.append(
                        f"| {case.name} | {rate:,} | {variant} | {cells} "
                        f"| {_median([r.latencies_ms[-1] if r.latencies_ms else float('nan') for r in mine]):.1f} "
                        f"| {sum(r.missing for r in mine)} | {sum(r.duplicates for r in mine)} "
                        f"| {_median([r.producer_cpu_share for r in mine]):.0%} | {_median([r.pacing_cpu_share for r in mine]):.0%} "
                        f"| {_median([r.consumer_cpu_share for r in mine]):.0%} "
                        f"| {_median([r.broker_cpu_share for r in mine]):.0%} | {_median([r.broker_cpu_us_per_request for r in mine]):.1f} "
                        f"| {_median([r.requests_per_record for r in mine]):.2f} |"
                    )
        lines += ["", _e2e_bars(figures)]
    if figures.ceilings:
        lines += [
            "",
            "(c) Broker ceilings with the C load generator (librdkafka, acks=1, linger 5 ms, 1 MiB batches):",
            "",
            "| case | variant | records/s | MB/s | broker CPU µs/record | records/s per broker CPU | MB/s per broker CPU |",
            "|---|---|---:|---:|---:|---:|---:|",
        ]
        for kind in ("produce 1 KiB", "consume 100 B"):
            for variant in variants:
                mine = [c for c in figures.ceilings if c.kind == kind and c.variant == variant]
                if not mine:
                    continue
                cpu_us = _median([c.cpu_us_per_record for c in mine])
                lines.append(
                    f"| {kind} ({mine[0].records:,} records) | {variant} | {_median([c.records_per_s for c in mine]):,.0f} "
                    f"| {_median([c.mb_per_s for c in mine]):,.0f} | {cpu_us:.2f} | {1e6 / cpu_us:,.0f} "
                    f"| {1e6 / cpu_us * mine[0].record_bytes / 1e6:,.0f} |"
                )
    lines += ["", HOW_MEASURED]
    return "\n".join(lines) + "\n"


def _cost_table_head(variants: Sequence[str], second: str) -> list[str]:
    """The heading and alignment rows of a table of broker CPU per request, then ``second``, for
    each variant."""
    return [
        "| request | "
        + " | ".join(f"{v} µs (user)" for v in variants)
        + " | "
        + " | ".join(f"{v} {second}" for v in variants)
        + " |",
        "|---|" + "---:|" * (2 * len(variants)),
    ]


def _e2e_bars(figures: Figures) -> str:
    def worst(case_prefix: str, rate: int, percent: float) -> float:
        values = [
            _median(
                [
                    r.percentile(percent)
                    for r in figures.end_to_end
                    if r.case == case.name and r.rate == rate and r.variant == "after"
                ]
            )
            for case in CLIENT_CASES
            if case.name.startswith(case_prefix)
        ]
        values = [value for value in values if value == value]
        return max(values) if values else float("nan")

    parts = []
    for prefix in ("confluent-kafka, linger.ms=0", "strom"):
        p50, p99 = worst(prefix, 10_000, 50), worst(prefix, 10_000, 99)
        if p50 == p50:
            verdict = "met" if p50 <= BAR_P50_MS and p99 <= BAR_P99_MS else "not met"
            parts.append(f"{prefix} at 10,000/s p50 {p50:.2f} / p99 {p99:.2f} ms: **{verdict}**")
    fast = [worst(prefix, 50_000, 99) for prefix in ("confluent-kafka, linger.ms=0", "strom")]
    fast = [value for value in fast if value == value]
    if fast:
        parts.append(
            f"p99 at 50,000/s ≤ {BAR_P99_FAST_MS:g} ms: **{'met' if max(fast) <= BAR_P99_FAST_MS else 'not met'}** (worst {max(fast):.2f} ms)"
        )
    producer = [
        r
        for r in figures.end_to_end
        if r.case.startswith("strom") and r.rate == 10_000 and r.variant == "after"
    ]
    if producer:
        share = _median([r.producer_cpu_share for r in producer])
        net = _median([r.producer_cpu_share - r.pacing_cpu_share for r in producer])
        parts.append(
            f"strom producer at 10,000/s ≤ {BAR_PRODUCER_CPU_SHARE:.0%} of a core: "
            f"**{'met' if share <= BAR_PRODUCER_CPU_SHARE else 'not met'}** ({share:.0%} of its process; "
            f"{net:.0%} beside what the benchmark's pacing loop takes alone)"
        )
    return "Bars (after): " + "; ".join(parts) + "." if parts else ""


HOW_MEASURED = """How measured: see the docstring of `benchmarks/latency.py`. Latency is from CLOCK_MONOTONIC read
just before the producer's send call to the moment `poll()` hands the record to the consumer's
application; the producer paces itself by the clock, so time a record waits in a slow client or
broker counts. CPU shares are of one core (user + system, all threads of the process); "of it
pacing" is what the producer's pacing loop takes alone (with a send that does nothing, one second
in the same process before the case), which the producer CPU includes. Broker CPU
per request divides the broker's CPU time during a case by the requests its metrics counted
(Produce, Fetch and whatever else the clients sent). The machine has 2 CPUs shared by the broker,
the clients and other work; wall-clock latencies move with the load average given above, CPU
per request much less."""


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rates", default=",".join(map(str, RATES_DEFAULT)), help="records/s for (a)")
    parser.add_argument(
        "--seconds", type=float, default=MEASURE_S_DEFAULT, help="measured seconds per case of (a)"
    )
    parser.add_argument("--rounds", type=int, default=1, help="rounds of every case (medians reported)")
    parser.add_argument("--before", default="", help="also measure this git revision's broker and client")
    parser.add_argument("--skip-e2e", action="store_true", help="leave out (a)")
    parser.add_argument("--skip-costs", action="store_true", help="leave out (b)")
    parser.add_argument("--skip-ceilings", action="store_true", help="leave out (c)")
    parser.add_argument("--output", default="BENCHMARKS.md", help="file whose latency section is replaced")
    parser.add_argument("--no-write", action="store_true", help="print only")
    arguments = parser.parse_args()
    figures = run(arguments)
    section = render(figures, arguments)
    print(section)
    if not arguments.no_write:
        replace_section(Path(arguments.output), "latency", section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
