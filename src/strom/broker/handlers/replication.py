"""The APIs only a broker of a cluster serves (``cluster_only``: a single node neither serves nor
advertises them).

* From the controller: LeaderAndIsr v6, UpdateMetadata v7, StopReplica v3 — fenced by
  ``BrokerControl`` (controller epoch, broker epoch, leader and partition epochs) and applied in
  order (``ClusterReplication.apply_command``).
* To the controller: AlterPartition v2 (a leader's ISR change), ControlledShutdown v3 (a broker
  stopping), ElectLeaders 0-2 (preferred or unclean elections asked by an admin client). They are
  handed to this broker's controller thread, which answers NOT_CONTROLLER when this broker is not
  the controller (the sender looks the controller up again). ElectLeaders is served by a single
  node too: there each partition's one replica leads already, and every partition named is
  answered ELECTION_NOT_NEEDED, as Kafka answers on one broker.
* AlterPartitionReassignments 0 and ListPartitionReassignments 0 (KIP-455: an admin client moves
  replicas between brokers, changes a replication factor, cancels a move): the controller starts
  each reassignment and answers once it is written to ZooKeeper; the move itself goes on after the
  answer (ListPartitionReassignments shows it until it ends). A single node serves them too: its
  partitions' one replica is on it already, so a "move" to itself is done at once, any other
  broker is not registered (INVALID_REPLICA_ASSIGNMENT), and nothing is ever in progress.
* OffsetForLeaderEpoch 0-4: where a leader epoch ends in this leader's log — asked by followers
  before they truncate, and by consumers checking their position after a leader change (KIP-320).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from strom.broker.authorization import cluster_allowed, topic_allowed
from strom.broker.cluster.peer import PeerError
from strom.broker.context import RequestContext
from strom.broker.registry import handles
from strom.cluster import wire
from strom.cluster.actions import ElectLeadersReply, ReassignmentsListReply, ReassignmentsReply
from strom.cluster.broker_control import CommandOutcome
from strom.cluster.events import (
    ElectionType,
    ElectLeadersReceived,
    ReassignmentsListed,
    ReassignmentsReceived,
)
from strom.cluster.model import TopicPartition, replica_list_fault
from strom.protocol.acl import AclOperation
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.alter_partition import AlterPartitionRequest, AlterPartitionResponse
from strom.protocol.messages.alter_partition_reassignments import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
)
from strom.protocol.messages.controlled_shutdown import ControlledShutdownRequest, ControlledShutdownResponse
from strom.protocol.messages.elect_leaders import ElectLeadersRequest, ElectLeadersResponse
from strom.protocol.messages.leader_and_isr import LeaderAndIsrRequest, LeaderAndIsrResponse
from strom.protocol.messages.list_partition_reassignments import (
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)
from strom.protocol.messages.offset_for_leader_epoch import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from strom.protocol.messages.stop_replica import StopReplicaRequest, StopReplicaResponse
from strom.protocol.messages.update_metadata import UpdateMetadataRequest, UpdateMetadataResponse
from strom.storage.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_OFFSET

if TYPE_CHECKING:
    from strom.broker.cluster.runtime import ClusterReplication

CURRENT_LEADER_EPOCH_MIN_VERSION = 2
REPLICA_ID_MIN_VERSION = 3
ELECTION_TYPE_MIN_VERSION = 1
NO_CHECK = -1


def _cluster_action_refused(context: RequestContext) -> bool:
    """With authorization on, the brokers' own APIs need CLUSTER_ACTION on the cluster (the
    brokers' principal must be a super user or hold that ACL)."""
    return context.broker.authorizer is not None and not cluster_allowed(context, AclOperation.CLUSTER_ACTION)


REFUSED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def _cluster(context: RequestContext) -> ClusterReplication:
    cluster = context.broker.cluster
    assert cluster is not None, "cluster APIs are only registered on a broker of a cluster"
    return cluster


# ---- from the controller ----------------------------------------------------------------------------


@handles(
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    wire.LEADER_AND_ISR_VERSION,
    wire.LEADER_AND_ISR_VERSION,
    cluster_only=True,
)
async def handle_leader_and_isr(
    context: RequestContext, request: LeaderAndIsrRequest
) -> LeaderAndIsrResponse:
    if _cluster_action_refused(context):
        return LeaderAndIsrResponse(error_code=REFUSED)
    cluster = _cluster(context)
    command = wire.leader_and_isr_command(request, cluster.node_id)
    outcome = await cluster.on_leader_and_isr(command)
    return wire.leader_and_isr_response(command, outcome)


