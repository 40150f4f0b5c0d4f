"""FindCoordinator 0-6 and the group APIs, which hand each request to the group coordinator.

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

from strom.broker.context import RequestContext
from strom.broker.metrics import add_remote_wait
from strom.broker.refused import Refused
from strom.broker.registry import handles
from strom.broker.replication import BrokerView
from strom.protocol.acl import GROUP_OPERATIONS
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


def _find_one(context: RequestContext, key: str, key_type: int) -> BrokerView | Refused:
    if key_type == KEY_TYPE_TRANSACTION:
        if not key:
            return Refused(ErrorCode.INVALID_REQUEST, "the transactional id must not be empty")
        return context.broker.replication.find_transaction_coordinator(key, context.listener)
    if key_type != KEY_TYPE_GROUP:
        return Refused(ErrorCode.INVALID_REQUEST, f"unknown coordinator key type {key_type}")
    if not key:
        return Refused(ErrorCode.INVALID_GROUP_ID, "the group id must not be empty")
    return context.broker.replication.find_coordinator(key, context.listener)


@handles(FindCoordinatorRequest, FindCoordinatorResponse, 0, 6)
async def handle_find_coordinator(
    context: RequestContext, request: FindCoordinatorRequest
) -> FindCoordinatorResponse:
    """The broker leading the group's partition of ``__consumer_offsets`` (a single node: itself),
    or COORDINATOR_NOT_AVAILABLE while there is none."""
    if context.api_version >= BATCHED_KEYS_MIN_VERSION:
        coordinators = []
        for key in request.coordinator_keys:
            found = _find_one(context, key, request.key_type)
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
    found = _find_one(context, request.key, request.key_type)
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
    coordinator = context.broker.groups.coordinator
    return await _parked(
        lambda respond: coordinator.join_group(
            request, context.api_version, context.client_id or "", "/" + context.client_host, respond
        )
    )


@handles(SyncGroupRequest, SyncGroupResponse, 0, 5)
async def handle_sync_group(context: RequestContext, request: SyncGroupRequest) -> SyncGroupResponse:
    coordinator = context.broker.groups.coordinator
    return await _parked(lambda respond: coordinator.sync_group(request, context.api_version, respond))


@handles(HeartbeatRequest, HeartbeatResponse, 0, 4)
async def handle_heartbeat(context: RequestContext, request: HeartbeatRequest) -> HeartbeatResponse:
    return context.broker.groups.coordinator.heartbeat(request, context.api_version)


@handles(LeaveGroupRequest, LeaveGroupResponse, 0, 5)
async def handle_leave_group(context: RequestContext, request: LeaveGroupRequest) -> LeaveGroupResponse:
    return context.broker.groups.coordinator.leave_group(request, context.api_version)


def _unknown_partitions(context: RequestContext, request: Any) -> set[tuple[str, int]]:
    """The partitions of the commit (OffsetCommit or TxnOffsetCommit) that do not exist here."""
    unknown: set[tuple[str, int]] = set()
    for topic in request.topics:
        metadata = context.broker.replication.topic(topic.name)
        count = metadata.partitions if metadata is not None else 0
        unknown.update(
            (topic.name, partition.partition_index)
            for partition in topic.partitions
            if not 0 <= partition.partition_index < count
        )
    return unknown


PartitionErrors = list[tuple[str, list[tuple[int, int]]]]


async def _commit_existing_partitions(
    context: RequestContext,
    request: CommitRequest,
    commit: Callable[[CommitRequest], Awaitable[Response]],
    build: Callable[[PartitionErrors], Response],
) -> Response:
    """Commit (OffsetCommit or TxnOffsetCommit) the partitions that exist; those that do not are
    answered UNKNOWN_TOPIC_OR_PARTITION without reaching the coordinator, as Kafka does. The
    answer, by ``build``, lists the partitions in the request's order."""
    unknown = _unknown_partitions(context, request)
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
    errors: dict[tuple[str, int], int] = dict.fromkeys(unknown, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
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


@handles(OffsetCommitRequest, OffsetCommitResponse, 0, 8)
async def handle_offset_commit(context: RequestContext, request: OffsetCommitRequest) -> OffsetCommitResponse:
    """Partitions that do not exist are answered UNKNOWN_TOPIC_OR_PARTITION without reaching the
    coordinator, as Kafka does (an admin's AlterConsumerGroupOffsets is this same request); the
    rest are committed, or refused as the group's state says."""
    coordinator = context.broker.groups.coordinator

    def build(by_topic: PartitionErrors) -> OffsetCommitResponse:
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

    return await _commit_existing_partitions(
        context,
        request,
        lambda known: _parked(
            lambda respond: coordinator.commit_offsets(known, context.api_version, respond)
        ),
        build,
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
    not implemented."""
    coordinator = context.broker.groups.coordinator

    def build(by_topic: PartitionErrors) -> TxnOffsetCommitResponse:
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

    return await _commit_existing_partitions(
        context,
        request,
        lambda known: _parked(
            lambda respond: coordinator.commit_transactional_offsets(known, context.api_version, respond)
        ),
        build,
    )


@handles(OffsetFetchRequest, OffsetFetchResponse, 0, 8)
async def handle_offset_fetch(context: RequestContext, request: OffsetFetchRequest) -> OffsetFetchResponse:
    return context.broker.groups.coordinator.fetch_offsets(request, context.api_version)


@handles(DescribeGroupsRequest, DescribeGroupsResponse, 0, 5)
async def handle_describe_groups(
    context: RequestContext, request: DescribeGroupsRequest
) -> DescribeGroupsResponse:
    response = context.broker.groups.coordinator.describe_groups(request, context.api_version)
    if context.api_version >= AUTHORIZED_OPERATIONS_MIN_VERSION and request.include_authorized_operations:
        for group in response.groups:
            group.authorized_operations = GROUP_OPERATIONS
    return response


@handles(ListGroupsRequest, ListGroupsResponse, 0, 4)
async def handle_list_groups(context: RequestContext, request: ListGroupsRequest) -> ListGroupsResponse:
    return context.broker.groups.coordinator.list_groups(request, context.api_version)


@handles(DeleteGroupsRequest, DeleteGroupsResponse, 0, 2)
async def handle_delete_groups(context: RequestContext, request: DeleteGroupsRequest) -> DeleteGroupsResponse:
    coordinator = context.broker.groups.coordinator
    return await _parked(lambda respond: coordinator.delete_groups(request, context.api_version, respond))


@handles(OffsetDeleteRequest, OffsetDeleteResponse, 0, 0)
async def handle_offset_delete(context: RequestContext, request: OffsetDeleteRequest) -> OffsetDeleteResponse:
    coordinator = context.broker.groups.coordinator
    return await _parked(lambda respond: coordinator.delete_offsets(request, context.api_version, respond))
