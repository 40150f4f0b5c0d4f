"""What the controller is told: its input (``Controller.step(event)``).

ZooKeeper watches become ``BrokersChanged`` / ``TopicsChanged`` / ``DeletionsRequested`` /
``TopicConfigChanged`` (each carries the whole current set, read after the watch fired, so a
missed intermediate change does not matter); requests addressed to the controller become the
``...Received`` events; the results of its own writes come back as ``WritesCompleted``; time moves
with ``Tick``.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum

from strom.cluster.actions import WriteOutcome
from strom.cluster.model import BrokerRegistration, ClusterSnapshot, TopicAssignment, TopicPartition


@dataclass(frozen=True)
class Activated:
    """This broker won the election: ``epoch`` is the new controller epoch, ``epoch_version`` the
    version of ``/controller_epoch`` that fences its writes, ``snapshot`` all it read after."""

    epoch: int
    epoch_version: int
    snapshot: ClusterSnapshot


@dataclass(frozen=True)
class Resigned:
    """No longer the controller (a write found a newer epoch, or the session ended)."""

    reason: str


@dataclass(frozen=True)
class BrokersChanged:
    brokers: Mapping[int, BrokerRegistration]


@dataclass(frozen=True)
class TopicsChanged:
    topics: Mapping[str, TopicAssignment]


@dataclass(frozen=True)
class DeletionsRequested:
    topics: frozenset[str]


@dataclass(frozen=True)
class TopicConfigChanged:
    topic: str
    config: Mapping[str, str]


@dataclass(frozen=True)
class WritesCompleted:
    outcomes: tuple[WriteOutcome, ...]


@dataclass(frozen=True)
class AlterPartitionItem:
    topic_id: uuid.UUID
    partition: int
    leader_epoch: int
    new_isr: tuple[int, ...]
    partition_epoch: int


@dataclass(frozen=True)
class AlterPartitionReceived:
    key: object
    broker_id: int
    broker_epoch: int
    items: tuple[AlterPartitionItem, ...]


@dataclass(frozen=True)
class ControlledShutdownReceived:
    key: object
    broker_id: int
    broker_epoch: int


class ElectionType(IntEnum):
    PREFERRED = 0
    UNCLEAN = 1


@dataclass(frozen=True)
class ElectLeadersReceived:
    key: object
    election_type: ElectionType
    partitions: tuple[TopicPartition, ...] | None  # None: every partition


@dataclass(frozen=True)
class ReassignmentsReceived:
    """AlterPartitionReassignments: per partition its new replicas, or None to cancel the
    reassignment in progress."""

    key: object
    targets: Mapping[TopicPartition, tuple[int, ...] | None]


@dataclass(frozen=True)
class ReassignmentsListed:
    """ListPartitionReassignments: of these partitions (None: of every partition)."""

    key: object
    partitions: tuple[TopicPartition, ...] | None


@dataclass(frozen=True)
class Tick:
    """Time has passed (the auto leader rebalance checks whether it is due)."""


ControllerEvent = (
    Activated
    | Resigned
    | BrokersChanged
    | TopicsChanged
    | DeletionsRequested
    | TopicConfigChanged
    | WritesCompleted
    | AlterPartitionReceived
    | ControlledShutdownReceived
    | ElectLeadersReceived
    | ReassignmentsReceived
    | ReassignmentsListed
    | Tick
)
