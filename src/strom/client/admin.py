"""Admin: topics, partitions, configs, records and offsets, consumer groups, and transactions.

Group operations go to each group's coordinator, found with FindCoordinator: list, describe (with
consumer assignments decoded), delete, and the group's committed offsets (list, alter, reset to
earliest/latest/a timestamp/given offsets, delete). Requests are built for the version the broker
negotiated by small pure functions below, so they are tested without a broker. Transactions are
listed from every broker (ListTransactions) and described by each id's transaction coordinator
(DescribeTransactions), found with FindCoordinator too. SCRAM credentials (strom users) are
described and altered with the pieces of ``strom.client.scram_credentials``. Partition
reassignments (KIP-455) go to the controller, looked up again when the broker Metadata named cannot
be reached or answers NOT_CONTROLLER.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from types import TracebackType
from typing import Any, Self, TypeVar

from strom.assignors import Assignment, decode_assignment
from strom.client.cluster import BrokerNode, TopicInfo, TopicPartition
from strom.client.config import AdminConfig
from strom.client.errors import (
    BrokerResponseError,
    KafkaConnectionError,
    KafkaError,
    ProtocolError,
    UnsupportedVersionError,
    error_for_code,
)
from strom.client.group_metadata import OffsetAndMetadata
from strom.client.offsets import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    OffsetAndTimestamp,
    list_offsets,
    timestamp_spec,
)
from strom.client.scram_credentials import (
    ScramCredentialInfo,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
    alter_user_scram_credentials_request,
    describe_user_scram_credentials_request,
    raise_for_alter,
    user_scram_credentials_from,
)
from strom.client.transport import LoopThread, Transport
from strom.protocol.errors import ErrorCode
from strom.protocol.group_history import (
    RebalanceEntry,
    StromGroupHistoryRequest,
    StromGroupHistoryResponse,
    decode_entry,
)
from strom.protocol.messages.alter_client_quotas import AlterClientQuotasRequest, AlterClientQuotasResponse
from strom.protocol.messages.alter_configs import AlterConfigsRequest
from strom.protocol.messages.alter_partition_reassignments import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
)
from strom.protocol.messages.consumer_group_describe import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
)
from strom.protocol.messages.create_acls import CreateAclsRequest
from strom.protocol.messages.create_partitions import CreatePartitionsRequest
from strom.protocol.messages.create_topics import CreateTopicsRequest
from strom.protocol.messages.delete_acls import DeleteAclsRequest
from strom.protocol.messages.delete_groups import DeleteGroupsRequest, DeleteGroupsResponse
from strom.protocol.messages.delete_records import DeleteRecordsRequest
from strom.protocol.messages.delete_topics import DeleteTopicsRequest
from strom.protocol.messages.describe_acls import DescribeAclsRequest
from strom.protocol.messages.describe_client_quotas import (
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)
from strom.protocol.messages.describe_cluster import DescribeClusterRequest
from strom.protocol.messages.describe_configs import DescribeConfigsRequest
from strom.protocol.messages.describe_groups import DescribeGroupsRequest, DescribeGroupsResponse
from strom.protocol.messages.describe_log_dirs import DescribeLogDirsRequest, DescribeLogDirsResponse
from strom.protocol.messages.describe_transactions import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
)
from strom.protocol.messages.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from strom.protocol.messages.list_groups import ListGroupsRequest, ListGroupsResponse
from strom.protocol.messages.list_partition_reassignments import (
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)
from strom.protocol.messages.list_transactions import ListTransactionsRequest, ListTransactionsResponse
from strom.protocol.messages.offset_commit import OffsetCommitRequest, OffsetCommitResponse
from strom.protocol.messages.offset_delete import OffsetDeleteRequest, OffsetDeleteResponse
from strom.protocol.messages.offset_fetch import OffsetFetchRequest, OffsetFetchResponse
from strom.protocol.primitives import DecodeError
from strom.security.acl import (
    AclBinding,
    AclBindingFilter,
    binding_from_wire,
)

__all__ = [
    "Admin",
    "AlterConfigOperation",
    "ClusterDescription",
    "ConfigEntry",
    "ConfigResource",
    "ConfigResourceType",
    "ConsumerGroupDescription",
    "ConsumerGroupMemberDescription",
    "GroupDescription",
    "GroupListing",
    "MemberDescription",
    "NewTopic",
    "OffsetAndMetadata",
    "PartitionDescription",
    "PartitionReassignment",
    "ScramCredentialInfo",
    "TopicDescription",
    "TransactionDescription",
    "TransactionListing",
    "UserScramCredentialDeletion",
    "UserScramCredentialUpsertion",
]

T = TypeVar("T")


class ConfigResourceType(IntEnum):
    TOPIC = 2
    BROKER = 4
    GROUP = 32  # group configs (KIP-848), named by group id


# -- client quotas: entities and filters -------------------------------------------------------------

# A quota entity: (entity type, name) pairs sorted by type ("client-id", "user"); None names the default.
QuotaEntityKey = tuple[tuple[str, str | None], ...]


def quota_entity_key(parts: Iterable[tuple[str, str | None]]) -> QuotaEntityKey:
    return tuple(sorted(parts, key=lambda part: part[0]))


class QuotaMatch(IntEnum):
    EXACT = 0  # the entity named by ``match``
    DEFAULT = 1  # the default entity of the type
    ANY = 2  # any named entity of the type (not the default)


@dataclass(frozen=True)
class QuotaFilterComponent:
    entity_type: str  # "user" or "client-id"
    match_type: QuotaMatch = QuotaMatch.EXACT
    match: str | None = None


class AlterConfigOperation(IntEnum):
    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass
class NewTopic:
    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    config: dict[str, str] = field(default_factory=dict)
    # Partition -> broker ids, to place replicas by hand (then leave the counts at -1).
    replica_assignment: dict[int, list[int]] = field(default_factory=dict)


@dataclass(frozen=True)
class ConfigResource:
    resource_type: ConfigResourceType
    name: str


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str | None
    read_only: bool = False
    is_default: bool = False
    is_sensitive: bool = False
    source: int = -1


@dataclass(frozen=True)
class PartitionDescription:
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True)
class TopicDescription:
    name: str
    partitions: list[PartitionDescription]
    is_internal: bool = False
    topic_id: str | None = None


@dataclass(frozen=True)
class ClusterDescription:
    cluster_id: str | None
    controller_id: int
    brokers: list[BrokerNode]


def _topic_description(name: str, info: TopicInfo) -> TopicDescription:
    return TopicDescription(
        name,
        [
            PartitionDescription(partition.partition, partition.leader, partition.replicas, partition.isr)
            for _, partition in sorted(info.partitions.items())
        ],
        info.is_internal,
        info.topic_id,
    )


def _raise_for(code: int, message: str | None, context: str) -> None:
    if code != ErrorCode.NONE:
        raise error_for_code(code, message, context=context)


# -- consumer groups: results ----------------------------------------------------------------------

# The protocol type of groups run by Kafka consumers: their member metadata and assignments use the
# consumer protocol's encoding, which describe_groups decodes.
CONSUMER_PROTOCOL_TYPE = "consumer"

# FindCoordinator's key types: a consumer group, a transactional id.
GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1

# OffsetCommit from outside the group: no generation, no member. The coordinator accepts it only
# while the group has no members.
ADMIN_GENERATION_ID = -1
ADMIN_MEMBER_ID = ""

# Connection ids for coordinators, below every bootstrap id (-1, -2, ...), so group requests get
# their own connection.
_COORDINATOR_CONNECTION_BASE = -1_000_000

# Group states in which the group has no members, so its offsets may be changed from outside.
_INACTIVE_GROUP_STATES = frozenset({"Empty", "Dead"})


@dataclass(frozen=True)
class GroupListing:
    group_id: str
    protocol_type: str
    # None when the broker answers ListGroups below v4, which carries no state.
    state: str | None
    # "classic" (JoinGroup/SyncGroup) or "consumer" (KIP-848's protocol); None when the broker
    # answers ListGroups below v5, which carries no type.
    group_type: str | None = None


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    # Decoded when the group's protocol type is "consumer" (None otherwise, or if undecodable).
    assignment: Assignment | None
    assignment_bytes: bytes


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    # The assignor the group chose ("range", "cooperative-sticky", ...); empty while rebalancing.
    protocol: str
    members: list[MemberDescription]


@dataclass(frozen=True)
class ConsumerGroupMemberDescription:
    """One member of a consumer-protocol group (KIP-848), as ConsumerGroupDescribe gives it."""

    member_id: str
    instance_id: str | None
    rack_id: str | None
    # The epoch the member has acknowledged (its assignment is that of this epoch).
    member_epoch: int
    client_id: str
    host: str
    subscribed_topic_names: list[str]
    subscribed_topic_regex: str | None
    # What the member owns now, and what the coordinator's target assignment gives it: they
    # differ while the member reconciles (revoking before it is given new partitions).
    assignment: list[TopicPartition]
    target_assignment: list[TopicPartition]


@dataclass(frozen=True)
class ConsumerGroupDescription:
    """A consumer-protocol group (KIP-848): its state (Empty, Assigning, Reconciling, Stable,
    Dead), its epoch, the epoch of its target assignment, the server-side assignor and members."""

    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor_name: str
    members: list[ConsumerGroupMemberDescription]


# -- transactions: results ----------------------------------------------------------------------


@dataclass(frozen=True)
class TransactionListing:
    """One transactional id as ListTransactions gives it."""

    transactional_id: str
    producer_id: int
    # The coordinator's state name: Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit,
    # CompleteAbort, PrepareEpochFence, Dead.
    state: str


@dataclass(frozen=True)
class TransactionDescription:
    """One transactional id as its coordinator describes it (DescribeTransactions)."""

    transactional_id: str
    coordinator_id: int
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    # When the open transaction began (ms since the epoch), -1 when none is open.
    start_time_ms: int
    # The partitions in the open transaction, sorted.
    partitions: list[TopicPartition]


def transaction_description_from(
    state: DescribeTransactionsResponse.TransactionState, coordinator_id: int
) -> TransactionDescription:
    """One DescribeTransactions result. Raises its error code (TRANSACTIONAL_ID_NOT_FOUND, ...)."""
    _raise_for(state.error_code, None, f"describe transactional id {state.transactional_id!r}")
    return TransactionDescription(
        transactional_id=state.transactional_id,
        coordinator_id=coordinator_id,
        state=state.transaction_state,
        producer_id=state.producer_id,
        producer_epoch=state.producer_epoch,
        timeout_ms=state.transaction_timeout_ms,
        start_time_ms=state.transaction_start_time_ms,
        partitions=sorted(
            TopicPartition(topic.topic, partition) for topic in state.topics for partition in topic.partitions
        ),
    )


# -- partition reassignments (KIP-455): requests and results (pure) --------------------------------


@dataclass(frozen=True)
class PartitionReassignment:
    """A partition's reassignment in progress, as ListPartitionReassignments tells it. While it
    moves, ``replicas`` is the target followed by the original replicas leaving; ``adding_replicas``
    are those joining (copying the log from the leader), ``removing_replicas`` those that drop the
    partition once every joining one is in the ISR."""

    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]


def _partition_name(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"


def alter_partition_reassignments_request(
    reassignments: Mapping[TopicPartition, Sequence[int] | None], timeout_ms: int
) -> AlterPartitionReassignmentsRequest:
    """Per partition its new replicas (the preferred leader first), or None: cancel its
    reassignment. Topics and partitions sorted."""
    by_topic: dict[str, list[AlterPartitionReassignmentsRequest.ReassignablePartition]] = {}
    for tp, replicas in sorted(reassignments.items()):
        by_topic.setdefault(tp.topic, []).append(
            AlterPartitionReassignmentsRequest.ReassignablePartition(
                partition_index=tp.partition, replicas=None if replicas is None else list(replicas)
            )
        )
    return AlterPartitionReassignmentsRequest(
        timeout_ms=timeout_ms,
        topics=[
            AlterPartitionReassignmentsRequest.ReassignableTopic(name=topic, partitions=partitions)
            for topic, partitions in by_topic.items()
        ],
    )


def reassignment_errors_from(
    response: AlterPartitionReassignmentsResponse, wanted: Mapping[TopicPartition, Sequence[int] | None]
) -> dict[TopicPartition, BrokerResponseError | None]:
    """Each partition's outcome: None (accepted) or its error, not raised. Raises the request's
    own error (NOT_CONTROLLER, CLUSTER_AUTHORIZATION_FAILED, ...) and a response that leaves a
    partition out. ``wanted``: what was asked (None: a cancellation), for the errors' wording."""
    _raise_for(response.error_code, response.error_message, "reassign partitions")
    outcomes: dict[TopicPartition, BrokerResponseError | None] = {}
    for topic in response.responses:
        for partition in topic.partitions:
            tp = TopicPartition(topic.name, partition.partition_index)
            if partition.error_code == ErrorCode.NONE:
                outcomes[tp] = None
                continue
            context = (
                f"cancel the reassignment of {_partition_name(tp)}"
                if tp in wanted and wanted[tp] is None
                else f"reassign {_partition_name(tp)}"
            )
            outcomes[tp] = error_for_code(partition.error_code, partition.error_message, context=context)
    missing = sorted(set(wanted) - set(outcomes))
    if missing:
        names = ", ".join(_partition_name(tp) for tp in missing)
        raise ProtocolError(f"reassign partitions: the response does not name {names}")
    return outcomes


