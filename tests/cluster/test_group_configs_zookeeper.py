"""Group configs (KIP-848) in a cluster: kept in ZooKeeper (``/config/groups/<group>`` with a
``/config/changes`` notification), so a group config set through one broker is described by the
others, given by the group's coordinator to the group's members, and survives a restart."""

from __future__ import annotations

import uuid

from strom.cli.dev_cluster import LocalCluster
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from strom.protocol.messages.describe_configs import DescribeConfigsRequest, DescribeConfigsResponse
from strom.protocol.messages.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from strom.protocol.messages.incremental_alter_configs import (
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from tests.compat.wire import WireClient

from .conftest import wait_until

GROUP_RESOURCE = 32
HEARTBEAT = "consumer.heartbeat.interval.ms"


def _described(port: int, group: str) -> dict[str, tuple[str | None, int]]:
    request = DescribeConfigsRequest(
        resources=[
            DescribeConfigsRequest.DescribeConfigsResource(resource_type=GROUP_RESOURCE, resource_name=group)
        ]
    )
    with WireClient(port) as client:
        [result] = client.round_trip(request, DescribeConfigsResponse, 4).results
    assert result.error_code == ErrorCode.NONE, result
    return {entry.name: (entry.value, entry.config_source) for entry in result.configs}


def _alter(port: int, group: str, operation: int, value: str | None) -> None:
    request = IncrementalAlterConfigsRequest(
        resources=[
            IncrementalAlterConfigsRequest.AlterConfigsResource(
                resource_type=GROUP_RESOURCE,
                resource_name=group,
                configs=[
                    IncrementalAlterConfigsRequest.AlterableConfig(
                        name=HEARTBEAT, config_operation=operation, value=value
                    )
                ],
            )
        ]
    )
    with WireClient(port) as client:
        [response] = client.round_trip(request, IncrementalAlterConfigsResponse, 1).responses
    assert response.error_code == ErrorCode.NONE, response


def _heartbeat_interval(cluster: LocalCluster, group: str) -> int | None:
    """What the group's coordinator tells a new member of it (None while it cannot answer)."""
    port = next(broker.port for broker in cluster.brokers.values() if broker.running)
    with WireClient(port) as client:
        found = client.round_trip(FindCoordinatorRequest(key=group), FindCoordinatorResponse, 1)
    if found.error_code != ErrorCode.NONE:
        return None
    request = ConsumerGroupHeartbeatRequest(
        group_id=group,
        member_id=uuid.uuid4().hex,
        member_epoch=0,
        rebalance_timeout_ms=30_000,
        subscribed_topic_names=["group-config-topic"],
        topic_partitions=[],
    )
    with WireClient(found.port) as client:
        answer = client.round_trip(request, ConsumerGroupHeartbeatResponse, 1)
    return answer.heartbeat_interval_ms if answer.error_code == ErrorCode.NONE else None


def test_a_group_config_set_through_one_broker_reaches_the_others_and_the_coordinator(
    cluster: LocalCluster,
) -> None:
    first, second, third = (cluster.brokers[node_id] for node_id in sorted(cluster.brokers))
    group = f"group-config-{uuid.uuid4().hex[:8]}"
    assert _described(second.port, group)[HEARTBEAT] == ("5000", 5)
    _alter(first.port, group, 0, "7000")
    assert _described(first.port, group)[HEARTBEAT] == ("7000", 8)
    wait_until(lambda: _described(second.port, group)[HEARTBEAT] == ("7000", 8), "broker 2 to read it")
    wait_until(lambda: _described(third.port, group)[HEARTBEAT] == ("7000", 8), "broker 3 to read it")
    wait_until(lambda: _heartbeat_interval(cluster, group) == 7000, "the coordinator to give it")

    second.stop()
    second.start()
    second.wait_listening()  # it listens before it has joined: the group configs come with joining
    wait_until(lambda: _described(second.port, group)[HEARTBEAT] == ("7000", 8), "broker 2 after its restart")

    _alter(third.port, group, 1, None)
    wait_until(
        lambda: _described(second.port, group)[HEARTBEAT] == ("5000", 5), "broker 2 to read the removal"
    )
    wait_until(lambda: _heartbeat_interval(cluster, group) == 5000, "the coordinator to drop it")
