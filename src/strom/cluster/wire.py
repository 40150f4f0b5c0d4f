"""The cluster's commands and replies as Kafka protocol messages (the generated codec), and back.

Only strom brokers exchange these, so one version of each is used:

* LeaderAndIsr v6 (topic ids, full/incremental type), UpdateMetadata v7 (topic ids, racks,
  listeners, offline replicas), StopReplica v3 (leader epoch per partition): controller -> broker;
* AlterPartition v2 (topic ids), ControlledShutdown v3 (broker epoch): broker -> controller.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from strom.cluster.actions import (
    AlterPartitionReply,
    AlterPartitionResult,
    ControlledShutdownReply,
    LeaderAndIsrCommand,
    PartitionInfo,
    StopPartition,
    StopReplicaCommand,
    UpdateMetadataCommand,
)
from strom.cluster.broker_control import CommandOutcome
from strom.cluster.events import AlterPartitionItem, AlterPartitionReceived, ControlledShutdownReceived
from strom.cluster.model import BrokerRegistration, Endpoint, TopicPartition
from strom.cluster.replica import AlterIsrProposal
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.alter_partition import AlterPartitionRequest, AlterPartitionResponse
from strom.protocol.messages.controlled_shutdown import ControlledShutdownRequest, ControlledShutdownResponse
from strom.protocol.messages.leader_and_isr import LeaderAndIsrRequest, LeaderAndIsrResponse
from strom.protocol.messages.stop_replica import StopReplicaRequest, StopReplicaResponse
from strom.protocol.messages.update_metadata import UpdateMetadataRequest

LEADER_AND_ISR_VERSION = 6
UPDATE_METADATA_VERSION = 7
STOP_REPLICA_VERSION = 3
ALTER_PARTITION_VERSION = 2
CONTROLLED_SHUTDOWN_VERSION = 3

# LeaderAndIsr's Type field (v5+).
LEADER_AND_ISR_INCREMENTAL = 0
LEADER_AND_ISR_FULL = 1

_SECURITY_PROTOCOLS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
_SECURITY_PROTOCOL_NAMES = {code: name for name, code in _SECURITY_PROTOCOLS.items()}


def _by_topic(partitions: Iterable[PartitionInfo]) -> dict[str, list[PartitionInfo]]:
    grouped: dict[str, list[PartitionInfo]] = {}
    for info in partitions:
        grouped.setdefault(info.topic, []).append(info)
    return grouped


# ---- LeaderAndIsr --------------------------------------------------------------------------------------


def leader_and_isr_request(command: LeaderAndIsrCommand) -> LeaderAndIsrRequest:
    Request = LeaderAndIsrRequest
    return Request(
        controller_id=command.controller_id,
        controller_epoch=command.controller_epoch,
        broker_epoch=command.broker_epoch,
        type=LEADER_AND_ISR_FULL if command.full else LEADER_AND_ISR_INCREMENTAL,
        topic_states=[
            Request.LeaderAndIsrTopicState(
                topic_name=topic,
                topic_id=infos[0].topic_id,
                partition_states=[
                    Request.LeaderAndIsrPartitionState(
                        partition_index=info.partition,
                        controller_epoch=info.controller_epoch,
                        leader=info.leader,
                        leader_epoch=info.leader_epoch,
                        isr=list(info.isr),
                        partition_epoch=info.partition_epoch,
                        replicas=list(info.replicas),
                        is_new=info.is_new,
                    )
                    for info in infos
                ],
            )
            for topic, infos in _by_topic(command.partitions).items()
        ],
        live_leaders=[
            Request.LeaderAndIsrLiveLeader(broker_id=broker.node_id, host_name=broker.host, port=broker.port)
            for broker in command.leaders
        ],
    )


def leader_and_isr_command(request: LeaderAndIsrRequest, broker_id: int) -> LeaderAndIsrCommand:
    """The command a LeaderAndIsr (v5+) received by ``broker_id`` carries."""
    partitions = tuple(
        PartitionInfo(
            topic=topic.topic_name,
            partition=state.partition_index,
            topic_id=topic.topic_id,
            leader=state.leader,
            leader_epoch=state.leader_epoch,
            isr=tuple(state.isr),
            partition_epoch=state.partition_epoch,
            replicas=tuple(state.replicas),
            controller_epoch=state.controller_epoch,
            is_new=state.is_new,
        )
        for topic in request.topic_states
        for state in topic.partition_states
    )
    leaders = tuple(
        BrokerRegistration(
            leader.broker_id,
            leader.host_name,
            leader.port,
            (Endpoint("PLAINTEXT", leader.host_name, leader.port),),
        )
        for leader in request.live_leaders
    )
    return LeaderAndIsrCommand(
        broker_id,
        request.broker_epoch,
        request.controller_id,
        request.controller_epoch,
        partitions,
        leaders,
        full=request.type == LEADER_AND_ISR_FULL,
    )


def leader_and_isr_response(command: LeaderAndIsrCommand, outcome: CommandOutcome) -> LeaderAndIsrResponse:
    """The answer to a LeaderAndIsr v5+ (errors grouped by topic id)."""
    Response = LeaderAndIsrResponse
    topic_ids = {info.topic: info.topic_id for info in command.partitions}
    grouped: dict[uuid.UUID, list[LeaderAndIsrResponse.LeaderAndIsrPartitionError]] = {}
    for tp, error in sorted(outcome.partition_errors.items()):
        grouped.setdefault(topic_ids[tp.topic], []).append(
            Response.LeaderAndIsrPartitionError(partition_index=tp.partition, error_code=error)
        )
    return Response(
        error_code=outcome.error,
        topics=[
            Response.LeaderAndIsrTopicError(topic_id=topic_id, partition_errors=errors)
            for topic_id, errors in grouped.items()
        ],
    )


# ---- UpdateMetadata ------------------------------------------------------------------------------------


def update_metadata_request(command: UpdateMetadataCommand) -> UpdateMetadataRequest:
    Request = UpdateMetadataRequest
    return Request(
        controller_id=command.controller_id,
        controller_epoch=command.controller_epoch,
        broker_epoch=command.broker_epoch,
        topic_states=[
            Request.UpdateMetadataTopicState(
                topic_name=topic,
                topic_id=infos[0].topic_id,
                partition_states=[
                    Request.UpdateMetadataPartitionState(
                        partition_index=info.partition,
                        controller_epoch=info.controller_epoch,
                        leader=info.leader,
                        leader_epoch=info.leader_epoch,
                        isr=list(info.isr),
                        zk_version=info.partition_epoch,
                        replicas=list(info.replicas),
                        offline_replicas=list(info.offline_replicas),
                    )
                    for info in infos
                ],
            )
            for topic, infos in _by_topic(command.partitions).items()
        ],
        live_brokers=[
            Request.UpdateMetadataBroker(
                id=broker.node_id,
                endpoints=[
                    Request.UpdateMetadataEndpoint(
                        port=endpoint.port,
                        host=endpoint.host,
                        listener=endpoint.listener,
                        security_protocol=_SECURITY_PROTOCOLS.get(endpoint.security_protocol, 0),
                    )
                    for endpoint in broker.endpoints
                ],
                rack=broker.rack,
            )
            for broker in command.live_brokers
        ],
    )


def update_metadata_command(request: UpdateMetadataRequest, broker_id: int) -> UpdateMetadataCommand:
    partitions = tuple(
        PartitionInfo(
            topic=topic.topic_name,
            partition=state.partition_index,
            topic_id=topic.topic_id,
            leader=state.leader,
            leader_epoch=state.leader_epoch,
            isr=tuple(state.isr),
            partition_epoch=state.zk_version,
            replicas=tuple(state.replicas),
            controller_epoch=state.controller_epoch,
            offline_replicas=tuple(state.offline_replicas),
        )
        for topic in request.topic_states
        for state in topic.partition_states
    )
    brokers: list[BrokerRegistration] = []
    for broker in request.live_brokers:
        endpoints = tuple(
            Endpoint(
                endpoint.listener,
                endpoint.host,
                endpoint.port,
                _SECURITY_PROTOCOL_NAMES.get(endpoint.security_protocol, "PLAINTEXT"),
            )
            for endpoint in broker.endpoints
        )
        host, port = (endpoints[0].host, endpoints[0].port) if endpoints else ("", -1)
        brokers.append(BrokerRegistration(broker.id, host, port, endpoints, broker.rack))
    return UpdateMetadataCommand(
        broker_id,
        request.broker_epoch,
        request.controller_id,
        request.controller_epoch,
        partitions,
        tuple(brokers),
    )


# ---- StopReplica ----------------------------------------------------------------------------------------


def stop_replica_request(command: StopReplicaCommand) -> StopReplicaRequest:
    Request = StopReplicaRequest
    grouped: dict[str, list[StopPartition]] = {}
    for stop in command.partitions:
        grouped.setdefault(stop.topic, []).append(stop)
    return Request(
        controller_id=command.controller_id,
        controller_epoch=command.controller_epoch,
        broker_epoch=command.broker_epoch,
        topic_states=[
            Request.StopReplicaTopicState(
                topic_name=topic,
                partition_states=[
                    Request.StopReplicaPartitionState(
                        partition_index=stop.partition,
                        leader_epoch=stop.leader_epoch,
                        delete_partition=stop.delete,
                    )
                    for stop in stops
                ],
            )
            for topic, stops in grouped.items()
        ],
    )


def stop_replica_command(request: StopReplicaRequest, broker_id: int) -> StopReplicaCommand:
    return StopReplicaCommand(
        broker_id,
        request.broker_epoch,
        request.controller_id,
        request.controller_epoch,
        tuple(
            StopPartition(topic.topic_name, state.partition_index, state.leader_epoch, state.delete_partition)
            for topic in request.topic_states
            for state in topic.partition_states
        ),
    )


def stop_replica_response(outcome: CommandOutcome) -> StopReplicaResponse:
    return StopReplicaResponse(
        error_code=outcome.error,
        partition_errors=[
            StopReplicaResponse.StopReplicaPartitionError(
                topic_name=tp.topic, partition_index=tp.partition, error_code=error
            )
            for tp, error in sorted(outcome.partition_errors.items())
        ],
    )


# ---- AlterPartition ---------------------------------------------------------------------------------------


def alter_partition_request(
    broker_id: int, broker_epoch: int, proposals: Iterable[tuple[uuid.UUID, AlterIsrProposal]]
) -> AlterPartitionRequest:
    """AlterPartition for ``(topic_id, proposal)`` pairs (several partitions in one request)."""
    Request = AlterPartitionRequest
    grouped: dict[uuid.UUID, list[AlterIsrProposal]] = {}
    for topic_id, proposal in proposals:
        grouped.setdefault(topic_id, []).append(proposal)
    return Request(
        broker_id=broker_id,
        broker_epoch=broker_epoch,
        topics=[
            Request.TopicData(
                topic_id=topic_id,
                partitions=[
                    Request.PartitionData(
                        partition_index=proposal.topic_partition.partition,
                        leader_epoch=proposal.leader_epoch,
                        new_isr=list(proposal.new_isr),
                        partition_epoch=proposal.partition_epoch,
                    )
                    for proposal in items
                ],
            )
            for topic_id, items in grouped.items()
        ],
    )


def alter_partition_event(request: AlterPartitionRequest, key: object) -> AlterPartitionReceived:
    return AlterPartitionReceived(
        key,
        request.broker_id,
        request.broker_epoch,
        tuple(
            AlterPartitionItem(
                topic.topic_id,
                item.partition_index,
                item.leader_epoch,
                tuple(item.new_isr),
                item.partition_epoch,
            )
            for topic in request.topics
            for item in topic.partitions
        ),
    )


def alter_partition_response(reply: AlterPartitionReply) -> AlterPartitionResponse:
    Response = AlterPartitionResponse
    grouped: dict[uuid.UUID, list[AlterPartitionResult]] = {}
    for result in reply.partitions:
        grouped.setdefault(result.topic_id, []).append(result)
    return Response(
        error_code=reply.error,
        topics=[
            Response.TopicData(
                topic_id=topic_id,
                partitions=[
                    Response.PartitionData(
                        partition_index=result.partition,
                        error_code=result.error,
                        leader_id=result.leader,
                        leader_epoch=result.leader_epoch,
                        isr=list(result.isr),
                        partition_epoch=result.partition_epoch,
                    )
                    for result in results
                ],
            )
            for topic_id, results in grouped.items()
        ],
    )


def alter_partition_results(response: AlterPartitionResponse) -> tuple[ErrorCode, list[AlterPartitionResult]]:
    results = [
        AlterPartitionResult(
            topic.topic_id,
            item.partition_index,
            ErrorCode(item.error_code),
            item.leader_id,
            item.leader_epoch,
            tuple(item.isr),
            item.partition_epoch,
        )
        for topic in response.topics
        for item in topic.partitions
    ]
    return ErrorCode(response.error_code), results


# ---- ControlledShutdown -------------------------------------------------------------------------------------


def controlled_shutdown_request(broker_id: int, broker_epoch: int) -> ControlledShutdownRequest:
    return ControlledShutdownRequest(broker_id=broker_id, broker_epoch=broker_epoch)


def controlled_shutdown_event(request: ControlledShutdownRequest, key: object) -> ControlledShutdownReceived:
    return ControlledShutdownReceived(key, request.broker_id, request.broker_epoch)


def controlled_shutdown_response(reply: ControlledShutdownReply) -> ControlledShutdownResponse:
    return ControlledShutdownResponse(
        error_code=reply.error,
        remaining_partitions=[
            ControlledShutdownResponse.RemainingPartition(topic_name=tp.topic, partition_index=tp.partition)
            for tp in reply.remaining
        ],
    )


def controlled_shutdown_remaining(
    response: ControlledShutdownResponse,
) -> tuple[ErrorCode, list[TopicPartition]]:
    return ErrorCode(response.error_code), [
        TopicPartition(item.topic_name, item.partition_index) for item in response.remaining_partitions
    ]