def list_partition_reassignments_request(
    partitions: Iterable[TopicPartition] | None,
) -> ListPartitionReassignmentsRequest:
    """The reassignments of ``partitions`` (None: of every partition)."""
    return ListPartitionReassignmentsRequest(
        topics=None
        if partitions is None
        else [
            ListPartitionReassignmentsRequest.ListPartitionReassignmentsTopics(
                name=topic, partition_indexes=indexes
            )
            for topic, indexes in _partitions_by_topic(partitions).items()
        ]
    )


def reassignments_from(
    response: ListPartitionReassignmentsResponse,
) -> dict[TopicPartition, PartitionReassignment]:
    """The reassignments in progress, sorted by partition. Raises the response's error."""
    _raise_for(response.error_code, response.error_message, "list partition reassignments")
    found = {
        TopicPartition(topic.name, partition.partition_index): PartitionReassignment(
            tuple(partition.replicas), tuple(partition.adding_replicas), tuple(partition.removing_replicas)
        )
        for topic in response.topics
        for partition in topic.partitions
    }
    return dict(sorted(found.items()))


# -- consumer groups: requests and responses for a negotiated version (pure) -----------------------


def find_coordinator_request(
    key: str, version: int, key_type: int = GROUP_KEY_TYPE
) -> FindCoordinatorRequest:
    """v4+ takes a list of keys; older versions one key (v0 only a group's)."""
    if version >= 4:
        return FindCoordinatorRequest(key_type=key_type, coordinator_keys=[key])
    if version == 0 and key_type != GROUP_KEY_TYPE:
        raise UnsupportedVersionError("finding a transaction coordinator needs FindCoordinator v1+")
    return FindCoordinatorRequest(key=key, key_type=key_type if version >= 1 else 0)


