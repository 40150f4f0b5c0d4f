"""Rebalance latency and heartbeat throughput of strom's group coordinator.

``python -m benchmarks.rebalance [--members 10,50,100] [--profile] [--output BENCHMARKS.md] [--no-write]``

Everything runs on 127.0.0.1 against one ``strom broker`` subprocess started here with
``group.initial.rebalance.delay.ms=0``. Group members are confluent-kafka consumers, each on its own
thread of this one process (librdkafka does its network work on its own threads and releases the
GIL in ``poll()``), using ``partition.assignment.strategy=range`` unless said otherwise.

- (a) join storm: N members subscribe at once to a topic with N partitions; the time from the first
  ``subscribe()`` until every member's last ``on_assign`` belongs to one and the same generation and
  the assignments cover every partition exactly once (held for a second, so it is the final one).
- (b) clean leave: one member of the stable group calls ``close()`` (LeaveGroup); the time from that
  call until every remaining member has its ``on_assign`` of the next, complete generation.
- (c) scale-out pause: 6 members consume a steady stream (a producer thread at a fixed rate over 12
  partitions); a 7th joins. For each member that owns partitions both before and after the
  rebalance, the longest gap between two received records around the join; eager (``range``) against
  cooperative (``cooperative-sticky``), beside the longest gap in steady state before the join.
- (d) heartbeats per second: one member joins and syncs over a raw connection (strom's own protocol
  classes); then several connections pipeline HeartbeatRequests for it (a window of requests in
  flight each) and the responses are counted for a few seconds; every response is checked for
  error code NONE.

librdkafka notices a rebalance started by someone else only on its next heartbeat, so (a) and (b)
depend on ``heartbeat.interval.ms``: it is set to ``HEARTBEAT_INTERVAL_MS`` here (Kafka's default is
3000 ms, under which every figure would grow by up to that much), and reported with the figures.

The results replace the section between ``<!-- rebalance:start -->`` and ``<!-- rebalance:end -->``
in the output file (appended when the markers are absent); the rest of the file is left alone.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import itertools
import os
import platform
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import confluent_kafka
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]  # re-exported untyped

from benchmarks.harness import Broker, cpu_seconds
from benchmarks.report import replace_section
from strom.assignors import Assignment, Subscription, encode_assignment, encode_subscription
from strom.protocol.errors import ErrorCode
from strom.protocol.headers import decode_response_header, encode_request
from strom.protocol.messages.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from strom.protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from strom.protocol.messages.join_group import JoinGroupRequest, JoinGroupResponse
from strom.protocol.messages.sync_group import SyncGroupRequest, SyncGroupResponse

MEMBER_COUNTS = (10, 50, 100)
HEARTBEAT_INTERVAL_MS = 100
SESSION_TIMEOUT_MS = 30_000
POLL_TIMEOUT_S = 0.2
STABLE_TIMEOUT_S = 120.0
STABLE_HOLD_S = 1.0
THREAD_JOIN_TIMEOUT_S = 60.0
# (c): a stream steady enough that a pause of tens of milliseconds shows.
SCALE_OUT_MEMBERS = 6
SCALE_OUT_PARTITIONS = 12
SCALE_OUT_RATE_PER_S = 2_000
SCALE_OUT_STEADY_S = 3.0
SCALE_OUT_AFTER_S = 2.0
SCALE_OUT_POLL_TIMEOUT_S = 0.005
# (d)
HEARTBEAT_CONNECTIONS = 4
HEARTBEAT_WINDOW = 128  # requests in flight per connection
HEARTBEAT_WARMUP_S = 1.0
HEARTBEAT_MEASURE_S = 5.0
HEARTBEAT_VERSION = 4
JOIN_VERSION = 5
SYNC_VERSION = 5
FIND_COORDINATOR_VERSION = 3
PROFILE_SECONDS = 5
PROFILE_TOP = 12
SIZE_PREFIX = struct.Struct(">i")
BAR_LEAVE_S = 1.0
BAR_HEARTBEATS_PER_S = 20_000

Partition = tuple[str, int]


# -- broker -----------------------------------------------------------------------------------------


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "broker.address.family": "v4"})
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    futures[topic].result(30)


# -- group members ----------------------------------------------------------------------------------


GROUP_METADATA_MAGIC = b"CGMDv2:"


def generation_of(metadata: object) -> int:
    """librdkafka's serialized group metadata: ``CGMDv2:``, then the generation id (4 bytes, host
    order), then NUL-terminated group, member and instance ids."""
    assert isinstance(metadata, bytes) and metadata.startswith(GROUP_METADATA_MAGIC), metadata
    start = len(GROUP_METADATA_MAGIC)
    return int.from_bytes(metadata[start : start + 4], sys.byteorder, signed=True)


@dataclass
class AssignEvent:
    at_s: float
    generation: int
    partitions: list[Partition]


@dataclass
class MemberRecord:
    assigns: list[AssignEvent] = field(default_factory=list)
    revokes: list[tuple[float, list[Partition]]] = field(default_factory=list)
    received_at_s: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class Member:
    """One confluent-kafka consumer on its own thread; the callbacks record when things happened."""

    def __init__(
        self,
        name: str,
        bootstrap: str,
        group: str,
        topic: str,
        strategy: str,
        poll_timeout_s: float = POLL_TIMEOUT_S,
    ) -> None:
        self.name = name
        self.poll_timeout_s = poll_timeout_s
        self.topic = topic
        self.config: dict[str, object] = {
            "bootstrap.servers": bootstrap,
            "broker.address.family": "v4",
            "group.id": group,
            "client.id": name,
            "partition.assignment.strategy": strategy,
            "session.timeout.ms": SESSION_TIMEOUT_MS,
            "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
            "auto.offset.reset": "latest",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
            "fetch.queue.backoff.ms": 10,
        }
        self.record = MemberRecord()
        self.lock = threading.Lock()
        self.assignment: set[Partition] = set()
        self.last_generation = -1
        self.close_requested = threading.Event()
        self.closed = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        consumer = Consumer(self.config)
        try:
            consumer.subscribe([self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke)
            while not self.close_requested.is_set():
                # consume() returns early only when num_messages arrived: its timeout is the arrival
                # resolution, hence short where arrival times are measured.
                messages = consumer.consume(num_messages=1000, timeout=self.poll_timeout_s)
                if messages:
                    now = time.monotonic()
                    good = sum(1 for message in messages if message.error() is None)
                    with self.lock:
                        self.record.received_at_s.extend([now] * good)
                    for message in messages:
                        error = message.error()
                        if error is not None and error.code() != KafkaError._PARTITION_EOF:
                            with self.lock:
                                self.record.errors.append(str(error))
        finally:
            consumer.close()
            self.closed.set()

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        generation = generation_of(consumer.consumer_group_metadata())
        assigned = [(partition.topic, partition.partition) for partition in partitions]
        with self.lock:
            self.record.assigns.append(AssignEvent(time.monotonic(), generation, assigned))
            self.assignment.update(assigned)
            self.last_generation = generation

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        revoked = [(partition.topic, partition.partition) for partition in partitions]
        with self.lock:
            self.record.revokes.append((time.monotonic(), revoked))
            self.assignment.difference_update(revoked)

    def state(self) -> tuple[int, set[Partition], float]:
        """(generation of the last assignment, current assignment, time of the last on_assign)."""
        with self.lock:
            last_at = self.record.assigns[-1].at_s if self.record.assigns else float("nan")
            return self.last_generation, set(self.assignment), last_at


def _complete(members: Sequence[Member], partitions: int, topic: str) -> tuple[int, float] | None:
    """(generation, time the last member got it) when the group is settled on one generation with
    every partition owned exactly once; None otherwise."""
    states = [member.state() for member in members]
    generations = {generation for generation, _, _ in states}
    if len(generations) != 1 or -1 in generations:
        return None
    owners = Counter(partition for _, assignment, _ in states for partition in assignment)
    if set(owners) != {(topic, index) for index in range(partitions)} or max(owners.values()) != 1:
        return None
    return generations.pop(), max(at_s for _, _, at_s in states)


def wait_stable(
    members: Sequence[Member], partitions: int, topic: str, after_generation: int = -1
) -> tuple[int, float]:
    """Wait until ``_complete`` holds on a generation above ``after_generation`` and still holds on
    the same generation ``STABLE_HOLD_S`` later; return that generation and when it was reached."""
    deadline = time.monotonic() + STABLE_TIMEOUT_S
    while time.monotonic() < deadline:
        for member in members:
            if member.record.errors:
                raise RuntimeError(f"{member.name}: {member.record.errors[:3]}")
        settled = _complete(members, partitions, topic)
        if settled is not None and settled[0] > after_generation:
            time.sleep(STABLE_HOLD_S)
            again = _complete(members, partitions, topic)
            if again == settled:
                return settled
            continue
        time.sleep(0.01)
    raise TimeoutError(
        f"group not stable in {STABLE_TIMEOUT_S} s: " + str([member.state()[:2] for member in members][:10])
    )


def stop_members(members: Sequence[Member]) -> None:
    for member in members:
        member.close_requested.set()
    for member in members:
        member.thread.join(THREAD_JOIN_TIMEOUT_S)


# -- (a) and (b) --------------------------------------------------------------------------------------


@dataclass
class StormResult:
    members: int
    join_s: float
    join_generation: int
    leave_s: float


def measure_storm_and_leave(bootstrap: str, member_count: int) -> StormResult:
    topic = f"storm-{member_count}-{os.getpid()}-{time.monotonic_ns()}"
    group = f"storm-group-{topic}"
    create_topic(bootstrap, topic, member_count)
    members = [Member(f"m{index}", bootstrap, group, topic, "range") for index in range(member_count)]
    try:
        started_at = time.monotonic()
        for member in members:
            member.thread.start()
        generation, stable_at = wait_stable(members, member_count, topic)
        join_s = stable_at - started_at

        leaving, staying = (
            members[member_count // 2],
            [m for m in members if m is not members[member_count // 2]],
        )
        left_at = time.monotonic()
        leaving.close_requested.set()
        _, restable_at = wait_stable(staying, member_count, topic, after_generation=generation)
        return StormResult(member_count, join_s, generation, restable_at - left_at)
    finally:
        stop_members(members)


# -- (c) ----------------------------------------------------------------------------------------------


@dataclass
class ScaleOutResult:
    strategy: str
    kept_members: int
    longest_gap_s: float
    median_gap_s: float
    steady_gap_s: float
    restable_s: float


def _produce_steadily(bootstrap: str, topic: str, stop: threading.Event) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "broker.address.family": "v4", "linger.ms": 1, "acks": 1}
    )
    interval_s = 1.0 / SCALE_OUT_RATE_PER_S
    next_at = time.monotonic()
    sequence = 0
    while not stop.is_set():
        producer.produce(topic, value=b"x" * 100, partition=sequence % SCALE_OUT_PARTITIONS)
        sequence += 1
        next_at += interval_s
        delay_s = next_at - time.monotonic()
        if delay_s > 0:
            producer.poll(delay_s)
        else:
            producer.poll(0)
    producer.flush(30)


def _longest_gap(times_s: Sequence[float], start_s: float, end_s: float) -> float:
    window = [at for at in times_s if start_s <= at <= end_s]
    points = [start_s, *window, end_s]
    return max(later - earlier for earlier, later in itertools.pairwise(points))


def measure_scale_out(bootstrap: str, strategy: str) -> ScaleOutResult:
    topic = f"scale-{strategy}-{time.monotonic_ns()}"
    group = f"scale-group-{topic}"
    create_topic(bootstrap, topic, SCALE_OUT_PARTITIONS)
    members = [
        Member(f"s{index}", bootstrap, group, topic, strategy, SCALE_OUT_POLL_TIMEOUT_S)
        for index in range(SCALE_OUT_MEMBERS)
    ]
    stop_producing = threading.Event()
    producer = threading.Thread(
        target=_produce_steadily, args=(bootstrap, topic, stop_producing), daemon=True
    )
    try:
        for member in members:
            member.thread.start()
        generation, _ = wait_stable(members, SCALE_OUT_PARTITIONS, topic)
        producer.start()
        steady_from = time.monotonic() + 0.5  # the first fetches of the stream settle
        time.sleep(SCALE_OUT_STEADY_S)
        before = {member.name: member.state()[1] for member in members}
        added_at = time.monotonic()
        newcomer = Member("newcomer", bootstrap, group, topic, strategy, SCALE_OUT_POLL_TIMEOUT_S)
        members.append(newcomer)
        newcomer.thread.start()
        _, restable_at = wait_stable(members, SCALE_OUT_PARTITIONS, topic, after_generation=generation)
        time.sleep(SCALE_OUT_AFTER_S)
        end_at = time.monotonic()
        gaps, steady_gaps = [], []
        for member in members[:-1]:
            if not before[member.name] or not member.state()[1]:
                continue  # owned nothing before or after: it has no stream to pause
            with member.lock:
                received = list(member.record.received_at_s)
            gaps.append(_longest_gap(received, added_at - 0.2, end_at))
            steady_gaps.append(_longest_gap(received, steady_from, added_at - 0.2))
        return ScaleOutResult(
            strategy,
            len(gaps),
            max(gaps),
            statistics.median(gaps),
            max(steady_gaps),
            restable_at - added_at,
        )
    finally:
        stop_producing.set()
        producer.join(60)
        stop_members(members)


# -- (d) ----------------------------------------------------------------------------------------------


class BlockingConnection:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.correlation_id = 0

    def round_trip(self, request: Any, response_type: Any, version: int) -> Any:
        self.correlation_id += 1
        self.sock.sendall(
            encode_request(request.API_KEY, version, self.correlation_id, "bench", request.encode(version))
        )
        (size,) = SIZE_PREFIX.unpack(self._exactly(SIZE_PREFIX.size))
        frame = self._exactly(size)
        _, body_offset = decode_response_header(frame, request.API_KEY, version)
        return response_type.decode(memoryview(frame)[body_offset:], version)

    def _exactly(self, count: int) -> bytes:
        data = b""
        while len(data) < count:
            chunk = self.sock.recv(count - len(data))
            if not chunk:
                raise ConnectionError("broker closed the connection")
            data += chunk
        return data


def join_raw_member(port: int, group: str, topic: str) -> tuple[BlockingConnection, int, str]:
    """Join and sync one member over a raw connection; returns it with (generation, member id)."""
    connection = BlockingConnection(port)
    found = connection.round_trip(
        FindCoordinatorRequest(key=group), FindCoordinatorResponse, FIND_COORDINATOR_VERSION
    )
    assert found.error_code == ErrorCode.NONE, found
    member_id = ""
    for _ in range(2):  # the two-step join: MEMBER_ID_REQUIRED hands out the id
        join = JoinGroupRequest(
            group_id=group,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            rebalance_timeout_ms=SESSION_TIMEOUT_MS,
            member_id=member_id,
            protocol_type="consumer",
            protocols=[
                JoinGroupRequest.JoinGroupRequestProtocol(
                    name="range", metadata=encode_subscription(Subscription([topic]))
                )
            ],
        )
        joined = connection.round_trip(join, JoinGroupResponse, JOIN_VERSION)
        member_id = joined.member_id
        if joined.error_code != ErrorCode.MEMBER_ID_REQUIRED:
            break
    assert joined.error_code == ErrorCode.NONE, joined
    synced = connection.round_trip(
        SyncGroupRequest(
            group_id=group,
            generation_id=joined.generation_id,
            member_id=member_id,
            protocol_type="consumer",
            protocol_name="range",
            assignments=[
                SyncGroupRequest.SyncGroupRequestAssignment(
                    member_id, encode_assignment(Assignment([(topic, 0)]))
                )
            ],
        ),
        SyncGroupResponse,
        SYNC_VERSION,
    )
    assert synced.error_code == ErrorCode.NONE, synced
    return connection, joined.generation_id, member_id


async def _pipeline_heartbeats(
    port: int,
    frames: bytes,
    window: int,
    stop_at: float,
    counts: list[int],
    index: int,
    check: Callable[[bytes], None],
) -> None:
    """Keep ``window`` heartbeats in flight on one connection; count responses as they arrive."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(frames + frames)  # two windows: one is always in flight while the other returns
        buffer = b""
        in_window = 0
        while time.monotonic() < stop_at:
            buffer += await reader.read(1 << 16)
            position = 0
            while len(buffer) - position >= SIZE_PREFIX.size:
                (size,) = SIZE_PREFIX.unpack_from(buffer, position)
                if len(buffer) - position - SIZE_PREFIX.size < size:
                    break
                if counts[index] % 1024 == 0:
                    check(buffer[position + SIZE_PREFIX.size : position + SIZE_PREFIX.size + size])
                position += SIZE_PREFIX.size + size
                counts[index] += 1
                in_window += 1
                if in_window == window:  # the whole window came back: send the next one
                    in_window = 0
                    writer.write(frames)
            buffer = buffer[position:]
    finally:
        writer.close()


