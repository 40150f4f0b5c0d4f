"""The transactional producer's APIs, handed to the transaction coordinator
(``strom.coordinator.transactions``, hosted by ``strom.broker.transactions``).

AddPartitionsToTxn 0-3, AddOffsetsToTxn 0-3 and EndTxn 0-3 (the client versions; later ones are
KIP-890's broker-side verification and transaction version 2), DescribeTransactions 0 and
ListTransactions 0-1 (KIP-664), and in a cluster WriteTxnMarkers 0-1 (a coordinator on another
broker delivering its markers to the partitions this broker leads). InitProducerId with a transactional id is in ``producer_ids``,
FindCoordinator for one in ``groups``. Each handler waits for the coordinator's callback (its
record durable, in a cluster replicated) as the group handlers do. Versions before KIP-588 (EndTxn,
AddPartitionsToTxn and AddOffsetsToTxn below v2, InitProducerId below v4) do not know
PRODUCER_FENCED: they are told INVALID_PRODUCER_EPOCH, as Kafka tells them.
"""

from __future__ import annotations

import asyncio

from strom.broker.authorization import allowed, cluster_allowed
from strom.broker.context import RequestContext
from strom.broker.handlers.groups import _parked
from strom.broker.registry import handles
from strom.broker.transactions import write_marker
from strom.coordinator.transactions import TopicPartition, TransactionMarkers
from strom.protocol.acl import AclOperation
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.add_offsets_to_txn import AddOffsetsToTxnRequest, AddOffsetsToTxnResponse
from strom.protocol.messages.add_partitions_to_txn import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
)
from strom.protocol.messages.describe_transactions import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
)
from strom.protocol.messages.end_txn import EndTxnRequest, EndTxnResponse
from strom.protocol.messages.list_transactions import ListTransactionsRequest, ListTransactionsResponse
from strom.protocol.messages.write_txn_markers import WriteTxnMarkersRequest, WriteTxnMarkersResponse
from strom.security.acl import ResourceType

# The first versions that know PRODUCER_FENCED (KIP-588).
PRODUCER_FENCED_MIN_VERSION = 2


def for_version(
    error: ErrorCode, version: int, fenced_min_version: int = PRODUCER_FENCED_MIN_VERSION
) -> ErrorCode:
    """PRODUCER_FENCED as a version before KIP-588 knows it."""
    if error == ErrorCode.PRODUCER_FENCED and version < fenced_min_version:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return error


def _unknown_partitions(
    context: RequestContext, topics: list[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic]
) -> set[TopicPartition]:
    replication = context.broker.replication
    unknown: set[TopicPartition] = set()
    for topic in topics:
        found = replication.topic(topic.name)
        for index in topic.partitions:
            if found is None or not 0 <= index < found.partitions:
                unknown.add(TopicPartition(topic.name, index))
    return unknown


