"""Requests that used to escape a handler as an exception (and close the client's connection) get
Kafka's error codes; the protocol gaps of issue 11 get Kafka's answers."""

from __future__ import annotations

import uuid

import pytest

from strom.protocol.acl import (
    CLUSTER_OPERATIONS,
    GROUP_OPERATIONS,
    OPERATIONS_NOT_PROVIDED,
    TOPIC_OPERATIONS,
    AclOperation,
    operations_bit_field,
)
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.describe_cluster import DescribeClusterRequest
from strom.protocol.messages.describe_configs import DescribeConfigsRequest
from strom.protocol.messages.describe_groups import DescribeGroupsRequest
from strom.protocol.messages.find_coordinator import FindCoordinatorRequest
from strom.protocol.messages.metadata import MetadataRequest
from strom.protocol.messages.offset_commit import OffsetCommitRequest
from strom.protocol.messages.offset_fetch import OffsetFetchRequest
from tests.unit.broker.conftest import InProcessBroker
from tests.unit.broker.test_dispatch import create_topic

INT64_MAX = 2**63 - 1


def _by_id(topic_id: uuid.UUID) -> MetadataRequest.MetadataRequestTopic:
    return MetadataRequest.MetadataRequestTopic(topic_id=topic_id, name=None)


def test_metadata_v12_names_a_topic_by_id_alone(broker: InProcessBroker) -> None:
    create_topic(broker, "by-id", partitions=2)
    known = broker.call(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="by-id")]), 12)
    topic_id = known.topics[0].topic_id
    unknown_id = uuid.UUID(int=12345)
    response = broker.call(MetadataRequest(topics=[_by_id(topic_id), _by_id(unknown_id)]), 12)
    found, missing = response.topics
    assert (found.error_code, found.name, found.topic_id, len(found.partitions)) == (
        ErrorCode.NONE,
        "by-id",
        topic_id,
        2,
    )
    assert (missing.error_code, missing.name, missing.topic_id) == (
        ErrorCode.UNKNOWN_TOPIC_ID,
        None,
        unknown_id,
    )


@pytest.mark.parametrize("version", [10, 11])
def test_metadata_v10_v11_without_a_name_is_an_invalid_request(broker: InProcessBroker, version: int) -> None:
    """These versions have the topic id field but cannot answer for a nameless topic (Kafka refuses)."""
    create_topic(broker, "named")
    request = MetadataRequest(
        topics=[_by_id(uuid.UUID(int=7)), MetadataRequest.MetadataRequestTopic(name="named")]
    )
    nameless, named = broker.call(request, version).topics
    assert (nameless.error_code, nameless.name) == (ErrorCode.INVALID_REQUEST, "")
    assert (named.error_code, named.name) == (ErrorCode.NONE, "named")


def test_metadata_auto_create_of_a_colliding_name_is_an_invalid_topic(broker: InProcessBroker) -> None:
    create_topic(broker, "a.b")
    response = broker.call(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="a_b")]), 9)
    assert response.topics[0].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION


def _commit(
    topic_partitions: dict[str, list[int]], offset: int = 5, retention_time_ms: int = -1
) -> OffsetCommitRequest:
    return OffsetCommitRequest(
        group_id="g",
        generation_id_or_member_epoch=-1,
        member_id="",
        retention_time_ms=retention_time_ms,
        topics=[
            OffsetCommitRequest.OffsetCommitRequestTopic(
                name=name,
                partitions=[
                    OffsetCommitRequest.OffsetCommitRequestPartition(
                        partition_index=index, committed_offset=offset
                    )
                    for index in indexes
                ],
            )
            for name, indexes in topic_partitions.items()
        ],
    )


def _committed(broker: InProcessBroker, topic: str, partitions: list[int]) -> dict[int, int]:
    request = OffsetFetchRequest(
        group_id="g",
        topics=[OffsetFetchRequest.OffsetFetchRequestTopic(name=topic, partition_indexes=partitions)],
    )
    response = broker.call(request, 5)
    return {p.partition_index: p.committed_offset for t in response.topics for p in t.partitions}


def _errors(response) -> dict[tuple[str, int], int]:  # type: ignore[no-untyped-def]
    return {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}


@pytest.mark.parametrize("version", [2, 3, 4])
def test_offset_commit_with_the_largest_retention_is_kept(broker: InProcessBroker, version: int) -> None:
    create_topic(broker, "kept")
    broker.call(FindCoordinatorRequest(key="g"), 1)
    response = broker.call(_commit({"kept": [0]}, offset=9, retention_time_ms=INT64_MAX), version)
    assert _errors(response) == {("kept", 0): ErrorCode.NONE}
    assert _committed(broker, "kept", [0]) == {0: 9}


