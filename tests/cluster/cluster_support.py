"""Three real brokers on a real ZooKeeper, and what the end-to-end cluster tests ask of them.

``running_cluster`` (module scope) is a ``LocalCluster`` (the one ``strom cluster up`` runs) under
its own chroot of the module's ZooKeeper. Tests kill, stop and restart its brokers; ``heal`` brings
every broker back and waits until each of them is registered and every partition's ISR is full
again, so each test starts from a whole cluster. Everything is observed from outside, through real
clients (confluent-kafka's AdminClient): metadata, leaders, ISRs, the controller.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from strom.cli import dev_cluster
from strom.cli.dev_cluster import BrokerProcess, LocalCluster

# Short enough that a killed broker is noticed within a few seconds, long enough for a loaded
# machine not to expire live sessions.
SESSION_TIMEOUT_MS = 4_000
CLUSTER_SETTINGS = {
    "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    "zookeeper.connection.timeout.ms": "10000",
    "replica.lag.time.max.ms": "4000",
    "controlled.shutdown.retry.backoff.ms": "300",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "6",
    "auto.leader.rebalance.enable": "false",
}
WAIT_S = 60.0


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    dev_cluster.wait_until(condition, what, timeout_s, interval_s=0.1, failure=AssertionError)


@dataclass(frozen=True)
class PartitionState:
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True)
class ClusterView:
    brokers: tuple[int, ...]
    controller: int
    partitions: dict[tuple[str, int], PartitionState]


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 5000})


def view(bootstrap: str, topic: str | None = None) -> ClusterView:
    """What a client is told (Metadata from whichever broker answers)."""
    metadata = admin(bootstrap).list_topics(topic, timeout=10)
    partitions: dict[tuple[str, int], PartitionState] = {}
    for name, described in metadata.topics.items():
        if described.error is not None:
            continue
        for index, partition in described.partitions.items():
            partitions[(name, index)] = PartitionState(
                partition.leader, tuple(partition.replicas), tuple(partition.isrs)
            )
    return ClusterView(tuple(sorted(metadata.brokers)), metadata.controller_id, partitions)


def live_bootstrap(cluster: LocalCluster) -> str:
    return cluster.live_bootstrap


def leader_of(cluster: LocalCluster, topic: str, partition: int) -> int:
    return view(live_bootstrap(cluster), topic).partitions[(topic, partition)].leader


def create_topic(
    cluster: LocalCluster, name: str, partitions: int = 3, replication_factor: int = 3, **config: str
) -> None:
    client = admin(cluster.bootstrap)  # kept: the futures fail if the client is collected first
    futures = client.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=replication_factor, config=config)]
    )
    futures[name].result(30)
    wait_until(lambda: all_led(cluster, name, partitions), f"leaders for every partition of {name}")


def all_led(cluster: LocalCluster, topic: str, partitions: int) -> bool:
    found = view(live_bootstrap(cluster), topic).partitions
    return all((topic, index) in found and found[(topic, index)].leader >= 0 for index in range(partitions))


def heal(cluster: LocalCluster) -> None:
    """Every broker running, registered, and every partition's ISR full (its replicas)."""
    cluster.restart_stopped()
    everyone = tuple(sorted(cluster.brokers))

    def whole() -> bool:
        for broker in cluster.brokers.values():
            seen = view(broker.address)
            if seen.brokers != everyone or seen.controller < 0:
                return False
            if any(
                state.leader < 0 or sorted(state.isr) != sorted(state.replicas)
                for state in seen.partitions.values()
            ):
                return False
        return True

    wait_until(whole, "every broker registered and every ISR full")


def restart(broker: BrokerProcess) -> None:
    broker.start()
    broker.wait_listening()
