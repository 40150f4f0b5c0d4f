"""strom's Consumer with ``group.protocol=consumer`` (KIP-848) against a real strom broker: scaling
while producing, leaving, a killed member, a pattern, and a group shared with librdkafka members.

Ownership is checked from the members' own callbacks, all run on this test's thread (every member
is polled in turn here): a partition handed to a member while another still holds it fails."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest

from strom.client.cluster import TopicPartition
from strom.client.consumer import Consumer, ConsumerRebalanceListener
from tests.compat.conftest import BrokerProcess
from tests.compat.support import confluent_producer, create_topic, unique_topic

pytestmark = pytest.mark.compat

SESSION_MS = 8_000
HEARTBEAT_MS = 300
BROKER_SETTINGS = {
    "group.consumer.session.timeout.ms": str(SESSION_MS),
    "group.consumer.min.session.timeout.ms": "1000",
    "group.consumer.heartbeat.interval.ms": str(HEARTBEAT_MS),
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.initial.rebalance.delay.ms": "0",  # classic members of the rolling upgrade
}
DEADLINE_S = 60.0
PARTITIONS = 12


@pytest.fixture(scope="module")
def shared_broker_settings() -> dict[str, str]:
    return dict(BROKER_SETTINGS)


@pytest.fixture
def bootstrap(shared_broker: BrokerProcess) -> str:
    return shared_broker.bootstrap


def strom_member(bootstrap: str, group: str, **settings: object) -> Consumer:
    config: dict[str, object] = {
        "bootstrap_servers": bootstrap,
        "group_id": group,
        "group_protocol": "consumer",
        "auto_offset_reset": "earliest",
        "auto_commit_interval_ms": 200,
    }
    config.update(settings)
    return Consumer(**config)


class Ownership:
    """Who owns each partition, as the members' callbacks tell it."""

    def __init__(self) -> None:
        self.owner: dict[TopicPartition, str] = {}
        self.violations: list[str] = []
        self.revoked: dict[str, list[TopicPartition]] = {}

    def assigned(self, name: str, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            holder = self.owner.get(tp)
            if holder is not None and holder != name:
                self.violations.append(f"{tp} given to {name} while {holder} still owns it")
            self.owner[tp] = name

    def released(self, name: str, partitions: list[TopicPartition], *, revoked: bool) -> None:
        if revoked:
            self.revoked.setdefault(name, []).extend(partitions)
        for tp in partitions:
            if self.owner.get(tp) == name:
                del self.owner[tp]

    def listener(self, name: str) -> ConsumerRebalanceListener:
        ownership = self

        class Listener(ConsumerRebalanceListener):
            def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
                ownership.assigned(name, assigned)

            def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
                ownership.released(name, revoked, revoked=True)

            def on_partitions_lost(self, lost: list[TopicPartition]) -> None:
                ownership.released(name, lost, revoked=False)

        return Listener()

    def held_by(self, name: str) -> set[TopicPartition]:
        return {tp for tp, holder in self.owner.items() if holder == name}


class ConfluentMember:
    """A librdkafka consumer with group.protocol=consumer, polled on the test's thread."""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str, ownership: Ownership) -> None:
        self.name = name
        self.consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "broker.address.family": "v4",
                "group.id": group,
                "group.protocol": "consumer",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": True,
                "auto.commit.interval.ms": 200,
            }
        )

        def on_assign(_: Any, partitions: list[confluent_kafka.TopicPartition]) -> None:
            ownership.assigned(name, [TopicPartition(tp.topic, tp.partition) for tp in partitions])

        def on_revoke(_: Any, partitions: list[confluent_kafka.TopicPartition]) -> None:
            ownership.released(
                name, [TopicPartition(tp.topic, tp.partition) for tp in partitions], revoked=True
            )

        def on_lost(_: Any, partitions: list[confluent_kafka.TopicPartition]) -> None:
            ownership.released(
                name, [TopicPartition(tp.topic, tp.partition) for tp in partitions], revoked=False
            )

        self.consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)

    def poll(self, sink: list[bytes]) -> None:
        message = self.consumer.poll(0.05)
        if message is not None and message.error() is None:
            value = message.value()
            assert isinstance(value, bytes)
            sink.append(value)