@pytest.mark.parametrize("version", [0, 2, 8])
def test_offset_commit_for_missing_topics_and_partitions(broker: InProcessBroker, version: int) -> None:
    """Kafka answers UNKNOWN_TOPIC_OR_PARTITION per partition that does not exist, and commits the rest."""
    create_topic(broker, "real", partitions=2)
    broker.call(FindCoordinatorRequest(key="g"), 1)
    response = broker.call(_commit({"real": [1, 2, -1], "ghost": [0]}), version)
    assert _errors(response) == {
        ("real", 1): ErrorCode.NONE,
        ("real", 2): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("real", -1): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("ghost", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert [t.name for t in response.topics] == ["real", "ghost"]
    assert _committed(broker, "real", [0, 1]) == {0: -1, 1: 5}
    only_missing = broker.call(_commit({"ghost": [0, 1]}), version)
    assert _errors(only_missing) == {
        ("ghost", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("ghost", 1): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }


def test_authorized_operations_use_kafkas_bit_encoding() -> None:
    assert TOPIC_OPERATIONS == 3576  # READ WRITE CREATE DELETE ALTER DESCRIBE DESCRIBE_CONFIGS ALTER_CONFIGS
    assert CLUSTER_OPERATIONS == 8096  # CREATE ALTER DESCRIBE CLUSTER_ACTION *_CONFIGS IDEMPOTENT_WRITE
    assert GROUP_OPERATIONS == 328  # READ DELETE DESCRIBE
    assert operations_bit_field([AclOperation.READ]) == 1 << 3
    assert OPERATIONS_NOT_PROVIDED == -(2**31)


@pytest.mark.parametrize("version", [8, 10, 12])
def test_metadata_reports_authorized_operations_only_when_asked(
    broker: InProcessBroker, version: int
) -> None:
    create_topic(broker, "ops")
    named = [MetadataRequest.MetadataRequestTopic(name="ops")]
    plain = broker.call(MetadataRequest(topics=named), version)
    assert plain.topics[0].topic_authorized_operations == OPERATIONS_NOT_PROVIDED
    assert plain.cluster_authorized_operations == OPERATIONS_NOT_PROVIDED
    asked = MetadataRequest(topics=named, include_topic_authorized_operations=True)
    if version <= 10:
        asked.include_cluster_authorized_operations = True
    answered = broker.call(asked, version)
    assert answered.topics[0].topic_authorized_operations == TOPIC_OPERATIONS
    if version <= 10:
        assert answered.cluster_authorized_operations == CLUSTER_OPERATIONS


def test_describe_cluster_and_groups_report_authorized_operations(broker: InProcessBroker) -> None:
    for version in (0, 1):
        assert (
            broker.call(DescribeClusterRequest(), version).cluster_authorized_operations
            == OPERATIONS_NOT_PROVIDED
        )
        asked = DescribeClusterRequest(include_cluster_authorized_operations=True)
        assert broker.call(asked, version).cluster_authorized_operations == CLUSTER_OPERATIONS
    broker.call(FindCoordinatorRequest(key="g"), 1)
    for version in (3, 5):
        plain = broker.call(DescribeGroupsRequest(groups=["g"]), version)
        assert plain.groups[0].authorized_operations == OPERATIONS_NOT_PROVIDED
        asked_groups = DescribeGroupsRequest(groups=["g"], include_authorized_operations=True)
        assert broker.call(asked_groups, version).groups[0].authorized_operations == GROUP_OPERATIONS


def test_describe_configs_with_an_empty_key_list_describes_every_key(broker: InProcessBroker) -> None:
    """Kafka reads an empty configuration_keys list as null (every key), not as no key."""
    create_topic(broker, "keys")

    def described(keys: list[str] | None) -> set[str]:
        request = DescribeConfigsRequest(
            resources=[
                DescribeConfigsRequest.DescribeConfigsResource(
                    resource_type=2, resource_name="keys", configuration_keys=keys
                )
            ]
        )
        return {config.name for config in broker.call(request, 4).results[0].configs}

    everything = described(None)
    assert "retention.ms" in everything and len(everything) > 10
    assert described([]) == everything
    assert described(["retention.ms"]) == {"retention.ms"}
