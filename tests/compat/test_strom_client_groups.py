"""strom's Consumer in consumer groups against a real strom broker, alone and beside confluent-kafka."""

from __future__ import annotations

import itertools
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import confluent_kafka
import pytest

from strom.client.cluster import TopicPartition
from strom.client.consumer import Consumer, ConsumerRebalanceListener
from strom.client.errors import KafkaError
from tests.compat.conftest import BrokerProcess
from tests.compat.support import confluent_producer, create_topic, unique_topic

pytestmark = pytest.mark.compat

BROKER_SETTINGS = {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000"}
DEADLINE_S = 40.0
# Short timeouts so rebalances after a member goes away finish quickly.
FAST_GROUP = {"session_timeout_ms": 6_000, "heartbeat_interval_ms": 500, "auto_offset_reset": "earliest"}


@pytest.fixture(scope="module")
def shared_broker_settings() -> dict[str, str]:
    return dict(BROKER_SETTINGS)


@pytest.fixture
def bootstrap(shared_broker: BrokerProcess) -> str:
    return shared_broker.bootstrap


def produce(bootstrap: str, topic: str, partitions: int, per_partition: int, prefix: str = "v") -> set[bytes]:
    producer = confluent_producer(bootstrap)
    values: set[bytes] = set()
    for partition in range(partitions):
        for index in range(per_partition):
            value = f"{prefix}-{partition}-{index}".encode()
            producer.produce(topic, value=value, partition=partition)
            values.add(value)
    assert producer.flush(30) == 0
    return values


def strom_consumer(bootstrap: str, group: str, **settings: object) -> Consumer:
    config: dict[str, object] = {"bootstrap_servers": bootstrap, "group_id": group, **FAST_GROUP}
    config.update(settings)
    return Consumer(**config)


def poll_until(
    consumers: list[Consumer], done: Callable[[], bool], sink: list[tuple[int, bytes]] | None = None
) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not done():
        assert time.monotonic() < deadline, "condition not reached in time"
        for index, consumer in enumerate(consumers):
            for record in consumer.poll(50):
                if sink is not None:
                    assert record.value is not None
                    sink.append((index, record.value))


class RecordingListener(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.assigned: list[list[TopicPartition]] = []
        self.revoked: list[list[TopicPartition]] = []
        self.lost: list[list[TopicPartition]] = []

    def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        self.assigned.append(assigned)

    def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        self.revoked.append(revoked)

    def on_partitions_lost(self, lost: list[TopicPartition]) -> None:
        self.lost.append(lost)


def test_subscribe_consume_commit_and_resume_from_committed_offsets(bootstrap: str) -> None:
    topic = unique_topic("sg-resume")
    create_topic(bootstrap, topic, partitions=3)
    first = produce(bootstrap, topic, 3, 20, "first")
    group = unique_topic("g-resume")
    seen: list[tuple[int, bytes]] = []
    listener = RecordingListener()
    with strom_consumer(bootstrap, group, enable_auto_commit=False) as consumer:
        consumer.subscribe([topic], listener=listener)
        poll_until([consumer], lambda: {value for _, value in seen} >= first, seen)
        assert len(seen) == len(first)
        assert sorted(consumer.assignment()) == [TopicPartition(topic, p) for p in range(3)]
        assert listener.assigned[0] == [TopicPartition(topic, p) for p in range(3)]
        consumer.commit()
        assert consumer.committed([(topic, p) for p in range(3)]) == {
            TopicPartition(topic, p): 20 for p in range(3)
        }
    second = produce(bootstrap, topic, 3, 5, "second")
    seen.clear()
    with strom_consumer(bootstrap, group) as consumer:
        consumer.subscribe([topic])
        poll_until([consumer], lambda: {value for _, value in seen} >= second, seen)
        time.sleep(0.3)
        seen.extend((0, record.value or b"") for record in consumer.poll(200))
        # Only what came after the commit: the committed offsets were the starting positions.
        assert sorted(value for _, value in seen) == sorted(second)
        outcomes: list[tuple[dict[TopicPartition, int], KafkaError | None]] = []
        consumer.commit(asynchronous=True, callback=lambda offsets, error: outcomes.append((offsets, error)))
        poll_until([consumer], lambda: bool(outcomes))
        offsets, error = outcomes[0]
        assert error is None and offsets == {TopicPartition(topic, p): 25 for p in range(3)}
        consumer.commit({(topic, 0): 21})
        assert consumer.committed([(topic, 0)]) == {TopicPartition(topic, 0): 21}


def test_pattern_subscription_picks_up_a_topic_created_later(bootstrap: str) -> None:
    prefix = unique_topic("sg-pattern")
    create_topic(bootstrap, f"{prefix}-a", partitions=1)
    produce(bootstrap, f"{prefix}-a", 1, 3)
    seen: list[tuple[int, bytes]] = []
    with strom_consumer(bootstrap, unique_topic("g-pattern"), metadata_max_age_ms=500) as consumer:
        consumer.subscribe(re.compile(re.escape(prefix) + "-.*"))
        poll_until([consumer], lambda: len(seen) >= 3, seen)
        create_topic(bootstrap, f"{prefix}-b", partitions=2)
        produce(bootstrap, f"{prefix}-b", 2, 4, "b")
        poll_until([consumer], lambda: len(seen) >= 11, seen)
        assert consumer.subscription() == {f"{prefix}-a", f"{prefix}-b"}
        assert {tp.topic for tp in consumer.assignment()} == {f"{prefix}-a", f"{prefix}-b"}


class ConfluentMember:
    """A confluent-kafka consumer polled on its own thread, recording what it reads."""

    def __init__(self, bootstrap: str, group: str, topic: str, strategy: str) -> None:
        self.consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "broker.address.family": "v4",
                "group.id": group,
                "auto.offset.reset": "earliest",
                "partition.assignment.strategy": strategy,
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 500,
                "enable.auto.commit": True,
                "auto.commit.interval.ms": 200,
            }
        )
        self.consumer.subscribe([topic])
        self.values: list[bytes] = []
        self.assignment: set[tuple[str, int]] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            message = self.consumer.poll(0.05)
            self.assignment = {(tp.topic, tp.partition) for tp in self.consumer.assignment()}
            if message is not None and message.error() is None:
                value = message.value()
                assert isinstance(value, bytes)
                self.values.append(value)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.consumer.close()


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
@pytest.mark.parametrize("strom_leads", [True, False], ids=["strom-leader", "confluent-leader"])
def test_strom_and_confluent_members_share_a_group(bootstrap: str, strategy: str, strom_leads: bool) -> None:
    topic = unique_topic("sg-mixed")
    partitions = 4
    create_topic(bootstrap, topic, partitions=partitions)
    group = unique_topic("g-mixed")
    strom_values: list[tuple[int, bytes]] = []
    strom_members: list[Consumer] = []
    confluent: ConfluentMember | None = None
    try:
        if not strom_leads:
            confluent = ConfluentMember(bootstrap, group, topic, strategy)
            deadline = time.monotonic() + DEADLINE_S
            while len(confluent.assignment) < partitions:
                assert time.monotonic() < deadline, "confluent member never got the partitions"
                time.sleep(0.05)
        strom_member = strom_consumer(bootstrap, group, partition_assignment_strategy=strategy)
        strom_members.append(strom_member)
        strom_member.subscribe([topic])
        if strom_leads:
            poll_until(strom_members, lambda: len(strom_member.assignment()) == partitions)
            confluent = ConfluentMember(bootstrap, group, topic, strategy)
        assert confluent is not None
        member = confluent

        def split() -> bool:
            mine = strom_member.assignment()
            return len(mine) == partitions // 2 and len(member.assignment) == partitions // 2
            # (both sides hold half and nothing overlaps once stable)

        poll_until(strom_members, split)
        assert not ({(tp.topic, tp.partition) for tp in strom_member.assignment()} & member.assignment)
        produced = produce(bootstrap, topic, partitions, 25)
        poll_until(
            strom_members,
            lambda: {value for _, value in strom_values} | set(member.values) >= produced,
            strom_values,
        )
        time.sleep(0.3)
        poll_until(strom_members, lambda: True, strom_values)
        every = [value for _, value in strom_values] + member.values
        # Exactly once while the group is stable: no record read by both, none read twice.
        assert sorted(every) == sorted(produced)
    finally:
        for consumer in strom_members:
            consumer.close()
        if confluent is not None:
            confluent.close()


