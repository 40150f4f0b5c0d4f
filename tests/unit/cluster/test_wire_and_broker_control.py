"""Controller commands through the generated codec and back, and the broker's fencing of them."""

from __future__ import annotations

import uuid

from strom.cluster import wire
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
from strom.cluster.broker_control import BecomeFollower, BecomeLeader, BrokerControl, IsrChanged, StopReplica
from strom.cluster.model import LEADER_DURING_DELETE, BrokerRegistration, Endpoint, TopicPartition
from strom.cluster.replica import AlterIsrProposal
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.alter_partition import AlterPartitionRequest, AlterPartitionResponse
from strom.protocol.messages.controlled_shutdown import ControlledShutdownRequest, ControlledShutdownResponse
from strom.protocol.messages.leader_and_isr import LeaderAndIsrRequest, LeaderAndIsrResponse
from strom.protocol.messages.stop_replica import StopReplicaRequest, StopReplicaResponse
from strom.protocol.messages.update_metadata import UpdateMetadataRequest

T_ID = uuid.UUID("11111111-2222-3333-4444-555555555555")


def info(
    partition: int, leader: int, epoch: int = 0, partition_epoch: int = 0, **overrides: object
) -> PartitionInfo:
    values: dict[str, object] = {
        "topic": "t",
        "partition": partition,
        "topic_id": T_ID,
        "leader": leader,
        "leader_epoch": epoch,
        "isr": (1, 2, 3),
        "partition_epoch": partition_epoch,
        "replicas": (1, 2, 3),
        "controller_epoch": 4,
    }
    values.update(overrides)
    return PartitionInfo(**values)  # type: ignore[arg-type]


def broker(node_id: int, rack: str | None = None) -> BrokerRegistration:
    port = 9000 + node_id
    return BrokerRegistration(node_id, "127.0.0.1", port, (Endpoint("PLAINTEXT", "127.0.0.1", port),), rack)


def through_the_wire_leader_and_isr(command: LeaderAndIsrCommand) -> LeaderAndIsrCommand:
    data = wire.leader_and_isr_request(command).encode(wire.LEADER_AND_ISR_VERSION)
    return wire.leader_and_isr_command(
        LeaderAndIsrRequest.decode(data, wire.LEADER_AND_ISR_VERSION), command.broker_id
    )


def test_leader_and_isr_round_trip() -> None:
    command = LeaderAndIsrCommand(
        2, 77, 1, 4, (info(0, 1, is_new=True), info(1, 2, 3, 5)), (broker(1), broker(2)), full=True
    )
    assert through_the_wire_leader_and_isr(command) == command


def test_update_metadata_round_trip_keeps_racks_listeners_and_offline_replicas() -> None:
    command = UpdateMetadataCommand(
        3,
        88,
        1,
        4,
        (info(0, 1, offline_replicas=(3,)), info(1, LEADER_DURING_DELETE)),
        (broker(1, "r1"), broker(2, None)),
    )
    data = wire.update_metadata_request(command).encode(wire.UPDATE_METADATA_VERSION)
    decoded = wire.update_metadata_command(
        UpdateMetadataRequest.decode(data, wire.UPDATE_METADATA_VERSION), 3
    )
    assert decoded == command


def test_stop_replica_round_trip_and_response() -> None:
    command = StopReplicaCommand(
        2, 7, 1, 4, (StopPartition("t", 0, -2, True), StopPartition("u", 3, 9, False))
    )
    data = wire.stop_replica_request(command).encode(wire.STOP_REPLICA_VERSION)
    decoded = wire.stop_replica_command(StopReplicaRequest.decode(data, wire.STOP_REPLICA_VERSION), 2)
    assert decoded == command
    control = BrokerControl(2, 7)
    outcome = control.on_stop_replica(decoded)
    response = StopReplicaResponse.decode(
        wire.stop_replica_response(outcome).encode(wire.STOP_REPLICA_VERSION), wire.STOP_REPLICA_VERSION
    )
    assert [(e.topic_name, e.partition_index, e.error_code) for e in response.partition_errors] == [
        ("t", 0, 0),
        ("u", 3, 0),
    ]


