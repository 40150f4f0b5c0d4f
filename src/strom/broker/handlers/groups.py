"""FindCoordinator 0-6 and the group APIs, which hand each request to the group coordinator.

OffsetCommit and OffsetFetch go up to v9 (KIP-848: the member id and epoch of a consumer-protocol
group's member), ListGroups to v5 (its group type filter); the consumer group protocol's own APIs
are in ``consumer_groups``. A classic request naming a consumer-protocol group is answered as the
coordinator decides (as Kafka 4 does), passed through unchanged.

The coordinator answers some requests at once and parks others (a JoinGroup waits for the
rebalance, a SyncGroup for the leader's assignment, an OffsetCommit for its write); each handler
turns the coordinator's ``respond`` callback into an awaited future. Only this broker's requests
for this connection wait: other connections keep being served.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from strom.broker.authorization import cluster_allowed
from strom.broker.context import RequestContext
from strom.broker.metrics import add_remote_wait
from strom.broker.refused import Refused
from strom.broker.registry import handles
from strom.broker.replication import BrokerView
from strom.protocol.acl import GROUP_OPERATION_LIST, GROUP_OPERATIONS, AclOperation
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.delete_groups import DeleteGroupsRequest, DeleteGroupsResponse
from strom.protocol.messages.describe_groups import DescribeGroupsRequest, DescribeGroupsResponse
from strom.protocol.messages.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from strom.protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from strom.protocol.messages.join_group import JoinGroupRequest, JoinGroupResponse
from strom.protocol.messages.leave_group import LeaveGroupRequest, LeaveGroupResponse
from strom.protocol.messages.list_groups import ListGroupsRequest, ListGroupsResponse
from strom.protocol.messages.offset_commit import OffsetCommitRequest, OffsetCommitResponse
from strom.protocol.messages.offset_delete import OffsetDeleteRequest, OffsetDeleteResponse
from strom.protocol.messages.offset_fetch import OffsetFetchRequest, OffsetFetchResponse
from strom.protocol.messages.sync_group import SyncGroupRequest, SyncGroupResponse
from strom.protocol.messages.txn_offset_commit import TxnOffsetCommitRequest, TxnOffsetCommitResponse
from strom.security.acl import Authorizer, ResourceType

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1
BATCHED_KEYS_MIN_VERSION = 4
# DescribeGroups versions that can carry a group's authorized operations.
AUTHORIZED_OPERATIONS_MIN_VERSION = 3

Response = TypeVar("Response")
CommitRequest = TypeVar("CommitRequest", OffsetCommitRequest, TxnOffsetCommitRequest)


async def _parked(start: Callable[[Callable[[Response], None]], None]) -> Response:
    """Run ``start(respond)`` and wait until the coordinator calls ``respond`` (maybe at once)."""
    future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()

    def respond(response: Response) -> None:
        if not future.done():
            future.set_result(response)

    start(respond)
    if future.done():
        return future.result()
    parked = time.perf_counter()
    try:
        return await future
    finally:
        add_remote_wait(time.perf_counter() - parked)  # the request's RemoteTimeMs


# The helpers below take the broker's authorizer as the handler read it, once per request (None:
# authorization is off, and they cost nothing more).


def _allowed(
    authorizer: Authorizer | None,
    context: RequestContext,
    operation: AclOperation,
    resource_type: ResourceType,
    name: str,
) -> bool:
    return authorizer is None or authorizer.authorize(
        context.principal, context.client_host, operation, resource_type, name
    )


def _group_refused(
    authorizer: Authorizer | None, context: RequestContext, operation: AclOperation, group_id: str
) -> bool:
    """With authorization on: whether the principal may not perform ``operation`` on the group."""
    return authorizer is not None and not authorizer.authorize(
        context.principal, context.client_host, operation, ResourceType.GROUP, group_id
    )


def _find_one(
    authorizer: Authorizer | None, context: RequestContext, key: str, key_type: int
) -> BrokerView | Refused:
    if key_type == KEY_TYPE_TRANSACTION:
        if not key:
            return Refused(ErrorCode.INVALID_REQUEST, "the transactional id must not be empty")
        if not _allowed(authorizer, context, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
            return Refused(
                ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "not authorized for the transactional id"
            )
        return context.broker.replication.find_transaction_coordinator(key, context.listener)
    if key_type != KEY_TYPE_GROUP:
        return Refused(ErrorCode.INVALID_REQUEST, f"unknown coordinator key type {key_type}")
    if not key:
        return Refused(ErrorCode.INVALID_GROUP_ID, "the group id must not be empty")
    if _group_refused(authorizer, context, AclOperation.DESCRIBE, key):
        return Refused(ErrorCode.GROUP_AUTHORIZATION_FAILED, "not authorized to describe the group")
    return context.broker.replication.find_coordinator(key, context.listener)


@handles(FindCoordinatorRequest, FindCoordinatorResponse, 0, 6)
async def handle_find_coordinator(
    context: RequestContext, request: FindCoordinatorRequest
) -> FindCoordinatorResponse:
    """The broker leading the group's partition of ``__consumer_offsets`` (a single node: itself),
    or COORDINATOR_NOT_AVAILABLE while there is none."""
    authorizer = context.broker.authorizer
    if context.api_version >= BATCHED_KEYS_MIN_VERSION:
        coordinators = []
        for key in request.coordinator_keys:
            found = _find_one(authorizer, context, key, request.key_type)
            if isinstance(found, Refused):
                coordinators.append(
                    FindCoordinatorResponse.Coordinator(
                        key=key,
                        node_id=-1,
                        host="",
                        port=-1,
                        error_code=found.error,
                        error_message=found.message,
                    )
                )
            else:
                coordinators.append(
                    FindCoordinatorResponse.Coordinator(
                        key=key,
                        node_id=found.node_id,
                        host=found.host,
                        port=found.port,
                        error_code=ErrorCode.NONE,
                        error_message=None,
                    )
                )
        return FindCoordinatorResponse(coordinators=coordinators)
    found = _find_one(authorizer, context, request.key, request.key_type)
    if isinstance(found, Refused):
        return FindCoordinatorResponse(
            error_code=found.error,
            error_message=found.message if context.api_version >= 1 else None,
            node_id=-1,
            host="",
            port=-1,
        )
    return FindCoordinatorResponse(
        error_code=ErrorCode.NONE,
        error_message=None,
        node_id=found.node_id,
        host=found.host,
        port=found.port,
    )


@handles(JoinGroupRequest, JoinGroupResponse, 0, 9)
async def handle_join_group(context: RequestContext, request: JoinGroupRequest) -> JoinGroupResponse:
    authorizer = context.broker.authorizer
    if _group_refused(authorizer, context, AclOperation.READ, request.group_id):
        return JoinGroupResponse(
            error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
            generation_id=-1,
            protocol_name=None if context.api_version >= 7 else "",
            member_id=request.member_id,
            members=[],
        )
    coordinator = context.broker.groups.coordinator
    return await _parked(
        lambda respond: coordinator.join_group(
            request, context.api_version, context.client_id or "", "/" + context.client_host, respond
        )
    )


@handles(SyncGroupRequest, SyncGroupResponse, 0, 5)
async def handle_sync_group(context: RequestContext, request: SyncGroupRequest) -> SyncGroupResponse:
    authorizer = context.broker.authorizer
    if _group_refused(authorizer, context, AclOperation.READ, request.group_id):
        return SyncGroupResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, assignment=b"")
    coordinator = context.broker.groups.coordinator
    return await _parked(lambda respond: coordinator.sync_group(request, context.api_version, respond))


@handles(HeartbeatRequest, HeartbeatResponse, 0, 4)
async def handle_heartbeat(context: RequestContext, request: HeartbeatRequest) -> HeartbeatResponse:
    authorizer = context.broker.authorizer
    if _group_refused(authorizer, context, AclOperation.READ, request.group_id):
        return HeartbeatResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    return context.broker.groups.coordinator.heartbeat(request, context.api_version)


@handles(LeaveGroupRequest, LeaveGroupResponse, 0, 5)
async def handle_leave_group(context: RequestContext, request: LeaveGroupRequest) -> LeaveGroupResponse:
    authorizer = context.broker.authorizer
    if _group_refused(authorizer, context, AclOperation.READ, request.group_id):
        return LeaveGroupResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, members=[])
    return context.broker.groups.coordinator.leave_group(request, context.api_version)


def _unknown_partitions(
    authorizer: Authorizer | None, context: RequestContext, request: Any
) -> dict[tuple[str, int], ErrorCode]:
    """The partitions of the commit (OffsetCommit or TxnOffsetCommit) that are not to reach the
    coordinator, with their answer: those of topics the principal may not read
    (TOPIC_AUTHORIZATION_FAILED, whether they exist or not), then those that do not exist here."""
    unknown: dict[tuple[str, int], ErrorCode] = {}
    for topic in request.topics:
        if authorizer is not None and not authorizer.authorize(
            context.principal, context.client_host, AclOperation.READ, ResourceType.TOPIC, topic.name
        ):
            for partition in topic.partitions:
                unknown[(topic.name, partition.partition_index)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            continue
        metadata = context.broker.replication.topic(topic.name)
        count = metadata.partitions if metadata is not None else 0
        for partition in topic.partitions:
            if not 0 <= partition.partition_index < count:
                unknown[(topic.name, partition.partition_index)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    return unknown


PartitionErrors = list[tuple[str, list[tuple[int, int]]]]


async def _commit_existing_partitions(
    authorizer: Authorizer | None,
    context: RequestContext,
    request: CommitRequest,
    commit: Callable[[CommitRequest], Awaitable[Response]],
    build: Callable[[PartitionErrors], Response],
) -> Response:
    """Commit (OffsetCommit or TxnOffsetCommit) the partitions that exist; those that do not are
    answered UNKNOWN_TOPIC_OR_PARTITION without reaching the coordinator, as Kafka does. The
    answer, by ``build``, lists the partitions in the request's order."""
    unknown = _unknown_partitions(authorizer, context, request)
    if not unknown:
        return await commit(request)
    known = copy.copy(request)
    known.topics = []
    for topic in request.topics:
        kept = [p for p in topic.partitions if (topic.name, p.partition_index) not in unknown]
        if kept:
            known_topic = copy.copy(topic)
            known_topic.partitions = kept
            known.topics.append(known_topic)
    errors: dict[tuple[str, int], int] = dict(unknown)
    if known.topics:
        answered: Any = await commit(known)
        for answered_topic in answered.topics:
            for answered_partition in answered_topic.partitions:
                errors[(answered_topic.name, answered_partition.partition_index)] = (
                    answered_partition.error_code
                )
    by_topic: PartitionErrors = []
    for topic in request.topics:
        indexes = dict.fromkeys(
            p.partition_index for p in topic.partitions if (topic.name, p.partition_index) in errors
        )
        if indexes:
            by_topic.append((topic.name, [(index, errors.pop((topic.name, index))) for index in indexes]))
    return build(by_topic)