def test_cooperative_scale_out_never_revokes_partitions_that_stay(bootstrap: str) -> None:
    topic = unique_topic("sg-coop")
    partitions = 8
    create_topic(bootstrap, topic, partitions=partitions)
    group = unique_topic("g-coop")
    listeners = [RecordingListener() for _ in range(4)]
    members: list[Consumer] = []
    seen: list[tuple[int, bytes]] = []
    try:
        for index in range(2):
            member = strom_consumer(bootstrap, group, partition_assignment_strategy="cooperative-sticky")
            member.subscribe([topic], listener=listeners[index])
            members.append(member)
        poll_until(members, lambda: sorted(len(m.assignment()) for m in members) == [4, 4])
        before = [set(m.assignment()) for m in members]
        for listener in listeners[:2]:
            listener.revoked.clear()  # forming the first pair may have moved partitions
        first = produce(bootstrap, topic, partitions, 5, "before")
        poll_until(members, lambda: {value for _, value in seen} >= first, seen)
        for index in range(2, 4):
            member = strom_consumer(bootstrap, group, partition_assignment_strategy="cooperative-sticky")
            member.subscribe([topic], listener=listeners[index])
            members.append(member)
        second = produce(bootstrap, topic, partitions, 5, "during")
        poll_until(members, lambda: sorted(len(m.assignment()) for m in members) == [2, 2, 2, 2], seen)
        poll_until(members, lambda: {value for _, value in seen} >= first | second, seen)
        for index in range(2):
            kept = set(members[index].assignment())
            assert kept <= before[index]
            revoked = {tp for batch in listeners[index].revoked for tp in batch}
            # Only what moved was revoked; what stayed never was.
            assert revoked == before[index] - kept
            assert listeners[index].lost == []
        owners = [tp for member in members for tp in member.assignment()]
        assert len(owners) == len(set(owners)) == partitions
    finally:
        for member in members:
            member.close()


