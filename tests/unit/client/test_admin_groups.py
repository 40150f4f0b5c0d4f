"""Admin group operations without a broker: requests built for every negotiated version (they must
encode there and say what we mean), responses read at every version, errors raised with their code,
and the arithmetic of offset resets."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from strom.assignors import Assignment, encode_assignment
from strom.client.admin import (
    ADMIN_GENERATION_ID,
    GroupDescription,
    MemberDescription,
    OffsetAndMetadata,
    consumer_group_description_from,
    coordinator_from_response,
    find_coordinator_request,
    group_description_from,
    offset_commit_request,
    offset_delete_request,
    offset_fetch_request,
    offsets_from_fetch_response,
    raise_for_commit,
    raise_for_offset_delete,
    reset_targets,
)
from strom.client.cluster import BrokerNode, TopicPartition
from strom.client.errors import BrokerResponseError, ProtocolError, UnsupportedVersionError
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.consumer_group_describe import ConsumerGroupDescribeResponse
from strom.protocol.messages.describe_groups import DescribeGroupsResponse
from strom.protocol.messages.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from strom.protocol.messages.offset_commit import OffsetCommitRequest, OffsetCommitResponse
from strom.protocol.messages.offset_delete import OffsetDeleteRequest, OffsetDeleteResponse
from strom.protocol.messages.offset_fetch import OffsetFetchRequest, OffsetFetchResponse

A0 = TopicPartition("a", 0)
A1 = TopicPartition("a", 1)
B0 = TopicPartition("b", 0)


def wire(message: Any, version: int) -> Any:
    """``message`` as the other side reads it at ``version``."""
    return type(message).decode(memoryview(message.encode(version)), version)


# -- FindCoordinator ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "version", range(FindCoordinatorRequest.MIN_VERSION, FindCoordinatorRequest.MAX_VERSION + 1)
)
def test_find_coordinator_names_the_group_at_every_version(version: int) -> None:
    sent = wire(find_coordinator_request("orders", version), version)
    assert (sent.coordinator_keys if version >= 4 else [sent.key]) == ["orders"]
    assert sent.key_type == 0


@pytest.mark.parametrize("version", [0, 3, 4, 6])
def test_coordinator_address_read_at_old_and_batched_versions(version: int) -> None:
    if version >= 4:
        response = FindCoordinatorResponse(
            coordinators=[
                FindCoordinatorResponse.Coordinator(key="other", node_id=9, host="x", port=1),
                FindCoordinatorResponse.Coordinator(key="orders", node_id=2, host="h", port=9092),
            ]
        )
    else:
        response = FindCoordinatorResponse(node_id=2, host="h", port=9092)
    assert coordinator_from_response(wire(response, version), "orders", version) == BrokerNode(2, "h", 9092)


def test_coordinator_errors_raise_with_their_code_and_stay_retriable() -> None:
    response = FindCoordinatorResponse(
        coordinators=[
            FindCoordinatorResponse.Coordinator(
                key="orders", error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message="loading"
            )
        ]
    )
    with pytest.raises(BrokerResponseError) as raised:
        coordinator_from_response(response, "orders", 4)
    assert raised.value.code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert raised.value.retriable
    assert "orders" in str(raised.value) and "loading" in str(raised.value)
    with pytest.raises(ProtocolError):
        coordinator_from_response(FindCoordinatorResponse(coordinators=[]), "orders", 4)
    with pytest.raises(BrokerResponseError) as old:
        coordinator_from_response(FindCoordinatorResponse(error_code=ErrorCode.NOT_COORDINATOR), "orders", 2)
    assert old.value.code == ErrorCode.NOT_COORDINATOR


# -- DescribeGroups ----------------------------------------------------------------------------------


def described_member(member_id: str, assignment: bytes) -> DescribeGroupsResponse.DescribedGroupMember:
    return DescribeGroupsResponse.DescribedGroupMember(
        member_id=member_id,
        group_instance_id="instance-1",
        client_id="client",
        client_host="/127.0.0.1",
        member_assignment=assignment,
    )


def test_consumer_group_assignments_are_decoded_and_undecodable_ones_kept_raw() -> None:
    assigned = encode_assignment(Assignment(partitions=[("a", 1), ("a", 0)]))
    described = DescribeGroupsResponse.DescribedGroup(
        group_id="orders",
        group_state="Stable",
        protocol_type="consumer",
        protocol_data="range",
        members=[described_member("m1", assigned), described_member("m2", b"\x00")],
    )
    description = group_description_from(wire(DescribeGroupsResponse(groups=[described]), 5).groups[0])
    assert description == GroupDescription(
        "orders",
        "Stable",
        "consumer",
        "range",
        [
            MemberDescription(
                "m1",
                "instance-1",
                "client",
                "/127.0.0.1",
                Assignment(partitions=[("a", 1), ("a", 0)]),
                assigned,
            ),
            MemberDescription("m2", "instance-1", "client", "/127.0.0.1", None, b"\x00"),
        ],
    )


def test_other_protocol_types_are_not_decoded() -> None:
    described = DescribeGroupsResponse.DescribedGroup(
        group_id="connect",
        group_state="Stable",
        protocol_type="connect",
        members=[described_member("m", b"\x01")],
    )
    assert group_description_from(described).members[0].assignment is None


def test_describe_error_raises_with_the_group_named() -> None:
    described = DescribeGroupsResponse.DescribedGroup(
        group_id="orders", error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED
    )
    with pytest.raises(BrokerResponseError, match="orders") as raised:
        group_description_from(described)
    assert raised.value.code == ErrorCode.GROUP_AUTHORIZATION_FAILED


# -- OffsetFetch -------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", range(OffsetFetchRequest.MIN_VERSION, OffsetFetchRequest.MAX_VERSION + 1))
def test_offset_fetch_asks_for_the_given_partitions_at_every_version(version: int) -> None:
    sent = wire(offset_fetch_request("orders", [B0, A1, A0, A1], version), version)
    if version >= 8:
        (group,) = sent.groups
        assert group.group_id == "orders"
        topics = [(topic.name, topic.partition_indexes) for topic in group.topics]
    else:
        assert sent.group_id == "orders"
        topics = [(topic.name, topic.partition_indexes) for topic in sent.topics]
    assert topics == [("a", [0, 1]), ("b", [0])]


@pytest.mark.parametrize("version", range(2, OffsetFetchRequest.MAX_VERSION + 1))
def test_offset_fetch_of_every_partition_sends_null_topics(version: int) -> None:
    sent = wire(offset_fetch_request("orders", None, version), version)
    assert (sent.groups[0].topics if version >= 8 else sent.topics) is None


@pytest.mark.parametrize("version", [0, 1])
def test_offset_fetch_of_every_partition_needs_v2(version: int) -> None:
    with pytest.raises(UnsupportedVersionError):
        offset_fetch_request("orders", None, version)


@pytest.mark.parametrize("version", range(7, OffsetFetchRequest.MAX_VERSION + 1))
@pytest.mark.parametrize("require_stable", [False, True])
def test_offset_fetch_asks_for_stable_offsets_when_told(version: int, require_stable: bool) -> None:
    sent = wire(offset_fetch_request("orders", [A0], version, require_stable), version)
    assert sent.require_stable is require_stable


@pytest.mark.parametrize("version", range(OffsetFetchRequest.MIN_VERSION, 7))
def test_stable_offsets_need_v7(version: int) -> None:
    assert wire(offset_fetch_request("orders", [A0], version), version).require_stable is False
    with pytest.raises(UnsupportedVersionError, match="require_stable"):
        offset_fetch_request("orders", [A0], version, require_stable=True)


def fetch_response(version: int, partitions: list[tuple[int, int, str | None, int]]) -> OffsetFetchResponse:
    """(partition, offset, metadata, error code) of topic "a"."""
    if version >= 8:
        return OffsetFetchResponse(
            groups=[
                OffsetFetchResponse.OffsetFetchResponseGroup(
                    group_id="orders",
                    topics=[
                        OffsetFetchResponse.OffsetFetchResponseTopics(
                            name="a",
                            partitions=[
                                OffsetFetchResponse.OffsetFetchResponsePartitions(
                                    partition_index=index,
                                    committed_offset=offset,
                                    metadata=metadata,
                                    error_code=code,
                                )
                                for index, offset, metadata, code in partitions
                            ],
                        )
                    ],
                )
            ]
        )
    return OffsetFetchResponse(
        topics=[
            OffsetFetchResponse.OffsetFetchResponseTopic(
                name="a",
                partitions=[
                    OffsetFetchResponse.OffsetFetchResponsePartition(
                        partition_index=index, committed_offset=offset, metadata=metadata, error_code=code
                    )
                    for index, offset, metadata, code in partitions
                ],
            )
        ]
    )


@pytest.mark.parametrize("version", [1, 2, 7, 8])
def test_offset_fetch_response_leaves_out_partitions_without_an_offset(version: int) -> None:
    response = wire(fetch_response(version, [(0, 12, "note", 0), (1, -1, "", 0)]), version)
    assert offsets_from_fetch_response(response, "orders", version) == {A0: OffsetAndMetadata(12, "note")}


@pytest.mark.parametrize("version", [2, 8])
def test_offset_fetch_errors_raise(version: int) -> None:
    response = fetch_response(version, [(0, -1, "", ErrorCode.UNSTABLE_OFFSET_COMMIT)])
    with pytest.raises(BrokerResponseError) as raised:
        offsets_from_fetch_response(response, "orders", version)
    assert raised.value.code == ErrorCode.UNSTABLE_OFFSET_COMMIT
    assert "'orders'" in str(raised.value) and str(A0) in str(raised.value)
    if version >= 8:
        response.groups[0].error_code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    else:
        response.error_code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    with pytest.raises(BrokerResponseError) as group_level:
        offsets_from_fetch_response(response, "orders", version)
    assert group_level.value.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS


# -- OffsetCommit and OffsetDelete -------------------------------------------------------------------


@pytest.mark.parametrize(
    "version", range(OffsetCommitRequest.MIN_VERSION, OffsetCommitRequest.MAX_VERSION + 1)
)
def test_admin_commit_has_no_generation_nor_member_at_every_version(version: int) -> None:
    offsets = {A1: OffsetAndMetadata(7, "why"), A0: OffsetAndMetadata(3), B0: OffsetAndMetadata(0, "")}
    sent = wire(offset_commit_request("orders", offsets, version), version)
    assert sent.group_id == "orders"
    if version >= 1:
        assert (sent.generation_id_or_member_epoch, sent.member_id) == (ADMIN_GENERATION_ID, "")
    committed = {
        (topic.name, partition.partition_index): (partition.committed_offset, partition.committed_metadata)
        for topic in sent.topics
        for partition in topic.partitions
    }
    assert committed == {("a", 0): (3, None), ("a", 1): (7, "why"), ("b", 0): (0, "")}


def commit_response(code: ErrorCode) -> OffsetCommitResponse:
    return OffsetCommitResponse(
        topics=[
            OffsetCommitResponse.OffsetCommitResponseTopic(
                name="a",
                partitions=[
                    OffsetCommitResponse.OffsetCommitResponsePartition(partition_index=0),
                    OffsetCommitResponse.OffsetCommitResponsePartition(partition_index=1, error_code=code),
                ],
            )
        ]
    )


def test_commit_refused_for_active_members_says_so() -> None:
    raise_for_commit(commit_response(ErrorCode.NONE), "orders")
    with pytest.raises(BrokerResponseError, match="active members") as raised:
        raise_for_commit(commit_response(ErrorCode.UNKNOWN_MEMBER_ID), "orders")
    assert raised.value.code == ErrorCode.UNKNOWN_MEMBER_ID
    with pytest.raises(BrokerResponseError) as other:
        raise_for_commit(commit_response(ErrorCode.OFFSET_METADATA_TOO_LARGE), "orders")
    assert other.value.code == ErrorCode.OFFSET_METADATA_TOO_LARGE
    assert "active members" not in str(other.value)


def test_offset_delete_request_and_errors() -> None:
    sent = wire(offset_delete_request("orders", [B0, A1, A0]), 0)
    assert isinstance(sent, OffsetDeleteRequest)
    assert [(topic.name, [p.partition_index for p in topic.partitions]) for topic in sent.topics] == [
        ("a", [0, 1]),
        ("b", [0]),
    ]
    raise_for_offset_delete(OffsetDeleteResponse(), "orders")
    with pytest.raises(BrokerResponseError) as group_level:
        raise_for_offset_delete(OffsetDeleteResponse(error_code=ErrorCode.GROUP_ID_NOT_FOUND), "orders")
    assert group_level.value.code == ErrorCode.GROUP_ID_NOT_FOUND
    subscribed = OffsetDeleteResponse(
        topics=[
            OffsetDeleteResponse.OffsetDeleteResponseTopic(
                name="a",
                partitions=[
                    OffsetDeleteResponse.OffsetDeleteResponsePartition(
                        partition_index=0, error_code=ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
                    )
                ],
            )
        ]
    )
    with pytest.raises(BrokerResponseError) as partition_level:
        raise_for_offset_delete(subscribed, "orders")
    assert partition_level.value.code == ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC


# -- resets ------------------------------------------------------------------------------------------

EARLIEST = {A0: 2, A1: 0}
LATEST = {A0: 10, A1: 5}


def test_reset_to_earliest_and_latest() -> None:
    assert reset_targets("earliest", [A0, A1], EARLIEST, LATEST, {}) == EARLIEST
    assert reset_targets("latest", [A0], EARLIEST, LATEST, {}) == {A0: 10}


def test_reset_to_a_timestamp_goes_to_the_end_where_no_record_is_that_late() -> None:
    assert reset_targets(1_000, [A0, A1], EARLIEST, LATEST, {A0: 4, A1: None}) == {A0: 4, A1: 5}


def test_reset_to_explicit_offsets_stays_within_the_partition() -> None:
    assert reset_targets({A0: 0, A1: 3}, [A0, A1], EARLIEST, LATEST, {}) == {A0: 2, A1: 3}
    assert reset_targets({A0: 99}, [A0], EARLIEST, LATEST, {}) == {A0: 10}


def test_consumer_protocol_group_read_from_consumer_group_describe() -> None:
    topic_id = uuid.UUID(int=7)
    member = ConsumerGroupDescribeResponse.Member(
        member_id="m-1",
        instance_id=None,
        rack_id="r1",
        member_epoch=4,
        client_id="c",
        client_host="/10.0.0.1",
        subscribed_topic_names=["a"],
        subscribed_topic_regex=None,
        assignment=ConsumerGroupDescribeResponse.Assignment(
            topic_partitions=[
                ConsumerGroupDescribeResponse.TopicPartitions(
                    topic_id=topic_id, topic_name="a", partitions=[1, 0]
                )
            ]
        ),
        target_assignment=ConsumerGroupDescribeResponse.Assignment(
            topic_partitions=[
                ConsumerGroupDescribeResponse.TopicPartitions(
                    topic_id=topic_id, topic_name="a", partitions=[0]
                )
            ]
        ),
    )
    described = consumer_group_description_from(
        ConsumerGroupDescribeResponse.DescribedGroup(
            group_id="g",
            group_state="Reconciling",
            group_epoch=5,
            assignment_epoch=5,
            assignor_name="uniform",
            members=[member],
        )
    )
    assert described is not None
    assert (described.state, described.group_epoch, described.assignment_epoch, described.assignor_name) == (
        "Reconciling",
        5,
        5,
        "uniform",
    )
    [read] = described.members
    assert (read.member_epoch, read.rack_id, read.host) == (4, "r1", "/10.0.0.1")
    assert read.assignment == [A0, A1] and read.target_assignment == [A0]


def test_a_group_consumer_group_describe_does_not_know_is_none_and_other_errors_raise() -> None:
    classic = ConsumerGroupDescribeResponse.DescribedGroup(
        group_id="g", error_code=ErrorCode.GROUP_ID_NOT_FOUND
    )
    assert consumer_group_description_from(classic) is None
    refused = ConsumerGroupDescribeResponse.DescribedGroup(
        group_id="g", error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, error_message="no"
    )
    with pytest.raises(BrokerResponseError, match="describe group 'g'") as raised:
        consumer_group_description_from(refused)
    assert raised.value.code == ErrorCode.GROUP_AUTHORIZATION_FAILED