def coordinator_from_response(
    response: FindCoordinatorResponse, key: str, version: int, key_type: int = GROUP_KEY_TYPE
) -> BrokerNode:
    """The coordinator's address, or the error as a ``KafkaError`` (retriable ones included)."""
    what = "group" if key_type == GROUP_KEY_TYPE else "transactional id"
    context = f"find coordinator of {what} {key!r}"
    if version >= 4:
        for coordinator in response.coordinators:
            if coordinator.key == key:
                _raise_for(coordinator.error_code, coordinator.error_message, context)
                return BrokerNode(coordinator.node_id, coordinator.host, coordinator.port)
        raise ProtocolError(f"{context}: the response does not name the {what}")
    _raise_for(response.error_code, response.error_message, context)
    return BrokerNode(response.node_id, response.host, response.port)


def group_description_from(described: DescribeGroupsResponse.DescribedGroup) -> GroupDescription:
    """One DescribeGroups result; assignments decoded for consumer groups. Raises its error code."""
    _raise_for(described.error_code, None, f"describe group {described.group_id!r}")
    members: list[MemberDescription] = []
    for member in described.members:
        assignment: Assignment | None = None
        if described.protocol_type == CONSUMER_PROTOCOL_TYPE:
            try:
                assignment = decode_assignment(member.member_assignment)
            except DecodeError:
                # One member's odd bytes must not hide the rest of the group: the raw bytes stay.
                assignment = None
        members.append(
            MemberDescription(
                member.member_id,
                member.group_instance_id,
                member.client_id,
                member.client_host,
                assignment,
                bytes(member.member_assignment),
            )
        )
    return GroupDescription(
        described.group_id, described.group_state, described.protocol_type, described.protocol_data, members
    )


def _described_partitions(
    assignment: ConsumerGroupDescribeResponse.Assignment,
) -> list[TopicPartition]:
    return sorted(
        TopicPartition(topic.topic_name, partition)
        for topic in assignment.topic_partitions
        for partition in topic.partitions
    )


def consumer_group_description_from(
    described: ConsumerGroupDescribeResponse.DescribedGroup,
) -> ConsumerGroupDescription | None:
    """One ConsumerGroupDescribe result; None when the group is no consumer-protocol group (the
    broker answers GROUP_ID_NOT_FOUND for a classic group and for one that does not exist).
    Raises any other error code."""
    if described.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
        return None
    _raise_for(described.error_code, described.error_message, f"describe group {described.group_id!r}")
    return ConsumerGroupDescription(
        described.group_id,
        described.group_state,
        described.group_epoch,
        described.assignment_epoch,
        described.assignor_name,
        [
            ConsumerGroupMemberDescription(
                member.member_id,
                member.instance_id,
                member.rack_id,
                member.member_epoch,
                member.client_id,
                member.client_host,
                list(member.subscribed_topic_names),
                member.subscribed_topic_regex,
                _described_partitions(member.assignment),
                _described_partitions(member.target_assignment),
            )
            for member in described.members
        ],
    )


def _partitions_by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(set(partitions)):
        by_topic.setdefault(topic, []).append(partition)
    return by_topic


def offset_fetch_request(
    group_id: str, partitions: Iterable[TopicPartition] | None, version: int, require_stable: bool = False
) -> OffsetFetchRequest:
    """Committed offsets of ``partitions`` (None: every partition the group has an offset for,
    which needs v2+). v8+ carries groups in a list. ``require_stable`` (v7+, KIP-447): the
    coordinator answers UNSTABLE_OFFSET_COMMIT while a transaction holds offsets of the group."""
    by_topic = None if partitions is None else _partitions_by_topic(partitions)
    if by_topic is None and version < 2:
        raise UnsupportedVersionError("listing all of a group's offsets needs OffsetFetch v2+")
    if require_stable and version < 7:
        raise UnsupportedVersionError("stable offsets (require_stable) need OffsetFetch v7+")
    if version >= 8:
        group = OffsetFetchRequest.OffsetFetchRequestGroup(
            group_id=group_id,
            topics=None
            if by_topic is None
            else [
                OffsetFetchRequest.OffsetFetchRequestTopics(name=topic, partition_indexes=indexes)
                for topic, indexes in by_topic.items()
            ],
        )
        return OffsetFetchRequest(require_stable=require_stable, groups=[group])
    return OffsetFetchRequest(
        group_id=group_id,
        require_stable=require_stable,
        topics=None
        if by_topic is None
        else [
            OffsetFetchRequest.OffsetFetchRequestTopic(name=topic, partition_indexes=indexes)
            for topic, indexes in by_topic.items()
        ],
    )


def offsets_from_fetch_response(
    response: OffsetFetchResponse, group_id: str, version: int
) -> dict[TopicPartition, OffsetAndMetadata]:
    """Committed offsets by partition; partitions without one (offset -1) are left out."""
    context = f"list offsets of group {group_id!r}"
    offsets: dict[TopicPartition, OffsetAndMetadata] = {}
    if version >= 8:
        groups = [group for group in response.groups if group.group_id == group_id]
        if not groups:
            raise ProtocolError(f"{context}: the response does not name the group")
        _raise_for(groups[0].error_code, None, context)
        for topic in groups[0].topics:
            for partition in topic.partitions:
                tp = TopicPartition(topic.name, partition.partition_index)
                _raise_for(partition.error_code, None, f"{context}, {tp}")
                if partition.committed_offset >= 0:
                    offsets[tp] = OffsetAndMetadata(partition.committed_offset, partition.metadata)
        return offsets
    if version >= 2:
        _raise_for(response.error_code, None, context)
    for old_topic in response.topics:
        for old_partition in old_topic.partitions:
            tp = TopicPartition(old_topic.name, old_partition.partition_index)
            _raise_for(old_partition.error_code, None, f"{context}, {tp}")
            if old_partition.committed_offset >= 0:
                offsets[tp] = OffsetAndMetadata(old_partition.committed_offset, old_partition.metadata)
    return offsets


def offset_commit_request(
    group_id: str, offsets: Mapping[TopicPartition, OffsetAndMetadata], version: int
) -> OffsetCommitRequest:
    """An OffsetCommit from outside the group (generation -1, no member id): accepted only while the
    group is empty."""
    by_topic: dict[str, list[OffsetCommitRequest.OffsetCommitRequestPartition]] = {}
    for (topic, partition), committed in sorted(offsets.items()):
        by_topic.setdefault(topic, []).append(
            OffsetCommitRequest.OffsetCommitRequestPartition(
                partition_index=partition,
                committed_offset=committed.offset,
                committed_metadata=committed.metadata,
            )
        )
    topics = [
        OffsetCommitRequest.OffsetCommitRequestTopic(name=topic, partitions=partitions)
        for topic, partitions in by_topic.items()
    ]
    # generation and member id are ignorable fields: v0 simply does not send them.
    return OffsetCommitRequest(
        group_id=group_id,
        generation_id_or_member_epoch=ADMIN_GENERATION_ID,
        member_id=ADMIN_MEMBER_ID,
        topics=topics,
    )


def raise_for_commit(response: OffsetCommitResponse, group_id: str) -> None:
    """The first partition error of an admin OffsetCommit, explained when it means "not empty"."""
    for topic in response.topics:
        for partition in topic.partitions:
            code = partition.error_code
            if code == ErrorCode.NONE:
                continue
            context = f"alter offsets of group {group_id!r}, {TopicPartition(topic.name, partition.partition_index)}"
            message = None
            if code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION):
                # What the coordinator answers a commit without a member while the group has members.
                message = "the group has active members; offsets can only be altered while it is empty"
            raise error_for_code(code, message, context)


def offset_delete_request(group_id: str, partitions: Iterable[TopicPartition]) -> OffsetDeleteRequest:
    return OffsetDeleteRequest(
        group_id=group_id,
        topics=[
            OffsetDeleteRequest.OffsetDeleteRequestTopic(
                name=topic,
                partitions=[
                    OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=index)
                    for index in indexes
                ],
            )
            for topic, indexes in _partitions_by_topic(partitions).items()
        ],
    )