class Group:
    """strom members (and librdkafka ones) of one group, polled in turn on this thread."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.group = unique_topic("g-kip848")
        self.ownership = Ownership()
        self.members: dict[str, Consumer] = {}
        self.confluent: dict[str, ConfluentMember] = {}
        self.values: list[bytes] = []

    def add(self, name: str, **settings: object) -> Consumer:
        member = strom_member(self.bootstrap, self.group, **settings)
        member.subscribe([self.topic], listener=self.ownership.listener(name))
        self.members[name] = member
        return member

    def add_confluent(self, name: str) -> None:
        self.confluent[name] = ConfluentMember(self.bootstrap, self.group, self.topic, name, self.ownership)

    def close(self, name: str) -> None:
        self.members.pop(name).close()

    def poll_once(self) -> None:
        for member in list(self.members.values()):
            self.values.extend(record.value or b"" for record in member.poll(20))
        for confluent in self.confluent.values():
            confluent.poll(self.values)

    def poll_until(self, done: Callable[[], bool], what: str, deadline_s: float = DEADLINE_S) -> float:
        """Poll every member until ``done()``; the seconds it took."""
        started = time.monotonic()
        while not done():
            assert time.monotonic() - started < deadline_s, f"not reached in {deadline_s} s: {what}"
            self.poll_once()
        return time.monotonic() - started

    def sizes(self) -> list[int]:
        names = [*self.members, *self.confluent]
        return sorted(len(self.ownership.held_by(name)) for name in names)

    def settled(self, *sizes: int) -> Callable[[], bool]:
        return lambda: self.sizes() == sorted(sizes) and len(self.ownership.owner) == PARTITIONS

    def shutdown(self) -> None:
        for member in self.members.values():
            member.close()
        for confluent in self.confluent.values():
            confluent.consumer.close()


@pytest.fixture
def group_of(bootstrap: str) -> Iterator[Callable[[str], Group]]:
    groups: list[Group] = []

    def make(topic: str) -> Group:
        groups.append(Group(bootstrap, topic))
        return groups[-1]

    yield make
    for group in groups:
        group.shutdown()


class BackgroundProducer:
    """Produces numbered records to every partition until stopped; knows what was acknowledged."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.producer = confluent_producer(bootstrap, linger_ms=5)
        self.topic = topic
        self.acknowledged: set[bytes] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _on_delivery(self, error: object, message: Any) -> None:
        if error is None:
            self.acknowledged.add(message.value())

    def _run(self) -> None:
        index = 0
        while not self._stop.is_set():
            for _ in range(PARTITIONS):
                self.producer.produce(
                    self.topic,
                    value=f"r{index}".encode(),
                    partition=index % PARTITIONS,
                    on_delivery=self._on_delivery,
                )
                index += 1
            self.producer.poll(0)
            time.sleep(0.02)

    def stop(self) -> set[bytes]:
        self._stop.set()
        self._thread.join(30)
        assert self.producer.flush(30) == 0
        return self.acknowledged


def test_scaling_one_to_three_to_one_while_producing(
    bootstrap: str, group_of: Callable[[str], Group]
) -> None:
    topic = unique_topic("cp-scale")
    create_topic(bootstrap, topic, PARTITIONS)
    group = group_of(topic)
    group.add("m1")
    group.poll_until(group.settled(PARTITIONS), "m1 owns every partition")
    producer = BackgroundProducer(bootstrap, topic)
    try:
        group.add("m2")
        group.add("m3")
        group.poll_until(group.settled(4, 4, 4), "three members with 4 partitions each")
        # m1 gave up only what moved: the partitions it kept were never revoked (no pause).
        assert not set(group.ownership.revoked["m1"]) & group.ownership.held_by("m1")
        group.ownership.revoked.clear()
        # A member that closes leaves (epoch -1): its partitions move at once, not after the session.
        group.close("m3")
        moved_s = group.poll_until(group.settled(6, 6), "m3's partitions moved to m1 and m2")
        assert moved_s < SESSION_MS / 1000 / 2, f"m3's partitions took {moved_s:.1f} s to move"
        group.close("m2")
        group.poll_until(group.settled(PARTITIONS), "m1 owns every partition again")
        # Scaling in only adds to the member that stays: it never gave anything up.
        assert group.ownership.revoked.get("m1", []) == []
    finally:
        produced = producer.stop()
    group.poll_until(lambda: set(group.values) >= produced, "every acknowledged record consumed")
    assert group.ownership.violations == []


