"""Classic (cooperative-sticky) against the consumer group protocol (KIP-848), side by side.

``python -m benchmarks.consumer_protocol [--members 10] [--partitions 900] [--heartbeat-interval-ms 500]
[--protocols classic,consumer] [--rounds 3] [--output BENCHMARKS.md] [--no-write]``

KIP-848's own headline: a group of 10 consumers to which 900 partitions are added settles in 5 s
with the new protocol instead of 103 s with the classic one. Here both protocols run against the
same ``strom broker`` subprocess (started here on 127.0.0.1), one after the other in one run, with
confluent-kafka consumers (librdkafka: ``partition.assignment.strategy=cooperative-sticky`` for
classic, ``group.protocol=consumer`` for the new protocol), each in a process of its own.
A producer thread writes a steady stream over every partition meanwhile. For each protocol:

- (a) partitions added: ``--members`` members consume a topic of ``START_PARTITIONS`` partitions;
  the topic grows to ``--partitions`` (CreatePartitions); the time from the growth until every
  partition is owned by exactly one member (from the members' assign/revoke callbacks) and stays so
  for ``STABLE_HOLD_S``;
- (b) one member joins the group of (a): the time from its ``subscribe()`` until settled again
  (every member owning at least one partition); its consumer is made before the steady window
  (see ``Member``);
- (c) one member (the newcomer) leaves with ``close()``: the time until the rest own everything;
- (d) for (b) and (c), the longest gap between two records received by a member that owns
  partitions before and after, in a window of ``WINDOW_S`` from just before the change (through
  the settling and well past it), against the longest gap of the same members in steady state,
  watched for ``STEADY_WINDOWS`` such windows just before (the bar: no staying member pauses
  longer than its steady-state fetch gap). The steady gap is the bound of a member's gaps when
  nothing changes, so it is watched for longer than the change: the longest of two equally long
  spells of one stream is the change's half the time with no pause at all. Only gaps begun
  before the group settled count: a later one is the new steady state's (after a join each member
  owns fewer partitions, and its records come that much less often).

(b) and (c) are repeated ``--rounds`` times (a member joins, then leaves, each round); the table
gives each protocol's median settle times over the rounds and its worst pause beside the steady gap
of the same round, and the bar counts the rounds in which no staying member paused longer than in
steady state.

"Settled at" is the time of the last callback before the group held still: a protocol that moves
partitions in several steps is charged for every step. Both protocols are given the same periods:
the classic members heartbeat every ``--heartbeat-interval-ms`` and refresh metadata as often
(how librdkafka notices the new partitions; the consumer protocol's coordinator notices them
itself and tells the members in their next heartbeat), and the broker tells consumer-protocol
members to heartbeat that often (``group.consumer.heartbeat.interval.ms``). A partition moving
between two consumer-protocol members takes up to two heartbeat intervals (the owner learns it
must revoke it on its next heartbeat, the new owner that it may take it on its own next one), so
the settle times scale with it.

The results replace the section between ``<!-- consumer-protocol:start -->`` and
``<!-- consumer-protocol:end -->`` in the output file (appended when absent).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import itertools
import multiprocessing
import statistics
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
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic  # type: ignore[attr-defined]

from benchmarks.harness import Broker
from benchmarks.rebalance import machine_description
from benchmarks.report import replace_section

MEMBERS = 10
PARTITIONS = 900
START_PARTITIONS = 10
HEARTBEAT_INTERVAL_MS = 500
SESSION_TIMEOUT_MS = 45_000
PRODUCE_RATE_PER_S = 2_000
# A change's window: from CHANGE_LEAD_S before it, long enough for the settling (at most a second
# or two) and two seconds after it; the steady state is watched for STEADY_WINDOWS as long, just before.
WINDOW_S = 3.5
CHANGE_LEAD_S = 0.2
STEADY_WINDOWS = 3
STEADY_S = STEADY_WINDOWS * WINDOW_S + CHANGE_LEAD_S + 0.3
ROUNDS = 3
STABLE_HOLD_S = 1.5
STABLE_TIMEOUT_S = 300.0
POLL_TIMEOUT_S = 0.005
THREAD_JOIN_TIMEOUT_S = 60.0
# The bar (the "Speed" section): the consumer protocol settles within a second.
BAR_SETTLE_S = 1.0
PROTOCOLS = ("classic", "consumer")
# Members are spawned, not forked: this process has client threads (the producer's, the admin's).
MEMBER_PROCESSES = multiprocessing.get_context("spawn")
# librdkafka debug contexts for every member (``--client-debug``): its lines go to stderr with
# the wall-clock time, which each round's printed pause detail gives for the change.
CLIENT_DEBUG: str | None = None


def broker_settings(heartbeat_interval_ms: int) -> dict[str, str]:
    return {
        "group.initial.rebalance.delay.ms": "0",
        "group.min.session.timeout.ms": "1000",
        "group.consumer.heartbeat.interval.ms": str(heartbeat_interval_ms),
        "group.consumer.min.heartbeat.interval.ms": str(min(heartbeat_interval_ms, 5000)),
        "group.consumer.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    }


Partition = tuple[str, int]


# -- members ------------------------------------------------------------------------------------------


@dataclass
class MemberRecord:
    # Every callback: (when, "assign" | "revoke" | "lost", partitions).
    events: list[tuple[float, str, list[Partition]]] = field(default_factory=list)
    received_at_s: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def member_config(
    protocol: str, bootstrap: str, group: str, name: str, heartbeat_interval_ms: int
) -> dict[str, object]:
    config: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "broker.address.family": "v4",
        "group.id": group,
        "client.id": name,
        "auto.offset.reset": "latest",
        "enable.auto.commit": False,
        "fetch.wait.max.ms": 100,
        "fetch.queue.backoff.ms": 10,
        "topic.metadata.refresh.interval.ms": heartbeat_interval_ms,
    }
    if protocol == "consumer":
        # The coordinator assigns and sets the session and heartbeat periods.
        config["group.protocol"] = "consumer"
    else:
        config["partition.assignment.strategy"] = "cooperative-sticky"
        config["session.timeout.ms"] = SESSION_TIMEOUT_MS
        config["heartbeat.interval.ms"] = heartbeat_interval_ms
    if CLIENT_DEBUG:
        config["debug"] = CLIENT_DEBUG
    return config


def run_member(name: str, config: dict[str, object], topic: str, hold: bool, connection: Any) -> None:
    """A member's process: one confluent-kafka consumer, its callbacks and arrivals timestamped
    and sent to the benchmark over ``connection`` (a pipe) as they happen. With ``hold`` it makes
    its consumer and subscribes when told ("subscribe"); it closes its consumer when told ("close")."""

    def send(*message: object) -> None:
        connection.send(message)

    def callback(kind: str) -> Callable[[Consumer, list[TopicPartition]], None]:
        def record(consumer: Consumer, partitions: list[TopicPartition]) -> None:
            send("event", time.monotonic(), kind, [(one.topic or "", one.partition) for one in partitions])

        return record

    try:
        consumer = Consumer(config)
    except Exception as error:
        send("error", f"{type(error).__name__}: {error}")
        return
    send("made")
    try:
        if hold and connection.recv() != "subscribe":
            return
        consumer.subscribe(
            [topic], on_assign=callback("assign"), on_revoke=callback("revoke"), on_lost=callback("lost")
        )
        while not connection.poll():
            messages = consumer.consume(num_messages=1000, timeout=POLL_TIMEOUT_S)
            if not messages:
                continue
            now = time.monotonic()
            good = 0
            for message in messages:
                failure = message.error()
                if failure is None:
                    good += 1
                elif failure.code() != KafkaError._PARTITION_EOF:
                    send("error", str(failure))
            if good:
                send("arrivals", now, good)
    finally:
        consumer.close()


class Member:
    """One confluent-kafka consumer in a process of its own (``run_member``), as each member of a
    real group is; its callbacks and arrivals, timestamped there (``time.monotonic`` is one clock
    for every process), are gathered here by a thread.

    The members were threads of this process once: a member's client pauses fetching all its
    partitions from the moment it hands a rebalance callback to its application until the
    application has run it (librdkafka: "Pausing fetchers for N assigned partition(s): incremental
    rebalance"), and ten members and a producer sharing one interpreter's lock made that wait the
    benchmark's, not the protocol's."""

    def __init__(
        self, name: str, config: dict[str, object], topic: str, hold: threading.Event | None = None
    ) -> None:
        """With ``hold``, the member makes its consumer at once and subscribes only once ``hold``
        is set (``made`` says when it is made): a newcomer joins without making its client then."""
        self.name = name
        self.hold = hold
        self.record = MemberRecord()
        self.lock = threading.Lock()
        self.assignment: set[Partition] = set()
        self.made = threading.Event()
        self.closed = threading.Event()
        self._connection, child_end = MEMBER_PROCESSES.Pipe()
        self._child_end = child_end
        self._send_lock = threading.Lock()
        self.process = MEMBER_PROCESSES.Process(
            target=run_member, args=(name, config, topic, hold is not None, child_end), name=name, daemon=True
        )
        self.thread = threading.Thread(target=self._gather, name=name, daemon=True)

    def start(self) -> Member:
        self.process.start()
        self._child_end.close()
        self.thread.start()
        if self.hold is not None:
            threading.Thread(target=self._subscribe_when_told, name=f"{self.name}-hold", daemon=True).start()
        return self

    def close(self) -> None:
        """Ask the member to close its consumer (leaving the group) and end."""
        self._tell("close")

    def join(self, timeout_s: float) -> None:
        self.thread.join(timeout_s)
        self.process.join(timeout_s)
        if self.process.is_alive():
            self.process.kill()

    def _tell(self, command: str) -> None:
        with self._send_lock, contextlib.suppress(OSError):
            self._connection.send(command)

    def _subscribe_when_told(self) -> None:
        assert self.hold is not None
        while not self.hold.wait(0.1):
            if self.closed.is_set():
                return
        self._tell("subscribe")

    def _gather(self) -> None:
        try:
            while True:
                try:
                    message = self._connection.recv()
                except (EOFError, OSError):
                    return
                kind = message[0]
                with self.lock:
                    if kind == "arrivals":
                        self.record.received_at_s.extend([message[1]] * message[2])
                    elif kind == "event":
                        _, at, change, moved = message
                        self.record.events.append((at, change, moved))
                        if change == "assign":
                            self.assignment.update(moved)
                        else:
                            self.assignment.difference_update(moved)
                    elif kind == "error":
                        self.record.errors.append(message[1])
                if kind == "made":
                    self.made.set()
        finally:
            self.closed.set()
            self.made.set()

    def state(self) -> tuple[set[Partition], float]:
        """(current assignment, time of the last callback)."""
        with self.lock:
            last_at = self.record.events[-1][0] if self.record.events else float("nan")
            return set(self.assignment), last_at

    def arrivals(self) -> list[float]:
        with self.lock:
            return list(self.record.received_at_s)

    def events(self) -> list[tuple[float, str, list[Partition]]]:
        with self.lock:
            return list(self.record.events)


def stop_members(members: Sequence[Member]) -> None:
    for member in members:
        member.close()
    for member in members:
        member.join(THREAD_JOIN_TIMEOUT_S)


def is_settled(assignments: Sequence[set[Partition]], topic: str, partitions: int) -> bool:
    """Every partition owned exactly once, and every member owning one (when there are enough)."""
    owners = Counter(partition for assignment in assignments for partition in assignment)
    if set(owners) != {(topic, index) for index in range(partitions)} or max(owners.values()) != 1:
        return False
    return len(assignments) > partitions or all(assignments)


def wait_settled(members: Sequence[Member], topic: str, partitions: int) -> float:
    """Wait until the members' assignments are settled and stay unchanged for ``STABLE_HOLD_S``;
    the time of the last callback before that (when the group got there)."""
    deadline = time.monotonic() + STABLE_TIMEOUT_S
    while time.monotonic() < deadline:
        for member in members:
            if member.record.errors:
                raise RuntimeError(f"{member.name}: {member.record.errors[:3]}")
        states = [member.state() for member in members]
        if is_settled([assignment for assignment, _ in states], topic, partitions):
            time.sleep(STABLE_HOLD_S)
            again = [member.state() for member in members]
            if [assignment for assignment, _ in again] == [assignment for assignment, _ in states]:
                return max((at for _, at in again if at == at), default=time.monotonic())
            continue
        time.sleep(0.01)
    assignments = {member.name: len(member.state()[0]) for member in members}
    raise TimeoutError(f"not settled in {STABLE_TIMEOUT_S} s: partitions per member {assignments}")


# -- the stream ---------------------------------------------------------------------------------------


class SteadyProducer:
    """Writes ``PRODUCE_RATE_PER_S`` records a second round-robin over the topic's partitions
    (``partitions`` may grow while it runs)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.topic = topic
        self.partitions = partitions
        self._bootstrap = bootstrap
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="producer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(THREAD_JOIN_TIMEOUT_S)

    def _run(self) -> None:
        producer = Producer(
            {"bootstrap.servers": self._bootstrap, "broker.address.family": "v4", "linger.ms": 1, "acks": 1}
        )
        interval_s = 1.0 / PRODUCE_RATE_PER_S
        next_at = time.monotonic()
        known = 0  # partitions the producer's own metadata has: it refuses others
        for sequence in itertools.count():
            if self._stop.is_set():
                break
            if known < self.partitions:
                known = len(producer.list_topics(self.topic, timeout=10).topics[self.topic].partitions)
            producer.produce(self.topic, value=b"x" * 100, partition=sequence % max(known, 1))
            next_at += interval_s
            delay_s = next_at - time.monotonic()
            producer.poll(max(delay_s, 0))
        producer.flush(30)


def longest_gap(times_s: Sequence[float], start_s: float, end_s: float) -> float:
    gap_from, gap_to = longest_gap_at(times_s, start_s, end_s)
    return gap_to - gap_from


def longest_gap_at(
    times_s: Sequence[float], start_s: float, end_s: float, begun_by_s: float | None = None
) -> tuple[float, float]:
    """(from, to) of the longest gap between arrivals in ``[start_s, end_s]`` (its ends count);
    with ``begun_by_s``, of the gaps begun by then."""
    window = [at for at in times_s if start_s <= at <= end_s]
    points = [start_s, *window, end_s]
    gaps = [pair for pair in itertools.pairwise(points) if begun_by_s is None or pair[0] <= begun_by_s]
    return max(gaps, key=lambda pair: pair[1] - pair[0])


# -- one protocol's run ------------------------------------------------------------------------------


@dataclass
class Pause:
    kept_members: int
    longest_gap_s: float
    steady_gap_s: float
    # Which member paused longest, when (from the change), and its callbacks around it: printed
    # with each round, to tell a client waiting on its application from a late answer.
    detail: str = ""

    @property
    def met(self) -> bool:
        return self.longest_gap_s <= self.steady_gap_s


@dataclass
class RoundResult:
    join_settle_s: float
    join_pause: Pause
    leave_settle_s: float
    leave_pause: Pause


@dataclass
class ProtocolResult:
    protocol: str
    members: int
    partitions: int
    add_settle_s: float
    rounds: list[RoundResult]

    @property
    def join_settle_s(self) -> float:
        return statistics.median(one.join_settle_s for one in self.rounds)

    @property
    def leave_settle_s(self) -> float:
        return statistics.median(one.leave_settle_s for one in self.rounds)


def pauses(
    members: Sequence[Member], before: dict[str, set[Partition]], change_at: float, settled_at: float
) -> Pause:
    """The longest gap of each member that owned partitions before ``change_at`` and still owns
    some, in the window after the change and in the steady windows before it.

    A gap of the change's window counts if it began before the group settled (``settled_at``, its
    last callback): one begun later is the new steady state's, where a member owns fewer
    partitions than before a join (1/11 fewer here), so its gaps are longer by as much: not a pause."""
    gaps, steady = [], []
    change_from = change_at - CHANGE_LEAD_S
    worst: tuple[float, str] = (-1.0, "")
    for member in members:
        if not before.get(member.name) or not member.state()[0]:
            continue  # owned nothing before or after: no stream of its own to pause
        arrivals = member.arrivals()
        gap_from, gap_to = longest_gap_at(arrivals, change_from, change_from + WINDOW_S, settled_at)
        gaps.append(gap_to - gap_from)
        steady.append(longest_gap(arrivals, change_from - STEADY_WINDOWS * WINDOW_S, change_from))
        if gap_to - gap_from > worst[0]:
            callbacks = ", ".join(
                f"{kind} {len(moved)} at {at - change_at:+.3f}"
                for at, kind, moved in member.events()
                if gap_from - 0.5 <= at <= gap_to + 0.1
            )
            change_wall = time.time() - (time.monotonic() - change_at)
            worst = (
                gap_to - gap_from,
                f"{member.name} {gap_from - change_at:+.3f}..{gap_to - change_at:+.3f} s from the change"
                f" at {change_wall:.3f} (callbacks: {callbacks or 'none'})",
            )
    return Pause(len(gaps), max(gaps, default=float("nan")), max(steady, default=float("nan")), worst[1])


def wait_until(at_s: float) -> None:
    delay_s = at_s - time.monotonic()
    if delay_s > 0:
        time.sleep(delay_s)


def one_round(
    members: list[Member],
    protocol: str,
    bootstrap: str,
    group: str,
    topic: str,
    partitions: int,
    heartbeat_interval_ms: int,
    index: int,
) -> RoundResult:
    """(b) a member joins, (c) it leaves; each after a steady window, each watched for a window."""
    join = threading.Event()
    newcomer = Member(
        f"{protocol}-new-{index}",
        member_config(protocol, bootstrap, group, f"newcomer-{index}", heartbeat_interval_ms),
        topic,
        hold=join,
    ).start()
    newcomer.made.wait(THREAD_JOIN_TIMEOUT_S)
    time.sleep(STEADY_S)
    before = {member.name: member.state()[0] for member in members}
    joined_at = time.monotonic()
    join.set()
    members.append(newcomer)
    join_settled_at = wait_settled(members, topic, partitions)
    join_settle_s = join_settled_at - joined_at
    wait_until(joined_at - CHANGE_LEAD_S + WINDOW_S)
    join_pause = pauses(members[:-1], before, joined_at, join_settled_at)

    time.sleep(STEADY_S)
    before = {member.name: member.state()[0] for member in members}
    left_at = time.monotonic()
    newcomer.close()
    newcomer.join(THREAD_JOIN_TIMEOUT_S)
    members.remove(newcomer)
    leave_settled_at = wait_settled(members, topic, partitions)
    leave_settle_s = leave_settled_at - left_at
    wait_until(left_at - CHANGE_LEAD_S + WINDOW_S)
    leave_pause = pauses(members, before, left_at, leave_settled_at)
    return RoundResult(join_settle_s, join_pause, leave_settle_s, leave_pause)


def measure(
    bootstrap: str, protocol: str, member_count: int, partitions: int, heartbeat_interval_ms: int, rounds: int
) -> ProtocolResult:
    stamp = time.monotonic_ns()
    topic = f"cp-{protocol}-{stamp}"
    group = f"cp-group-{protocol}-{stamp}"
    admin = AdminClient({"bootstrap.servers": bootstrap, "broker.address.family": "v4"})
    admin.create_topics([NewTopic(topic, num_partitions=START_PARTITIONS, replication_factor=1)])[
        topic
    ].result(60)
    members = [
        Member(
            f"{protocol}-{index}",
            member_config(protocol, bootstrap, group, f"m{index}", heartbeat_interval_ms),
            topic,
        )
        for index in range(member_count)
    ]
    producer = SteadyProducer(bootstrap, topic, START_PARTITIONS)
    try:
        for member in members:
            member.start()
        wait_settled(members, topic, START_PARTITIONS)
        producer.start()

        # (a) the topic grows.
        grown_at = time.monotonic()
        admin.create_partitions([NewPartitions(topic, partitions)])[topic].result(60)
        producer.partitions = partitions
        add_settle_s = wait_settled(members, topic, partitions) - grown_at

        # (b) and (c), round after round.
        results = []
        for index in range(rounds):
            results.append(
                one_round(
                    members, protocol, bootstrap, group, topic, partitions, heartbeat_interval_ms, index
                )
            )
            print(f"{protocol} round {index + 1}: {results[-1]}", flush=True)
        return ProtocolResult(protocol, member_count, partitions, add_settle_s, results)
    finally:
        producer.stop()
        stop_members(members)


# -- report -------------------------------------------------------------------------------------------


def render(results: Sequence[ProtocolResult], heartbeat_interval_ms: int) -> str:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    first = results[0]
    lines = [
        "## Classic against the consumer group protocol (`python -m benchmarks.consumer_protocol`)",
        "",
        f"Run: {now}. Machine: {machine_description()}. confluent-kafka {confluent_kafka.__version__},"
        f" librdkafka {confluent_kafka.libversion()[0]}. {first.members} members (a process each)"
        f" on one topic grown from {START_PARTITIONS} to {first.partitions} partitions while a producer"
        f" writes {PRODUCE_RATE_PER_S:,} records/s over all of them. Classic: `cooperative-sticky`,"
        f" `heartbeat.interval.ms` {heartbeat_interval_ms}, `topic.metadata.refresh.interval.ms`"
        f" {heartbeat_interval_ms}; consumer: `group.protocol=consumer`, the broker's"
        f" `group.consumer.heartbeat.interval.ms` {heartbeat_interval_ms}. Settled: every partition owned"
        f" once (from the callbacks), unchanged for {STABLE_HOLD_S} s; the time is to the last callback.",
        "",
        f"| protocol | (a) settle after partitions added, s | (b) settle after one joins, s, median of {len(first.rounds)} |"
        " (c) settle after one leaves, s, median | (d) longest pause of a staying member / its steady-state"
        " longest gap, join, s, each round | the same, leave, s, each round |",
        "|---|---:|---:|---:|---:|---:|",
    ]

    def pairs(found: Sequence[Pause]) -> str:
        return ", ".join(f"{pause.longest_gap_s:.3f} / {pause.steady_gap_s:.3f}" for pause in found)

    for result in results:
        lines.append(
            f"| {result.protocol} | {result.add_settle_s:.2f} | {result.join_settle_s:.2f} |"
            f" {result.leave_settle_s:.2f} | {pairs([one.join_pause for one in result.rounds])} |"
            f" {pairs([one.leave_pause for one in result.rounds])} |"
        )
    consumer = next((result for result in results if result.protocol == "consumer"), None)
    if consumer is not None:
        settle_met = (
            max(
                consumer.add_settle_s,
                *(one.join_settle_s for one in consumer.rounds),
                *(one.leave_settle_s for one in consumer.rounds),
            )
            <= BAR_SETTLE_S
        )
        changes = [pause for one in consumer.rounds for pause in (one.join_pause, one.leave_pause)]
        calm = sum(pause.met for pause in changes)
        lines += [
            "",
            f"A change is watched for {WINDOW_S} s from {CHANGE_LEAD_S} s before it, the steady state for"
            f" {STEADY_WINDOWS * WINDOW_S} s just before that; a gap of the change counts if it began before"
            " the group settled. Bars: the consumer protocol settles in at most"
            f" {BAR_SETTLE_S:.0f} s (every settle of every round): **{'met' if settle_met else 'not met'}**;"
            f" no staying member pauses longer than its steady-state gap: **{'met' if calm == len(changes) else 'not met'}**"
            f" (met in {calm} of {len(changes)} changes).",
        ]
    lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--members", type=int, default=MEMBERS, help="group size")
    parser.add_argument("--partitions", type=int, default=PARTITIONS, help="partitions the topic grows to")
    parser.add_argument(
        "--heartbeat-interval-ms",
        type=int,
        default=HEARTBEAT_INTERVAL_MS,
        help="heartbeat (and classic metadata refresh) interval of both protocols",
    )
    parser.add_argument("--protocols", default=",".join(PROTOCOLS), help="classic,consumer (in this order)")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="times a member joins and leaves")
    parser.add_argument("--output", default="BENCHMARKS.md", help="file whose section is replaced")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument(
        "--client-debug", help="librdkafka debug contexts for the members (e.g. cgrp,fetch; to stderr)"
    )
    arguments = parser.parse_args()
    global CLIENT_DEBUG
    CLIENT_DEBUG = arguments.client_debug
    if arguments.partitions <= START_PARTITIONS or arguments.members < 1 or arguments.rounds < 1:
        parser.error(f"--partitions must exceed {START_PARTITIONS}, --members and --rounds be at least 1")
    results = []
    with tempfile.TemporaryDirectory(prefix="strom-consumer-protocol-") as work_dir:
        broker = Broker(Path(work_dir), broker_settings(arguments.heartbeat_interval_ms))
        try:
            for protocol in arguments.protocols.split(","):
                results.append(
                    measure(
                        broker.bootstrap,
                        protocol,
                        arguments.members,
                        arguments.partitions,
                        arguments.heartbeat_interval_ms,
                        arguments.rounds,
                    )
                )
                print(results[-1], flush=True)
        finally:
            broker.stop()
            # The broker's own word on stalls of its event loop (each line has its time), to set
            # beside the pauses printed with each round.
            for line in broker.log_path.read_text(errors="replace").splitlines():
                if "stalled" in line:
                    print(f"broker: {line}", flush=True)
    section = render(results, arguments.heartbeat_interval_ms)
    print(section)
    if not arguments.no_write:
        replace_section(Path(arguments.output), "consumer-protocol", section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