def test_static_member_restarts_without_a_rebalance(bootstrap: str) -> None:
    topic = unique_topic("sg-static")
    create_topic(bootstrap, topic, partitions=4)
    group = unique_topic("g-static")
    other_listener = RecordingListener()
    other = strom_consumer(bootstrap, group, group_instance_id="other", session_timeout_ms=10_000)
    static = strom_consumer(bootstrap, group, group_instance_id="restarting", session_timeout_ms=10_000)
    try:
        other.subscribe([topic], listener=other_listener)
        static.subscribe([topic])
        poll_until([other, static], lambda: len(other.assignment()) == 2 and len(static.assignment()) == 2)
        held = set(static.assignment())
        settled = RecordingListener()
        other._listener = settled  # from here on: what the restart does to the other member
        static.close()  # a static member sends no LeaveGroup
        static = strom_consumer(bootstrap, group, group_instance_id="restarting", session_timeout_ms=10_000)
        static.subscribe([topic])
        poll_until([other, static], lambda: len(static.assignment()) == 2)
        assert set(static.assignment()) == held
        poll_until([other, static], lambda: True)
        time.sleep(1.0)
        poll_until([other, static], lambda: True)
        assert settled.revoked == [] and settled.lost == [] and settled.assigned == []
    finally:
        other.close()
        static.close()


# A worker: consume the group, print each value read and commit synchronously after each poll, so
# everything committed was printed first (at-least-once). SIGKILL can strike anywhere.
WORKER = """
import sys
from strom.client.consumer import Consumer
consumer = Consumer(bootstrap_servers=sys.argv[1], group_id=sys.argv[2], auto_offset_reset="earliest",
                    enable_auto_commit=False, session_timeout_ms=3000, heartbeat_interval_ms=300)
consumer.subscribe([sys.argv[3]])
while True:
    records = consumer.poll(100)
    for record in records:
        sys.stdout.write(record.value.decode() + "\\n")
    sys.stdout.flush()
    if records:
        try:
            consumer.commit()
        except Exception as error:
            sys.stderr.write(f"commit failed: {error}\\n")
"""


def test_at_least_once_with_members_killed_and_restarted(bootstrap: str, tmp_path: os.PathLike[str]) -> None:
    topic = unique_topic("sg-kill")
    partitions = 6
    create_topic(bootstrap, topic, partitions=partitions)
    group = unique_topic("g-kill")
    rng = random.Random(20)
    outputs: list[str] = []
    workers: list[subprocess.Popen[bytes]] = []

    def start_worker() -> None:
        path = os.path.join(tmp_path, f"worker-{len(outputs)}.out")
        outputs.append(path)
        with open(path, "wb") as out:
            workers.append(
                subprocess.Popen(
                    [sys.executable, "-c", WORKER, bootstrap, group, topic],
                    stdout=out,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )

    produced: set[str] = set()
    committed_history: list[dict[TopicPartition, int | None]] = []
    producer = confluent_producer(bootstrap)
    try:
        for _ in range(3):
            start_worker()
        checked = [TopicPartition(topic, p) for p in range(partitions)]
        for round_index in range(12):
            for index in range(40):
                value = f"r{round_index}-{index}"
                producer.produce(topic, value=value.encode(), partition=index % partitions)
                produced.add(value)
            producer.flush(30)
            time.sleep(0.3)
            if round_index % 3 == 1:
                alive = [worker for worker in workers if worker.poll() is None]
                victim = rng.choice(alive)
                victim.send_signal(signal.SIGKILL)
                victim.wait(10)
                start_worker()
            committed_history.append(_committed(bootstrap, group, checked))
        # Let the survivors catch up, then check what they committed covers everything.
        deadline = time.monotonic() + DEADLINE_S * 2
        while True:
            committed = _committed(bootstrap, group, checked)
            committed_history.append(committed)
            if sum(offset or 0 for offset in committed.values()) >= len(produced):
                break
            assert time.monotonic() < deadline, f"committed {committed} of {len(produced)} records"
            time.sleep(0.3)
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.send_signal(signal.SIGKILL)
                worker.wait(10)
    consumed: set[str] = set()
    for path in outputs:
        with open(path) as lines:
            consumed.update(line.strip() for line in lines if line.strip())
    assert produced <= consumed, f"{len(produced - consumed)} records never consumed"
    # Committed offsets never go backwards.
    for earlier, later in itertools.pairwise(committed_history):
        for tp, offset in earlier.items():
            assert offset is None or (later[tp] or 0) >= offset, (
                f"{tp} went back from {offset} to {later[tp]}"
            )


def _committed(
    bootstrap: str, group: str, partitions: list[TopicPartition]
) -> dict[TopicPartition, int | None]:
    """The group's committed offsets, read by OffsetFetch from a consumer that does not join it."""
    with Consumer(bootstrap_servers=bootstrap, group_id=group) as reader:
        return reader.committed(partitions)