def test_alter_partition_round_trip() -> None:
    proposal = AlterIsrProposal(TopicPartition("t", 2), (1, 2), 5, 9)
    request = wire.alter_partition_request(1, 33, [(T_ID, proposal)])
    data = request.encode(wire.ALTER_PARTITION_VERSION)
    event = wire.alter_partition_event(
        AlterPartitionRequest.decode(data, wire.ALTER_PARTITION_VERSION), "key"
    )
    assert (event.broker_id, event.broker_epoch) == (1, 33)
    [item] = event.items
    assert (item.topic_id, item.partition, item.leader_epoch, item.new_isr, item.partition_epoch) == (
        T_ID,
        2,
        5,
        (1, 2),
        9,
    )
    reply = AlterPartitionReply(
        "key", ErrorCode.NONE, (AlterPartitionResult(T_ID, 2, ErrorCode.NONE, 1, 5, (1, 2), 10),)
    )
    response = AlterPartitionResponse.decode(
        wire.alter_partition_response(reply).encode(wire.ALTER_PARTITION_VERSION),
        wire.ALTER_PARTITION_VERSION,
    )
    assert wire.alter_partition_results(response) == (ErrorCode.NONE, list(reply.partitions))


def test_controlled_shutdown_round_trip() -> None:
    data = wire.controlled_shutdown_request(2, 55).encode(wire.CONTROLLED_SHUTDOWN_VERSION)
    event = wire.controlled_shutdown_event(
        ControlledShutdownRequest.decode(data, wire.CONTROLLED_SHUTDOWN_VERSION), "k"
    )
    assert (event.broker_id, event.broker_epoch) == (2, 55)
    reply = ControlledShutdownReply("k", ErrorCode.NONE, (TopicPartition("t", 1),))
    response = ControlledShutdownResponse.decode(
        wire.controlled_shutdown_response(reply).encode(wire.CONTROLLED_SHUTDOWN_VERSION),
        wire.CONTROLLED_SHUTDOWN_VERSION,
    )
    assert wire.controlled_shutdown_remaining(response) == (ErrorCode.NONE, [TopicPartition("t", 1)])


def test_broker_control_transitions_and_fencing() -> None:
    control = BrokerControl(2, broker_epoch=77)

    def send(
        *partitions: PartitionInfo, controller_epoch: int = 4, broker_epoch: int = 77, full: bool = False
    ):  # type: ignore[no-untyped-def]
        command = LeaderAndIsrCommand(2, broker_epoch, 1, controller_epoch, partitions, (), full=full)
        return control.on_leader_and_isr(through_the_wire_leader_and_isr(command))

    outcome = send(info(0, 1), info(1, 2))
    assert [type(t) for t in outcome.transitions] == [BecomeFollower, BecomeLeader]
    assert outcome.partition_errors == {
        TopicPartition("t", 0): ErrorCode.NONE,
        TopicPartition("t", 1): ErrorCode.NONE,
    }
    again = send(info(0, 1), info(1, 2))
    assert again.transitions == [] and set(again.partition_errors.values()) == {ErrorCode.NONE}, "idempotent"
    isr = send(info(1, 2, 0, 1, isr=(2, 3)))
    assert [type(t) for t in isr.transitions] == [IsrChanged]
    stale = send(info(1, 2, 0, 0))
    assert stale.partition_errors[TopicPartition("t", 1)] is ErrorCode.STALE_CONTROLLER_EPOCH
    moved = send(info(1, 3, 1, 2))
    assert [type(t) for t in moved.transitions] == [BecomeFollower]
    assert send(info(0, 1), controller_epoch=3).error is ErrorCode.STALE_CONTROLLER_EPOCH
    assert send(info(0, 1), broker_epoch=76).error is ErrorCode.STALE_BROKER_EPOCH
    foreign = send(info(5, 1, replicas=(1, 3)))
    assert foreign.partition_errors[TopicPartition("t", 5)] is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    response = wire.leader_and_isr_response(
        LeaderAndIsrCommand(2, 77, 1, 4, (info(0, 1),), ()), outcome
    ).encode(wire.LEADER_AND_ISR_VERSION)
    decoded = LeaderAndIsrResponse.decode(response, wire.LEADER_AND_ISR_VERSION)
    assert decoded.topics[0].topic_id == T_ID and len(decoded.topics[0].partition_errors) == 2


def test_a_full_leader_and_isr_names_the_strays() -> None:
    control = BrokerControl(2, broker_epoch=1)
    control.on_leader_and_isr(LeaderAndIsrCommand(2, 1, 1, 1, (info(0, 1), info(1, 2)), ()))
    old_id = uuid.uuid4()
    hosted = [
        (TopicPartition("t", 0), T_ID),
        (TopicPartition("t", 1), T_ID),
        (TopicPartition("old", 0), old_id),
        (TopicPartition("t", 7), old_id),
    ]
    outcome = control.on_leader_and_isr(LeaderAndIsrCommand(2, 1, 1, 2, (info(0, 1),), (), full=True), hosted)
    stops = [t for t in outcome.transitions if isinstance(t, StopReplica)]
    assert {(s.topic_partition, s.delete) for s in stops} == {
        (TopicPartition("t", 1), True),
        (TopicPartition("old", 0), True),
        (TopicPartition("t", 7), True),
    }
    assert list(control.partitions) == [TopicPartition("t", 0)]


