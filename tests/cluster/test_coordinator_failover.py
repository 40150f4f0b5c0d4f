"""The group coordinator's broker killed (kill -9) at each phase seed 000 names, on three real
brokers and a real ZooKeeper, with mixed groups of real clients (confluent-kafka, kafka-python,
strom's own consumer) and raw members (strom's protocol classes) that hold the group in the phase:

(a) while members' JoinGroups are parked (the leader has not rejoined);
(b) after some members were told REBALANCE_IN_PROGRESS and others not;
(c) after the JoinGroup responses, before the leader's SyncGroup;
(d) after the new generation was written (the leader's SyncGroup answered), before every member's
    SyncGroup was answered;
plus a stable group heartbeating through the kill (members keep fetching meanwhile), and a group
of static members.

After each kill the group converges on the new coordinator (the broker that took over the group's
``__consumer_offsets`` partition): one generation for every member, every partition owned by
exactly one member, the coordinator describing it Stable, every commit acknowledged before the
kill read back, and every member able to commit as a member of that generation. Each test prints
the time from the kill to the first moment all of that held.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from confluent_kafka import ConsumerGroupState, Producer
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

from strom.cli.dev_cluster import LocalCluster
from strom.client.transport import LoopThread
from strom.protocol.errors import ErrorCode

from .cluster_support import SESSION_TIMEOUT_MS as ZOOKEEPER_SESSION_TIMEOUT_MS
from .cluster_support import admin, all_led, create_topic, live_bootstrap, wait_until
from .group_support import (
    KAFKA_PYTHON_WARNING,
    ClientMember,
    ConfluentMember,
    KafkaPythonMember,
    Member,
    RawMember,
    StromMember,
    close_kafka_python_refused_sockets,
    commit_from_each,
    committed,
    coordinator_of,
    describe,
    received_between,
    stop_all,
    wait_converged,
)

pytestmark = pytest.mark.filterwarnings(f"ignore:{KAFKA_PYTHON_WARNING}:DeprecationWarning")

PARTITIONS = 6
RECORDS_PER_PARTITION = 30


@pytest.fixture(autouse=True)
def kafka_python_sockets_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    close_kafka_python_refused_sockets(monkeypatch)


@pytest.fixture
def loop_thread() -> Iterator[LoopThread]:
    """The event loop of the raw members; every member a test started is stopped before it ends."""
    thread = LoopThread("raw-members")
    try:
        yield thread
    finally:
        started, _STARTED[:] = list(_STARTED), []
        try:
            stop_all(started)
        finally:
            thread.stop()


# Members started by the running test (stopped by the ``loop_thread`` fixture, whatever happens).
_STARTED: list[Member] = []


@dataclass
class Group:
    """A group under test: its members (raw ones first), topic, and what was acknowledged."""

    cluster: LocalCluster
    name: str
    topic: str
    members: list[Member] = field(default_factory=list)
    acknowledged: dict[int, int] = field(default_factory=dict)

    def raw(self, index: int) -> RawMember:
        member = self.members[index]
        assert isinstance(member, RawMember)
        return member

    def add(self, member: Member) -> Member:
        self.members.append(member)
        _STARTED.append(member)
        member.start()
        return member

    def converge(self) -> tuple[float, int]:
        return wait_converged(self.cluster, self.name, self.members, PARTITIONS)


def produce(bootstrap: str, topic: str, count_per_partition: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for partition in range(PARTITIONS):
        for index in range(count_per_partition):
            producer.produce(topic, value=f"{partition}-{index}".encode(), partition=partition)
    assert producer.flush(60) == 0


def mixed_group(cluster: LocalCluster, loop: LoopThread, name: str) -> Group:
    """A stable group: raw member R (the first to join, so the leader: it stays leader as long as
    it rejoins), raw member S, and a confluent-kafka, a kafka-python and a strom member; each
    committed offsets for its partitions (acknowledged, recorded)."""
    topic = f"{name}-events"
    create_topic(cluster, topic, PARTITIONS)
    produce(live_bootstrap(cluster), topic, RECORDS_PER_PARTITION)
    group = Group(cluster, name, topic)
    leader = group.add(RawMember(loop, cluster, "R", name, topic, PARTITIONS))
    wait_until(lambda: leader.current_generation() is not None, "R alone in the group")
    group.add(RawMember(loop, cluster, "S", name, topic, PARTITIONS))
    bootstrap = cluster.bootstrap
    group.add(ConfluentMember("confluent", bootstrap, name, topic, None))
    group.add(KafkaPythonMember("kafka-python", bootstrap, name, topic, None))
    group.add(StromMember("strom", bootstrap, name, topic, None))
    group.converge()
    assert group.raw(0).leader, "R leads the group"
    group.acknowledged = commit_from_each(group.members, base=10)
    return group


def kill_coordinator(group: Group) -> tuple[int, float]:
    coordinator = coordinator_of(live_bootstrap(group.cluster), group.name)
    group.cluster.brokers[coordinator].kill()
    return coordinator, time.monotonic()


def check_after_failover(group: Group, coordinator: int, killed_at: float, what: str) -> int:
    """The group converged on another broker with its commits intact; the generation."""
    stable_at, generation = group.converge()
    new_coordinator = coordinator_of(live_bootstrap(group.cluster), group.name)
    assert new_coordinator != coordinator
    print(
        f"\n{what}: kill -9 of broker {coordinator} -> Stable on broker {new_coordinator} "
        f"in {stable_at - killed_at:.1f} s (generation {generation})"
    )
    found = committed(live_bootstrap(group.cluster), group.name, group.topic, PARTITIONS)
    assert found == group.acknowledged, "offsets committed before the kill"
    # Every member is a member of that generation: its commit is accepted.
    acknowledged = commit_from_each(group.members, base=20)
    assert committed(live_bootstrap(group.cluster), group.name, group.topic, PARTITIONS) == acknowledged
    return generation


def newcomer(group: Group) -> ClientMember:
    member = ConfluentMember("newcomer", group.cluster.bootstrap, group.name, group.topic, None)
    group.add(member)
    return member


def test_a_kill_while_join_groups_are_parked(cluster: LocalCluster, loop_thread: LoopThread) -> None:
    group = mixed_group(cluster, loop_thread, "parked-joins")
    leader, follower = group.raw(0), group.raw(1)
    leader.hold("join")  # told to rejoin, R (the leader) does not: everyone else waits for it
    newcomer(group)
    leader.wait_held("join")
    wait_until(lambda: follower.in_request == "JoinGroupRequest", "S's JoinGroup parked")
    assert describe(live_bootstrap(cluster), group.name).state == ConsumerGroupState.PREPARING_REBALANCING
    coordinator, killed_at = kill_coordinator(group)
    leader.release("join")
    check_after_failover(group, coordinator, killed_at, "(a) JoinGroups parked")


def test_a_kill_after_some_members_were_told_to_rebalance(
    cluster: LocalCluster, loop_thread: LoopThread
) -> None:
    group = mixed_group(cluster, loop_thread, "half-told")
    leader, follower = group.raw(0), group.raw(1)
    leader.hold("heartbeat")  # R hears nothing of the rebalance
    follower.hold("join")  # S is told, and holds before rejoining
    leader.wait_held("heartbeat")
    told_before = len(leader.told)
    newcomer(group)
    follower.wait_held("join")
    assert follower.told[-1] == ("heartbeat", ErrorCode.REBALANCE_IN_PROGRESS)
    assert leader.told[told_before:] == []
    coordinator, killed_at = kill_coordinator(group)
    leader.release("heartbeat")
    follower.release("join")
    check_after_failover(group, coordinator, killed_at, "(b) some told REBALANCE_IN_PROGRESS")


def test_a_kill_between_the_join_responses_and_the_leaders_sync(
    cluster: LocalCluster, loop_thread: LoopThread
) -> None:
    group = mixed_group(cluster, loop_thread, "joined-not-synced")
    leader, follower = group.raw(0), group.raw(1)
    before = leader.generation
    leader.hold("sync")  # R gets its JoinGroup response (with the members) and holds
    newcomer(group)
    leader.wait_held("sync")
    assert leader.generation == before + 1
    wait_until(lambda: follower.in_request == "SyncGroupRequest", "S's SyncGroup parked")
    coordinator, killed_at = kill_coordinator(group)
    leader.release("sync")
    check_after_failover(group, coordinator, killed_at, "(c) joined, not synced")


def test_a_kill_after_the_new_generation_was_written_before_every_sync_was_answered(
    cluster: LocalCluster, loop_thread: LoopThread
) -> None:
    group = mixed_group(cluster, loop_thread, "written-not-all-synced")
    leader, follower = group.raw(0), group.raw(1)
    before = leader.generation
    follower.hold("sync")  # S has its JoinGroup response and holds before SyncGroup
    newcomer(group)
    follower.wait_held("sync")
    # R's SyncGroup is answered once the group's record is below the high watermark.
    wait_until(lambda: leader.current_generation() == before + 1, "R synced in the new generation")
    written = leader.generation
    coordinator, killed_at = kill_coordinator(group)
    follower.release("sync")
    generation = check_after_failover(group, coordinator, killed_at, "(d) written, not all synced")
    # The generation written before the kill is the one the group converged on: S's SyncGroup
    # at the new coordinator was answered from the loaded record, nobody had to rejoin.
    assert generation == written
    assert ("sync", ErrorCode.NONE) in follower.told


def test_a_stable_group_heartbeats_through_the_kill_and_keeps_fetching(
    cluster: LocalCluster, loop_thread: LoopThread
) -> None:
    """Members of a Stable group (no raw member) with every partition of their topic on the other
    brokers: while the coordinator is gone (at least the dead broker's ZooKeeper session),
    they keep receiving records; then they find the new coordinator."""
    name = "stable-heartbeats"
    bootstrap = live_bootstrap(cluster)
    wait_until(lambda: coordinator_or_none(bootstrap, name) is not None, "a coordinator for the group")
    coordinator = coordinator_or_none(bootstrap, name)
    assert coordinator is not None
    others = [node for node in sorted(cluster.brokers) if node != coordinator]
    topic = f"{name}-events"
    # Replicated on the two other brokers only: the coordinator's death leaves every ISR and
    # the high watermark alone, so records keep becoming readable while it is gone.
    assignments = {
        partition: [others[partition % 2], others[1 - partition % 2]] for partition in range(PARTITIONS)
    }
    client = admin(bootstrap)
    futures = client.create_topics(
        [
            NewTopic(
                topic,
                num_partitions=PARTITIONS,
                replica_assignment=[assignments[p] for p in range(PARTITIONS)],
            )
        ]
    )
    futures[topic].result(30)
    wait_until(lambda: all_led(cluster, topic, PARTITIONS), f"leaders for {topic}")
    group = Group(cluster, name, topic)
    stop_producing = threading.Event()
    producer = threading.Thread(
        target=keep_producing, args=(cluster.bootstrap, topic, stop_producing), daemon=True
    )
    producer.start()
    try:
        for member in (
            ConfluentMember("confluent-1", cluster.bootstrap, name, topic, None),
            ConfluentMember("confluent-2", cluster.bootstrap, name, topic, None),
            KafkaPythonMember("kafka-python", cluster.bootstrap, name, topic, None),
            StromMember("strom", cluster.bootstrap, name, topic, None),
        ):
            group.add(member)
        group.converge()
        group.acknowledged = commit_from_each(group.members, base=10)
        assert coordinator_of(live_bootstrap(cluster), name) == coordinator
        killed_coordinator, killed_at = kill_coordinator(group)
        check_after_failover(group, killed_coordinator, killed_at, "stable group heartbeating")
        # Before the dead broker's ZooKeeper session ends no other broker can lead its offsets
        # partition: records received in that window came while the coordinator was unreachable.
        outage_end = killed_at + ZOOKEEPER_SESSION_TIMEOUT_MS / 1000
        for member in group.members:
            assert isinstance(member, ClientMember)
            if member.kind == "kafka-python":
                continue  # kafka-python's poll() returns nothing while it has no coordinator
            during = received_between(member, killed_at + 0.5, outage_end)
            received = member.snapshot().received
            before = [round(r.at - killed_at, 2) for r in received if r.at <= killed_at][-3:]
            after = [round(r.at - killed_at, 2) for r in received if r.at > killed_at][:3]
            assert during, (
                f"{member.name} received nothing while the coordinator was gone (last records "
                f"before the kill at {before} s, first after at {after} s, relative to it; "
                f"it owns {sorted(member.current_assignment())})"
            )
    finally:
        stop_producing.set()
        producer.join(30)


def test_static_members_keep_their_partitions_across_the_kill(
    cluster: LocalCluster, loop_thread: LoopThread
) -> None:
    name = "static-members"
    topic = f"{name}-events"
    create_topic(cluster, topic, PARTITIONS)
    produce(live_bootstrap(cluster), topic, RECORDS_PER_PARTITION)
    group = Group(cluster, name, topic)
    for member in (
        ConfluentMember("confluent-1", cluster.bootstrap, name, topic, "instance-1"),
        ConfluentMember("confluent-2", cluster.bootstrap, name, topic, "instance-2"),
        KafkaPythonMember("kafka-python", cluster.bootstrap, name, topic, "instance-3"),
        StromMember("strom", cluster.bootstrap, name, topic, "instance-4"),
    ):
        group.add(member)
    group.converge()
    group.acknowledged = commit_from_each(group.members, base=10)
    before = {member.name: member.current_assignment() for member in group.members}
    coordinator, killed_at = kill_coordinator(group)
    check_after_failover(group, coordinator, killed_at, "static members")
    # Static members keep their instance ids' places: the same partitions each.
    assert {member.name: member.current_assignment() for member in group.members} == before


def coordinator_or_none(bootstrap: str, group: str) -> int | None:
    try:
        return coordinator_of(bootstrap, group)
    except Exception:
        return None


def keep_producing(bootstrap: str, topic: str, stop: threading.Event) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    index = 0
    while not stop.is_set():
        producer.produce(topic, value=str(index).encode(), partition=index % PARTITIONS)
        index += 1
        producer.poll(0)
        time.sleep(0.005)
    producer.flush(30)