@handles(OffsetCommitRequest, OffsetCommitResponse, 0, 9)
async def handle_offset_commit(context: RequestContext, request: OffsetCommitRequest) -> OffsetCommitResponse:
    """Partitions that do not exist are answered UNKNOWN_TOPIC_OR_PARTITION without reaching the
    coordinator, as Kafka does (an admin's AlterConsumerGroupOffsets is this same request); the
    rest are committed, or refused as the group's state says. With authorization on, the group
    needs READ (else every partition is GROUP_AUTHORIZATION_FAILED) and each topic READ."""
    authorizer = context.broker.authorizer
    coordinator = context.broker.groups.coordinator
    if _group_refused(authorizer, context, AclOperation.READ, request.group_id):
        return _every_partition(request, ErrorCode.GROUP_AUTHORIZATION_FAILED, build_offset_commit)

    return await _commit_existing_partitions(
        authorizer,
        context,
        request,
        lambda known: _parked(
            lambda respond: coordinator.commit_offsets(known, context.api_version, respond)
        ),
        build_offset_commit,
    )


def build_offset_commit(by_topic: PartitionErrors) -> OffsetCommitResponse:
    return OffsetCommitResponse(
        topics=[
            OffsetCommitResponse.OffsetCommitResponseTopic(
                name=name,
                partitions=[
                    OffsetCommitResponse.OffsetCommitResponsePartition(
                        partition_index=index, error_code=error
                    )
                    for index, error in partitions
                ],
            )
            for name, partitions in by_topic
        ]
    )