@handles(
    UpdateMetadataRequest,
    UpdateMetadataResponse,
    wire.UPDATE_METADATA_VERSION,
    wire.UPDATE_METADATA_VERSION,
    cluster_only=True,
)
async def handle_update_metadata(
    context: RequestContext, request: UpdateMetadataRequest
) -> UpdateMetadataResponse:
    if _cluster_action_refused(context):
        return UpdateMetadataResponse(error_code=REFUSED)
    cluster = _cluster(context)
    error = await cluster.on_update_metadata(wire.update_metadata_command(request, cluster.node_id))
    return UpdateMetadataResponse(error_code=error)


@handles(
    StopReplicaRequest,
    StopReplicaResponse,
    wire.STOP_REPLICA_VERSION,
    wire.STOP_REPLICA_VERSION,
    cluster_only=True,
)
async def handle_stop_replica(context: RequestContext, request: StopReplicaRequest) -> StopReplicaResponse:
    if _cluster_action_refused(context):
        return StopReplicaResponse(error_code=REFUSED)
    cluster = _cluster(context)
    outcome: CommandOutcome = await cluster.on_stop_replica(
        wire.stop_replica_command(request, cluster.node_id)
    )
    return wire.stop_replica_response(outcome)


# ---- to the controller ----------------------------------------------------------------------------------


@handles(
    AlterPartitionRequest,
    AlterPartitionResponse,
    wire.ALTER_PARTITION_VERSION,
    wire.ALTER_PARTITION_VERSION,
    cluster_only=True,
)
async def handle_alter_partition(
    context: RequestContext, request: AlterPartitionRequest
) -> AlterPartitionResponse:
    if _cluster_action_refused(context):
        return AlterPartitionResponse(error_code=REFUSED)
    try:
        reply = await _cluster(context).post_to_controller(
            lambda key: wire.alter_partition_event(request, key)
        )
    except PeerError:
        return AlterPartitionResponse(error_code=ErrorCode.NOT_CONTROLLER)
    return wire.alter_partition_response(reply)  # type: ignore[arg-type]


@handles(
    ControlledShutdownRequest,
    ControlledShutdownResponse,
    wire.CONTROLLED_SHUTDOWN_VERSION,
    wire.CONTROLLED_SHUTDOWN_VERSION,
    cluster_only=True,
)
async def handle_controlled_shutdown(
    context: RequestContext, request: ControlledShutdownRequest
) -> ControlledShutdownResponse:
    if _cluster_action_refused(context):
        return ControlledShutdownResponse(error_code=REFUSED)
    try:
        reply = await _cluster(context).post_to_controller(
            lambda key: wire.controlled_shutdown_event(request, key)
        )
    except PeerError:
        return ControlledShutdownResponse(error_code=ErrorCode.NOT_CONTROLLER)
    return wire.controlled_shutdown_response(reply)  # type: ignore[arg-type]


@handles(ElectLeadersRequest, ElectLeadersResponse, 0, 2)
async def handle_elect_leaders(context: RequestContext, request: ElectLeadersRequest) -> ElectLeadersResponse:
    """Preferred (0) or unclean (1) elections, for the partitions named or (null) every partition;
    answered per partition once the controller settled them. With authorization on: ALTER on the
    cluster."""
    if context.broker.authorizer is not None and not cluster_allowed(context, AclOperation.ALTER):
        return ElectLeadersResponse(error_code=REFUSED)
    version = context.api_version
    election_type = request.election_type if version >= ELECTION_TYPE_MIN_VERSION else ElectionType.PREFERRED
    if election_type not in (ElectionType.PREFERRED, ElectionType.UNCLEAN):
        return ElectLeadersResponse(error_code=ErrorCode.INVALID_REQUEST)
    partitions = (
        None
        if request.topic_partitions is None
        else tuple(
            TopicPartition(topic.topic, partition)
            for topic in request.topic_partitions
            for partition in topic.partitions
        )
    )
    if context.broker.cluster is None:
        error, results = ErrorCode.NONE, _single_node_election(context, partitions)
    else:
        try:
            reply = await _cluster(context).post_to_controller(
                lambda key: ElectLeadersReceived(key, ElectionType(election_type), partitions)
            )
        except PeerError:
            reply = ElectLeadersReply(None, ErrorCode.REQUEST_TIMED_OUT)
        assert isinstance(reply, ElectLeadersReply)
        error = ErrorCode(reply.error)
        results = dict(reply.results)
    if error != ErrorCode.NONE and partitions is not None:
        results = dict.fromkeys(partitions, error)
    grouped: dict[str, list[ElectLeadersResponse.PartitionResult]] = {}
    for tp, partition_error in sorted(results.items()):
        grouped.setdefault(tp.topic, []).append(
            ElectLeadersResponse.PartitionResult(
                partition_id=tp.partition,
                error_code=partition_error,
                error_message=None if partition_error == ErrorCode.NONE else ErrorCode(partition_error).name,
            )
        )
    response = ElectLeadersResponse(
        replica_election_results=[
            ElectLeadersResponse.ReplicaElectionResult(topic=topic, partition_result=items)
            for topic, items in grouped.items()
        ]
    )
    if version >= ELECTION_TYPE_MIN_VERSION:
        response.error_code = error
    return response


