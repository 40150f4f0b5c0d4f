"""strom's Admin group operations against a real strom broker, on a group run by confluent-kafka:
list, describe (members and decoded assignments while the consumer runs), list/alter/reset/delete
offsets, delete the group; refusals while the group has members; every reset checked by a
confluent-kafka consumer that resumes where the reset put the group."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import confluent_kafka
import pytest

from strom.client.admin import Admin, GroupDescription, NewTopic, OffsetAndMetadata
from strom.client.cluster import TopicPartition
from strom.client.errors import BrokerResponseError
from strom.protocol.errors import ErrorCode
from tests.compat.conftest import BrokerProcess
from tests.compat.support import confluent_producer, unique_topic

pytestmark = pytest.mark.compat

BROKER_SETTINGS = {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000"}
DEADLINE_S = 40.0
PARTITIONS = 2
RECORDS_PER_PARTITION = 10
# Record i of every partition carries timestamp BASE + i * STEP, so a timestamp picks an offset.
BASE_TIMESTAMP_MS = 1_700_000_000_000
TIMESTAMP_STEP_MS = 1_000
CLIENT_ID = "admin-groups-test"


@pytest.fixture(scope="module")
def shared_broker_settings() -> dict[str, str]:
    return dict(BROKER_SETTINGS)


@pytest.fixture
def admin(shared_broker: BrokerProcess) -> Iterator[Admin]:
    with Admin(bootstrap_servers=shared_broker.bootstrap) as client:
        yield client


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"not reached in {DEADLINE_S} s: {what}"
        time.sleep(0.05)


def produce(bootstrap: str, topic: str, first_index: int, count: int) -> None:
    producer = confluent_producer(bootstrap)
    for partition in range(PARTITIONS):
        for index in range(first_index, first_index + count):
            producer.produce(
                topic,
                value=f"{partition}-{index}".encode(),
                partition=partition,
                timestamp=BASE_TIMESTAMP_MS + index * TIMESTAMP_STEP_MS,
            )
    assert producer.flush(30) == 0


def group_consumer(bootstrap: str, group: str, topic: str) -> confluent_kafka.Consumer:
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "broker.address.family": "v4",
            "group.id": group,
            "client.id": CLIENT_ID,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6_000,
            "heartbeat.interval.ms": 500,
        }
    )
    consumer.subscribe([topic])
    return consumer


def first_offsets(consumer: confluent_kafka.Consumer, partitions: int) -> dict[int, int]:
    """The offset of the first record the consumer gets from each partition."""
    first: dict[int, int] = {}
    deadline = time.monotonic() + DEADLINE_S
    while len(first) < partitions:
        assert time.monotonic() < deadline, f"records from only {sorted(first)} in {DEADLINE_S} s"
        message: Any = consumer.poll(0.1)
        if message is None:
            continue
        assert message.error() is None, message.error()
        first.setdefault(message.partition(), message.offset())
    return first


def resumes_at(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """Where a fresh member of the group starts reading; it leaves without committing."""
    consumer = group_consumer(bootstrap, group, topic)
    try:
        return first_offsets(consumer, PARTITIONS)
    finally:
        consumer.close()


def offsets(admin: Admin, group: str) -> dict[TopicPartition, int]:
    return {tp: committed.offset for tp, committed in admin.list_group_offsets(group).items()}


def broker_code(error: pytest.ExceptionInfo[BrokerResponseError]) -> ErrorCode | None:
    return error.value.code


def test_group_administration_from_a_running_group_to_its_deletion(
    shared_broker: BrokerProcess, admin: Admin
) -> None:
    bootstrap = shared_broker.bootstrap
    topic = unique_topic("admin-groups")
    group = unique_topic("admin-group")
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])
    produce(bootstrap, topic, 0, RECORDS_PER_PARTITION)
    partitions = [TopicPartition(topic, partition) for partition in range(PARTITIONS)]

    consumer = group_consumer(bootstrap, group, topic)
    try:
        consumed: dict[int, int] = {}
        deadline = time.monotonic() + DEADLINE_S
        while sum(consumed.values()) < PARTITIONS * RECORDS_PER_PARTITION:
            assert time.monotonic() < deadline, f"consumed only {consumed}"
            message: Any = consumer.poll(0.1)
            if message is not None and message.error() is None:
                consumed[message.partition()] = consumed.get(message.partition(), 0) + 1
        consumer.commit(asynchronous=False)

        # -- while the consumer is a member -------------------------------------------------------
        listed = {listing.group_id: listing for listing in admin.list_groups()}
        assert listed[group].protocol_type == "consumer"
        assert listed[group].state == "Stable"
        assert group in {listing.group_id for listing in admin.list_groups(states=["Stable"])}
        assert group not in {listing.group_id for listing in admin.list_groups(states=["Empty"])}

        description = admin.describe_groups([group])[group]
        assert (description.group_id, description.state) == (group, "Stable")
        assert (description.protocol_type, description.protocol) == ("consumer", "range")
        (member,) = description.members
        assert member.client_id == CLIENT_ID
        assert member.member_id.startswith(CLIENT_ID)
        assert member.group_instance_id is None
        assert member.host
        assert member.assignment is not None
        assert sorted(member.assignment.partitions) == [(topic, index) for index in range(PARTITIONS)]

        assert admin.list_group_offsets(group) == dict.fromkeys(
            partitions, OffsetAndMetadata(RECORDS_PER_PARTITION, "")
        )
        assert admin.list_group_offsets(group, [partitions[1]]) == {
            partitions[1]: OffsetAndMetadata(RECORDS_PER_PARTITION, "")
        }

        with pytest.raises(BrokerResponseError) as altered:
            admin.alter_group_offsets(group, {partitions[0]: 1})
        assert broker_code(altered) == ErrorCode.UNKNOWN_MEMBER_ID
        assert "active members" in str(altered.value)
        with pytest.raises(BrokerResponseError) as reset:
            admin.reset_group_offsets(group, "earliest", dry_run=True)
        assert broker_code(reset) == ErrorCode.NON_EMPTY_GROUP
        assert "stop its consumers" in str(reset.value)
        with pytest.raises(BrokerResponseError) as deleted:
            admin.delete_groups([group])
        assert broker_code(deleted) == ErrorCode.NON_EMPTY_GROUP
        with pytest.raises(BrokerResponseError) as offsets_deleted:
            admin.delete_group_offsets(group, [partitions[0]])
        assert broker_code(offsets_deleted) == ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
        assert offsets(admin, group) == dict.fromkeys(partitions, RECORDS_PER_PARTITION)
    finally:
        consumer.close()

    def state() -> GroupDescription:
        return admin.describe_groups([group])[group]

    wait_until(lambda: state().state == "Empty", "the group is empty once its consumer closed")
    assert state().members == []

    # -- alter, then reset every way; a fresh consumer resumes where each reset put the group -------
    admin.alter_group_offsets(group, {partitions[0]: OffsetAndMetadata(3, "by hand"), partitions[1]: 4})
    assert admin.list_group_offsets(group) == {
        partitions[0]: OffsetAndMetadata(3, "by hand"),
        partitions[1]: OffsetAndMetadata(4, ""),
    }
    assert resumes_at(bootstrap, group, topic) == {0: 3, 1: 4}
    wait_until(lambda: state().state == "Empty", "the checking consumer left")

    assert admin.reset_group_offsets(group, "earliest", dry_run=True) == dict.fromkeys(partitions, 0)
    assert offsets(admin, group) == {partitions[0]: 3, partitions[1]: 4}
    assert admin.reset_group_offsets(group, "earliest") == dict.fromkeys(partitions, 0)
    assert offsets(admin, group) == dict.fromkeys(partitions, 0)
    assert resumes_at(bootstrap, group, topic) == {0: 0, 1: 0}
    wait_until(lambda: state().state == "Empty", "the checking consumer left")

    halfway_ms = BASE_TIMESTAMP_MS + 5 * TIMESTAMP_STEP_MS
    assert admin.reset_group_offsets(group, halfway_ms - 1, dry_run=True) == dict.fromkeys(partitions, 5)
    assert offsets(admin, group) == dict.fromkeys(partitions, 0)
    assert admin.reset_group_offsets(group, halfway_ms, topics=[topic]) == dict.fromkeys(partitions, 5)
    assert resumes_at(bootstrap, group, topic) == {0: 5, 1: 5}
    wait_until(lambda: state().state == "Empty", "the checking consumer left")
    # A timestamp after every record: the end of the partition.
    after_all_ms = BASE_TIMESTAMP_MS + RECORDS_PER_PARTITION * TIMESTAMP_STEP_MS
    assert admin.reset_group_offsets(group, after_all_ms, dry_run=True) == dict.fromkeys(
        partitions, RECORDS_PER_PARTITION
    )

    assert admin.reset_group_offsets(group, "latest", partitions=[partitions[0]]) == {
        partitions[0]: RECORDS_PER_PARTITION
    }
    assert offsets(admin, group) == {partitions[0]: RECORDS_PER_PARTITION, partitions[1]: 5}
    produce(bootstrap, topic, RECORDS_PER_PARTITION, 1)
    assert resumes_at(bootstrap, group, topic) == {0: RECORDS_PER_PARTITION, 1: 5}
    wait_until(lambda: state().state == "Empty", "the checking consumer left")

    # Explicit offsets stay inside each partition's earliest..latest.
    explicit = {partitions[0]: 7, partitions[1]: 1_000}
    assert admin.reset_group_offsets(group, explicit) == {
        partitions[0]: 7,
        partitions[1]: RECORDS_PER_PARTITION + 1,
    }
    produce(bootstrap, topic, RECORDS_PER_PARTITION + 1, 1)
    assert resumes_at(bootstrap, group, topic) == {0: 7, 1: RECORDS_PER_PARTITION + 1}
    wait_until(lambda: state().state == "Empty", "the checking consumer left")

    # -- delete offsets, then the group ------------------------------------------------------------
    admin.delete_group_offsets(group, [partitions[0]])
    assert offsets(admin, group) == {partitions[1]: RECORDS_PER_PARTITION + 1}
    admin.delete_groups([group])
    assert group not in {listing.group_id for listing in admin.list_groups()}
    assert admin.list_group_offsets(group) == {}
    assert state().state == "Dead"
    with pytest.raises(BrokerResponseError) as gone:
        admin.delete_groups([group])
    assert broker_code(gone) == ErrorCode.GROUP_ID_NOT_FOUND
