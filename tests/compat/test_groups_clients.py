"""Consumer groups of the other clients against strom's coordinator: kafka-python under each of its
assignors (range, roundrobin, sticky, cooperative-sticky), an aiokafka group, ``kcat -G``, and one
group mixing librdkafka and kafka-python members under the ``range`` protocol both speak."""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time
import warnings
from typing import Any

import pytest

from tests.compat.conftest import BrokerProcess
from tests.compat.support import (
    confluent_produce,
    confluent_producer,
    create_topic,
    make_records,
    unique_topic,
)
from tests.compat.test_groups_helpers import (
    GROUP_BROKER_SETTINGS,
    HEARTBEAT_INTERVAL_MS,
    SESSION_TIMEOUT_MS,
    THREAD_JOIN_TIMEOUT_S,
    ConfluentMember,
    Consumed,
    MemberLog,
    Partition,
    all_partitions,
    assert_consumed_exactly_once,
    committed_offsets,
    end_offsets,
    stop_all,
    wait_for_consumed,
    wait_until_stable,
)

# kafka-python 3 loads its protocol schemas with importlib.resources.read_text/open_text, deprecated in
# 3.11; the suite turns warnings into errors, so the import (and lazy schema loads) are let through.
KAFKA_PYTHON_WARNING = "(read|open)_text is deprecated"
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=KAFKA_PYTHON_WARNING, category=DeprecationWarning)
    from aiokafka import AIOKafkaConsumer
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor as AioRangePartitionAssignor
    from kafka import KafkaConsumer
    from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
    from kafka.errors import CommitFailedError, RebalanceInProgressError

pytestmark = [
    pytest.mark.compat,
    pytest.mark.filterwarnings(f"ignore:{KAFKA_PYTHON_WARNING}:DeprecationWarning"),
]

PARTITIONS = 6
RECORDS_PER_TEST = 600
KAFKA_PYTHON_ASSIGNORS = {
    "range": RangePartitionAssignor,
    "roundrobin": RoundRobinPartitionAssignor,
    "sticky": StickyPartitionAssignor,
    "cooperative-sticky": CooperativeStickyAssignor,
}
KCAT_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def shared_broker_settings() -> dict[str, str]:
    return dict(GROUP_BROKER_SETTINGS)


@pytest.fixture
def topic(shared_broker: BrokerProcess) -> str:
    name = unique_topic("groups-clients")
    create_topic(shared_broker.bootstrap, name, PARTITIONS)
    return name


def _partitions(partitions: Any) -> set[Partition]:
    return {(partition.topic, partition.partition) for partition in partitions}