def _single_node_election(
    context: RequestContext, partitions: tuple[TopicPartition, ...] | None
) -> dict[TopicPartition, int]:
    """A single node's answer: its one replica of each partition leads already (null: every
    partition, and none needs an election)."""
    replication = context.broker.replication
    results: dict[TopicPartition, int] = {}
    for tp in partitions or ():
        topic = replication.topic(tp.topic)
        known = topic is not None and 0 <= tp.partition < topic.partitions
        results[tp] = ErrorCode.ELECTION_NOT_NEEDED if known else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    return results


# ---- reassignments -------------------------------------------------------------------------------------


@handles(AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, 0, 0)
async def handle_alter_partition_reassignments(
    context: RequestContext, request: AlterPartitionReassignmentsRequest
) -> AlterPartitionReassignmentsResponse:
    """Per partition its new replicas (or null: cancel its reassignment). With authorization on:
    ALTER on the cluster."""
    if context.broker.authorizer is not None and not cluster_allowed(context, AclOperation.ALTER):
        return AlterPartitionReassignmentsResponse(
            error_code=REFUSED, error_message="ALTER on the cluster is not allowed"
        )
    targets: dict[TopicPartition, tuple[int, ...] | None] = {}
    for topic in request.topics:
        for partition in topic.partitions:
            replicas = partition.replicas
            targets[TopicPartition(topic.name, partition.partition_index)] = (
                None if replicas is None else tuple(replicas)
            )
    if context.broker.cluster is None:
        results = _single_node_reassignments(context, targets)
    else:
        try:
            reply = await _cluster(context).post_to_controller(
                lambda key: ReassignmentsReceived(key, targets)
            )
        except PeerError:
            reply = ReassignmentsReply(None, ErrorCode.REQUEST_TIMED_OUT)
        assert isinstance(reply, ReassignmentsReply)
        if reply.error != ErrorCode.NONE:
            return AlterPartitionReassignmentsResponse(error_code=reply.error)
        results = dict(reply.results)
    grouped: dict[str, list[AlterPartitionReassignmentsResponse.ReassignablePartitionResponse]] = {}
    for tp in targets:
        error, message = results[tp]
        grouped.setdefault(tp.topic, []).append(
            AlterPartitionReassignmentsResponse.ReassignablePartitionResponse(
                partition_index=tp.partition, error_code=error, error_message=message
            )
        )
    return AlterPartitionReassignmentsResponse(
        responses=[
            AlterPartitionReassignmentsResponse.ReassignableTopicResponse(name=name, partitions=partitions)
            for name, partitions in grouped.items()
        ]
    )