def raise_for_offset_delete(response: OffsetDeleteResponse, group_id: str) -> None:
    context = f"delete offsets of group {group_id!r}"
    _raise_for(response.error_code, None, context)
    for topic in response.topics:
        for partition in topic.partitions:
            tp = TopicPartition(topic.name, partition.partition_index)
            _raise_for(partition.error_code, None, f"{context}, {tp}")


def reset_targets(
    to: str | int | Mapping[TopicPartition, int],
    partitions: Iterable[TopicPartition],
    earliest: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    at_timestamp: Mapping[TopicPartition, int | None],
) -> dict[TopicPartition, int]:
    """Where each partition's committed offset goes for a reset.

    ``to`` is "earliest", "latest", a timestamp in ms (the first offset at or after it; the end of the
    partition when no record is that late) or explicit offsets, which are kept inside
    [earliest, latest] as Kafka's tool does, so a consumer never resumes out of range.
    """
    targets: dict[TopicPartition, int] = {}
    for tp in partitions:
        if to == "earliest":
            targets[tp] = earliest[tp]
        elif to == "latest":
            targets[tp] = latest[tp]
        elif isinstance(to, Mapping):
            targets[tp] = min(max(to[tp], earliest[tp]), latest[tp])
        else:
            found = at_timestamp[tp]
            targets[tp] = latest[tp] if found is None else found
    return targets


async def send_to_controller(
    transport: Transport, request: Any, error_of: Callable[[Any], int] | None = None
) -> Any:
    """Send ``request`` to the controller Metadata names (any broker while none is known).
    The controller may have moved since metadata was read: when the broker named cannot be
    reached, or answers NOT_CONTROLLER (``error_of`` reads a response's top-level error code), it
    is looked up again and the request sent once more (a second failure is the caller's)."""
    try:
        response = await _send_to_controller(transport, request, refresh=False)
    except KafkaConnectionError:
        return await _send_to_controller(transport, request, refresh=True)
    if error_of is not None and error_of(response) == ErrorCode.NOT_CONTROLLER:
        response = await _send_to_controller(transport, request, refresh=True)
    return response


async def _send_to_controller(transport: Transport, request: Any, *, refresh: bool) -> Any:
    controller = transport.metadata.controller_id
    if refresh or controller < 0 or controller not in transport.metadata.brokers:
        await transport.refresh_metadata([])
        controller = transport.metadata.controller_id
    if controller >= 0 and controller in transport.metadata.brokers:
        return await transport.send(controller, request)
    return await transport.send_any(request)


