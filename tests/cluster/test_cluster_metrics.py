"""``/metrics`` of real brokers of a cluster (``strom broker --zookeeper ... --metrics-port``): the
replication and controller figures under Kafka's names follow what happens to the cluster — one
active controller, under-replicated and offline partitions while a broker is down, ISR shrinks and
expands, back to whole when it returns."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]
from prometheus_client.parser import text_string_to_metric_families

from strom.cli.dev_cluster import BrokerProcess, LocalCluster

from .cluster_support import CLUSTER_SETTINGS, admin, all_led, heal, restart, wait_until
from .conftest import _LIVE_CLUSTERS
from .zookeeper_server import ZooKeeperServer

PARTITIONS = 6
SCRAPE_TIMEOUT_S = 5

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(broker: BrokerProcess) -> Samples:
    assert broker.metrics_url is not None
    with urllib.request.urlopen(broker.metrics_url, timeout=SCRAPE_TIMEOUT_S) as answer:
        page = answer.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(page)
        for sample in family.samples
    }


def figure(samples: Samples, name: str) -> float:
    return samples[(name, ())]


def figures(cluster: LocalCluster, name: str) -> dict[int, float]:
    """``name`` on every running broker, by node id."""
    return {
        node_id: figure(scrape(broker), name) for node_id, broker in cluster.brokers.items() if broker.running
    }


ACTIVE = "kafka_controller_kafkacontroller_activecontrollercount"
UNDER_REPLICATED = "kafka_server_replicamanager_underreplicatedpartitions"
OFFLINE = "kafka_controller_kafkacontroller_offlinepartitionscount"
LEADERS = "kafka_server_replicamanager_leadercount"
PARTITION_COUNT = "kafka_server_replicamanager_partitioncount"
GLOBAL_PARTITIONS = "kafka_controller_kafkacontroller_globalpartitioncount"
SHRINKS = "kafka_server_replicamanager_isrshrinks_total"
EXPANDS = "kafka_server_replicamanager_isrexpands_total"


@pytest.fixture(scope="module")
def metrics_cluster(
    zookeeper_server: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalCluster]:
    cluster = LocalCluster(
        tmp_path_factory.mktemp("metrics-cluster"),
        3,
        settings=CLUSTER_SETTINGS,
        zookeeper=zookeeper_server,
        chroot="/strom-metrics",
        metrics_base_port=0,
    )
    _LIVE_CLUSTERS.append(cluster)
    try:
        cluster.start()
        heal(cluster)
        yield cluster
    finally:
        _LIVE_CLUSTERS.remove(cluster)
        cluster.stop()


def one_controller(cluster: LocalCluster) -> int:
    """The node id of the one broker whose active controller count is 1 (the others say 0)."""
    active = figures(cluster, ACTIVE)
    assert sorted(active.values()) == [0.0] * (len(active) - 1) + [1.0], active
    return next(node_id for node_id, value in active.items() if value == 1)


def test_under_replicated_and_offline_partitions_follow_a_broker_down_and_back(
    metrics_cluster: LocalCluster,
) -> None:
    cluster = metrics_cluster
    client = admin(cluster.bootstrap)  # kept: the futures fail if the client is collected first
    wait_until(lambda: sum(figures(cluster, ACTIVE).values()) == 1, "one active controller")
    controller = one_controller(cluster)
    victim = next(node_id for node_id in cluster.brokers if node_id != controller)
    # "alone" has its one replica on the victim: offline while the victim is down.
    topics = [
        NewTopic("replicated", num_partitions=PARTITIONS, replication_factor=3),
        NewTopic("alone", num_partitions=1, replica_assignment=[[victim]]),
    ]
    for future in client.create_topics(topics).values():
        future.result(30)
    wait_until(lambda: all_led(cluster, "replicated", PARTITIONS) and all_led(cluster, "alone", 1), "leaders")

    def whole() -> bool:
        under = figures(cluster, UNDER_REPLICATED)
        led = figures(cluster, LEADERS)
        held = figures(cluster, PARTITION_COUNT)
        controller_page = scrape(cluster.brokers[controller])
        return (
            sum(under.values()) == 0
            and sum(led.values()) == PARTITIONS + 1
            and sum(held.values()) == PARTITIONS * 3 + 1
            and figure(controller_page, GLOBAL_PARTITIONS) == PARTITIONS + 1
            and figure(controller_page, OFFLINE) == 0
        )

    wait_until(whole, "every partition led once, none under-replicated")
    assert one_controller(cluster) == controller
    shrinks_before = sum(figures(cluster, SHRINKS).values())

    cluster.brokers[victim].kill()
    # Each partition of "replicated" has a replica on the victim: every one is under-replicated
    # on its leader once the controller took the victim out of the ISRs (and moved its leaderships).
    wait_until(
        lambda: sum(figures(cluster, UNDER_REPLICATED).values()) == PARTITIONS,
        f"{PARTITIONS} under-replicated partitions with broker {victim} down",
    )
    wait_until(
        lambda: figure(scrape(cluster.brokers[controller]), OFFLINE) == 1, "the lone partition offline"
    )
    assert one_controller(cluster) == controller
    assert sum(figures(cluster, SHRINKS).values()) > shrinks_before
    assert sum(figures(cluster, LEADERS).values()) == PARTITIONS  # "alone" has no leader
    expands_before = sum(figures(cluster, EXPANDS).values())

    restart(cluster.brokers[victim])
    wait_until(whole, f"broker {victim} back in every ISR, nothing under-replicated or offline")
    assert sum(figures(cluster, EXPANDS).values()) > expands_before
    assert one_controller(cluster) == controller