@dataclass
class HeartbeatResult:
    per_s: float
    total: int
    broker_cpu_share: float  # of one CPU, while counting


def measure_heartbeats(port: int, bootstrap: str, broker_pid: int) -> HeartbeatResult:
    topic = f"heartbeat-{time.monotonic_ns()}"
    group = f"heartbeat-group-{topic}"
    create_topic(bootstrap, topic, 1)
    member_connection, generation, member_id = join_raw_member(port, group, topic)
    request = HeartbeatRequest(group_id=group, generation_id=generation, member_id=member_id)
    body = request.encode(HEARTBEAT_VERSION)
    frames = b"".join(
        encode_request(request.API_KEY, HEARTBEAT_VERSION, correlation_id, "bench", body)
        for correlation_id in range(HEARTBEAT_WINDOW)
    )

    def check(frame: bytes) -> None:
        _, body_offset = decode_response_header(frame, request.API_KEY, HEARTBEAT_VERSION)
        response = HeartbeatResponse.decode(memoryview(frame)[body_offset:], HEARTBEAT_VERSION)
        assert response.error_code == ErrorCode.NONE, response

    async def run() -> HeartbeatResult:
        counts = [0] * HEARTBEAT_CONNECTIONS
        started_at = time.monotonic()
        stop_at = started_at + HEARTBEAT_WARMUP_S + HEARTBEAT_MEASURE_S
        tasks = [
            asyncio.create_task(
                _pipeline_heartbeats(port, frames, HEARTBEAT_WINDOW, stop_at, counts, index, check)
            )
            for index in range(HEARTBEAT_CONNECTIONS)
        ]
        await asyncio.sleep(HEARTBEAT_WARMUP_S)
        counted_from, at_start, cpu_at_start = time.monotonic(), sum(counts), cpu_seconds(broker_pid)
        await asyncio.gather(*tasks)
        elapsed_s = time.monotonic() - counted_from
        cpu_share = (cpu_seconds(broker_pid) - cpu_at_start) / elapsed_s
        return HeartbeatResult((sum(counts) - at_start) / elapsed_s, sum(counts), cpu_share)

    try:
        return asyncio.run(run())
    finally:
        member_connection.sock.close()


