"""How long a consumer group is without a coordinator when its coordinator's process dies.

``python -m benchmarks.coordinator_failover [--members 10,100] [--tries N] [--output BENCHMARKS.md] [--no-write]``

Everything runs on 127.0.0.1: a real ZooKeeper (Debian's jar run with java,
``strom.cli.local_zookeeper``) and three ``strom broker --zookeeper ... --node-id N`` processes
(``strom.cli.dev_cluster.LocalCluster``) with ``zookeeper.session.timeout.ms`` 6000; then, for the
comparison, one ``strom broker`` without ZooKeeper.

For each group size N: a topic of N partitions (replication factor 3 in the cluster) and a group
of N confluent-kafka consumers, each on its own thread of this process (``range``,
``heartbeat.interval.ms`` 100, ``session.timeout.ms`` 30000 so that no member expires while the
coordinator moves; the settings are printed in the section). Every member commits an offset for
"its" partition (member i, partition i) when asked, with ``commit(asynchronous=False)``: librdkafka
sends its member id and generation, so an accepted commit proves the coordinator that took it
knows the member in its current generation.

A try, in the cluster: the group is Stable with all N members, every partition of the topic and of
``__consumer_offsets`` has its whole ISR (so the broker about to die is nobody's only in-sync
replica), and every member has just had a commit accepted. The group's coordinator (as
DescribeGroups names it) is sent SIGKILL by its PID. **Re-stable** is the first moment when both
hold:

1. every one of the N members has had a commit accepted that it sent after the kill (so by the new
   coordinator), all with one and the same generation, and
2. DescribeGroups, asked of the surviving brokers (librdkafka's admin client finds the coordinator
   itself), answers from a broker other than the killed one: state Stable with N members.

The figure is the time from the kill to that moment (the later of the last member's accepted
commit and the first such DescribeGroups answer); a last DescribeGroups afterwards must still say
Stable with N members. Beside it, where the time went: when the dead broker's registration
(``/brokers/ids/N``, ephemeral) left ZooKeeper (its session expired), when the surviving brokers'
metadata named a new leader of the group's ``__consumer_offsets`` partition (the controller
elected), when DescribeGroups first answered Stable, when the first and the last member's commit
was accepted, and how long the new coordinator's load of that partition took (from its log). The
stages between these moments add up to the figure. DescribeGroups is asked only once a new leader
is named, with an admin client made then (before, it could only wait on the dead broker). Then
the killed broker is restarted and the cluster is whole again before the next try. Bar:
re-stable ≤ the ZooKeeper session timeout + 2 s.

The single-node figures beside them, for the same group sizes in the same run, by the same
definition: one ``strom broker`` (no ZooKeeper) is sent SIGKILL and started again at once on the
same port and data directory; it loads ``__consumer_offsets`` on start (DescribeGroups is asked
once it listens again). This is the comparison that keeps everything but the cluster's part equal
(same clients, same definition, a coordinator that disappears without a word); what the cluster
adds is the wait for the session to expire and the election, and what it saves is the process
restart. The clean-leave re-stable time of
``benchmarks.rebalance`` (case b: one member leaves, the others rejoin) is measured on that single
broker as well and shown as a third column: it is a rebalance of a live coordinator, not a
failover, so it is context, not a comparison.

The results replace the section between ``<!-- coordinator-failover:start -->`` and
``<!-- coordinator-failover:end -->`` in the output file.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import re
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import confluent_kafka
from confluent_kafka import Consumer, ConsumerGroupState, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]  # re-exported untyped
from kazoo.client import KazooClient

from benchmarks.rebalance import generation_of, measure_storm_and_leave
from benchmarks.report import replace_section
from benchmarks.run import machine_description
from strom.cli.dev_cluster import BrokerProcess, LocalCluster
from strom.cli.local_zookeeper import free_port
from strom.cluster.znodes import BROKER_IDS_PATH
from strom.coordinator import OFFSETS_TOPIC, partition_for_group

MEMBER_COUNTS = (10, 100)
TRIES = 5
BROKERS = 3
SESSION_TIMEOUT_MS = 6_000  # zookeeper.session.timeout.ms, as `strom cluster up` sets it
BAR_MARGIN_MS = 2_000
OFFSETS_PARTITIONS = 50  # offsets.topic.num.partitions, the default
CLUSTER_SETTINGS = {
    "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    "zookeeper.connection.timeout.ms": "30000",
    # No leadership moves but the ones a kill makes (a preferred election would be one).
    "auto.leader.rebalance.enable": "false",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
}
SINGLE_SETTINGS = {
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
    "group.min.session.timeout.ms": "1000",  # benchmarks.rebalance's clean leave runs here too
}
# The members' settings besides bootstrap, group and client ids.
MEMBER_CONFIG: dict[str, object] = {
    "broker.address.family": "v4",
    "partition.assignment.strategy": "range",
    "heartbeat.interval.ms": 100,
    "session.timeout.ms": 30_000,
    "auto.offset.reset": "latest",
    "enable.auto.commit": False,
    "fetch.wait.max.ms": 100,
}
POLL_TIMEOUT_S = 0.1
COMMIT_RETRY_POLL_S = 0.01  # between a refused commit and the next, the member polls this long
SETTLE_TIMEOUT_S = 180.0
TRY_TIMEOUT_S = 120.0
WAIT_STEP_S = 0.02
ADMIN_TIMEOUT_S = 2.0
THREAD_JOIN_TIMEOUT_S = 60.0
LOG_TIMESTAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")
LOADED_LINE = re.compile(r"coordinating __consumer_offsets-(\d+): loaded from (\d+) records in (\d+) ms")


# -- pure helpers ----------------------------------------------------------------------------------


def spread(values: Sequence[float]) -> tuple[float, float, float]:
    """(min, median, max)."""
    if not values:
        raise ValueError("no values")
    return min(values), statistics.median(values), max(values)


def cluster_stages(
    expired_ms: float | None, ready_ms: float, described_ms: float, restable_ms: float
) -> tuple[float, float, float, float]:
    """A cluster failover cut into stages that add up to its figure: (kill → the dead broker's
    ZooKeeper session expired, → the survivors name a new leader, → DescribeGroups answers Stable,
    → re-stable). Without an observed expiry, the first two stages are one."""
    expired = ready_ms if expired_ms is None else min(expired_ms, ready_ms)
    return expired, ready_ms - expired, described_ms - ready_ms, restable_ms - described_ms


def parse_load_lines(text: str, partition: int, after_wall_s: float) -> float | None:
    """The load time in ms of the first "coordinating __consumer_offsets-P: loaded ..." line of a
    broker log for ``partition`` logged at or after ``after_wall_s`` (seconds since the epoch; the
    log's timestamps are local time with milliseconds); None when there is none."""
    for line in text.splitlines():
        loaded = LOADED_LINE.search(line)
        stamp = LOG_TIMESTAMP.match(line)
        if loaded is None or stamp is None or int(loaded.group(1)) != partition:
            continue
        at = datetime.datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        if at >= after_wall_s - 0.001:
            return float(loaded.group(3))
    return None


# -- group members ---------------------------------------------------------------------------------


@dataclass
class Commit:
    round: int
    at_s: float  # when commit() returned with success (monotonic)
    generation: int


class Member:
    """One confluent-kafka consumer on its own thread; commits partition ``index`` when asked."""

    def __init__(self, index: int, bootstrap: str, group: str, topic: str) -> None:
        self.index = index
        self.topic = topic
        self.config = {
            **MEMBER_CONFIG,
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": f"member-{index}",
            # Connection refusals from the dead broker would flood stderr; what matters is seen
            # in the commits' outcomes.
            "log_level": 0,
        }
        self.lock = threading.Lock()
        self.wanted_round = 0  # commit once for every round up to this one
        self.commits: list[Commit] = []
        self.refusals: list[str] = []
        self.failures: list[str] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"member-{index}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def request_commit(self, round_number: int) -> None:
        with self.lock:
            self.wanted_round = round_number

    def commit_of(self, round_number: int) -> Commit | None:
        with self.lock:
            return next((commit for commit in self.commits if commit.round == round_number), None)

    def _run(self) -> None:
        consumer = Consumer(self.config)
        try:
            consumer.subscribe([self.topic])
            done_round = 0
            while not self.stopping.is_set():
                with self.lock:
                    wanted = self.wanted_round
                if wanted <= done_round:
                    self._consume(consumer, POLL_TIMEOUT_S)
                    continue
                offsets = [TopicPartition(self.topic, self.index, wanted)]
                try:
                    consumer.commit(offsets=offsets, asynchronous=False)
                except KafkaException as error:
                    with self.lock:
                        self.refusals.append(str(error.args[0]))
                    self._consume(consumer, COMMIT_RETRY_POLL_S)
                    continue
                committed_at = time.monotonic()
                generation = generation_of(consumer.consumer_group_metadata())
                with self.lock:
                    self.commits.append(Commit(wanted, committed_at, generation))
                done_round = wanted
        except Exception as error:  # reported by the main thread, which waits on this member
            with self.lock:
                self.failures.append(repr(error))
        finally:
            consumer.close()

    def _consume(self, consumer: Consumer, timeout_s: float) -> None:
        for message in consumer.consume(num_messages=100, timeout=timeout_s):
            error = message.error()
            if error is not None and error.code() != KafkaError._PARTITION_EOF:
                with self.lock:
                    self.failures.append(str(error))

    def stop(self) -> None:
        self.stopping.set()


def stop_members(members: Sequence[Member]) -> None:
    for member in members:
        member.stop()
    for member in members:
        member.thread.join(THREAD_JOIN_TIMEOUT_S)


def check_members(members: Sequence[Member]) -> None:
    for member in members:
        if member.failures:
            raise RuntimeError(f"member {member.index}: {member.failures[:3]}")


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = SETTLE_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if condition():
                return
        except (KafkaException, KeyError):  # a broker going away mid-question: ask again
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(WAIT_STEP_S)


# -- the group as the brokers see it ---------------------------------------------------------------


@dataclass
class Described:
    state: ConsumerGroupState
    members: int
    coordinator: int


def describe(admin: AdminClient, group: str) -> Described:
    found = admin.describe_consumer_groups([group], request_timeout=ADMIN_TIMEOUT_S)[group].result()
    return Described(found.state, len(found.members), int(found.coordinator.id))


def stable_with(admin: AdminClient, group: str, members: int, not_on: int | None = None) -> bool:
    found = describe(admin, group)
    return (
        found.state == ConsumerGroupState.STABLE
        and found.members == members
        and (not_on is None or found.coordinator != not_on)
    )


def wait_stable(admin: AdminClient, group: str, members: int, not_on: int | None = None) -> None:
    wait_until(functools.partial(stable_with, admin, group, members, not_on), f"group of {members} Stable")


def commit_round(members: Sequence[Member], round_number: int) -> None:
    """Ask every member to commit and wait until all of them had it accepted."""
    for member in members:
        member.request_commit(round_number)

    def all_committed() -> bool:
        check_members(members)
        return all(member.commit_of(round_number) is not None for member in members)

    wait_until(all_committed, f"every member's commit of round {round_number}")


# -- one failover ----------------------------------------------------------------------------------


@dataclass
class Failover:
    members: int
    restable_ms: float
    commits_ms: float  # kill → the last member's accepted commit
    first_commit_ms: float  # kill → the first member's accepted commit
    described_ms: float  # kill → the first DescribeGroups answer Stable with every member elsewhere
    # kill → the cluster's survivors name a new leader of the group's offsets partition in their
    # metadata / the restarted single broker listens
    ready_ms: float
    load_ms: float | None = None  # the new coordinator's load of the group's partition (its log)
    expired_ms: float | None = None  # cluster: kill → the dead broker's registration left ZooKeeper
    was_controller: bool = False
    generation_kept: bool = True
    refusals: int = 0  # commits refused (and retried) between the kill and re-stable


def stages_ms(
    members: int,
    killed_at: float,
    first_commit_at: float,
    commits_at: float,
    described_at: float,
    ready_at: float,
) -> dict[str, Any]:
    """The figures of one try that both the cluster and the single node measure (``Failover``'s
    first fields), in ms after the kill; re-stable is the later of the commits and DescribeGroups."""
    return {
        "members": members,
        "restable_ms": (max(commits_at, described_at) - killed_at) * 1000,
        "commits_ms": (commits_at - killed_at) * 1000,
        "first_commit_ms": (first_commit_at - killed_at) * 1000,
        "described_ms": (described_at - killed_at) * 1000,
        "ready_ms": (ready_at - killed_at) * 1000,
    }


def await_restable(
    members: Sequence[Member],
    round_number: int,
    killed_at: float,
    admin_once_ready: Callable[[], AdminClient],
    group: str,
    killed_node: int | None,
    ready: Callable[[], bool],
) -> tuple[tuple[float, float], float, float, set[int]]:
    """Wait until the group is re-stable (see the docstring); ((first, last) accepted commit,
    described_at, ready_at, generations of the members' commits). DescribeGroups is asked only once ``ready`` held (the
    survivors name a new leader; the restarted broker listens): before that it could only wait for
    a broker that is gone, which would make the polling coarse. The admin client is made by
    ``admin_once_ready`` then, so that its own reconnection backoff towards a dead broker is not
    part of the figure."""
    for member in members:
        member.request_commit(round_number)
    deadline = killed_at + TRY_TIMEOUT_S
    described_at: float | None = None
    ready_at: float | None = None
    admin: AdminClient | None = None
    while True:
        check_members(members)
        if ready_at is None:
            with contextlib.suppress(KafkaException, KeyError, OSError):
                if ready():
                    ready_at = time.monotonic()
                    admin = admin_once_ready()
        elif described_at is None and admin is not None:
            with contextlib.suppress(KafkaException):
                if stable_with(admin, group, len(members), killed_node):
                    described_at = time.monotonic()
        commits = [member.commit_of(round_number) for member in members]
        if ready_at is not None and described_at is not None and all(c is not None for c in commits):
            accepted = [commit for commit in commits if commit is not None]
            generations = {commit.generation for commit in accepted}
            if len(generations) == 1 or time.monotonic() > deadline:
                times = [commit.at_s for commit in accepted]
                return (min(times), max(times)), described_at, ready_at, generations
            # members on different generations: a rebalance is going on; wait for the next round
            round_number += 1
            for member in members:
                member.request_commit(round_number)
            described_at = None
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"group {group} not re-stable {TRY_TIMEOUT_S} s after the kill: described at"
                f" {described_at}, {sum(c is not None for c in commits)} of {len(members)} commits accepted"
            )
        time.sleep(WAIT_STEP_S)


