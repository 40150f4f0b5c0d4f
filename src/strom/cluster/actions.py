"""What the controller asks its shell to do: its explicit output (``Controller.ready()``).

Three kinds, like etcd raft's ``Ready``: writes to ZooKeeper (each one conditional, fenced by the
controller epoch), commands to brokers (LeaderAndIsr, UpdateMetadata, StopReplica — ``wire``
turns them into the generated protocol messages), and replies to requests the controller answers
(AlterPartition, ControlledShutdown, ElectLeaders). Commands only ever describe partition states
that ZooKeeper has confirmed, so the shell may send them and perform the writes in any order.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from strom.cluster.model import BrokerRegistration, TopicPartition
from strom.cluster.zk_store import Op, OpResult, ZkError
from strom.protocol.errors import ErrorCode

# ---- ZooKeeper writes --------------------------------------------------------------------------


@dataclass(frozen=True)
class ControllerWrite:
    """One conditional change, run by the shell as a transaction [check /controller_epoch, *ops].

    ``parents`` are empty persistent containers created first (unfenced: creating an empty
    container changes nothing anyone reads). ``delete_trees`` are deleted leaves first, each
    deletion fenced by the controller epoch, before ``ops`` run.
    """

    key: str
    ops: tuple[Op, ...] = ()
    parents: tuple[str, ...] = ()
    delete_trees: tuple[str, ...] = ()


@dataclass(frozen=True)
class WriteOutcome:
    """How one ``ControllerWrite`` went.

    On success ``results`` holds the result of each of its ops. On failure ``error`` says why and
    ``current`` holds, for the znode of the failed op, what ZooKeeper has now (data and version, or
    None if it does not exist), so the controller can adopt it and decide again.
    """

    key: str
    results: tuple[OpResult, ...] | None = None
    error: ZkError | None = None
    current: tuple[bytes, int] | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


# ---- commands to brokers -------------------------------------------------------------------------


@dataclass(frozen=True)
class PartitionInfo:
    """A partition's confirmed state as LeaderAndIsr / UpdateMetadata carry it."""

    topic: str
    partition: int
    topic_id: uuid.UUID
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int  # the state znode's version
    replicas: tuple[int, ...]
    controller_epoch: int
    offline_replicas: tuple[int, ...] = ()
    is_new: bool = False

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


@dataclass(frozen=True)
class LeaderAndIsrCommand:
    """Tell ``broker_id`` to lead or follow these partitions.

    ``full``: the partitions are every one the broker hosts (sent when it registers and when a
    controller takes office); a local log absent from a full command is a stray to delete.
    """

    broker_id: int
    broker_epoch: int
    controller_id: int
    controller_epoch: int
    partitions: tuple[PartitionInfo, ...]
    leaders: tuple[BrokerRegistration, ...]
    full: bool = False


@dataclass(frozen=True)
class UpdateMetadataCommand:
    """Every live broker and the given partition states, for the broker's metadata answers.

    A partition whose ``leader`` is ``LEADER_DURING_DELETE`` belongs to a topic being deleted.
    """

    broker_id: int
    broker_epoch: int
    controller_id: int
    controller_epoch: int
    partitions: tuple[PartitionInfo, ...]
    live_brokers: tuple[BrokerRegistration, ...]


@dataclass(frozen=True)
class StopPartition:
    topic: str
    partition: int
    leader_epoch: int
    delete: bool


@dataclass(frozen=True)
class StopReplicaCommand:
    broker_id: int
    broker_epoch: int
    controller_id: int
    controller_epoch: int
    partitions: tuple[StopPartition, ...]


BrokerCommand = LeaderAndIsrCommand | UpdateMetadataCommand | StopReplicaCommand


# ---- replies ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AlterPartitionResult:
    topic_id: uuid.UUID
    partition: int
    error: ErrorCode
    leader: int = -1
    leader_epoch: int = -1
    isr: tuple[int, ...] = ()
    partition_epoch: int = -1


@dataclass(frozen=True)
class AlterPartitionReply:
    key: object
    error: ErrorCode
    partitions: tuple[AlterPartitionResult, ...] = ()


@dataclass(frozen=True)
class ControlledShutdownReply:
    key: object
    error: ErrorCode
    remaining: tuple[TopicPartition, ...] = ()


@dataclass(frozen=True)
class ElectLeadersReply:
    key: object
    error: ErrorCode
    results: Mapping[TopicPartition, ErrorCode] = field(default_factory=dict)


@dataclass(frozen=True)
class ReassignmentsReply:
    """AlterPartitionReassignments' answer: per partition an error (NONE: the reassignment, or
    its cancellation, is written and under way) and a message."""

    key: object
    error: ErrorCode
    results: Mapping[TopicPartition, tuple[ErrorCode, str | None]] = field(default_factory=dict)


@dataclass(frozen=True)
class OngoingReassignment:
    replicas: tuple[int, ...]  # all of them, the target ones first
    adding: tuple[int, ...]
    removing: tuple[int, ...]


@dataclass(frozen=True)
class ReassignmentsListReply:
    key: object
    error: ErrorCode
    ongoing: Mapping[TopicPartition, OngoingReassignment] = field(default_factory=dict)


ControllerReply = (
    AlterPartitionReply
    | ControlledShutdownReply
    | ElectLeadersReply
    | ReassignmentsReply
    | ReassignmentsListReply
)


@dataclass(frozen=True)
class UncleanElection:
    """A leader elected from outside the ISR: acknowledged records may be lost."""

    topic_partition: TopicPartition
    leader: int
    leader_epoch: int


@dataclass
class ControllerReady:
    writes: list[ControllerWrite] = field(default_factory=list)
    commands: list[BrokerCommand] = field(default_factory=list)
    replies: list[ControllerReply] = field(default_factory=list)
    unclean_elections: list[UncleanElection] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)  # things worth a log line
    resigned: bool = False

    def __bool__(self) -> bool:
        return bool(
            self.writes
            or self.commands
            or self.replies
            or self.unclean_elections
            or self.notices
            or self.resigned
        )
