"""Group administration against strom's coordinator: confluent-kafka's AdminClient (list, describe,
list/alter offsets, delete groups) and OffsetDelete, which confluent-kafka's Python AdminClient does
not expose, as a raw request built with strom's protocol classes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from strom.protocol.errors import ErrorCode
from strom.protocol.messages.offset_delete import OffsetDeleteRequest, OffsetDeleteResponse
from tests.compat.conftest import BrokerProcess
from tests.compat.support import (
    ADMIN_TIMEOUT_S,
    admin_client,
    confluent_produce,
    confluent_producer,
    create_topic,
    make_records,
    unique_topic,
)
from tests.compat.test_groups_helpers import (
    GROUP_BROKER_SETTINGS,
    ConfluentMember,
    all_partitions,
    end_offsets,
    stop_all,
    wait_for_consumed,
    wait_until,
    wait_until_stable,
)
from tests.compat.wire import WireClient

pytestmark = pytest.mark.compat

PARTITIONS = 6
OFFSET_DELETE_VERSION = 0
ALTERED_OFFSET = 5


@pytest.fixture(scope="module")
def shared_broker_settings() -> dict[str, str]:
    return dict(GROUP_BROKER_SETTINGS)


@pytest.fixture
def admin(shared_broker: BrokerProcess) -> Iterator[AdminClient]:
    yield admin_client(shared_broker.bootstrap)


def _group_offsets(admin: AdminClient, group: str) -> dict[tuple[str, int], int]:
    futures = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)], request_timeout=ADMIN_TIMEOUT_S
    )
    result = futures[group].result(ADMIN_TIMEOUT_S)
    return {(partition.topic, partition.partition): partition.offset for partition in result.topic_partitions}


def _listed_groups(admin: AdminClient) -> dict[str, ConsumerGroupState]:
    result = admin.list_consumer_groups(request_timeout=ADMIN_TIMEOUT_S).result(ADMIN_TIMEOUT_S)
    assert not result.errors, result.errors
    return {listing.group_id: listing.state for listing in result.valid}


def _offset_delete(
    broker: BrokerProcess, group: str, topic: str, partitions: list[int]
) -> OffsetDeleteResponse:
    request = OffsetDeleteRequest(
        group_id=group,
        topics=[
            OffsetDeleteRequest.OffsetDeleteRequestTopic(
                name=topic,
                partitions=[
                    OffsetDeleteRequest.OffsetDeleteRequestPartition(partition) for partition in partitions
                ],
            )
        ],
    )
    with WireClient(broker.port) as client:
        response: OffsetDeleteResponse = client.round_trip(
            request, OffsetDeleteResponse, OFFSET_DELETE_VERSION
        )
    return response


def _partition_errors(response: OffsetDeleteResponse) -> dict[int, int]:
    return {
        partition.partition_index: partition.error_code
        for topic in response.topics
        for partition in topic.partitions
    }


def test_admin_client_manages_a_group(shared_broker: BrokerProcess, admin: AdminClient) -> None:
    topic = unique_topic("groups-admin")
    group = unique_topic("admin-group")
    create_topic(shared_broker.bootstrap, topic, PARTITIONS)
    members = [
        ConfluentMember(
            f"a{index}", shared_broker.bootstrap, group, [topic], partition_assignment_strategy="range"
        )
        for index in range(2)
    ]
    try:
        for member in members:
            member.start()
        wait_until_stable(members, all_partitions(topic, PARTITIONS))
        # Produced only once the group is stable: records read by a member that loses its partitions
        # in a later rebalance would be read again by the next owner and counted twice.
        sent = confluent_produce(confluent_producer(shared_broker.bootstrap), topic, make_records(600))
        wait_for_consumed(members, len(sent))
        for member in members:
            member.request_commit()
        for member in members:
            assert member.commit_done.wait(30)
        # The assignment is settled once every member saw it; the coordinator is Stable by then.
        wait_until(
            lambda: _listed_groups(admin).get(group) == ConsumerGroupState.STABLE,
            10,
            lambda: f"listed: {_listed_groups(admin).get(group)}",
        )

        [description] = admin.describe_consumer_groups([group], request_timeout=ADMIN_TIMEOUT_S).values()
        described = description.result(ADMIN_TIMEOUT_S)
        assert described.group_id == group
        assert described.state == ConsumerGroupState.STABLE
        assert described.partition_assignor == "range"
        assert not described.is_simple_consumer_group
        assert described.coordinator.host == "127.0.0.1"
        assert described.coordinator.port == shared_broker.port
        assert sorted(member.client_id for member in described.members) == ["a0", "a1"]
        assignments = {
            member.client_id: {
                (partition.topic, partition.partition) for partition in member.assignment.topic_partitions
            }
            for member in described.members
        }
        assert assignments == {member.name: member.current_assignment() for member in members}

        committed = {(topic, partition): offset for partition, offset in end_offsets(sent).items()}
        assert _group_offsets(admin, group) == committed

        # Deleting a group with live members is refused; so is deleting offsets of a subscribed topic.
        with pytest.raises(KafkaException) as refused:
            admin.delete_consumer_groups([group], request_timeout=ADMIN_TIMEOUT_S)[group].result(
                ADMIN_TIMEOUT_S
            )
        assert refused.value.args[0].code() == ErrorCode.NON_EMPTY_GROUP
        response = _offset_delete(shared_broker, group, topic, [0])
        assert response.error_code == ErrorCode.NONE
        assert _partition_errors(response) == {0: ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC}
    finally:
        stop_all(member for member in members if not member.closed.is_set())

    # Both members left: the group is Empty and its offsets can be changed from outside.
    wait_until(
        lambda: _listed_groups(admin).get(group) == ConsumerGroupState.EMPTY,
        10,
        lambda: str(_listed_groups(admin).get(group)),
    )
    altered = [TopicPartition(topic, partition, ALTERED_OFFSET) for partition in range(PARTITIONS)]
    [alter] = admin.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, altered)], request_timeout=ADMIN_TIMEOUT_S
    ).values()
    assert all(partition.error is None for partition in alter.result(ADMIN_TIMEOUT_S).topic_partitions)
    assert _group_offsets(admin, group) == {
        (topic, partition): ALTERED_OFFSET for partition in range(PARTITIONS)
    }

    response = _offset_delete(shared_broker, group, topic, [0, 1])
    assert (response.error_code, _partition_errors(response)) == (
        ErrorCode.NONE,
        {0: ErrorCode.NONE, 1: ErrorCode.NONE},
    )
    # Asked for all of a group's offsets, the coordinator lists only partitions with one committed.
    assert _group_offsets(admin, group) == {
        (topic, partition): ALTERED_OFFSET for partition in range(2, PARTITIONS)
    }

    admin.delete_consumer_groups([group], request_timeout=ADMIN_TIMEOUT_S)[group].result(ADMIN_TIMEOUT_S)
    assert group not in _listed_groups(admin)
    assert _group_offsets(admin, group) == {}


def test_describe_unknown_group_is_dead(admin: AdminClient) -> None:
    group = unique_topic("never-joined")
    [description] = admin.describe_consumer_groups([group], request_timeout=ADMIN_TIMEOUT_S).values()
    described = description.result(ADMIN_TIMEOUT_S)
    assert described.state == ConsumerGroupState.DEAD
    assert described.members == []