def build_txn_offset_commit(by_topic: PartitionErrors) -> TxnOffsetCommitResponse:
    return TxnOffsetCommitResponse(
        topics=[
            TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic(
                name=name,
                partitions=[
                    TxnOffsetCommitResponse.TxnOffsetCommitResponsePartition(
                        partition_index=index, error_code=error
                    )
                    for index, error in partitions
                ],
            )
            for name, partitions in by_topic
        ]
    )


def _every_partition(
    request: CommitRequest, error: ErrorCode, build: Callable[[PartitionErrors], Response]
) -> Response:
    return build(
        [
            (topic.name, [(partition.partition_index, error) for partition in topic.partitions])
            for topic in request.topics
        ]
    )


@handles(TxnOffsetCommitRequest, TxnOffsetCommitResponse, 0, 3)
async def handle_txn_offset_commit(
    context: RequestContext, request: TxnOffsetCommitRequest
) -> TxnOffsetCommitResponse:
    """A transactional producer's offsets (``send_offsets_to_transaction``): written as one
    transactional batch of its producer id and epoch, answered once written, counted once the
    transaction's COMMIT marker is written to the group's ``__consumer_offsets`` partition
    (``GroupService.complete_transaction``). Partitions that do not exist: as OffsetCommit.
    v4 (KIP-890's TRANSACTION_ABORTABLE, verification against the transaction coordinator) is
    not implemented. With authorization on: WRITE on the transactional id
    (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), READ on the group (GROUP_AUTHORIZATION_FAILED), READ
    on each topic (TOPIC_AUTHORIZATION_FAILED)."""
    authorizer = context.broker.authorizer
    coordinator = context.broker.groups.coordinator
    if not _allowed(
        authorizer, context, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id
    ):
        return _every_partition(
            request, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, build_txn_offset_commit
        )
    if _group_refused(authorizer, context, AclOperation.READ, request.group_id):
        return _every_partition(request, ErrorCode.GROUP_AUTHORIZATION_FAILED, build_txn_offset_commit)
    return await _commit_existing_partitions(
        authorizer,
        context,
        request,
        lambda known: _parked(
            lambda respond: coordinator.commit_transactional_offsets(known, context.api_version, respond)
        ),
        build_txn_offset_commit,
    )