def profile_broker(pid: int, seconds: int, work: Callable[[], object]) -> list[tuple[str, float, float]]:
    """Run ``work`` while py-spy samples the broker; return the top functions as
    (function, self share, inclusive share) from py-spy's collapsed stacks."""
    output = Path(tempfile.mkdtemp()) / "profile.txt"
    py_spy = Path(sys.executable).parent / "py-spy"
    sampler = subprocess.Popen(
        [
            str(py_spy),
            "record",
            "--pid",
            str(pid),
            "--duration",
            str(seconds),
            "--format",
            "raw",
            "--nolineno",
            "--output",
            str(output),
            "--nonblocking",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        work()
    finally:
        sampler.wait(seconds + 60)
    self_samples: Counter[str] = Counter()
    inclusive_samples: Counter[str] = Counter()
    total = 0
    for line in output.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        count = int(count_text)
        frames = stack.split(";")
        total += count
        self_samples[frames[-1]] += count
        for frame in set(frames):
            inclusive_samples[frame] += count
    return [
        (frame, count / total, inclusive_samples[frame] / total)
        for frame, count in self_samples.most_common(PROFILE_TOP)
    ]


# -- report -------------------------------------------------------------------------------------------


# -- the cost of recording the rebalance history (issue 15) -----------------------------------------

# The rebalance history's hooks in the coordinator (strom.coordinator.history.RebalanceHistory): what
# a broker without history recording skips, and what a timed broker times.
HISTORY_HOOKS = (
    "classic_trigger",
    "classic_started",
    "classic_joined_during",
    "classic_joined",
    "classic_synced",
    "consumer_snapshot",
    "consumer_written",
)

# A benchmark-only switch, not a broker setting: a ``sitecustomize`` module on the broker's
# PYTHONPATH (``Broker(source_dir=...)``) that Python imports at start, before the broker runs.
# "off" makes every hook do nothing (no entry kept, no history record written to
# __consumer_offsets; classic_trigger answers a constant, as its answer only feeds the history);
# "timed" adds up the time spent inside the hooks (the history records they write included)
# and writes it to a file when the broker stops.
HISTORY_SWITCH = """
import atexit, time
from strom.coordinator import history as _history
from strom.coordinator.history import RebalanceHistory, Trigger

MODE = {mode!r}
HOOKS = {hooks!r}

if MODE == "off":
    for _name in HOOKS:
        if _name == "classic_trigger":
            setattr(RebalanceHistory, _name, staticmethod(lambda *args: Trigger.MEMBER_REJOINED))
        elif _name == "consumer_snapshot":
            setattr(RebalanceHistory, _name, staticmethod(lambda *args: None))
        else:
            setattr(RebalanceHistory, _name, lambda self, *args, **kwargs: None)
elif MODE == "timed":
    _totals = {{"seconds": 0.0, "calls": 0}}

    def _timed(function):
        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                _totals["seconds"] += time.perf_counter() - started
                _totals["calls"] += 1
        return timed

    for _name in HOOKS:
        _function = RebalanceHistory.__dict__[_name]
        if isinstance(_function, staticmethod):
            setattr(RebalanceHistory, _name, staticmethod(_timed(_function.__func__)))
        else:
            setattr(RebalanceHistory, _name, _timed(_function))

    @atexit.register
    def _write_totals():
        with open({totals_path!r}, "w") as totals:
            totals.write(f"{{_totals['seconds']}} {{_totals['calls']}}")
"""


def history_broker(work_dir: Path, mode: str, settings: dict[str, str]) -> Broker:
    """A broker whose rebalance history is recorded as usual ("on"), not at all ("off"), or with
    the time inside its hooks added up ("timed", read by ``hook_totals``)."""
    work_dir.mkdir(parents=True)
    if mode == "on":
        return Broker(work_dir, settings)
    switch = work_dir / "history-switch"
    switch.mkdir()
    (switch / "sitecustomize.py").write_text(
        HISTORY_SWITCH.format(mode=mode, hooks=HISTORY_HOOKS, totals_path=str(work_dir / "history-hooks.txt"))
    )
    return Broker(work_dir, settings, source_dir=switch)


def hook_totals(work_dir: Path) -> tuple[float, int]:
    """Seconds spent in the history's hooks and their calls, of a stopped "timed" broker."""
    seconds, calls = (work_dir / "history-hooks.txt").read_text().split()
    return float(seconds), int(calls)


@dataclass
class HistoryCostResult:
    members: int
    rounds: int
    on: list[StormResult]
    off: list[StormResult]
    on_cpu_s: list[float]
    off_cpu_s: list[float]
    timed: list[StormResult]
    hook_s: float
    hook_calls: int


def measure_history_cost(member_count: int, rounds: int, settings: dict[str, str]) -> HistoryCostResult:
    """(a) and (b) with ``member_count`` members, ``rounds`` times on each of three brokers in
    turn (all three run all along, so they see the same machine): one recording the history, one
    not recording it, one with its history hooks timed; with each broker's CPU time per round."""
    with tempfile.TemporaryDirectory(prefix="strom-history-cost-") as work:
        brokers: dict[str, Broker] = {}
        results: dict[str, list[StormResult]] = {mode: [] for mode in ("on", "off", "timed")}
        cpu: dict[str, list[float]] = {mode: [] for mode in results}
        try:
            for mode in results:
                brokers[mode] = history_broker(Path(work) / mode, mode, settings)
            for broker in brokers.values():
                measure_storm_and_leave(broker.bootstrap, 2)  # creates __consumer_offsets: not measured
            for _ in range(rounds):
                for mode in ("on", "off", "timed"):
                    broker = brokers[mode]
                    before = cpu_seconds(broker.process.pid)
                    results[mode].append(measure_storm_and_leave(broker.bootstrap, member_count))
                    cpu[mode].append(cpu_seconds(broker.process.pid) - before)
                    print(mode, results[mode][-1], f"broker CPU {cpu[mode][-1]:.2f} s", flush=True)
        finally:
            for broker in brokers.values():
                broker.stop()
        hook_s, hook_calls = hook_totals(Path(work) / "timed")
    return HistoryCostResult(
        member_count,
        rounds,
        results["on"],
        results["off"],
        cpu["on"],
        cpu["off"],
        results["timed"],
        hook_s,
        hook_calls,
    )


def render_history_cost(result: HistoryCostResult) -> str:
    def median(values: Sequence[float]) -> float:
        return statistics.median(values)

    on_leave = median([r.leave_s for r in result.on])
    off_leave = median([r.leave_s for r in result.off])
    on_join = median([r.join_s for r in result.on])
    off_join = median([r.join_s for r in result.off])
    # Each round is a join storm (and its generations) plus one leave.
    rebalances = sum(r.join_generation + 1 for r in result.timed)
    hook_ms_per_round = result.hook_s / result.rounds * 1000
    hook_ms_per_rebalance = result.hook_s / max(rebalances, 1) * 1000
    figure_s = median([r.leave_s for r in result.timed])
    round_s = median([r.join_s + r.leave_s for r in result.timed])
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return "\n".join(
        [
            "## Recording the rebalance history: its cost (`python -m benchmarks.rebalance --history-cost`)",
            "",
            f"Run: {now}. Machine: {machine_description()}; load average (1, 5, 15 min) at the end {load}."
            f" {result.members} members, (a) and (b) of the rebalance section, {result.rounds} rounds on each of three brokers"
            " run side by side (a round on each in turn): one recording the history, one with its hooks switched off (a benchmark-only"
            " switch, `HISTORY_SWITCH`), one with its hooks timed.",
            "",
            "| broker | (a) join storm, median s | (b) re-stable after a leave, median s | broker CPU per round, median s |",
            "|---|---:|---:|---:|",
            f"| history recorded | {on_join:.2f} | {on_leave:.3f} | {median(result.on_cpu_s):.2f} |",
            f"| history off | {off_join:.2f} | {off_leave:.3f} | {median(result.off_cpu_s):.2f} |",
            "",
            f"Inside the history's hooks (timed broker): {result.hook_s * 1000:.1f} ms in {result.hook_calls:,} calls"
            f" over {result.rounds} rounds, {hook_ms_per_round:.2f} ms a round: **{hook_ms_per_round / 1000 / round_s:.2%}**"
            f" of that broker's median (a) + (b) of {round_s:.2f} s a round (bar: 2 %). Per rebalance"
            f" ({rebalances} in all: each join storm's generations and each leave), {hook_ms_per_rebalance:.2f} ms on"
            f" average: **{hook_ms_per_rebalance / 1000 / figure_s:.2%}** of its median (b) figure, one rebalance"
            f" of {result.members} members, {figure_s:.3f} s. The on/off rows differ by the machine's noise more"
            " than by the history (rounds of one broker vary by tens of percent under load, the join storm"
            " most); the hooks' own time is the figure that says what recording costs.",
            "",
        ]
    )


def machine_description() -> str:
    cpu = platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} CPUs, Linux {platform.release()}, Python {platform.python_version()}"


def render(
    storms: Sequence[StormResult],
    scale_outs: Sequence[ScaleOutResult],
    heartbeats: HeartbeatResult,
    profile: Sequence[tuple[str, float, float]],
) -> str:
    cpu_per_heartbeat_us = heartbeats.broker_cpu_share / heartbeats.per_s * 1e6
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "## Group rebalances (`python -m benchmarks.rebalance`)",
        "",
        f"Run: {now}. Machine: {machine_description()}. confluent-kafka {confluent_kafka.__version__},"
        f" librdkafka {confluent_kafka.libversion()[0]}. Members are threads of one process (one"
        f" confluent-kafka consumer each) sharing the 2 CPUs with the broker; `heartbeat.interval.ms`"
        f" {HEARTBEAT_INTERVAL_MS}, `session.timeout.ms` {SESSION_TIMEOUT_MS},"
        " `group.initial.rebalance.delay.ms` 0, strategy `range` for (a) and (b).",
        "",
        "| members | (a) join storm to all stable, s | generations to get there | (b) re-stable after one clean leave, s |",
        "|---:|---:|---:|---:|",
    ]
    for storm in storms:
        lines.append(
            f"| {storm.members} | {storm.join_s:.2f} | {storm.join_generation} | {storm.leave_s:.3f} |"
        )
    lines += [
        "",
        f"(c) Scale-out from {SCALE_OUT_MEMBERS} to {SCALE_OUT_MEMBERS + 1} members while consuming"
        f" {SCALE_OUT_RATE_PER_S:,} records/s over {SCALE_OUT_PARTITIONS} partitions; gaps are between"
        " records received by the members that own partitions both before and after the join:",
        "",
        "| strategy | members owning partitions before and after | longest gap, s | median of their longest gaps, s | longest gap in steady state, s | re-stable after join, s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for result in scale_outs:
        lines.append(
            f"| {result.strategy} | {result.kept_members} | {result.longest_gap_s:.3f} | {result.median_gap_s:.3f}"
            f" | {result.steady_gap_s:.3f} | {result.restable_s:.3f} |"
        )
    lines += [
        "",
        f"(d) Heartbeats: **{heartbeats.per_s:,.0f} responses/s** ({HEARTBEAT_CONNECTIONS} connections,"
        f" {HEARTBEAT_WINDOW} requests in flight each, HeartbeatRequest v{HEARTBEAT_VERSION} for one member of a"
        f" stable group, {HEARTBEAT_MEASURE_S:.0f} s after {HEARTBEAT_WARMUP_S:.0f} s of warm-up;"
        f" {heartbeats.total:,} answered in all, every 1024th decoded and checked for error NONE). The broker"
        f" used {heartbeats.broker_cpu_share:.0%} of one CPU meanwhile (it runs one event loop; the rest of"
        f" the machine was busy), that is {cpu_per_heartbeat_us:.0f} µs of broker CPU per heartbeat: at most"
        f" ~{1e6 / cpu_per_heartbeat_us:,.0f} heartbeats/s with a whole CPU to itself.",
        "",
    ]
    largest = max(storms, key=lambda storm: storm.members, default=None)
    leave_met = largest is not None and largest.leave_s < BAR_LEAVE_S
    lines += [
        f"Bars: {largest.members if largest else '-'} members re-stable after a clean leave in under"
        f" {BAR_LEAVE_S:.0f} s: **{'met' if leave_met else 'not met'}**; at least {BAR_HEARTBEATS_PER_S:,}"
        f" heartbeats/s: **{'met' if heartbeats.per_s >= BAR_HEARTBEATS_PER_S else 'not met'}**.",
        "",
    ]
    lines += [
        "Reading the figures: the 2 CPUs are shared by the broker, the members and anything else running,"
        " so figures vary run to run, the join storm most. (a) climbs through a few generations because"
        " members trickle in while earlier ones already formed a generation; each later one is noticed on"
        " its next heartbeat. (b) stays near 0.5 s from 10 to 100 members: the heartbeat interval, the"
        " rejoin and the sync round trips, not the group size. (c) eager `range` pauses every member for"
        " about one rebalance; cooperative members keep consuming the partitions they keep (the median"
        " member's longest gap is at the steady-state level) but the whole move takes two rebalances."
        " (d) is bounded by broker CPU per request: one write per read of pipelined answers, timers that"
        " move a member's deadline instead of re-creating a loop handle, and the group's partition cached"
        " took it from ~75 µs to ~30 µs per heartbeat; the rest is generic decode/encode.",
        "",
    ]
    if profile:
        lines += [
            f"Broker profile during (d) (py-spy, {PROFILE_SECONDS} s, top functions by own samples):",
            "",
            "| function | own | inclusive |",
            "|---|---:|---:|",
        ]
        lines += [f"| `{frame}` | {own:.1%} | {inclusive:.1%} |" for frame, own, inclusive in profile]
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--members", default=",".join(map(str, MEMBER_COUNTS)), help="group sizes for (a)/(b)"
    )
    parser.add_argument("--profile", action="store_true", help="sample the broker with py-spy during (d)")
    parser.add_argument("--output", default="BENCHMARKS.md", help="file whose rebalance section is replaced")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument(
        "--history-cost",
        type=int,
        metavar="ROUNDS",
        default=0,
        help="only compare (a)/(b) with the rebalance history recorded, off and timed, ROUNDS rounds each"
        " with the largest --members (its own section, rebalance-history)",
    )
    arguments = parser.parse_args()
    member_counts = [int(count) for count in arguments.members.split(",")]
    if arguments.history_cost:
        cost = measure_history_cost(
            max(member_counts),
            arguments.history_cost,
            {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000"},
        )
        section = render_history_cost(cost)
        print(section)
        if not arguments.no_write:
            replace_section(Path(arguments.output), "rebalance-history", section)
        return 0
    with tempfile.TemporaryDirectory(prefix="strom-rebalance-") as work_dir:
        broker = Broker(
            Path(work_dir),
            {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000"},
        )
        try:
            # Warm-up, not reported: the first group creates __consumer_offsets (50 partitions).
            measure_storm_and_leave(broker.bootstrap, 2)
            storms = []
            for count in member_counts:
                storms.append(measure_storm_and_leave(broker.bootstrap, count))
                print(storms[-1], flush=True)
            scale_outs = []
            for strategy in ("range", "cooperative-sticky"):
                scale_outs.append(measure_scale_out(broker.bootstrap, strategy))
                print(scale_outs[-1], flush=True)
            heartbeats = measure_heartbeats(broker.port, broker.bootstrap, broker.process.pid)
            print(heartbeats, flush=True)
            profile: list[tuple[str, float, float]] = []
            if arguments.profile:
                profile = profile_broker(
                    broker.process.pid,
                    PROFILE_SECONDS,
                    lambda: measure_heartbeats(broker.port, broker.bootstrap, broker.process.pid),
                )
        finally:
            broker.stop()
    section = render(storms, scale_outs, heartbeats, profile)
    print(section)
    if not arguments.no_write:
        replace_section(Path(arguments.output), "rebalance", section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