def start_members(bootstrap: str, group: str, topic: str, count: int) -> list[Member]:
    members = [Member(index, bootstrap, group, topic) for index in range(count)]
    for member in members:
        member.start()
    return members


def create_topic(bootstrap: str, topic: str, partitions: int, replication_factor: int) -> None:
    """Create ``topic``; while the controller does not know every broker yet (it refuses with
    INVALID_REPLICATION_FACTOR), ask again."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "broker.address.family": "v4"})
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        futures = admin.create_topics(
            [NewTopic(topic, num_partitions=partitions, replication_factor=replication_factor)]
        )
        try:
            futures[topic].result(60)
            return
        except KafkaException as error:
            if error.args[0].code() != KafkaError.INVALID_REPLICATION_FACTOR or time.monotonic() > deadline:
                raise
        time.sleep(WAIT_STEP_S * 10)


def refusals_since(members: Sequence[Member], counts: Sequence[int]) -> int:
    return sum(len(member.refusals) - count for member, count in zip(members, counts, strict=True))


# -- the cluster -----------------------------------------------------------------------------------


def survivors_admin(cluster: LocalCluster, excluded: int | None = None) -> AdminClient:
    bootstrap = ",".join(
        broker.address for node, broker in cluster.brokers.items() if broker.running and node != excluded
    )
    return AdminClient(
        {"bootstrap.servers": bootstrap, "broker.address.family": "v4", "socket.timeout.ms": 5000}
    )


def whole(cluster: LocalCluster, topics: Sequence[str]) -> bool:
    """Every broker registered, a controller, and every partition of ``topics`` led with its
    whole ISR (so no broker is the only in-sync replica of anything)."""
    metadata = survivors_admin(cluster).list_topics(timeout=10)
    if len(metadata.brokers) != BROKERS or metadata.controller_id < 0:
        return False
    for topic in topics:
        found = metadata.topics.get(topic)
        if found is None or found.error is not None or not found.partitions:
            return False
        for partition in found.partitions.values():
            if partition.leader < 0 or sorted(partition.isrs) != sorted(partition.replicas):
                return False
            if len(partition.replicas) != BROKERS:
                return False
    return True


def heal(cluster: LocalCluster, topics: Sequence[str]) -> None:
    for broker in cluster.brokers.values():
        if not broker.running:
            broker.start()
    for broker in cluster.brokers.values():
        broker.wait_listening()
    wait_until(lambda: whole(cluster, topics), "every broker back and every ISR whole")


def cluster_failovers(cluster: LocalCluster, count: int, tries: int) -> list[Failover]:
    topic = f"failover-{count}"
    group = f"failover-group-{count}"
    offsets_partition = partition_for_group(group, OFFSETS_PARTITIONS)
    heal(cluster, [])  # the broker the previous size killed last is back
    create_topic(cluster.bootstrap, topic, count, BROKERS)
    heal(cluster, [topic])
    members = start_members(cluster.bootstrap, group, topic, count)
    zookeeper = KazooClient(hosts=cluster.zookeeper_connect)
    results = []
    round_number = 0
    try:
        zookeeper.start(timeout=30)
        admin = survivors_admin(cluster)
        wait_stable(admin, group, count)
        for try_index in range(tries):
            heal(cluster, [topic, OFFSETS_TOPIC])
            admin = survivors_admin(cluster)
            wait_stable(admin, group, count)
            round_number += 1
            commit_round(members, round_number)
            wait_stable(admin, group, count)
            before = {commit.generation for m in members if (commit := m.commit_of(round_number))}
            coordinator = describe(admin, group).coordinator
            metadata = admin.list_topics(OFFSETS_TOPIC, timeout=10)
            leader = metadata.topics[OFFSETS_TOPIC].partitions[offsets_partition].leader
            assert leader == coordinator, f"coordinator {coordinator}, partition leader {leader}"
            was_controller = metadata.controller_id == coordinator
            refusals_before = [len(member.refusals) for member in members]
            survivors = survivors_admin(cluster, excluded=coordinator)

            expired_at: list[float] = []

            def elected(
                survivors: AdminClient = survivors,
                dead: int = coordinator,
                expired_at: list[float] = expired_at,
            ) -> bool:
                if not expired_at and zookeeper.exists(f"{BROKER_IDS_PATH}/{dead}") is None:
                    expired_at.append(time.monotonic())
                found = survivors.list_topics(OFFSETS_TOPIC, timeout=ADMIN_TIMEOUT_S).topics[OFFSETS_TOPIC]
                return found.partitions[offsets_partition].leader not in (dead, -1)

            killed_wall = time.time()
            cluster.brokers[coordinator].kill()  # SIGKILL by PID, and reaped
            killed_at = time.monotonic()
            round_number += 1
            (first_commit_at, commits_at), described_at, ready_at, generations = await_restable(
                members,
                round_number,
                killed_at,
                functools.partial(survivors_admin, cluster, coordinator),
                group,
                coordinator,
                elected,
            )
            wait_stable(survivors, group, count, coordinator)
            new_coordinator = describe(survivors, group).coordinator
            log_text = cluster.brokers[new_coordinator].log_path.read_text(errors="replace")
            result = Failover(
                **stages_ms(count, killed_at, first_commit_at, commits_at, described_at, ready_at),
                load_ms=parse_load_lines(log_text, offsets_partition, killed_wall),
                expired_ms=(expired_at[0] - killed_at) * 1000 if expired_at else None,
                was_controller=was_controller,
                generation_kept=generations == before,
                refusals=refusals_since(members, refusals_before),
            )
            print(
                f"cluster, {count} members, try {try_index + 1}: coordinator {coordinator}"
                f"{' (controller)' if was_controller else ''} → {new_coordinator}: re-stable"
                f" {result.restable_ms:,.0f} ms (session expired {result.expired_ms or 0:,.0f} ms, elected {result.ready_ms:,.0f} ms, load"
                f" {result.load_ms} ms, described {result.described_ms:,.0f} ms, commits"
                f" {result.first_commit_ms:,.0f}-{result.commits_ms:,.0f} ms, {result.refusals} refused commits, generation"
                f" {'kept' if result.generation_kept else f'{before} → {generations}'})",
                flush=True,
            )
            results.append(result)
    finally:
        stop_members(members)
        zookeeper.stop()
        zookeeper.close()
    return results


# -- one broker ------------------------------------------------------------------------------------


class SingleBroker(BrokerProcess):
    """A ``strom broker`` without ZooKeeper, restartable on the same port and data directory."""

    def __init__(self, work_dir: Path) -> None:
        super().__init__(0, free_port(), work_dir / "data", work_dir / "broker.log", "", SINGLE_SETTINGS)

    def command(self) -> list[str]:
        command = [sys.executable, "-m", "strom.cli.main", "broker", "--host", "127.0.0.1"]
        command += ["--port", str(self.port), "--data-dir", str(self.data_dir)]
        for key, value in self.settings.items():
            command += ["--set", f"{key}={value}"]
        return command

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.address, "broker.address.family": "v4"})

    def listening(self) -> bool:
        with socket.create_connection(("127.0.0.1", self.port), timeout=1):
            return True


def single_failovers(broker: SingleBroker, count: int, tries: int) -> list[Failover]:
    topic = f"failover-{count}"
    group = f"failover-group-{count}"
    create_topic(broker.address, topic, count, 1)
    members = start_members(broker.address, group, topic, count)
    admin = broker.admin()
    results = []
    round_number = 0
    try:
        for try_index in range(tries):
            wait_stable(admin, group, count)
            round_number += 1
            commit_round(members, round_number)
            wait_stable(admin, group, count)
            before = {commit.generation for m in members if (commit := m.commit_of(round_number))}
            refusals_before = [len(member.refusals) for member in members]
            broker.kill()
            killed_at = time.monotonic()
            broker.start()
            round_number += 1
            (first_commit_at, commits_at), described_at, ready_at, generations = await_restable(
                members, round_number, killed_at, broker.admin, group, None, broker.listening
            )
            admin = broker.admin()
            wait_stable(admin, group, count)
            result = Failover(
                **stages_ms(count, killed_at, first_commit_at, commits_at, described_at, ready_at),
                generation_kept=generations == before,
                refusals=refusals_since(members, refusals_before),
            )
            print(
                f"single broker, {count} members, try {try_index + 1}: re-stable"
                f" {result.restable_ms:,.0f} ms (listening {result.ready_ms:,.0f} ms, described"
                f" {result.described_ms:,.0f} ms, commits"
                f" {result.first_commit_ms:,.0f}-{result.commits_ms:,.0f} ms, {result.refusals} refused commits, generation"
                f" {'kept' if result.generation_kept else f'{before} → {generations}'})",
                flush=True,
            )
            results.append(result)
    finally:
        stop_members(members)
    return results


# -- the report ------------------------------------------------------------------------------------


def machine_load() -> str:
    """How busy the machine is (others' work included): load average, CPU pressure."""
    text = f"load average {Path('/proc/loadavg').read_text().split()[0]}"
    with contextlib.suppress(OSError, IndexError):
        some = Path("/proc/pressure/cpu").read_text().splitlines()[0].split()
        text += f", tasks waiting for a CPU {some[2].split('=')[1]}% of the last minute"
    return text


def ms_spread(values: Sequence[float | None]) -> str:
    known = [value for value in values if value is not None]
    if not known:
        return "-"
    low, middle, high = spread(known)
    return f"{low:,.0f} / {middle:,.0f} / {high:,.0f}"


def render(
    cluster: dict[int, list[Failover]],
    single: dict[int, list[Failover]],
    leaves: dict[int, float],
    tries: int,
    loads: Sequence[tuple[str, str]],
) -> str:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    versions = f"confluent-kafka {confluent_kafka.__version__}, librdkafka {confluent_kafka.libversion()[0]}"
    bar_ms = SESSION_TIMEOUT_MS + BAR_MARGIN_MS
    member_settings = ", ".join(
        f"`{key}` {value}" for key, value in MEMBER_CONFIG.items() if key != "broker.address.family"
    )
    lines = [
        "## Coordinator failover (`python -m benchmarks.coordinator_failover`)",
        "",
        f"Run: {now}. Machine: {machine_description()}, shared with other engineers' work: the"
        " figures are compared within this run. Machine load "
        + "; ".join(f"{what}: {load}" for what, load in loads)
        + " (2 would be both CPUs busy).",
        "",
        f"Cluster: ZooKeeper and 3 `strom broker` processes on 127.0.0.1, `zookeeper.session.timeout.ms`"
        f" {SESSION_TIMEOUT_MS}, `__consumer_offsets` {OFFSETS_PARTITIONS} partitions with 3 replicas,"
        " the group's topic one partition per member with 3 replicas. Single node: one `strom broker`"
        f" without ZooKeeper. Members: {versions}, threads of one process, {member_settings}; every other"
        f" librdkafka setting (reconnect backoff, coordinator queries) at its default. {tries} tries per"
        " size; min / median / max in ms.",
        "",
        "| members | cluster: kill -9 of the coordinator → re-stable on the new one | bar ≤ session timeout"
        " + 2 s | single node: kill -9 and restart → re-stable | single node: re-stable after a clean"
        " leave (`benchmarks.rebalance` case b) |",
        "|---:|---:|---|---:|---:|",
    ]
    for count in sorted(cluster):
        tried = cluster[count]
        met = "**met**" if max(result.restable_ms for result in tried) <= bar_ms else "**not met**"
        leave = leaves.get(count)
        lines.append(
            f"| {count} | {ms_spread([r.restable_ms for r in tried])} | ≤ {bar_ms:,}: {met}"
            f" | {ms_spread([r.restable_ms for r in single.get(count, [])])}"
            f" | {'-' if leave is None else f'{leave * 1000:,.0f}'} |"
        )
    lines += [
        "",
        "Where the time goes (ms from the kill, min / median / max):",
        "",
        "| case | members | the dead broker's registration left ZooKeeper | new leader of the group's"
        " offsets partition named (cluster) / broker listening again (single) | the new coordinator's load of that partition | DescribeGroups: Stable, every"
        " member | first member's commit accepted | last member's commit accepted | coordinator was"
        " the controller |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for case, results in (("cluster", cluster), ("single node", single)):
        for count in sorted(results):
            tried = results[count]
            lines.append(
                f"| {case} | {count} | {ms_spread([r.expired_ms for r in tried])}"
                f" | {ms_spread([r.ready_ms for r in tried])}"
                f" | {ms_spread([r.load_ms for r in tried]) if case == 'cluster' else 'at start, with the rest'}"
                f" | {ms_spread([r.described_ms for r in tried])} | {ms_spread([r.first_commit_ms for r in tried])}"
                f" | {ms_spread([r.commits_ms for r in tried])}"
                f" | {f'{sum(r.was_controller for r in tried)} of {len(tried)}' if case == 'cluster' else '-'} |"
            )
    lines += [
        "",
        "The cluster figure cut into stages that add up to it (median over the tries of each stage, ms):",
        "",
        "| members | ZooKeeper expires the dead broker's session | the controller elects, the survivors'"
        " metadata says so | the new coordinator loads the group, DescribeGroups answers Stable | the"
        " members find the new coordinator (→ the last one's commit accepted) |",
        "|---:|---:|---:|---:|---:|",
    ]
    for count in sorted(cluster):
        stages = [
            cluster_stages(r.expired_ms, r.ready_ms, r.described_ms, r.restable_ms) for r in cluster[count]
        ]
        medians = [statistics.median(stage[index] for stage in stages) for index in range(4)]
        lines.append(f"| {count} | " + " | ".join(f"{value:,.0f}" for value in medians) + " |")
    every = [result for results in (*cluster.values(), *single.values()) for result in results]
    kept = all(result.generation_kept for result in every)
    refused = sum(result.refusals for result in every)
    lines += [
        "",
        "Re-stable: every member has had an offset commit accepted that it sent after the kill (the"
        " commit carries the member id and generation, so the coordinator that took it knows the"
        " member in its generation), all on one generation, and DescribeGroups answered by a broker"
        " other than the killed one says Stable with every member; the figure is the time from the"
        " kill to the later of the two (details in the docstring of"
        " `benchmarks/coordinator_failover.py`). Generation unchanged across every failover (the"
        f" group was loaded Stable, no rebalance): {'yes' if kept else 'no'}; commits refused and"
        f" retried meanwhile: {refused}.",
    ]
    if cluster:
        every_stage = [
            cluster_stages(r.expired_ms, r.ready_ms, r.described_ms, r.restable_ms)
            for results in cluster.values()
            for r in results
        ]
        zookeeper_low, _, zookeeper_high = spread([stage[0] for stage in every_stage])
        strom_low, strom_median, strom_high = spread([stage[1] + stage[2] for stage in every_stage])
        client_low, client_median, client_high = spread([stage[3] for stage in every_stage])
        lines += [
            "",
            f"Reading it: most of the cluster figure is ZooKeeper's. The dead broker's session expires"
            f" {zookeeper_low / 1000:.1f}-{zookeeper_high / 1000:.1f} s after the kill in these tries:"
            f" {SESSION_TIMEOUT_MS / 1000:.0f} s after the broker last spoke to ZooKeeper (it pings every"
            " third of that when idle), which is the setting's to change, not strom's. strom's own part,"
            " from the expiry to the new coordinator answering Stable (the controller's election, the"
            " survivors' metadata, the load of the group's partition, DescribeGroups), took"
            f" {strom_low:,.0f} / {strom_median:,.0f} / {strom_high:,.0f} ms (min / median / max over"
            " every try). The last stage is the client's: a librdkafka member that lost its coordinator"
            " asks for it again on its own internal interval (not a setting) and then opens a new"
            " connection to it, so the last member's accepted commit came"
            f" {client_low:,.0f} / {client_median:,.0f} / {client_high:,.0f} ms after the new"
            " coordinator answered Stable. The single node needs no expiry and comes back in the time a"
            " `strom broker` process takes to start and load (most of its figure is the process"
            " start, which the machine's load stretches), but its groups have no coordinator at all"
            " until someone restarts it; a clean leave, for scale, is one heartbeat and a rebalance.",
        ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--members", default=",".join(map(str, MEMBER_COUNTS)), help="group sizes")
    parser.add_argument("--tries", type=int, default=TRIES, help=f"failovers per size (default {TRIES})")
    parser.add_argument("--output", default="BENCHMARKS.md", help="file whose section is replaced")
    parser.add_argument("--no-write", action="store_true", help="print only")
    arguments = parser.parse_args()
    counts = [int(count) for count in arguments.members.split(",")]
    loads = [("at the start", machine_load())]
    cluster_results: dict[int, list[Failover]] = {}
    single_results: dict[int, list[Failover]] = {}
    leaves: dict[int, float] = {}
    with tempfile.TemporaryDirectory(prefix="strom-bench-failover-") as temp:
        work_dir = Path(temp)
        cluster = LocalCluster(work_dir / "cluster", BROKERS, settings=CLUSTER_SETTINGS)
        try:
            cluster.start()
            wait_until(lambda: whole(cluster, []), "every broker registered")
            for count in counts:
                cluster_results[count] = cluster_failovers(cluster, count, arguments.tries)
        finally:
            cluster.stop()
        loads.append(("after the cluster", machine_load()))
        (work_dir / "single").mkdir()
        single = SingleBroker(work_dir / "single")
        try:
            single.start()
            single.wait_listening()
            measure_storm_and_leave(single.address, 2)  # creates __consumer_offsets; not reported
            for count in counts:
                single_results[count] = single_failovers(single, count, arguments.tries)
            for count in counts:
                leaves[count] = measure_storm_and_leave(single.address, count).leave_s
                print(
                    f"single broker, {count} members: clean leave re-stable {leaves[count]:.3f} s", flush=True
                )
        finally:
            single.stop()
        loads.append(("at the end", machine_load()))
    section = render(cluster_results, single_results, leaves, arguments.tries, loads)
    print(section)
    if not arguments.no_write:
        replace_section(Path(arguments.output), "coordinator-failover", section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
