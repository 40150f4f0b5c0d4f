"""``BrokerTopics``: the topics as the consumer group protocol's coordinator sees them — ids and
partition counts from the broker's replication, replica racks where brokers have them, internal
topics out of regex matching, answers cached until ``forget``."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import cast

from strom.assignors.server import TopicSpec
from strom.broker.group_topics import BrokerTopics
from strom.broker.replication import PartitionView, Replication, TopicView
from strom.protocol.errors import ErrorCode

ORDERS_ID = uuid.UUID(int=1)
OFFSETS_ID = uuid.UUID(int=2)


@dataclass
class Topic:
    name: str
    topic_id: uuid.UUID
    internal: bool
    partitions: int


@dataclass
class FakeReplication:
    """Topics and their replicas (partition -> broker ids); counts how often it is asked."""

    topics: dict[str, Topic] = field(default_factory=dict)
    replicas: dict[str, list[list[int]]] = field(default_factory=dict)
    described: int = 0

    def topic_names(self) -> list[str]:
        return sorted(self.topics)

    def topic(self, name: str) -> Topic | None:
        return self.topics.get(name)

    def describe_partitions(self, topic: TopicView, first: int, last: int) -> list[PartitionView]:
        self.described += 1
        return [
            PartitionView(index, ErrorCode.NONE, replicas[0], 0, replicas, replicas, [])
            for index, replicas in enumerate(self.replicas[topic.name][first:last], start=first)
        ]


def view(replication: FakeReplication, racks: dict[int, str]) -> BrokerTopics:
    return BrokerTopics(lambda: cast(Replication, replication), lambda: racks)


def test_topics_with_replica_racks_and_no_internal_ones_for_regexes() -> None:
    replication = FakeReplication(
        topics={
            "orders": Topic("orders", ORDERS_ID, False, 3),
            "__consumer_offsets": Topic("__consumer_offsets", OFFSETS_ID, True, 50),
        },
        replicas={"orders": [[1, 2], [2, 3], [3, 1]], "__consumer_offsets": [[1]] * 50},
    )
    topics = view(replication, {1: "a", 2: "b"})  # broker 3 has no rack
    assert topics.topic("orders") == TopicSpec(
        ORDERS_ID, "orders", 3, (frozenset({"a", "b"}), frozenset({"b"}), frozenset({"a"}))
    )
    assert topics.topic("missing") is None
    assert list(topics.topic_names()) == ["orders"]
    # Named explicitly, an internal topic is still a topic (as Kafka allows).
    offsets = topics.topic("__consumer_offsets")
    assert offsets is not None and offsets.partition_count == 50


def test_without_racks_no_partition_is_looked_up() -> None:
    replication = FakeReplication(topics={"orders": Topic("orders", ORDERS_ID, False, 3)})
    assert view(replication, {}).topic("orders") == TopicSpec(ORDERS_ID, "orders", 3, ())
    assert replication.described == 0


def test_answers_are_cached_until_forgotten() -> None:
    replication = FakeReplication(
        topics={"orders": Topic("orders", ORDERS_ID, False, 1)}, replicas={"orders": [[1]]}
    )
    topics = view(replication, {1: "a"})
    assert topics.topic("orders") == topics.topic("orders")
    assert replication.described == 1
    replication.topics["orders"].partitions = 2
    replication.replicas["orders"].append([1])
    topics.forget(["other"])
    assert topics.topic("orders") is not None and topics.topic("orders").partition_count == 1  # type: ignore[union-attr]
    topics.forget(["orders"])
    grown = topics.topic("orders")
    assert grown is not None and grown.partition_count == 2
    del replication.topics["orders"]
    assert topics.topic("orders") is not None  # still cached
    topics.forget(None)
    assert topics.topic("orders") is None