class PythonClientMember:
    """A kafka-python or aiokafka member on its own thread. Its assignment is read from the client
    after every poll (``assignment()``), which is right whatever rebalance protocol is in use."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.log = MemberLog()
        self.lock = threading.Lock()
        self.assignment: set[Partition] = set()
        self._stop = threading.Event()
        self._commit_requested = threading.Event()
        self.commit_done = threading.Event()
        self.closed = threading.Event()
        self._thread = threading.Thread(target=self._guarded_run, name=f"member-{name}", daemon=True)

    def start(self) -> PythonClientMember:
        self._thread.start()
        return self

    def current_assignment(self) -> set[Partition]:
        with self.lock:
            return set(self.assignment)

    def snapshot(self) -> MemberLog:
        with self.lock:
            return MemberLog(records=list(self.log.records), errors=list(self.log.errors))

    def request_commit(self) -> None:
        self.commit_done.clear()
        self._commit_requested.set()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(THREAD_JOIN_TIMEOUT_S)
        assert not self._thread.is_alive(), f"member {self.name} did not close in {THREAD_JOIN_TIMEOUT_S} s"

    def _record(self, topic: str, partition: int, offset: int, value: bytes | None) -> None:
        with self.lock:
            self.log.records.append(Consumed(self.name, topic, partition, offset, value))

    def _guarded_run(self) -> None:
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=KAFKA_PYTHON_WARNING, category=DeprecationWarning)
                self._run()
        except Exception as error:  # reported to the test thread, which fails on it
            with self.lock:
                self.log.errors.append(f"{type(error).__name__}: {error}")
        finally:
            self.closed.set()

    def _run(self) -> None:
        raise NotImplementedError


class KafkaPythonMember(PythonClientMember):
    def __init__(self, name: str, bootstrap: str, group: str, topic: str, assignor: Any) -> None:
        super().__init__(name)
        self.settings: dict[str, Any] = {
            "bootstrap_servers": bootstrap,
            "group_id": group,
            "client_id": name,
            "auto_offset_reset": "earliest",
            "enable_auto_commit": False,
            "session_timeout_ms": SESSION_TIMEOUT_MS,
            "heartbeat_interval_ms": HEARTBEAT_INTERVAL_MS,
            "partition_assignment_strategy": [assignor],
        }
        self.topic = topic

    def _run(self) -> None:
        consumer = KafkaConsumer(**self.settings)
        try:
            consumer.subscribe([self.topic])
            # Subscribe first, then load the topic's metadata, before the first poll joins the group.
            # kafka-python's leader remembers the metadata it assigned with and rejoins when a later
            # metadata response differs; it only looks at responses that arrive while subscribed.
            # Metadata loaded before subscribing leaves it remembering nothing for the topic, so the
            # leader rejoins right after its first rebalances. kafka-python 3.0.12 cannot always
            # finish a rejoin started that way: its join loop runs while need_rejoin(), and the
            # assignment done inside the rejoin makes need_rejoin() false, so when poll(100 ms)
            # gives up before the SyncGroup answer, the next poll never collects the finished join:
            # the member stays "rebalancing", its heartbeats stay off, its commits fail locally and
            # its session expires 6 s later. Any broker answers the same (the late metadata answer
            # is queued behind a long-polling Fetch on the same connection, as Kafka queues it).
            deadline = time.monotonic() + 30
            while not consumer.partitions_for_topic(self.topic) and time.monotonic() < deadline:
                time.sleep(0.05)
            while not self._stop.is_set():
                batches = consumer.poll(timeout_ms=100)
                for topic_partition, messages in batches.items():
                    for message in messages:
                        self._record(
                            topic_partition.topic, topic_partition.partition, message.offset, message.value
                        )
                with self.lock:
                    self.assignment = _partitions(consumer.assignment())
                if self._commit_requested.is_set():
                    try:
                        consumer.commit()  # the positions of everything consumed, synchronously
                    except (CommitFailedError, RebalanceInProgressError):
                        # The group rebalanced under the commit (kafka-python sends a fresh JoinGroup
                        # when a join finished between two polls, and a leader's rejoin rebalances
                        # the group): as the error says, poll to rejoin, then commit again.
                        continue
                    self._commit_requested.clear()
                    self.commit_done.set()
        finally:
            consumer.close(autocommit=False)


class AioKafkaMember(PythonClientMember):
    def __init__(self, name: str, bootstrap: str, group: str, topic: str) -> None:
        super().__init__(name)
        self.settings: dict[str, Any] = {
            "bootstrap_servers": bootstrap,
            "group_id": group,
            "client_id": name,
            "auto_offset_reset": "earliest",
            "enable_auto_commit": False,
            "session_timeout_ms": SESSION_TIMEOUT_MS,
            "heartbeat_interval_ms": HEARTBEAT_INTERVAL_MS,
            "partition_assignment_strategy": (AioRangePartitionAssignor,),
        }
        self.topic = topic

    def _run(self) -> None:
        asyncio.run(self._consume())

    async def _consume(self) -> None:
        consumer = AIOKafkaConsumer(**self.settings)
        await consumer.start()
        try:
            consumer.subscribe([self.topic])
            while not self._stop.is_set():
                batches = await consumer.getmany(timeout_ms=100)
                for topic_partition, messages in batches.items():
                    for message in messages:
                        self._record(
                            topic_partition.topic, topic_partition.partition, message.offset, message.value
                        )
                with self.lock:
                    self.assignment = _partitions(consumer.assignment())
                if self._commit_requested.is_set():
                    self._commit_requested.clear()
                    await consumer.commit()
                    self.commit_done.set()
        finally:
            await consumer.stop()


def _run_group(bootstrap: str, topic: str, group: str, members: list[Any]) -> None:
    """Start the members, wait until stable, produce, check exactly-once delivery and the commit."""
    try:
        for member in members:
            member.start()
        wait_until_stable(members, all_partitions(topic, PARTITIONS))
        sent = confluent_produce(confluent_producer(bootstrap), topic, make_records(RECORDS_PER_TEST))
        wait_for_consumed(members, len(sent))
        assert_consumed_exactly_once(members, sent, topic)
        for member in members:
            owned = member.current_assignment()
            assert {(record.topic, record.partition) for record in member.snapshot().records} <= owned
        for member in members:
            member.request_commit()
        for member in members:
            assert member.commit_done.wait(30), (
                f"member {member.name} did not commit: {member.snapshot().errors}"
            )
            assert not member.snapshot().errors, member.snapshot().errors
        assert committed_offsets(bootstrap, group, topic, PARTITIONS) == end_offsets(sent)
    finally:
        stop_all(member for member in members if not member.closed.is_set())


@pytest.mark.parametrize("strategy", sorted(KAFKA_PYTHON_ASSIGNORS))
def test_kafka_python_group(shared_broker: BrokerProcess, topic: str, strategy: str) -> None:
    group = unique_topic(f"kp-{strategy}")
    assignor = KAFKA_PYTHON_ASSIGNORS[strategy]
    members = [
        KafkaPythonMember(f"kp{index}", shared_broker.bootstrap, group, topic, assignor) for index in range(2)
    ]
    _run_group(shared_broker.bootstrap, topic, group, members)


def test_aiokafka_group(shared_broker: BrokerProcess, topic: str) -> None:
    group = unique_topic("aio")
    members = [AioKafkaMember(f"aio{index}", shared_broker.bootstrap, group, topic) for index in range(2)]
    _run_group(shared_broker.bootstrap, topic, group, members)


def test_librdkafka_and_kafka_python_share_a_range_group(shared_broker: BrokerProcess, topic: str) -> None:
    group = unique_topic("mixed")
    members: list[Any] = [
        ConfluentMember(
            "rdkafka", shared_broker.bootstrap, group, [topic], partition_assignment_strategy="range"
        ),
        KafkaPythonMember("kafka-python", shared_broker.bootstrap, group, topic, RangePartitionAssignor),
    ]
    _run_group(shared_broker.bootstrap, topic, group, members)
    # Range over 6 partitions and 2 members: 3 each, whichever client led the group.
    assert all(len(member.snapshot().records) > 0 for member in members)


def test_kcat_group_consumes_every_record(shared_broker: BrokerProcess, topic: str) -> None:
    group = unique_topic("kcat")
    sent = confluent_produce(
        confluent_producer(shared_broker.bootstrap), topic, make_records(RECORDS_PER_TEST, binary=False)
    )
    # -G ignores -e in some kcat versions: -c stops it after exactly the records we sent, and the
    # timeout bounds the whole run if it never gets them.
    result = subprocess.run(
        [
            "timeout",
            str(KCAT_TIMEOUT_S),
            "kcat",
            "-b",
            shared_broker.bootstrap,
            "-X",
            "broker.address.family=v4",
            "-X",
            "auto.offset.reset=earliest",
            "-X",
            f"session.timeout.ms={SESSION_TIMEOUT_MS}",
            "-q",
            "-f",
            "%p %o\\n",
            "-c",
            str(len(sent)),
            "-G",
            group,
            topic,
        ],
        capture_output=True,
        timeout=KCAT_TIMEOUT_S + 10,
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode(errors="replace")[-2000:]
    read = [
        tuple(int(field) for field in line.split()) for line in result.stdout.decode().splitlines() if line
    ]
    assert sorted(read) == sorted((record.partition, record.offset) for record in sent)
    # kcat closes its consumer on exit, which commits what it consumed (auto commit is on by default).
    committed = committed_offsets(shared_broker.bootstrap, group, topic, PARTITIONS)
    assert committed == end_offsets(sent)
