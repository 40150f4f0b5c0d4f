"""A single node describes every partition alike, so it keeps a range's partition views built and
shares them between Metadata answers, within ``limits.single_node_partition_views_cached_max``."""

from __future__ import annotations

import pytest

from strom.base import limits
from strom.broker.replication import SINGLE_NODE_LEADER_EPOCH, PartitionView, SingleNode
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.metadata import MetadataRequest, MetadataResponse
from tests.unit.broker.conftest import InProcessBroker
from tests.unit.broker.test_dispatch import create_topic


def _expected(node: int, first: int, last: int) -> list[PartitionView]:
    return [
        PartitionView(index, ErrorCode.NONE, node, SINGLE_NODE_LEADER_EPOCH, [node], [node], [])
        for index in range(first, last)
    ]


def _partitions(broker: InProcessBroker, topic: str) -> list[tuple[int, int, list[int], list[int]]]:
    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)])
    response: MetadataResponse = broker.call(request, 12)
    [answer] = response.topics
    return [(p.partition_index, p.leader_id, p.replica_nodes, p.isr_nodes) for p in answer.partitions]


def test_views_are_built_once_per_range_and_describe_what_a_fresh_build_would(
    broker: InProcessBroker,
) -> None:
    replication = broker.server.state.replication
    assert isinstance(replication, SingleNode)
    create_topic(broker, "shared", partitions=3)
    topic = replication.topic("shared")
    assert topic is not None
    node = broker.server.state.node_id
    first = replication.describe_partitions(topic, 0, 3)
    assert first == _expected(node, 0, 3)
    assert replication.describe_partitions(topic, 0, 3) is first, "built once, shared after"
    assert replication.describe_partitions(topic, 1, 3) == _expected(node, 1, 3)
    # Metadata answers read them: the second answer the same as the first.
    assert (
        _partitions(broker, "shared")
        == _partitions(broker, "shared")
        == [(index, node, [node], [node]) for index in range(3)]
    )


def test_the_views_kept_stay_within_their_bound(
    broker: InProcessBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "single_node_partition_views_cached_max", 10)
    replication = broker.server.state.replication
    assert isinstance(replication, SingleNode)
    create_topic(broker, "wide", partitions=8)
    topic = replication.topic("wide")
    assert topic is not None
    node = broker.server.state.node_id
    for first in range(8):
        assert replication.describe_partitions(topic, first, 8) == _expected(node, first, 8)
        held = sum(len(views) for views in replication._views.values())
        assert held <= 10, held
