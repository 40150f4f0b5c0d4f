"""What a broker knows of the whole cluster, from the controller's UpdateMetadata.

Every broker answers Metadata, FindCoordinator and DescribeCluster from this image: the live
brokers with their endpoints and racks, the controller, and every partition's leader, leader
epoch, replicas, ISR and offline replicas.

A partition's state also comes in the LeaderAndIsr the controller sends its replicas just before
the UpdateMetadata (``update_partition``): an old leader that has just been told to follow must
not name itself the leader to the client it has just refused (NOT_LEADER_OR_FOLLOWER) — the
client would ask again, be told the same, and wait for its next metadata refresh. A partition's
state never goes back: an older (leader epoch, partition epoch) of the same topic id is ignored.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from strom.cluster.actions import PartitionInfo, UpdateMetadataCommand
from strom.cluster.model import LEADER_DURING_DELETE, BrokerRegistration, TopicPartition


@dataclass
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionInfo] = field(default_factory=dict)


class MetadataImage:
    def __init__(self) -> None:
        self.controller_id = -1
        self.brokers: dict[int, BrokerRegistration] = {}
        self.topics: dict[str, TopicImage] = {}
        self._by_id: dict[uuid.UUID, str] = {}

    def apply(self, command: UpdateMetadataCommand) -> None:
        self.controller_id = command.controller_id
        self.brokers = {broker.node_id: broker for broker in command.live_brokers}
        for info in command.partitions:
            topic = self.topics.get(info.topic)
            if info.leader == LEADER_DURING_DELETE:
                if topic is not None and topic.topic_id == info.topic_id:
                    topic.partitions.pop(info.partition, None)
                    if not topic.partitions:
                        del self.topics[info.topic]
                        self._by_id.pop(info.topic_id, None)
                continue
            self.update_partition(info)

    def update_partition(self, info: PartitionInfo) -> None:
        """A partition's state (from UpdateMetadata or LeaderAndIsr), unless an older one."""
        topic = self.topics.get(info.topic)
        if topic is None or topic.topic_id != info.topic_id:
            if topic is not None:
                self._by_id.pop(topic.topic_id, None)
            topic = TopicImage(info.topic, info.topic_id)
            self.topics[info.topic] = topic
            self._by_id[info.topic_id] = info.topic
        known = topic.partitions.get(info.partition)
        if known is not None and (info.leader_epoch, info.partition_epoch) < (
            known.leader_epoch,
            known.partition_epoch,
        ):
            return
        topic.partitions[info.partition] = info

    def topic(self, name: str) -> TopicImage | None:
        return self.topics.get(name)

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return self._by_id.get(topic_id)

    def partition(self, tp: TopicPartition) -> PartitionInfo | None:
        topic = self.topics.get(tp.topic)
        return None if topic is None else topic.partitions.get(tp.partition)

    def leader(self, tp: TopicPartition) -> BrokerRegistration | None:
        """The live broker leading ``tp``, or None (no leader, unknown partition, leader gone)."""
        info = self.partition(tp)
        return None if info is None else self.brokers.get(info.leader)

    def offline_replicas(self, info: PartitionInfo) -> tuple[int, ...]:
        """Replicas not registered now (the image's live set is newer than the partition's state)."""
        return tuple(replica for replica in info.replicas if replica not in self.brokers)

    def live_brokers(self) -> list[BrokerRegistration]:
        return [self.brokers[node_id] for node_id in sorted(self.brokers)]