def _single_node_reassignments(
    context: RequestContext, targets: dict[TopicPartition, tuple[int, ...] | None]
) -> dict[TopicPartition, tuple[ErrorCode, str | None]]:
    """A single node's answer: every replica is on it, and stays there."""
    replication = context.broker.replication
    node_id = replication.controller_id()
    results: dict[TopicPartition, tuple[ErrorCode, str | None]] = {}
    for tp, target in targets.items():
        topic = replication.topic(tp.topic)
        if topic is None or not 0 <= tp.partition < topic.partitions:
            results[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{tp} does not exist")
        elif target is None:
            results[tp] = (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, f"no reassignment of {tp} is in progress")
        elif (fault := replica_list_fault(target)) is not None:
            results[tp] = (ErrorCode.INVALID_REPLICA_ASSIGNMENT, fault)
        elif list(target) != [node_id]:
            results[tp] = (
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"replicas {list(target)}: broker {node_id} is the only one registered",
            )
        else:
            results[tp] = (ErrorCode.NONE, None)
    return results


@handles(ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse, 0, 0)
async def handle_list_partition_reassignments(
    context: RequestContext, request: ListPartitionReassignmentsRequest
) -> ListPartitionReassignmentsResponse:
    """The reassignments in progress, of the partitions named or (null) of every partition. With
    authorization on: DESCRIBE on the cluster."""
    if context.broker.authorizer is not None and not cluster_allowed(context, AclOperation.DESCRIBE):
        return ListPartitionReassignmentsResponse(
            error_code=REFUSED, error_message="DESCRIBE on the cluster is not allowed"
        )
    if context.broker.cluster is None:
        return ListPartitionReassignmentsResponse()  # nothing ever moves on one node
    partitions = (
        None
        if request.topics is None
        else tuple(
            TopicPartition(topic.name, index) for topic in request.topics for index in topic.partition_indexes
        )
    )
    try:
        reply = await _cluster(context).post_to_controller(lambda key: ReassignmentsListed(key, partitions))
    except PeerError:
        reply = ReassignmentsListReply(None, ErrorCode.REQUEST_TIMED_OUT)
    assert isinstance(reply, ReassignmentsListReply)
    if reply.error != ErrorCode.NONE:
        return ListPartitionReassignmentsResponse(error_code=reply.error)
    grouped: dict[str, list[ListPartitionReassignmentsResponse.OngoingPartitionReassignment]] = {}
    for tp, ongoing in sorted(reply.ongoing.items()):
        grouped.setdefault(tp.topic, []).append(
            ListPartitionReassignmentsResponse.OngoingPartitionReassignment(
                partition_index=tp.partition,
                replicas=list(ongoing.replicas),
                adding_replicas=list(ongoing.adding),
                removing_replicas=list(ongoing.removing),
            )
        )
    return ListPartitionReassignmentsResponse(
        topics=[
            ListPartitionReassignmentsResponse.OngoingTopicReassignment(name=name, partitions=items)
            for name, items in grouped.items()
        ]
    )


# ---- OffsetForLeaderEpoch -----------------------------------------------------------------------------


@handles(OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, 0, 4, cluster_only=True)
async def handle_offset_for_leader_epoch(
    context: RequestContext, request: OffsetForLeaderEpochRequest
) -> OffsetForLeaderEpochResponse:
    """For each partition: the largest epoch at or below the one asked for that this leader's log
    has, and where it ends (the log end for the latest epoch). Only the leader answers (fenced by
    ``current_leader_epoch`` from v2)."""
    version = context.api_version
    replication = context.broker.replication
    replica_id = request.replica_id if version >= REPLICA_ID_MIN_VERSION else NO_CHECK
    results: list[OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult] = []
    # With authorization on: a follower needs CLUSTER_ACTION on the cluster, a consumer DESCRIBE
    # on each topic (TOPIC_AUTHORIZATION_FAILED whether it exists or not).
    authorizer = context.broker.authorizer
    refused_all = authorizer is not None and replica_id >= 0 and _cluster_action_refused(context)
    for topic in request.topics:
        partitions: list[OffsetForLeaderEpochResponse.EpochEndOffset] = []
        refused: ErrorCode | None = (
            REFUSED
            if refused_all
            else ErrorCode.TOPIC_AUTHORIZATION_FAILED
            if authorizer is not None
            and replica_id < 0
            and not topic_allowed(context, AclOperation.DESCRIBE, topic.topic)
            else None
        )
        for wanted in topic.partitions:
            current = wanted.current_leader_epoch if version >= CURRENT_LEADER_EPOCH_MIN_VERSION else NO_CHECK
            access = (
                refused
                if refused is not None
                else replication.readable(topic.topic, wanted.partition, current, replica_id)
            )
            if isinstance(access, ErrorCode):
                partitions.append(
                    OffsetForLeaderEpochResponse.EpochEndOffset(
                        error_code=access,
                        partition=wanted.partition,
                        leader_epoch=UNDEFINED_EPOCH,
                        end_offset=UNDEFINED_OFFSET,
                    )
                )
                continue
            partition_log = access.log
            epoch, end_offset = partition_log.leader_epochs.end_offset_for(
                wanted.leader_epoch, partition_log.log_end_offset
            )
            partitions.append(
                OffsetForLeaderEpochResponse.EpochEndOffset(
                    error_code=ErrorCode.NONE,
                    partition=wanted.partition,
                    leader_epoch=epoch,
                    end_offset=end_offset,
                )
            )
        results.append(
            OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult(topic=topic.topic, partitions=partitions)
        )
    return OffsetForLeaderEpochResponse(topics=results)