@handles(OffsetFetchRequest, OffsetFetchResponse, 0, 9)
async def handle_offset_fetch(context: RequestContext, request: OffsetFetchRequest) -> OffsetFetchResponse:
    authorizer = context.broker.authorizer
    if authorizer is None:
        return context.broker.groups.coordinator.fetch_offsets(request, context.api_version)
    return _authorized_offset_fetch(authorizer, context, request)


def _authorized_offset_fetch(
    authorizer: Authorizer, context: RequestContext, request: OffsetFetchRequest
) -> OffsetFetchResponse:
    """OffsetFetch with authorization on: DESCRIBE on the group (KIP-163; READ implies it; else
    GROUP_AUTHORIZATION_FAILED), and DESCRIBE on each topic: a topic asked for by name the principal
    may not describe is answered TOPIC_AUTHORIZATION_FAILED, and left out of an answer for every
    topic, as Kafka does."""
    version = context.api_version
    coordinator = context.broker.groups.coordinator

    def visible(topic: Any, named: bool) -> Any:
        if _allowed(authorizer, context, AclOperation.DESCRIBE, ResourceType.TOPIC, topic.name):
            return topic
        if not named:
            return None
        for partition in topic.partitions:
            partition.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            partition.committed_offset = -1
            partition.metadata = None if version >= 8 else ""
        return topic

    if version >= 8:
        allowed_groups = copy.copy(request)
        allowed_groups.groups = [
            entry
            for entry in request.groups
            if not _group_refused(authorizer, context, AclOperation.DESCRIBE, entry.group_id)
        ]
        response = coordinator.fetch_offsets(allowed_groups, version)
        answered = {group.group_id: group for group in response.groups}
        groups = []
        for entry in request.groups:
            group = answered.get(entry.group_id)
            if group is None:
                groups.append(
                    OffsetFetchResponse.OffsetFetchResponseGroup(
                        group_id=entry.group_id, topics=[], error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED
                    )
                )
                continue
            group.topics = [
                topic
                for topic in (visible(topic, entry.topics is not None) for topic in group.topics)
                if topic
            ]
            groups.append(group)
        response.groups = groups
        return response
    if _group_refused(authorizer, context, AclOperation.DESCRIBE, request.group_id):
        if version >= 2:
            return OffsetFetchResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, topics=[])
        return OffsetFetchResponse(
            topics=[
                OffsetFetchResponse.OffsetFetchResponseTopic(
                    name=topic.name,
                    partitions=[
                        OffsetFetchResponse.OffsetFetchResponsePartition(
                            partition_index=index,
                            committed_offset=-1,
                            metadata="",
                            error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                        )
                        for index in topic.partition_indexes
                    ],
                )
                for topic in request.topics or []
            ]
        )
    response = coordinator.fetch_offsets(request, version)
    response.topics = [
        topic for topic in (visible(topic, request.topics is not None) for topic in response.topics) if topic
    ]
    return response


