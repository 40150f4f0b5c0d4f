"""A cluster whose brokers reach each other and ZooKeeper only through a ``FaultProxy``, and what
the fault tests observe of it (replicas' files, broker logs).

Each broker of a ``ProxiedCluster`` opens two listeners: ``BROKER`` (first: what the other brokers
connect to, advertised at the proxy's port) and ``CLIENT`` (its own port, which clients bootstrap
from and are told about). Its ZooKeeper connect string names its own proxy route. So the proxy can
cut a broker from the other brokers, from ZooKeeper, or both, while clients still reach it.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Mapping
from pathlib import Path

from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

from strom.cli.dev_cluster import BrokerProcess, LocalCluster
from strom.cli.local_zookeeper import ZooKeeperServer, free_port
from strom.cluster.config import ZooKeeperConnect
from strom.cluster.kazoo_store import KazooStore
from strom.cluster.zk_store import NoNodeError
from tools.fault_proxy import ZOOKEEPER, FaultProxy, broker_name

from .cluster_support import admin, all_led, heal, live_bootstrap, wait_until

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"


class ProxiedBroker(BrokerProcess):
    """A broker with a listener for brokers (behind the proxy) and one for clients (``port``)."""

    def __init__(
        self,
        node_id: int,
        data_dir: Path,
        log_path: Path,
        zookeeper_connect: str,
        settings: Mapping[str, str],
        *,
        client_port: int,
        broker_port: int,
        proxied_broker_port: int,
    ) -> None:
        listeners = {
            "listeners": f"BROKER://127.0.0.1:{broker_port},CLIENT://127.0.0.1:{client_port}",
            "advertised.listeners": f"BROKER://127.0.0.1:{proxied_broker_port},CLIENT://127.0.0.1:{client_port}",
            "listener.security.protocol.map": "BROKER:PLAINTEXT,CLIENT:PLAINTEXT",
        }
        super().__init__(
            node_id, client_port, data_dir, log_path, zookeeper_connect, {**settings, **listeners}
        )

    def command(self) -> list[str]:
        # No --host/--port: they would replace the first listener, the brokers' one.
        command = [sys.executable, "-m", "strom.cli.main", "broker", "--data-dir", str(self.data_dir)]
        command += ["--zookeeper", self.zookeeper_connect, "--node-id", str(self.node_id)]
        for key, value in self.settings.items():
            command += ["--set", f"{key}={value}"]
        return command


class ProxiedCluster(LocalCluster):
    """``broker_count`` brokers on ``zookeeper`` (under ``chroot``), every link through ``proxy``."""

    def __init__(
        self,
        work_dir: Path,
        broker_count: int,
        *,
        settings: Mapping[str, str],
        zookeeper: ZooKeeperServer,
        chroot: str,
        proxy: FaultProxy,
    ) -> None:
        super().__init__(work_dir, broker_count, settings=settings, zookeeper=zookeeper, chroot=chroot)
        self.proxy = proxy
        for node_id in list(self.brokers):
            broker_port = free_port()
            zookeeper_route = proxy.add_route(ZOOKEEPER, zookeeper.port, source=broker_name(node_id))
            self.brokers[node_id] = ProxiedBroker(
                node_id,
                work_dir / f"broker-{node_id}",
                work_dir / f"broker-{node_id}.log",
                f"127.0.0.1:{zookeeper_route}{chroot}",
                settings,
                client_port=free_port(),
                broker_port=broker_port,
                proxied_broker_port=proxy.add_route(broker_name(node_id), broker_port),
            )

    def isolate(self, node_id: int, *, from_zookeeper: bool) -> None:
        """Cut ``node_id`` from every other broker (both ways), and from ZooKeeper if asked.
        Clients still reach it."""
        others = [broker_name(other) for other in self.brokers if other != node_id]
        self.proxy.isolate(broker_name(node_id), [*others, ZOOKEEPER] if from_zookeeper else others)


def heal_everything(cluster: LocalCluster) -> None:
    """No fault left: every link healed (a proxied cluster), every broker resumed and running,
    registered, and every ISR full."""
    if isinstance(cluster, ProxiedCluster):
        cluster.proxy.heal()
    for broker in cluster.brokers.values():
        broker.signal(signal.SIGCONT)
    heal(cluster)


def replica_files(cluster: LocalCluster, topic: str, partition: int) -> dict[int, dict[str, bytes]]:
    """Per broker holding the partition: its segment files (``*.log``) and leader epoch checkpoint."""
    found: dict[int, dict[str, bytes]] = {}
    for node_id, broker in cluster.brokers.items():
        directory = broker.data_dir / f"{topic}-{partition}"
        if not directory.is_dir():
            continue
        paths = [*sorted(directory.glob("*.log")), directory / LEADER_EPOCH_CHECKPOINT]
        found[node_id] = {path.name: path.read_bytes() for path in paths if path.exists()}
    return found


def wait_for_identical_replicas(
    cluster: LocalCluster, topic: str, partition: int, replicas: int
) -> dict[int, dict[str, bytes]]:
    """Wait until ``replicas`` brokers hold byte-identical segment files and epoch checkpoints for
    the partition (the followers catch up with the leader); those files. The assertion names the
    first difference."""
    last: list[dict[int, dict[str, bytes]]] = [{}]

    def identical() -> bool:
        files = last[0] = replica_files(cluster, topic, partition)
        return len(files) == replicas and all(found == files[min(files)] for found in files.values())

    try:
        wait_until(identical, f"identical replicas of {topic}-{partition}", timeout_s=30)
    except AssertionError:
        raise AssertionError(
            f"replicas of {topic}-{partition} differ: {describe_difference(last[0])}"
        ) from None
    return last[0]


def describe_difference(files: dict[int, dict[str, bytes]]) -> str:
    if not files:
        return "no replica found"
    reference_node = min(files)
    reference = files[reference_node]
    lines = []
    for node_id, found in files.items():
        for name in sorted(set(reference) | set(found)):
            mine, theirs = found.get(name), reference.get(name)
            if mine == theirs:
                continue
            if mine is None or theirs is None:
                lines.append(f"broker {node_id} {'lacks' if mine is None else 'alone has'} {name}")
                continue
            at = next((i for i, (a, b) in enumerate(zip(mine, theirs, strict=False)) if a != b), None)
            lines.append(
                f"broker {node_id} {name}: {len(mine)} bytes vs {len(theirs)} on broker {reference_node}, "
                f"first difference at byte {at if at is not None else min(len(mine), len(theirs))}"
            )
    return "; ".join(lines) or f"{len(files)} replicas found"


def log_lines(broker: BrokerProcess, text: str) -> list[str]:
    try:
        content = broker.log_path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    return [line for line in content.splitlines() if text in line]


def create_assigned_topic(
    cluster: LocalCluster, name: str, assignment: list[list[int]], **config: str
) -> None:
    """A topic whose partition P has the replicas ``assignment[P]`` (the first leads), led everywhere."""
    client = admin(live_bootstrap(cluster))  # kept: the futures fail if the client is collected first
    futures = client.create_topics(
        [NewTopic(name, num_partitions=len(assignment), replica_assignment=assignment, config=config)]
    )
    futures[name].result(30)
    wait_until(lambda: all_led(cluster, name, len(assignment)), f"leaders for every partition of {name}")


def broker_sessions(cluster: LocalCluster) -> dict[int, int]:
    """Which ZooKeeper session holds each broker's registration (``/brokers/ids/N``), as
    ZooKeeper itself answers (a broker whose session expired registers under a new one)."""
    store = KazooStore.connect(
        ZooKeeperConnect.parse(cluster.zookeeper_connect),
        session_timeout_ms=10_000,
        connect_timeout_ms=10_000,
    )
    try:
        found: dict[int, int] = {}
        for node_id in cluster.brokers:
            try:
                _, stat = store.get(f"/brokers/ids/{node_id}")
            except NoNodeError:
                continue
            found[node_id] = stat.ephemeral_owner
        return found
    finally:
        store.close()
