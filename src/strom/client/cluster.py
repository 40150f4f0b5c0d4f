"""The client's view of the cluster: brokers, topics, partition leaders. Pure, no I/O.

Built from Metadata responses. ``stale`` says when the view is older than ``metadata.max.age.ms``
or someone asked for a refresh (a NOT_LEADER or UNKNOWN_TOPIC error on a produce or fetch).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from strom.protocol.errors import ErrorCode
from strom.protocol.messages.metadata import MetadataResponse

__all__ = ["BrokerNode", "ClusterMetadata", "PartitionInfo", "TopicInfo", "TopicPartition"]


class TopicPartition(NamedTuple):
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class BrokerNode:
    node_id: int
    host: str
    port: int
    rack: str | None = None


class PartitionInfo(NamedTuple):
    """A partition as the latest Metadata answer described it (a tuple: a large cluster's answer
    makes one per partition, and a frozen dataclass costs nearly three times as much to build)."""

    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error_code: int = 0


@dataclass(slots=True)
class TopicInfo:
    name: str
    partitions: dict[int, PartitionInfo] = field(default_factory=dict)
    is_internal: bool = False
    error_code: int = 0
    topic_id: str | None = None


class ClusterMetadata:
    """The latest Metadata answer, with the time it arrived."""

    def __init__(self, max_age_ms: int) -> None:
        self.max_age_ms = max_age_ms
        self.brokers: dict[int, BrokerNode] = {}
        self.topics: dict[str, TopicInfo] = {}
        self.cluster_id: str | None = None
        self.controller_id: int = -1
        self.updated_ms: int | None = None
        self.refresh_requested = False
        # Topics some caller needs even when nobody listed them yet (producers, assigned partitions).
        self.wanted_topics: set[str] = set()

    def stale(self, now_ms: int) -> bool:
        return (
            self.refresh_requested or self.updated_ms is None or now_ms - self.updated_ms >= self.max_age_ms
        )

    def request_refresh(self) -> None:
        self.refresh_requested = True

    def update(self, response: MetadataResponse, now_ms: int, *, all_topics: bool) -> None:
        """Take in a Metadata response. With ``all_topics`` the response lists every topic, so
        topics missing from it are dropped; otherwise only the listed topics are replaced."""
        self.brokers = {
            broker.node_id: BrokerNode(broker.node_id, broker.host, broker.port, broker.rack)
            for broker in response.brokers
        }
        self.cluster_id = response.cluster_id
        self.controller_id = response.controller_id
        if all_topics:
            self.topics = {}
        make_partition = PartitionInfo  # once per partition of the cluster in an all-topics answer
        for topic in response.topics:
            if topic.name is None:
                continue
            if topic.error_code != ErrorCode.NONE and not topic.partitions:
                self.topics.pop(topic.name, None)
                if topic.error_code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    self.topics[topic.name] = TopicInfo(topic.name, error_code=topic.error_code)
                continue
            self.topics[topic.name] = TopicInfo(
                topic.name,
                {
                    p.partition_index: make_partition(
                        p.partition_index,
                        p.leader_id,
                        p.leader_epoch,
                        tuple(p.replica_nodes),
                        tuple(p.isr_nodes),
                        p.error_code,
                    )
                    for p in topic.partitions
                },
                topic.is_internal,
                topic.error_code,
                str(topic.topic_id),
            )
        self.updated_ms = now_ms
        self.refresh_requested = False

    def partition_count(self, topic: str) -> int | None:
        """Partitions of ``topic``, or None when the topic is unknown (or has none yet)."""
        info = self.topics.get(topic)
        if info is None or not info.partitions:
            return None
        return len(info.partitions)

    def leader_for(self, topic_partition: TopicPartition) -> int | None:
        """The leader's node id, or None when unknown or leaderless."""
        info = self.topics.get(topic_partition.topic)
        if info is None:
            return None
        partition = info.partitions.get(topic_partition.partition)
        if partition is None or partition.leader < 0 or partition.leader not in self.brokers:
            return None
        return partition.leader

    def leader_epoch(self, topic_partition: TopicPartition) -> int:
        info = self.topics.get(topic_partition.topic)
        partition = None if info is None else info.partitions.get(topic_partition.partition)
        return -1 if partition is None else partition.leader_epoch

    def any_broker(self) -> int | None:
        return min(self.brokers) if self.brokers else None