@handles(AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, 0, 3)
async def handle_add_partitions_to_txn(
    context: RequestContext, request: AddPartitionsToTxnRequest
) -> AddPartitionsToTxnResponse:
    """Partitions join the producer's open transaction (opening it). As Kafka: if any partition is
    unknown, those are UNKNOWN_TOPIC_OR_PARTITION, the others OPERATION_NOT_ATTEMPTED, nothing added."""
    version = context.api_version
    topics = request.v3_and_below_topics
    asked = [TopicPartition(topic.name, index) for topic in topics for index in topic.partitions]
    refused: dict[TopicPartition, ErrorCode] = {}
    if context.broker.authorizer is not None:
        # WRITE on the transactional id, then on each topic (whether it exists or not).
        if not allowed(
            context, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.v3_and_below_transactional_id
        ):
            refused = dict.fromkeys(asked, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        else:
            refused = {
                tp: ErrorCode.TOPIC_AUTHORIZATION_FAILED
                for tp in asked
                if not allowed(context, AclOperation.WRITE, ResourceType.TOPIC, tp.topic)
            }
    unknown = _unknown_partitions(context, topics)
    if refused:
        errors = {tp: refused.get(tp, ErrorCode.OPERATION_NOT_ATTEMPTED) for tp in asked}
    elif unknown:
        errors = {
            tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else ErrorCode.OPERATION_NOT_ATTEMPTED
            for tp in asked
        }
    else:
        coordinator = context.broker.transactions.coordinator
        answered: dict[TopicPartition, ErrorCode] = await _parked(
            lambda respond: coordinator.add_partitions(
                request.v3_and_below_transactional_id,
                request.v3_and_below_producer_id,
                request.v3_and_below_producer_epoch,
                asked,
                respond,
            )
        )
        errors = {tp: for_version(answered.get(tp, ErrorCode.NONE), version) for tp in asked}
    by_topic: dict[str, list[AddPartitionsToTxnResponse.AddPartitionsToTxnPartitionResult]] = {}
    for (name, index), error in errors.items():
        by_topic.setdefault(name, []).append(
            AddPartitionsToTxnResponse.AddPartitionsToTxnPartitionResult(
                partition_index=index, partition_error_code=error
            )
        )
    return AddPartitionsToTxnResponse(
        results_by_topic_v3_and_below=[
            AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult(name=name, results_by_partition=results)
            for name, results in by_topic.items()
        ]
    )


@handles(AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, 0, 3)
async def handle_add_offsets_to_txn(
    context: RequestContext, request: AddOffsetsToTxnRequest
) -> AddOffsetsToTxnResponse:
    """The group's ``__consumer_offsets`` partition joins the transaction (the producer then
    sends TxnOffsetCommit to the group's coordinator). With authorization on: WRITE on the
    transactional id, READ on the group."""
    if context.broker.authorizer is not None:
        if not allowed(context, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
            return AddOffsetsToTxnResponse(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        if not allowed(context, AclOperation.READ, ResourceType.GROUP, request.group_id):
            return AddOffsetsToTxnResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    coordinator = context.broker.transactions.coordinator
    error: ErrorCode = await _parked(
        lambda respond: coordinator.add_offsets(
            request.transactional_id, request.producer_id, request.producer_epoch, request.group_id, respond
        )
    )
    return AddOffsetsToTxnResponse(error_code=for_version(error, context.api_version))


@handles(EndTxnRequest, EndTxnResponse, 0, 3)
async def handle_end_txn(context: RequestContext, request: EndTxnRequest) -> EndTxnResponse:
    """Commit or abort: answered once PrepareCommit / PrepareAbort is durable; the markers and the
    Complete record follow (a read_committed consumer sees the records once the markers are in).
    With authorization on: WRITE on the transactional id."""
    if not allowed(context, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        return EndTxnResponse(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    coordinator = context.broker.transactions.coordinator
    error: ErrorCode = await _parked(
        lambda respond: coordinator.end_transaction(
            request.transactional_id, request.producer_id, request.producer_epoch, request.committed, respond
        )
    )
    return EndTxnResponse(error_code=for_version(error, context.api_version))


@handles(DescribeTransactionsRequest, DescribeTransactionsResponse, 0, 0)
async def handle_describe_transactions(
    context: RequestContext, request: DescribeTransactionsRequest
) -> DescribeTransactionsResponse:
    coordinator = context.broker.transactions.coordinator
    states = []
    # With authorization on: DESCRIBE on each transactional id, whether it exists or not.
    refused = (
        set()
        if context.broker.authorizer is None
        else {
            transactional_id
            for transactional_id in request.transactional_ids
            if not allowed(context, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, transactional_id)
        }
    )
    for transactional_id in refused:
        states.append(
            DescribeTransactionsResponse.TransactionState(
                error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                transactional_id=transactional_id,
                transaction_state="",
                producer_id=-1,
                producer_epoch=-1,
                topics=[],
            )
        )
    wanted = [
        transactional_id for transactional_id in request.transactional_ids if transactional_id not in refused
    ]
    for description in coordinator.describe_transactions(wanted):
        by_topic: dict[str, list[int]] = {}
        for name, index in description.partitions:
            by_topic.setdefault(name, []).append(index)
        states.append(
            DescribeTransactionsResponse.TransactionState(
                error_code=description.error,
                transactional_id=description.transactional_id,
                transaction_state=description.state,
                transaction_timeout_ms=description.timeout_ms,
                transaction_start_time_ms=description.start_timestamp_ms,
                producer_id=description.producer_id,
                producer_epoch=description.producer_epoch,
                topics=[
                    DescribeTransactionsResponse.TopicData(topic=name, partitions=indexes)
                    for name, indexes in by_topic.items()
                ],
            )
        )
    return DescribeTransactionsResponse(transaction_states=states)


@handles(ListTransactionsRequest, ListTransactionsResponse, 0, 1)
async def handle_list_transactions(
    context: RequestContext, request: ListTransactionsRequest
) -> ListTransactionsResponse:
    coordinator = context.broker.transactions.coordinator
    listing = coordinator.list_transactions(
        request.state_filters,
        request.producer_id_filters,
        request.duration_filter if context.api_version >= 1 else -1,
    )
    authorizer = context.broker.authorizer
    return ListTransactionsResponse(
        error_code=listing.error,
        unknown_state_filters=list(listing.unknown_state_filters),
        transaction_states=[
            ListTransactionsResponse.TransactionState(
                transactional_id=listed.transactional_id,
                producer_id=listed.producer_id,
                transaction_state=listed.state,
            )
            for listed in listing.transactions
            # With authorization on: only the transactional ids the principal may describe.
            if authorizer is None
            or allowed(context, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, listed.transactional_id)
        ],
    )


@handles(WriteTxnMarkersRequest, WriteTxnMarkersResponse, 0, 1, cluster_only=True)
async def handle_write_txn_markers(
    context: RequestContext, request: WriteTxnMarkersRequest
) -> WriteTxnMarkersResponse:
    """From a transaction coordinator (another broker of the cluster): write each marker to the
    partitions this broker leads, every partition answered once its marker is replicated (or
    with why not: NOT_LEADER_OR_FOLLOWER, a fenced producer or coordinator epoch, ...)."""
    state = context.broker
    if state.authorizer is not None and not cluster_allowed(context, AclOperation.CLUSTER_ACTION):
        return WriteTxnMarkersResponse(
            markers=[
                WriteTxnMarkersResponse.WritableTxnMarkerResult(
                    producer_id=marker.producer_id,
                    topics=[
                        WriteTxnMarkersResponse.WritableTxnMarkerTopicResult(
                            name=topic.name,
                            partitions=[
                                WriteTxnMarkersResponse.WritableTxnMarkerPartitionResult(
                                    partition_index=index, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                                )
                                for index in topic.partition_indexes
                            ],
                        )
                        for topic in marker.topics
                    ],
                )
                for marker in request.markers
            ]
        )
    timeout_ms = state.config.get_int("offsets.commit.timeout.ms")
    results = []
    for marker in request.markers:
        markers = TransactionMarkers(
            transactional_id="",
            producer_id=marker.producer_id,
            producer_epoch=marker.producer_epoch,
            coordinator_epoch=marker.coordinator_epoch,
            commit=marker.transaction_result,
            transaction_log_partition=-1,
            partitions=tuple(
                TopicPartition(topic.name, index)
                for topic in marker.topics
                for index in topic.partition_indexes
            ),
        )
        errors = await asyncio.gather(
            *(write_marker(state, partition, markers, timeout_ms) for partition in markers.partitions)
        )
        by_topic: dict[str, list[WriteTxnMarkersResponse.WritableTxnMarkerPartitionResult]] = {}
        for (name, index), error in zip(markers.partitions, errors, strict=True):
            by_topic.setdefault(name, []).append(
                WriteTxnMarkersResponse.WritableTxnMarkerPartitionResult(
                    partition_index=index, error_code=error
                )
            )
        results.append(
            WriteTxnMarkersResponse.WritableTxnMarkerResult(
                producer_id=marker.producer_id,
                topics=[
                    WriteTxnMarkersResponse.WritableTxnMarkerTopicResult(name=name, partitions=partitions)
                    for name, partitions in by_topic.items()
                ],
            )
        )
    return WriteTxnMarkersResponse(markers=results)