def test_a_killed_member_loses_its_partitions_after_the_session_timeout(
    bootstrap: str, group_of: Callable[[str], Group], tmp_path: Path
) -> None:
    topic = unique_topic("cp-kill")
    create_topic(bootstrap, topic, PARTITIONS)
    group = group_of(topic)
    group.add("m1")
    group.poll_until(group.settled(PARTITIONS), "m1 owns every partition")
    out = tmp_path / "worker.out"
    with out.open("wb") as sink:
        worker = subprocess.Popen(
            [sys.executable, "-c", WORKER, bootstrap, group.group, topic],
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        group.poll_until(
            lambda: (
                len(group.ownership.held_by("m1")) == PARTITIONS // 2
                and f"owns {PARTITIONS // 2}" in out.read_text()
            ),
            "the worker owns half the partitions",
        )
        worker.send_signal(signal.SIGKILL)
        worker.wait(10)
        took_s = group.poll_until(group.settled(PARTITIONS), "the killed worker's partitions came back to m1")
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGKILL)
            worker.wait(10)
    # Not before the coordinator gave up on the worker. Its last heartbeat came one interval
    # (0.3 s) before the kill when it runs freely; the bound is half the session so that only a
    # worker stalled for 4 s (not a slow machine) could break it.
    assert took_s >= SESSION_MS / 1000 / 2, f"moved after {took_s:.1f} s"
    assert group.ownership.violations == []


# A member in its own process, reporting how many partitions it owns after each change.
WORKER = """
import sys
from strom.client.consumer import Consumer, ConsumerRebalanceListener
consumer = Consumer(bootstrap_servers=sys.argv[1], group_id=sys.argv[2], group_protocol="consumer",
                    auto_offset_reset="earliest")
class Report(ConsumerRebalanceListener):
    def on_partitions_assigned(self, assigned):
        print("owns", len(consumer.assignment()), flush=True)
consumer.subscribe([sys.argv[3]], listener=Report())
while True:
    consumer.poll(100)
"""


def test_a_pattern_picks_up_a_topic_created_later_and_gives_way_to_names(bootstrap: str) -> None:
    prefix = unique_topic("cp-pattern")
    create_topic(bootstrap, f"{prefix}-a", 2)
    producer = confluent_producer(bootstrap)
    producer.produce(f"{prefix}-a", value=b"a0", partition=0)
    assert producer.flush(30) == 0
    seen: list[bytes] = []
    with strom_member(bootstrap, unique_topic("g-pattern"), metadata_max_age_ms=500) as member:
        member.subscribe(["^" + re.escape(prefix) + "-.*"])  # librdkafka's way to give a pattern
        deadline = time.monotonic() + DEADLINE_S
        while b"a0" not in seen:
            assert time.monotonic() < deadline, "nothing read from the first topic"
            seen.extend(record.value or b"" for record in member.poll(100))
        create_topic(bootstrap, f"{prefix}-b", 3)
        for partition in range(3):
            producer.produce(f"{prefix}-b", value=f"b{partition}".encode(), partition=partition)
        assert producer.flush(30) == 0
        while not {b"b0", b"b1", b"b2"} <= set(seen):
            assert time.monotonic() < deadline, f"the later topic's records not read: {seen}"
            seen.extend(record.value or b"" for record in member.poll(100))
        assert {tp.topic for tp in member.assignment()} == {f"{prefix}-a", f"{prefix}-b"}
        assert member.subscription() == {f"{prefix}-a", f"{prefix}-b"}
        # From the pattern to a name: the coordinator drops the pattern's other matches.
        member.subscribe([f"{prefix}-b"])
        while {tp.topic for tp in member.assignment()} != {f"{prefix}-b"}:
            assert time.monotonic() < deadline, f"still assigned {member.assignment()}"
            member.poll(100)


def test_strom_and_librdkafka_members_share_a_consumer_group(
    bootstrap: str, group_of: Callable[[str], Group]
) -> None:
    topic = unique_topic("cp-mixed")
    create_topic(bootstrap, topic, PARTITIONS)
    group = group_of(topic)
    group.add("strom-1")
    group.add_confluent("librdkafka-1")
    group.poll_until(group.settled(6, 6), "the strom and librdkafka members split the partitions")
    group.add("strom-2")
    group.add_confluent("librdkafka-2")
    group.poll_until(group.settled(3, 3, 3, 3), "four members with 3 partitions each")
    producer = confluent_producer(bootstrap)
    produced: set[bytes] = set()
    for index in range(PARTITIONS * 10):
        value = f"m{index}".encode()
        producer.produce(topic, value=value, partition=index % PARTITIONS)
        produced.add(value)
    assert producer.flush(30) == 0
    group.poll_until(lambda: set(group.values) >= produced, "every record consumed")
    # The group was stable while it read: each record once.
    assert sorted(group.values) == sorted(produced)
    group.close("strom-1")
    group.poll_until(group.settled(4, 4, 4), "strom-1's partitions spread over the other three")
    assert group.ownership.violations == []