@handles(DescribeGroupsRequest, DescribeGroupsResponse, 0, 5)
async def handle_describe_groups(
    context: RequestContext, request: DescribeGroupsRequest
) -> DescribeGroupsResponse:
    authorizer = context.broker.authorizer
    if authorizer is not None:
        refused = [
            group_id
            for group_id in request.groups
            if _group_refused(authorizer, context, AclOperation.DESCRIBE, group_id)
        ]
        if refused:
            request = copy.copy(request)
            request.groups = [group_id for group_id in request.groups if group_id not in refused]
    response = context.broker.groups.coordinator.describe_groups(request, context.api_version)
    if authorizer is not None and refused:
        response.groups.extend(
            DescribeGroupsResponse.DescribedGroup(
                group_id=group_id,
                error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                group_state="",
                protocol_type="",
                protocol_data="",
                members=[],
            )
            for group_id in refused
        )
    if context.api_version >= AUTHORIZED_OPERATIONS_MIN_VERSION and request.include_authorized_operations:
        for group in response.groups:
            group.authorized_operations = (
                GROUP_OPERATIONS
                if authorizer is None
                else authorizer.authorized_operations(
                    context.principal,
                    context.client_host,
                    ResourceType.GROUP,
                    group.group_id,
                    GROUP_OPERATION_LIST,
                )
            )
    return response


@handles(ListGroupsRequest, ListGroupsResponse, 0, 5)
async def handle_list_groups(context: RequestContext, request: ListGroupsRequest) -> ListGroupsResponse:
    authorizer = context.broker.authorizer
    response = context.broker.groups.coordinator.list_groups(request, context.api_version)
    # With authorization on: every group for DESCRIBE on the cluster, else those it may describe.
    if authorizer is not None and not cluster_allowed(context, AclOperation.DESCRIBE):
        response.groups = [
            group
            for group in response.groups
            if not _group_refused(authorizer, context, AclOperation.DESCRIBE, group.group_id)
        ]
    return response


@handles(DeleteGroupsRequest, DeleteGroupsResponse, 0, 2)
async def handle_delete_groups(context: RequestContext, request: DeleteGroupsRequest) -> DeleteGroupsResponse:
    authorizer = context.broker.authorizer
    coordinator = context.broker.groups.coordinator
    refused: list[str] = []
    if authorizer is not None:
        refused = [
            group_id
            for group_id in request.groups_names
            if _group_refused(authorizer, context, AclOperation.DELETE, group_id)
        ]
        if refused:
            request = copy.copy(request)
            request.groups_names = [group_id for group_id in request.groups_names if group_id not in refused]
            if not request.groups_names:
                return _deleted_refused(refused)
    response: DeleteGroupsResponse = await _parked(
        lambda respond: coordinator.delete_groups(request, context.api_version, respond)
    )
    if refused:
        response.results.extend(_deleted_refused(refused).results)
    return response


def _deleted_refused(group_ids: list[str]) -> DeleteGroupsResponse:
    return DeleteGroupsResponse(
        results=[
            DeleteGroupsResponse.DeletableGroupResult(
                group_id=group_id, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED
            )
            for group_id in dict.fromkeys(group_ids)
        ]
    )


@handles(OffsetDeleteRequest, OffsetDeleteResponse, 0, 0)
async def handle_offset_delete(context: RequestContext, request: OffsetDeleteRequest) -> OffsetDeleteResponse:
    authorizer = context.broker.authorizer
    if _group_refused(authorizer, context, AclOperation.DELETE, request.group_id):
        return OffsetDeleteResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, topics=[])
    coordinator = context.broker.groups.coordinator
    return await _parked(lambda respond: coordinator.delete_offsets(request, context.api_version, respond))