def test_a_recreated_topic_replaces_the_old_replica() -> None:
    control = BrokerControl(2, broker_epoch=1)
    control.on_leader_and_isr(LeaderAndIsrCommand(2, 1, 1, 1, (info(0, 1, 4, 4),), ()))
    new_id = uuid.uuid4()
    outcome = control.on_leader_and_isr(LeaderAndIsrCommand(2, 1, 1, 1, (info(0, 1, topic_id=new_id),), ()))
    assert [type(t) for t in outcome.transitions] == [StopReplica, BecomeFollower]
    assert control.partitions[TopicPartition("t", 0)].topic_id == new_id


def test_stop_replica_fencing_and_metadata_image() -> None:
    control = BrokerControl(2, broker_epoch=1)
    control.on_leader_and_isr(LeaderAndIsrCommand(2, 1, 1, 1, (info(0, 1, 5),), ()))
    fenced = control.on_stop_replica(StopReplicaCommand(2, 1, 1, 1, (StopPartition("t", 0, 4, False),)))
    assert fenced.partition_errors[TopicPartition("t", 0)] is ErrorCode.FENCED_LEADER_EPOCH
    assert (
        control.on_update_metadata(UpdateMetadataCommand(2, 1, 1, 0, (), ()))
        is ErrorCode.STALE_CONTROLLER_EPOCH
    )
    assert (
        control.on_update_metadata(
            UpdateMetadataCommand(2, 1, 3, 2, (info(0, 1), info(1, 3)), (broker(1), broker(2)))
        )
        is ErrorCode.NONE
    )
    image = control.metadata
    assert image.controller_id == 3 and [b.node_id for b in image.live_brokers()] == [1, 2]
    assert image.leader(TopicPartition("t", 0)) == broker(1)
    assert image.leader(TopicPartition("t", 1)) is None, "its leader is not live"
    assert image.offline_replicas(image.partition(TopicPartition("t", 1))) == (3,)  # type: ignore[arg-type]
    assert image.topic_name(T_ID) == "t"
    control.on_update_metadata(
        UpdateMetadataCommand(2, 1, 3, 2, (info(0, LEADER_DURING_DELETE), info(1, LEADER_DURING_DELETE)), ())
    )
    assert image.topic("t") is None and image.topic_name(T_ID) is None


def test_a_leader_and_isr_moves_the_leader_in_the_metadata_image_and_an_older_state_never_wins() -> None:
    """An old leader told to follow must not name itself the leader to the client it refuses
    (NOT_LEADER_OR_FOLLOWER): the image takes the LeaderAndIsr's state, and an UpdateMetadata
    that is older (leader epoch, partition epoch) does not bring the old leader back."""
    control = BrokerControl(2, broker_epoch=7)

    def update(*partitions: PartitionInfo) -> None:
        assert control.on_update_metadata(UpdateMetadataCommand(2, 7, 1, 4, partitions, ())) is ErrorCode.NONE

    update(info(0, 2, epoch=3, partition_epoch=5))
    outcome = control.on_leader_and_isr(
        LeaderAndIsrCommand(2, 7, 1, 4, (info(0, 3, epoch=4, partition_epoch=6, isr=(1, 3)),), ())
    )
    assert [type(t) for t in outcome.transitions] == [BecomeFollower]
    moved = control.metadata.partition(TopicPartition("t", 0))
    assert moved is not None and (moved.leader, moved.leader_epoch, moved.isr) == (3, 4, (1, 3))
    update(info(0, 2, epoch=3, partition_epoch=5))
    kept = control.metadata.partition(TopicPartition("t", 0))
    assert kept is not None and kept.leader == 3, "an older state came back"
    # A follower's ISR change (same leader epoch) is a transition too: a broker shutting down
    # stops fetching once it is out.
    shrunk = control.on_leader_and_isr(
        LeaderAndIsrCommand(2, 7, 1, 4, (info(0, 3, epoch=4, partition_epoch=7, isr=(3,)),), ())
    )
    assert [type(t) for t in shrunk.transitions] == [IsrChanged]