def test_a_static_member_restarts_with_its_partitions_and_committed_offsets(
    bootstrap: str, group_of: Callable[[str], Group]
) -> None:
    topic = unique_topic("cp-static")
    create_topic(bootstrap, topic, 4)
    producer = confluent_producer(bootstrap)
    for index in range(40):
        producer.produce(topic, value=f"old-{index}".encode(), partition=index % 4)
    assert producer.flush(30) == 0
    group = group_of(topic)
    group.add("other", enable_auto_commit=False)
    static = group.add("static", group_instance_id="restarting", enable_auto_commit=False)
    group.poll_until(lambda: group.sizes() == [2, 2] and len(group.ownership.owner) == 4, "two members")
    held = group.ownership.held_by("static")
    old = {f"old-{index}".encode() for index in range(40)}
    # (Some may be read twice: what the first member read before handing partitions over.)
    group.poll_until(
        lambda: set(group.values) >= old and all(static.position(tp) == 10 for tp in held),
        "the old records read",
    )
    static.commit()  # with its member epoch (OffsetCommit v9)
    assert static.committed(sorted(held)) == dict.fromkeys(held, 10)
    others_before = group.ownership.held_by("other")
    group.ownership.revoked.clear()
    group.close("static")  # leaves with epoch -2: the coordinator keeps its partitions for it
    group.values.clear()
    group.add("static", group_instance_id="restarting", enable_auto_commit=False)
    group.poll_until(lambda: len(group.ownership.held_by("static")) == 2, "the static member back")
    assert group.ownership.held_by("static") == held
    for index in range(4):
        producer.produce(topic, value=f"new-{index}".encode(), partition=index)
    assert producer.flush(30) == 0
    group.poll_until(lambda: len(group.values) >= 4, "the new records read")
    # From the committed offsets: nothing old read again; the other member never moved.
    assert sorted(group.values) == [f"new-{index}".encode() for index in range(4)]
    # Had the other member been given the static member's partitions meanwhile, it would have
    # had to revoke them before the restarted member got them back.
    assert group.ownership.held_by("other") == others_before
    assert group.ownership.revoked.get("other", []) == []
    assert group.ownership.violations == []


def test_a_rolling_upgrade_from_classic_keeps_the_committed_offsets(
    bootstrap: str, group_of: Callable[[str], Group]
) -> None:
    topic = unique_topic("cp-upgrade")
    create_topic(bootstrap, topic, 6)
    producer = confluent_producer(bootstrap)
    old = set()
    for index in range(60):
        producer.produce(topic, value=f"old-{index}".encode(), partition=index % 6)
        old.add(f"old-{index}".encode())
    assert producer.flush(30) == 0
    group = group_of(topic)
    classic = {"group_protocol": "classic", "session_timeout_ms": 6_000, "heartbeat_interval_ms": 300}
    for name in ("m1", "m2"):
        group.add(name, **classic)
    group.poll_until(lambda: group.sizes() == [3, 3] and len(group.ownership.owner) == 6, "a classic pair")
    group.poll_until(
        lambda: (
            set(group.values) >= old
            and all(
                member.position((topic, p)) == 10 for member in group.members.values() for p in _held(member)
            )
        ),
        "the old records read",
    )
    for member in group.members.values():
        member.commit()
    # One member at a time restarts with the consumer protocol: the group converts online.
    for name in ("m1", "m2"):
        group.close(name)
        group.add(name)
        group.poll_until(
            lambda: group.sizes() == [3, 3] and len(group.ownership.owner) == 6,
            f"{name} back as a consumer member",
        )
    group.values.clear()
    new = set()
    for index in range(12):
        producer.produce(topic, value=f"new-{index}".encode(), partition=index % 6)
        new.add(f"new-{index}".encode())
    assert producer.flush(30) == 0
    group.poll_until(lambda: set(group.values) >= new, "the new records read")
    # Every member started from the offsets committed under the classic protocol.
    assert sorted(group.values) == sorted(new)
    assert group.ownership.violations == []


def _held(member: Consumer) -> list[int]:
    return [tp.partition for tp in member.assignment()]
