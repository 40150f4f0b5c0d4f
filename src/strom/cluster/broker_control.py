"""The broker's side of the controller's commands: fencing, then what each partition becomes.

``BrokerControl`` checks every LeaderAndIsr / UpdateMetadata / StopReplica against what this
broker knows — the controller epoch (an older controller is refused: STALE_CONTROLLER_EPOCH), its
own broker epoch (a command for an earlier life of this node id: STALE_BROKER_EPOCH), and per
partition the leader epoch and partition epoch (an older state is ignored) — and turns what passes
into transitions the broker carries out: become leader, become follower, update the ISR, stop (and
delete) a replica. Pure: the broker applies the transitions to its logs, fetchers and
``PartitionLeader`` objects.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from strom.cluster.actions import (
    LeaderAndIsrCommand,
    PartitionInfo,
    StopReplicaCommand,
    UpdateMetadataCommand,
)
from strom.cluster.metadata_image import MetadataImage
from strom.cluster.model import TopicPartition
from strom.protocol.errors import ErrorCode


@dataclass(frozen=True)
class BecomeLeader:
    info: PartitionInfo


@dataclass(frozen=True)
class BecomeFollower:
    info: PartitionInfo  # info.leader may be NO_LEADER: stop fetching, wait for the next state


@dataclass(frozen=True)
class IsrChanged:
    """Same leader and epoch, a newer partition epoch: the ISR changed (on the leader and on the
    followers: a follower in controlled shutdown stops fetching once it is out of the ISR)."""

    info: PartitionInfo


@dataclass(frozen=True)
class StopReplica:
    topic_partition: TopicPartition
    delete: bool


Transition = BecomeLeader | BecomeFollower | IsrChanged | StopReplica


@dataclass
class CommandOutcome:
    error: ErrorCode = ErrorCode.NONE
    partition_errors: dict[TopicPartition, ErrorCode] = field(default_factory=dict)
    transitions: list[Transition] = field(default_factory=list)


class BrokerControl:
    def __init__(self, node_id: int, broker_epoch: int) -> None:
        self.node_id = node_id
        self.broker_epoch = broker_epoch
        self.controller_id = -1
        self.controller_epoch = -1
        self.partitions: dict[TopicPartition, PartitionInfo] = {}
        self.metadata = MetadataImage()

    def _fence(self, controller_id: int, controller_epoch: int, broker_epoch: int) -> ErrorCode:
        if broker_epoch != -1 and broker_epoch != self.broker_epoch:
            return ErrorCode.STALE_BROKER_EPOCH
        if controller_epoch < self.controller_epoch:
            return ErrorCode.STALE_CONTROLLER_EPOCH
        self.controller_epoch = controller_epoch
        self.controller_id = controller_id
        return ErrorCode.NONE

    def on_leader_and_isr(
        self, command: LeaderAndIsrCommand, hosted: Iterable[tuple[TopicPartition, uuid.UUID]] = ()
    ) -> CommandOutcome:
        """Apply a LeaderAndIsr. ``hosted``: the partition logs on disk (name, topic id); with a
        full command, those it does not list (or lists under another topic id) are strays."""
        outcome = CommandOutcome(
            self._fence(command.controller_id, command.controller_epoch, command.broker_epoch)
        )
        if outcome.error is not ErrorCode.NONE:
            return outcome
        listed: dict[TopicPartition, uuid.UUID] = {}
        for info in command.partitions:
            tp = info.topic_partition
            listed[tp] = info.topic_id
            if self.node_id not in info.replicas:
                outcome.partition_errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            current = self.partitions.get(tp)
            if current is not None and current.topic_id != info.topic_id:
                # The topic was deleted and created again under the same name.
                outcome.transitions.append(StopReplica(tp, delete=True))
                current = None
            if current is not None:
                incoming = (info.leader_epoch, info.partition_epoch)
                known = (current.leader_epoch, current.partition_epoch)
                if incoming < known:
                    outcome.partition_errors[tp] = ErrorCode.STALE_CONTROLLER_EPOCH
                    continue
                if incoming == known:
                    outcome.partition_errors[tp] = ErrorCode.NONE
                    continue
            outcome.partition_errors[tp] = ErrorCode.NONE
            self.partitions[tp] = info
            self.metadata.update_partition(info)
            if current is not None and current.leader_epoch == info.leader_epoch:
                outcome.transitions.append(IsrChanged(info))
                continue
            if info.leader == self.node_id:
                outcome.transitions.append(BecomeLeader(info))
            else:
                outcome.transitions.append(BecomeFollower(info))
        if command.full:
            for tp in sorted(set(self.partitions) - set(listed)):
                del self.partitions[tp]
                outcome.transitions.append(StopReplica(tp, delete=True))
            already = {t.topic_partition for t in outcome.transitions if isinstance(t, StopReplica)}
            for tp, topic_id in sorted(hosted, key=lambda entry: entry[0]):
                if listed.get(tp) != topic_id and tp not in already:
                    outcome.transitions.append(StopReplica(tp, delete=True))
        return outcome

    def on_stop_replica(self, command: StopReplicaCommand) -> CommandOutcome:
        outcome = CommandOutcome(
            self._fence(command.controller_id, command.controller_epoch, command.broker_epoch)
        )
        if outcome.error is not ErrorCode.NONE:
            return outcome
        for stop in command.partitions:
            tp = TopicPartition(stop.topic, stop.partition)
            current = self.partitions.get(tp)
            if current is not None and stop.leader_epoch >= 0 and stop.leader_epoch < current.leader_epoch:
                outcome.partition_errors[tp] = ErrorCode.FENCED_LEADER_EPOCH
                continue
            outcome.partition_errors[tp] = ErrorCode.NONE
            if stop.delete:
                self.partitions.pop(tp, None)
            outcome.transitions.append(StopReplica(tp, stop.delete))
        return outcome

    def on_update_metadata(self, command: UpdateMetadataCommand) -> ErrorCode:
        error = self._fence(command.controller_id, command.controller_epoch, command.broker_epoch)
        if error is ErrorCode.NONE:
            self.metadata.apply(command)
        return error
