"""The values the cluster is made of: brokers, topic assignments, partition states.

Plain frozen data shared by the controller, the ZooKeeper shell and the broker side. A partition
state is what ``/brokers/topics/T/partitions/P/state`` holds (leader, leader epoch, ISR, the
epoch of the controller that wrote it) together with the znode's version, which is the partition
epoch: every change is a write conditional on that version, so it names exactly which state it
replaces.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

# Leader ids with a meaning (Kafka's): no leader elected; the topic is being deleted (sent in
# UpdateMetadata so brokers drop it from their metadata).
NO_LEADER = -1
LEADER_DURING_DELETE = -2


@dataclass(frozen=True, order=True)
class TopicPartition:
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True)
class Endpoint:
    """One listener of a broker: ``PLAINTEXT://host:port``."""

    listener: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    def __str__(self) -> str:
        return f"{self.listener}://{self.host}:{self.port}"


@dataclass(frozen=True)
class BrokerRegistration:
    """A live broker as ``/brokers/ids/N`` describes it.

    ``epoch`` is not in the JSON: it is the creation zxid of the ephemeral znode, different for
    every registration, so a request addressed to (or sent by) an earlier life of the same node id
    is recognised and refused (Kafka's broker epoch).
    """

    node_id: int
    host: str
    port: int
    endpoints: tuple[Endpoint, ...]
    rack: str | None = None
    timestamp_ms: int = 0
    epoch: int = -1

    def with_epoch(self, epoch: int) -> BrokerRegistration:
        return BrokerRegistration(
            self.node_id, self.host, self.port, self.endpoints, self.rack, self.timestamp_ms, epoch
        )


@dataclass(frozen=True)
class TopicAssignment:
    """``/brokers/topics/T``: which brokers hold each partition, the preferred leader first.

    A partition being reassigned (KIP-455) has its full replica set in ``replicas`` (the target
    replicas first, then the original ones leaving), and the members joining and leaving in
    ``adding`` and ``removing``: the replicas it ends with are ``replicas`` without ``removing``.
    """

    name: str
    topic_id: uuid.UUID
    replicas: Mapping[int, tuple[int, ...]]
    version: int = -1  # the znode's version when read (-1: not read from ZooKeeper)
    adding: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    removing: Mapping[int, tuple[int, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        assert list(self.replicas) == sorted(self.replicas), "partitions are kept in order"

    def reassigning(self, partition: int) -> bool:
        return partition in self.adding or partition in self.removing

    def target(self, partition: int) -> tuple[int, ...]:
        """The replicas the partition ends with (its replicas, when it is not being reassigned)."""
        leaving = self.removing.get(partition, ())
        return tuple(replica for replica in self.replicas[partition] if replica not in leaving)

    def original(self, partition: int) -> tuple[int, ...]:
        """The replicas the partition had before its reassignment began."""
        joining = self.adding.get(partition, ())
        return tuple(replica for replica in self.replicas[partition] if replica not in joining)

    @property
    def partition_count(self) -> int:
        return len(self.replicas)

    @property
    def replication_factor(self) -> int:
        return len(self.replicas[0]) if self.replicas else 0

    def partitions(self) -> list[TopicPartition]:
        return [TopicPartition(self.name, index) for index in self.replicas]


def replica_list_fault(replicas: tuple[int, ...]) -> str | None:
    """What is wrong with a replica list a client asked for (empty, a broker named twice), or None;
    whether its brokers exist is the caller's to check."""
    if not replicas:
        return "the replica list is empty"
    if len(set(replicas)) != len(replicas):
        return f"the replica list {list(replicas)} has duplicates"
    return None


@dataclass(frozen=True)
class LeaderAndIsr:
    """The JSON of a partition's state znode."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int

    def with_isr(self, isr: tuple[int, ...], controller_epoch: int) -> LeaderAndIsr:
        """The same leader and epoch, another ISR (a follower left or joined)."""
        return LeaderAndIsr(self.leader, self.leader_epoch, isr, controller_epoch)

    def with_leader(self, leader: int, isr: tuple[int, ...], controller_epoch: int) -> LeaderAndIsr:
        """A new leader: the leader epoch moves on, so every write of the old leader is fenced."""
        return LeaderAndIsr(leader, self.leader_epoch + 1, isr, controller_epoch)


@dataclass(frozen=True)
class PartitionState:
    """A state znode as read: its content and its version (the partition epoch)."""

    leader_and_isr: LeaderAndIsr
    version: int

    @property
    def leader(self) -> int:
        return self.leader_and_isr.leader

    @property
    def leader_epoch(self) -> int:
        return self.leader_and_isr.leader_epoch

    @property
    def isr(self) -> tuple[int, ...]:
        return self.leader_and_isr.isr


@dataclass(frozen=True)
class ClusterSnapshot:
    """Everything a new controller reads from ZooKeeper before it acts."""

    brokers: Mapping[int, BrokerRegistration]
    topics: Mapping[str, TopicAssignment]
    partition_states: Mapping[TopicPartition, PartitionState]
    topics_to_delete: frozenset[str] = frozenset()
    topic_configs: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