class Admin:
    """Synchronous admin client. Every method raises a ``KafkaError`` subclass on failure."""

    def __init__(self, config: Mapping[str, Any] | None = None, /, **settings: Any) -> None:
        self.config = AdminConfig.from_settings(config, **settings)
        self._loop_thread = LoopThread(f"strom-admin-{self.config.client_id}")
        self._transport: Transport = self._loop_thread.run_or_stop(self._make_transport())
        self._closed = False

    async def _make_transport(self) -> Transport:
        return Transport(self.config)

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        # A little over request.timeout.ms: the loop enforces the real timeouts itself.
        return self._loop_thread.run(coroutine, timeout_s=self.config.request_timeout_ms / 1000 * 2 + 5)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._run(self._transport.close())
        self._loop_thread.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    async def _to_controller(self, request: Any, error_of: Callable[[Any], int] | None = None) -> Any:
        return await send_to_controller(self._transport, request, error_of)

    # -- topics --------------------------------------------------------------------------------

    def create_topics(
        self, topics: Iterable[NewTopic], validate_only: bool = False, timeout_ms: int = 30_000
    ) -> None:
        request = CreateTopicsRequest(
            topics=[
                CreateTopicsRequest.CreatableTopic(
                    name=topic.name,
                    num_partitions=topic.num_partitions,
                    replication_factor=topic.replication_factor,
                    assignments=[
                        CreateTopicsRequest.CreatableReplicaAssignment(
                            partition_index=index, broker_ids=list(brokers)
                        )
                        for index, brokers in sorted(topic.replica_assignment.items())
                    ],
                    configs=[
                        CreateTopicsRequest.CreatableTopicConfig(name=name, value=value)
                        for name, value in topic.config.items()
                    ],
                )
                for topic in topics
            ],
            timeout_ms=timeout_ms,
            validate_only=validate_only,
        )
        response = self._run(self._to_controller(request))
        for result in response.topics:
            _raise_for(result.error_code, result.error_message, f"create topic {result.name!r}")

    def delete_topics(self, names: Iterable[str], timeout_ms: int = 30_000) -> None:
        names = list(names)
        request = DeleteTopicsRequest(
            topics=[DeleteTopicsRequest.DeleteTopicState(name=name) for name in names],
            topic_names=names,
            timeout_ms=timeout_ms,
        )
        response = self._run(self._to_controller(request))
        for result in response.responses:
            _raise_for(result.error_code, result.error_message, f"delete topic {result.name!r}")

    def create_partitions(
        self, new_totals: Mapping[str, int], validate_only: bool = False, timeout_ms: int = 30_000
    ) -> None:
        """Grow each topic to the given total number of partitions."""
        request = CreatePartitionsRequest(
            topics=[
                CreatePartitionsRequest.CreatePartitionsTopic(name=name, count=total, assignments=None)
                for name, total in new_totals.items()
            ],
            timeout_ms=timeout_ms,
            validate_only=validate_only,
        )
        response = self._run(self._to_controller(request))
        for result in response.results:
            _raise_for(result.error_code, result.error_message, f"create partitions for {result.name!r}")

    def list_topics(self, include_internal: bool = False) -> list[str]:
        async def fetch() -> list[str]:
            await self._transport.refresh_metadata(None)
            return sorted(
                name
                for name, info in self._transport.metadata.topics.items()
                if include_internal or not info.is_internal
            )

        return self._run(fetch())

    def describe_topics(self, names: Iterable[str]) -> dict[str, TopicDescription]:
        names = list(names)

        async def fetch() -> dict[str, TopicDescription]:
            await self._transport.refresh_metadata(names)
            descriptions: dict[str, TopicDescription] = {}
            for name in names:
                info = self._transport.metadata.topics.get(name)
                if info is None:
                    raise error_for_code(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, context=f"topic {name!r}")
                _raise_for(info.error_code, None, f"topic {name!r}")
                descriptions[name] = _topic_description(name, info)
            return descriptions

        return self._run(fetch())

    def describe_all_topics(self, include_internal: bool = False) -> dict[str, TopicDescription]:
        """Every topic (the ones ``list_topics`` names), described from the same one Metadata round:
        ``describe_topics(list_topics())`` asks the cluster twice."""

        async def fetch() -> dict[str, TopicDescription]:
            await self._transport.refresh_metadata(None)
            return {
                name: _topic_description(name, info)
                for name, info in sorted(self._transport.metadata.topics.items())
                if include_internal or not info.is_internal
            }

        return self._run(fetch())

    def describe_cluster(self) -> ClusterDescription:
        async def fetch() -> ClusterDescription:
            transport = self._transport
            if transport.ready_channel(transport.least_loaded_node()) is None:
                await transport.refresh_metadata([])
            node = transport.least_loaded_node()
            channel = await transport.channel(node)
            if channel.connection.supports(DescribeClusterRequest.API_KEY):
                response = await transport.send(node, DescribeClusterRequest())
                _raise_for(response.error_code, response.error_message, "describe cluster")
                return ClusterDescription(
                    response.cluster_id,
                    response.controller_id,
                    [
                        BrokerNode(broker.broker_id, broker.host, broker.port, broker.rack)
                        for broker in response.brokers
                    ],
                )
            await transport.refresh_metadata([])
            metadata = transport.metadata
            return ClusterDescription(
                metadata.cluster_id,
                metadata.controller_id,
                sorted(metadata.brokers.values(), key=lambda b: b.node_id),
            )

        return self._run(fetch())

    # -- partition reassignments (KIP-455) -----------------------------------------------------

    def alter_partition_reassignments(
        self,
        reassignments: Mapping[TopicPartition, Sequence[int] | None],
        timeout_ms: int = 30_000,
    ) -> dict[TopicPartition, BrokerResponseError | None]:
        """Move each partition to new replicas (broker ids, the preferred leader first), or with
        None cancel its reassignment in progress (its replicas go back to the original ones). Sent
        to the controller, which answers once the move is recorded; the joining replicas then copy
        the log and the leaving ones drop it when those are in the ISR (``list_partition_reassignments``
        shows the move until it ends).

        Returns each partition's outcome: None when accepted, else its error, not raised
        (INVALID_REPLICA_ASSIGNMENT: a broker not registered, duplicates, no replicas;
        UNKNOWN_TOPIC_OR_PARTITION; NO_REASSIGNMENT_IN_PROGRESS for a cancellation). An error of the
        whole request (the controller unknown, CLUSTER_AUTHORIZATION_FAILED) is raised."""
        wanted = {
            TopicPartition(*tp): None if replicas is None else list(replicas)
            for tp, replicas in reassignments.items()
        }
        if not wanted:
            return {}
        request = alter_partition_reassignments_request(wanted, timeout_ms)
        response = self._run(self._to_controller(request, lambda answer: answer.error_code))
        return reassignment_errors_from(response, wanted)

    def list_partition_reassignments(
        self, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, PartitionReassignment]:
        """The reassignments in progress (of ``partitions``, or of every partition), from the
        controller; a partition not being moved, or one that does not exist, is left out."""
        wanted = None if partitions is None else [TopicPartition(*tp) for tp in partitions]
        if wanted is not None and not wanted:
            return {}
        request = list_partition_reassignments_request(wanted)
        return reassignments_from(self._run(self._to_controller(request, lambda answer: answer.error_code)))

    # -- ACLs ----------------------------------------------------------------------------------

    def create_acls(self, bindings: Iterable[AclBinding]) -> None:
        """Create the bindings (one already there is no error); raises for the first one refused
        (SECURITY_DISABLED without an authorizer, CLUSTER_AUTHORIZATION_FAILED without ALTER on
        the cluster, INVALID_REQUEST for a binding that cannot exist)."""
        bindings = list(bindings)
        request = CreateAclsRequest(
            creations=[
                CreateAclsRequest.AclCreation(
                    resource_type=pattern.resource_type,
                    resource_name=pattern.name,
                    resource_pattern_type=pattern.pattern_type,
                    principal=entry.principal,
                    host=entry.host,
                    operation=entry.operation,
                    permission_type=entry.permission,
                )
                for pattern, entry in bindings
            ]
        )
        response = self._run(self._transport.send_any(request))
        for binding, result in zip(bindings, response.results, strict=True):
            _raise_for(
                result.error_code, result.error_message, f"create ACL {binding.pattern} {binding.entry}"
            )

    def describe_acls(self, acl_filter: AclBindingFilter | None = None) -> list[AclBinding]:
        """The bindings the filter selects (every binding without one)."""
        wanted = acl_filter if acl_filter is not None else AclBindingFilter.everything()
        request = DescribeAclsRequest(
            resource_type_filter=wanted.resource_type,
            resource_name_filter=wanted.name,
            pattern_type_filter=wanted.pattern_type,
            principal_filter=wanted.principal,
            host_filter=wanted.host,
            operation=wanted.operation,
            permission_type=wanted.permission,
        )
        response = self._run(self._transport.send_any(request))
        _raise_for(response.error_code, response.error_message, "describe ACLs")
        return [
            binding_from_wire(
                resource.resource_type,
                resource.resource_name,
                resource.pattern_type,
                acl.principal,
                acl.host,
                acl.operation,
                acl.permission_type,
            )
            for resource in response.resources
            for acl in resource.acls
        ]

    def delete_acls(self, filters: Iterable[AclBindingFilter]) -> list[AclBinding]:
        """Delete every binding a filter selects; the bindings deleted (each once)."""
        filters = list(filters)
        request = DeleteAclsRequest(
            filters=[
                DeleteAclsRequest.DeleteAclsFilter(
                    resource_type_filter=wanted.resource_type,
                    resource_name_filter=wanted.name,
                    pattern_type_filter=wanted.pattern_type,
                    principal_filter=wanted.principal,
                    host_filter=wanted.host,
                    operation=wanted.operation,
                    permission_type=wanted.permission,
                )
                for wanted in filters
            ]
        )
        response = self._run(self._transport.send_any(request))
        deleted: dict[AclBinding, None] = {}
        for result in response.filter_results:
            _raise_for(result.error_code, result.error_message, "delete ACLs")
            for matching in result.matching_acls:
                _raise_for(matching.error_code, matching.error_message, "delete ACL")
                binding = binding_from_wire(
                    matching.resource_type,
                    matching.resource_name,
                    matching.pattern_type,
                    matching.principal,
                    matching.host,
                    matching.operation,
                    matching.permission_type,
                )
                deleted[binding] = None
        return list(deleted)

    # -- configs -------------------------------------------------------------------------------

    def describe_configs(
        self, resources: Iterable[ConfigResource], keys: Iterable[str] | None = None
    ) -> dict[ConfigResource, dict[str, ConfigEntry]]:
        resources = list(resources)
        request = DescribeConfigsRequest(
            resources=[
                DescribeConfigsRequest.DescribeConfigsResource(
                    resource_type=int(resource.resource_type),
                    resource_name=resource.name,
                    configuration_keys=None if keys is None else list(keys),
                )
                for resource in resources
            ]
        )
        response = self._run(self._transport.send_any(request))
        described: dict[ConfigResource, dict[str, ConfigEntry]] = {}
        for result in response.results:
            resource = ConfigResource(ConfigResourceType(result.resource_type), result.resource_name)
            _raise_for(result.error_code, result.error_message, f"describe configs of {resource}")
            described[resource] = {
                entry.name: ConfigEntry(
                    entry.name,
                    entry.value,
                    entry.read_only,
                    entry.is_default,
                    entry.is_sensitive,
                    entry.config_source,
                )
                for entry in result.configs
            }
        return described

    def alter_configs(
        self, configs: Mapping[ConfigResource, Mapping[str, str | None]], validate_only: bool = False
    ) -> None:
        """Replace each resource's whole dynamic config (keys not given return to their default)."""
        request = AlterConfigsRequest(
            resources=[
                AlterConfigsRequest.AlterConfigsResource(
                    resource_type=int(resource.resource_type),
                    resource_name=resource.name,
                    configs=[
                        AlterConfigsRequest.AlterableConfig(name=name, value=value)
                        for name, value in entries.items()
                    ],
                )
                for resource, entries in configs.items()
            ],
            validate_only=validate_only,
        )
        response = self._run(self._transport.send_any(request))
        for result in response.responses:
            _raise_for(result.error_code, result.error_message, f"alter configs of {result.resource_name!r}")

    def incremental_alter_configs(
        self,
        changes: Mapping[ConfigResource, Iterable[tuple[str, AlterConfigOperation, str | None]]],
        validate_only: bool = False,
    ) -> None:
        """Apply (name, operation, value) changes, leaving other keys alone."""
        from strom.protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest

        request = IncrementalAlterConfigsRequest(
            resources=[
                IncrementalAlterConfigsRequest.AlterConfigsResource(
                    resource_type=int(resource.resource_type),
                    resource_name=resource.name,
                    configs=[
                        IncrementalAlterConfigsRequest.AlterableConfig(
                            name=name, config_operation=int(operation), value=value
                        )
                        for name, operation, value in entries
                    ],
                )
                for resource, entries in changes.items()
            ],
            validate_only=validate_only,
        )
        response = self._run(self._transport.send_any(request))
        for result in response.responses:
            _raise_for(result.error_code, result.error_message, f"alter configs of {result.resource_name!r}")

    # -- users (SCRAM credentials, KIP-554) ------------------------------------------------------

    def describe_user_scram_credentials(
        self, users: Iterable[str] | None = None
    ) -> dict[str, list[ScramCredentialInfo]]:
        """Each user's SCRAM mechanisms and iteration counts (``users`` None: every user with a
        credential). A named user without any maps to an empty list."""
        request = describe_user_scram_credentials_request(users)
        return user_scram_credentials_from(self._run(self._transport.send_any(request)))

    def alter_user_scram_credentials(
        self, alterations: Iterable[UserScramCredentialUpsertion | UserScramCredentialDeletion]
    ) -> None:
        """Add, replace or delete credentials. An upsertion's password is salted and hashed here,
        with a random salt: the broker gets the salted password, never the password."""
        alterations = list(alterations)
        if not alterations:
            return
        request = alter_user_scram_credentials_request(alterations)
        response = self._run(self._to_controller(request))
        raise_for_alter(response, [alteration.user for alteration in alterations])

    # -- records and offsets -------------------------------------------------------------------

    def delete_records(
        self, before: Mapping[TopicPartition, int], timeout_ms: int = 30_000
    ) -> dict[TopicPartition, int]:
        """Delete records below each offset (-1: the high watermark); returns the new low watermarks."""
        wanted = {TopicPartition(*tp): offset for tp, offset in before.items()}

        async def attempt() -> dict[TopicPartition, int]:
            transport = self._transport
            await transport.refresh_metadata(sorted({tp.topic for tp in wanted}))
            by_leader: dict[int, list[TopicPartition]] = {}
            for topic_partition in wanted:
                leader = transport.metadata.leader_for(topic_partition)
                if leader is None:
                    raise error_for_code(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, context=str(topic_partition))
                by_leader.setdefault(leader, []).append(topic_partition)

            async def ask(leader: int, topic_partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
                topics: dict[str, DeleteRecordsRequest.DeleteRecordsTopic] = {}
                for tp in topic_partitions:
                    topics.setdefault(
                        tp.topic, DeleteRecordsRequest.DeleteRecordsTopic(name=tp.topic)
                    ).partitions.append(
                        DeleteRecordsRequest.DeleteRecordsPartition(
                            partition_index=tp.partition, offset=wanted[tp]
                        )
                    )
                response = await transport.send(
                    leader, DeleteRecordsRequest(topics=list(topics.values()), timeout_ms=timeout_ms)
                )
                low_watermarks: dict[TopicPartition, int] = {}
                for topic in response.topics:
                    for partition in topic.partitions:
                        tp = TopicPartition(topic.name, partition.partition_index)
                        _raise_for(partition.error_code, None, f"delete records of {tp}")
                        low_watermarks[tp] = partition.low_watermark
                return low_watermarks

            results: dict[TopicPartition, int] = {}
            for answer in await asyncio.gather(*(ask(leader, tps) for leader, tps in by_leader.items())):
                results.update(answer)
            return results

        return self._run(self._transport.with_retries(attempt))

    def list_offsets(
        self, specs: Mapping[TopicPartition, str | int], isolation_level: str = "read_uncommitted"
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """For each partition: ``"earliest"``, ``"latest"`` or a timestamp in ms -> the offset
        (None when no record is at or after the timestamp)."""
        converted = {TopicPartition(*tp): timestamp_spec(spec) for tp, spec in specs.items()}
        level = {"read_uncommitted": 0, "read_committed": 1}.get(isolation_level)
        if level is None:
            raise KafkaError(
                f"isolation level must be read_uncommitted or read_committed, not {isolation_level!r}"
            )
        return self._run(list_offsets(self._transport, converted, isolation_level=level))

    # -- consumer groups -----------------------------------------------------------------------

    async def _version(self, node_id: int, api_key: int) -> int:
        """The version the connection to ``node_id`` encodes ``api_key`` at (connecting if needed)."""
        channel = await self._transport.channel(node_id)
        return channel.connection.version_for(api_key)

    async def _find_coordinator(self, key: str, key_type: int = GROUP_KEY_TYPE) -> int:
        """The connection id of the coordinator of a group (or, with ``TRANSACTION_KEY_TYPE``, of
        a transactional id), asked afresh every time: callers retry NOT_COORDINATOR and friends
        by calling this again."""
        transport = self._transport
        node = transport.least_loaded_node()
        version = await self._version(node, FindCoordinatorRequest.API_KEY)
        response = await transport.send(node, find_coordinator_request(key, version, key_type))
        coordinator = coordinator_from_response(response, key, version, key_type)
        connection_id = _COORDINATOR_CONNECTION_BASE - coordinator.node_id
        transport.register_address(connection_id, coordinator.host, coordinator.port)
        return connection_id

    def _on_coordinator(
        self, key: str, operation: Callable[[int], Awaitable[T]], key_type: int = GROUP_KEY_TYPE
    ) -> T:
        """Run ``operation(coordinator connection id)``, finding the coordinator again and retrying
        while the answer is retriable (coordinator moving or loading) within request.timeout.ms."""

        async def attempt() -> T:
            return await operation(await self._find_coordinator(key, key_type))

        return self._run(self._transport.with_retries(attempt))

    def log_dir_sizes(self, topics: Iterable[str] | None = None) -> dict[TopicPartition, int]:
        """Bytes on disk of each partition of ``topics`` (every topic when None), summed over the
        brokers that hold a replica (DescribeLogDirs)."""
        wanted = None if topics is None else sorted(set(topics))

        def request_for_wanted() -> DescribeLogDirsRequest:
            if wanted is None:
                return DescribeLogDirsRequest(topics=None)
            entries = []
            for name in wanted:
                info = self._transport.metadata.topics.get(name)
                if info is None:
                    raise error_for_code(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, context=f"topic {name!r}")
                entries.append(
                    DescribeLogDirsRequest.DescribableLogDirTopic(
                        topic=name, partitions=sorted(info.partitions)
                    )
                )
            return DescribeLogDirsRequest(topics=entries)

        async def ask(node_id: int) -> list[tuple[TopicPartition, int]]:
            response: DescribeLogDirsResponse = await self._transport.send(node_id, request_for_wanted())
            sizes: list[tuple[TopicPartition, int]] = []
            for result in response.results:
                _raise_for(result.error_code, None, f"describe log dir {result.log_dir} on broker {node_id}")
                for topic in result.topics:
                    sizes.extend(
                        (TopicPartition(topic.name, partition.partition_index), partition.partition_size)
                        for partition in topic.partitions
                    )
            return sizes

        async def attempt() -> dict[TopicPartition, int]:
            await self._transport.refresh_metadata(wanted or [])
            answers = await asyncio.gather(
                *(ask(node_id) for node_id in sorted(self._transport.metadata.brokers))
            )
            totals: dict[TopicPartition, int] = {}
            for answer in answers:
                for topic_partition, size in answer:
                    totals[topic_partition] = totals.get(topic_partition, 0) + size
            return totals

        return self._run(self._transport.with_retries(attempt))

    def list_groups(
        self, states: Iterable[str] | None = None, types: Iterable[str] | None = None
    ) -> list[GroupListing]:
        """Every group on every broker, optionally only those in ``states`` ("Stable", "Empty",
        "PreparingRebalance", "CompletingRebalance", "Dead"; a consumer-protocol group's
        "Assigning", "Reconciling") and of ``types`` ("classic", "consumer"), sorted by group id."""
        wanted_states = None if states is None else sorted(set(states))
        wanted_types = None if types is None else sorted(set(types))

        async def ask(node_id: int) -> list[GroupListing]:
            version = await self._version(node_id, ListGroupsRequest.API_KEY)
            if wanted_states and version < 4:
                raise UnsupportedVersionError(
                    f"filtering groups by state needs ListGroups v4+; broker {node_id} offers v{version}"
                )
            if wanted_types and version < 5:
                raise UnsupportedVersionError(
                    f"filtering groups by type needs ListGroups v5+; broker {node_id} offers v{version}"
                )
            request = ListGroupsRequest()
            if version >= 4:
                request.states_filter = wanted_states or []
            if version >= 5:
                request.types_filter = wanted_types or []
            response: ListGroupsResponse = await self._transport.send(node_id, request)
            _raise_for(response.error_code, None, f"list groups on broker {node_id}")
            return [
                GroupListing(
                    group.group_id,
                    group.protocol_type,
                    group.group_state if version >= 4 else None,
                    group.group_type if version >= 5 else None,
                )
                for group in response.groups
            ]

        async def attempt() -> list[GroupListing]:
            await self._transport.refresh_metadata([])
            answers = await asyncio.gather(
                *(ask(node_id) for node_id in sorted(self._transport.metadata.brokers))
            )
            return sorted(
                (listing for answer in answers for listing in answer), key=lambda each: each.group_id
            )

        return self._run(self._transport.with_retries(attempt))

    def describe_groups(self, group_ids: Iterable[str]) -> dict[str, GroupDescription]:
        """State, protocol and members of each group. A group that does not exist is described as
        the broker says (state "Dead", no members)."""
        descriptions: dict[str, GroupDescription] = {}
        for group_id in dict.fromkeys(group_ids):
            descriptions[group_id] = self._describe_group(group_id)
        return descriptions

    def _describe_group(self, group_id: str) -> GroupDescription:
        async def describe(coordinator: int) -> GroupDescription:
            response: DescribeGroupsResponse = await self._transport.send(
                coordinator, DescribeGroupsRequest(groups=[group_id])
            )
            for described in response.groups:
                if described.group_id == group_id:
                    return group_description_from(described)
            raise ProtocolError(f"describe group {group_id!r}: the response does not name the group")

        return self._on_coordinator(group_id, describe)

    def describe_consumer_protocol_groups(
        self, group_ids: Iterable[str]
    ) -> dict[str, ConsumerGroupDescription | None]:
        """Each group as a consumer-protocol group (ConsumerGroupDescribe): member epochs, current
        and target assignments. None for a group that is not one (a classic group, a group that
        does not exist) or when its coordinator does not offer ConsumerGroupDescribe."""
        descriptions: dict[str, ConsumerGroupDescription | None] = {}
        for group_id in dict.fromkeys(group_ids):
            descriptions[group_id] = self._describe_consumer_protocol_group(group_id)
        return descriptions

    def _describe_consumer_protocol_group(self, group_id: str) -> ConsumerGroupDescription | None:
        async def describe(coordinator: int) -> ConsumerGroupDescription | None:
            try:
                await self._version(coordinator, ConsumerGroupDescribeRequest.API_KEY)
            except UnsupportedVersionError:
                return None
            response: ConsumerGroupDescribeResponse = await self._transport.send(
                coordinator, ConsumerGroupDescribeRequest(group_ids=[group_id])
            )
            for described in response.groups:
                if described.group_id == group_id:
                    return consumer_group_description_from(described)
            raise ProtocolError(f"describe group {group_id!r}: the response does not name the group")

        return self._on_coordinator(group_id, describe)

    def group_history(self, group_id: str) -> list[RebalanceEntry]:
        """The group's rebalances as its coordinator recorded them, oldest first (the last one with
        ``end_ms`` -1 if one is under way). strom-only (StromGroupHistory, API key 32100): a broker
        that does not advertise it raises UnsupportedVersionError saying so."""

        async def ask(coordinator: int) -> list[RebalanceEntry]:
            try:
                version = await self._version(coordinator, StromGroupHistoryRequest.API_KEY)
            except UnsupportedVersionError:
                raise UnsupportedVersionError(
                    "the group's coordinator keeps no rebalance history (a strom broker does)"
                ) from None
            response: StromGroupHistoryResponse = await self._transport.send(
                coordinator, StromGroupHistoryRequest(group_id=group_id)
            )
            assert version == 0
            _raise_for(response.error_code, response.error_message, f"history of group {group_id!r}")
            return [decode_entry(entry) for entry in response.entries]

        return self._on_coordinator(group_id, ask)

    def delete_groups(self, group_ids: Iterable[str]) -> None:
        """Delete each group and its offsets. Refused (NON_EMPTY_GROUP) while a group has members;
        GROUP_ID_NOT_FOUND for a group that does not exist. Groups are deleted in the order given;
        the first refusal raises, naming its group."""
        for group_id in dict.fromkeys(group_ids):

            async def delete(coordinator: int, group_id: str = group_id) -> None:
                response: DeleteGroupsResponse = await self._transport.send(
                    coordinator, DeleteGroupsRequest(groups_names=[group_id])
                )
                for result in response.results:
                    if result.group_id == group_id:
                        _raise_for(result.error_code, None, f"delete group {group_id!r}")
                        return
                raise ProtocolError(f"delete group {group_id!r}: the response does not name the group")

            self._on_coordinator(group_id, delete)

    def list_group_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        require_stable: bool = False,
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets (of ``partitions``, or all); partitions without a committed
        offset are left out. With ``require_stable`` (KIP-447) the answer waits, within
        request.timeout.ms, until no transaction holds offsets of the group pending: what a
        transaction is committing is never read half-done."""
        wanted = None if partitions is None else [TopicPartition(*tp) for tp in partitions]

        async def fetch(coordinator: int) -> dict[TopicPartition, OffsetAndMetadata]:
            version = await self._version(coordinator, OffsetFetchRequest.API_KEY)
            response = await self._transport.send(
                coordinator, offset_fetch_request(group_id, wanted, version, require_stable)
            )
            return offsets_from_fetch_response(response, group_id, version)

        return self._on_coordinator(group_id, fetch)

    def alter_group_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, int | OffsetAndMetadata]
    ) -> None:
        """Commit ``offsets`` for the group from outside it. The coordinator refuses this while the
        group has members (raised as UNKNOWN_MEMBER_ID, with that explanation)."""
        committed = {
            TopicPartition(*tp): value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(value)
            for tp, value in offsets.items()
        }
        if not committed:
            return

        async def commit(coordinator: int) -> None:
            version = await self._version(coordinator, OffsetCommitRequest.API_KEY)
            response = await self._transport.send(
                coordinator, offset_commit_request(group_id, committed, version)
            )
            raise_for_commit(response, group_id)

        self._on_coordinator(group_id, commit)

    def delete_group_offsets(self, group_id: str, partitions: Iterable[TopicPartition]) -> None:
        """Delete the group's committed offsets of ``partitions``. Refused per partition
        (GROUP_SUBSCRIBED_TO_TOPIC) for topics an active member subscribes to."""
        wanted = [TopicPartition(*tp) for tp in partitions]
        if not wanted:
            return

        async def delete(coordinator: int) -> None:
            response = await self._transport.send(coordinator, offset_delete_request(group_id, wanted))
            raise_for_offset_delete(response, group_id)

        self._on_coordinator(group_id, delete)

    def reset_group_offsets(
        self,
        group_id: str,
        to: str | int | Mapping[TopicPartition, int],
        partitions: Iterable[TopicPartition] | None = None,
        topics: Iterable[str] | None = None,
        dry_run: bool = False,
    ) -> dict[TopicPartition, int]:
        """Move the group's committed offsets and return the new ones (with ``dry_run`` only return
        them). ``to``: "earliest", "latest", a timestamp in ms, or explicit offsets per partition
        (kept within each partition's earliest..latest).

        Which partitions: the keys of explicit offsets; else ``partitions``; else every partition of
        ``topics``; else every partition the group has a committed offset for. Refused (NON_EMPTY_GROUP)
        while the group has members, as Kafka's tool refuses: they would overwrite the reset with
        their next commit.
        """
        description = self._describe_group(group_id)
        if description.members or description.state not in _INACTIVE_GROUP_STATES:
            raise error_for_code(
                ErrorCode.NON_EMPTY_GROUP,
                f"the group is {description.state} with {len(description.members)} member(s); "
                "stop its consumers before resetting its offsets",
                context=f"reset offsets of group {group_id!r}",
            )
        if isinstance(to, Mapping):
            explicit = {TopicPartition(*tp): offset for tp, offset in to.items()}
            chosen = sorted(explicit)
            target: str | int | Mapping[TopicPartition, int] = explicit
        else:
            timestamp_spec(to)  # refuses anything but "earliest", "latest" or a timestamp early
            target = to
            if partitions is not None:
                chosen = sorted({TopicPartition(*tp) for tp in partitions})
            elif topics is not None:
                chosen = self._partitions_of(list(topics))
            else:
                chosen = sorted(self.list_group_offsets(group_id))
        if not chosen:
            return {}
        earliest = self._offsets_at(chosen, EARLIEST_TIMESTAMP)
        latest = self._offsets_at(chosen, LATEST_TIMESTAMP)
        at_timestamp: dict[TopicPartition, int | None] = {}
        if isinstance(target, int) and not isinstance(target, bool):
            at_timestamp = self._offsets_at(chosen, target)
        targets = reset_targets(
            target,
            chosen,
            {tp: offset for tp, offset in earliest.items() if offset is not None},
            {tp: offset for tp, offset in latest.items() if offset is not None},
            at_timestamp,
        )
        if not dry_run:
            self.alter_group_offsets(group_id, targets)
        return targets

    def _offsets_at(
        self, partitions: list[TopicPartition], timestamp: int
    ) -> dict[TopicPartition, int | None]:
        found = self._run(list_offsets(self._transport, dict.fromkeys(partitions, timestamp)))
        return {tp: None if answer is None else answer.offset for tp, answer in found.items()}

    def _partitions_of(self, topics: list[str]) -> list[TopicPartition]:
        described = self.describe_topics(topics)
        return [
            TopicPartition(name, partition.partition)
            for name, description in sorted(described.items())
            for partition in description.partitions
        ]

    # -- transactions --------------------------------------------------------------------------

    def list_transactions(
        self,
        states: Iterable[str] | None = None,
        producer_ids: Iterable[int] | None = None,
        duration_ms: int | None = None,
    ) -> list[TransactionListing]:
        """Every transactional id on every broker (ListTransactions), sorted; optionally only those
        in ``states`` ("Ongoing", "Empty", "CompleteCommit", ...), of ``producer_ids``, or whose
        open transaction has run longer than ``duration_ms`` (ListTransactions v1+)."""
        wanted_states = sorted(set(states or ()))
        wanted_producers = sorted(set(producer_ids or ()))
        if duration_ms is not None and duration_ms < 0:
            raise ValueError(f"duration_ms must not be negative, not {duration_ms}")

        async def ask(node_id: int) -> list[TransactionListing]:
            version = await self._version(node_id, ListTransactionsRequest.API_KEY)
            if duration_ms is not None and version < 1:
                raise UnsupportedVersionError(
                    f"filtering transactions by duration needs ListTransactions v1+; broker {node_id} offers v{version}"
                )
            request = ListTransactionsRequest(
                state_filters=wanted_states,
                producer_id_filters=wanted_producers,
                duration_filter=-1 if duration_ms is None else duration_ms,
            )
            response: ListTransactionsResponse = await self._transport.send(node_id, request)
            _raise_for(response.error_code, None, f"list transactions on broker {node_id}")
            if response.unknown_state_filters:
                raise KafkaError(
                    f"unknown transaction state {', '.join(response.unknown_state_filters)} (the states are "
                    "Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort, "
                    "PrepareEpochFence, Dead)"
                )
            return [
                TransactionListing(listed.transactional_id, listed.producer_id, listed.transaction_state)
                for listed in response.transaction_states
            ]

        async def attempt() -> list[TransactionListing]:
            await self._transport.refresh_metadata([])
            answers = await asyncio.gather(
                *(ask(node_id) for node_id in sorted(self._transport.metadata.brokers))
            )
            return sorted(
                (listing for answer in answers for listing in answer), key=lambda each: each.transactional_id
            )

        return self._run(self._transport.with_retries(attempt))

    def describe_transactions(self, transactional_ids: Iterable[str]) -> dict[str, TransactionDescription]:
        """State, producer, timeout and partitions of each transactional id, from its coordinator.
        Raises ``BrokerResponseError`` (TRANSACTIONAL_ID_NOT_FOUND) for an id the cluster does not know."""
        descriptions: dict[str, TransactionDescription] = {}
        for transactional_id in dict.fromkeys(transactional_ids):
            descriptions[transactional_id] = self._describe_transaction(transactional_id)
        return descriptions

    def _describe_transaction(self, transactional_id: str) -> TransactionDescription:
        async def describe(coordinator: int) -> TransactionDescription:
            response: DescribeTransactionsResponse = await self._transport.send(
                coordinator, DescribeTransactionsRequest(transactional_ids=[transactional_id])
            )
            for state in response.transaction_states:
                if state.transactional_id == transactional_id:
                    return transaction_description_from(state, _COORDINATOR_CONNECTION_BASE - coordinator)
            raise ProtocolError(
                f"describe transactional id {transactional_id!r}: the response does not name it"
            )

        return self._on_coordinator(transactional_id, describe, TRANSACTION_KEY_TYPE)

    # -- client quotas (seed 003 §2.9; Kafka's DescribeClientQuotas / AlterClientQuotas) ----------

    def describe_client_quotas(
        self, components: Iterable[QuotaFilterComponent] = (), strict: bool = False
    ) -> dict[QuotaEntityKey, dict[str, float]]:
        """The quotas of every entity the filter matches (no components: every entity; ``strict``:
        only entities with no entity type the filter does not name). An entity is a sorted tuple of
        (entity type, name) pairs, ``None`` naming the default: ``(("user", "alice"),)``."""
        request = DescribeClientQuotasRequest(
            components=[
                DescribeClientQuotasRequest.ComponentData(
                    entity_type=component.entity_type,
                    match_type=int(component.match_type),
                    match=component.match,
                )
                for component in components
            ],
            strict=strict,
        )
        response: DescribeClientQuotasResponse = self._run(self._transport.send_any(request))
        _raise_for(response.error_code, response.error_message, "describe client quotas")
        return {
            quota_entity_key((part.entity_type, part.entity_name) for part in entry.entity): {
                value.key: value.value for value in entry.values
            }
            for entry in response.entries or []
        }

    def alter_client_quotas(
        self, alterations: Mapping[QuotaEntityKey, Mapping[str, float | None]], validate_only: bool = False
    ) -> None:
        """Set (a value) or remove (``None``) quota keys of each entity; raises the first entry's error."""
        request = AlterClientQuotasRequest(
            entries=[
                AlterClientQuotasRequest.EntryData(
                    entity=[
                        AlterClientQuotasRequest.EntityData(entity_type=entity_type, entity_name=name)
                        for entity_type, name in entity
                    ],
                    ops=[
                        AlterClientQuotasRequest.OpData(key=key, value=value or 0.0, remove=value is None)
                        for key, value in ops.items()
                    ],
                )
                for entity, ops in alterations.items()
            ],
            validate_only=validate_only,
        )
        response: AlterClientQuotasResponse = self._run(self._transport.send_any(request))
        for entry in response.entries:
            entity = quota_entity_key((part.entity_type, part.entity_name) for part in entry.entity)
            _raise_for(entry.error_code, entry.error_message, f"alter client quotas of {entity}")
