"""The cluster a campaign attacks: a ZooKeeper and N ``strom broker`` processes on 127.0.0.1, every
broker reached only through fault proxies.

Each broker has two listeners: INTERNAL (the first: what its registration names, so the other
brokers — the controller's commands, the followers' fetches — reach it there) and CLIENT (what
clients bootstrap from and are told in Metadata). Both are advertised at a proxy's port, so the
campaign can cut one broker off from the other brokers (its INTERNAL proxy) or from the clients
(its CLIENT proxy). Processes are started and stopped by PID.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from strom.cli.dev_cluster import BrokerProcess
from strom.cli.local_zookeeper import ZooKeeperServer
from strom.client.transport import LoopThread

from .proxy import FaultProxy, free_port

# Short enough that a dead or paused broker is noticed in seconds, long enough for a loaded
# machine not to expire live sessions.
ZOOKEEPER_SESSION_TIMEOUT_MS = 6_000
BROKER_SETTINGS: Mapping[str, str] = {
    "zookeeper.session.timeout.ms": str(ZOOKEEPER_SESSION_TIMEOUT_MS),
    "zookeeper.connection.timeout.ms": "15000",
    "replica.lag.time.max.ms": "5000",
    "min.insync.replicas": "2",
    "default.replication.factor": "3",
    "offsets.topic.num.partitions": "6",
    "group.initial.rebalance.delay.ms": "0",
    "controlled.shutdown.retry.backoff.ms": "300",
    "unclean.leader.election.enable": "false",
    "listener.security.protocol.map": "INTERNAL:PLAINTEXT,CLIENT:PLAINTEXT",
}


@dataclass
class ChaosBroker:
    node_id: int
    process: BrokerProcess
    internal: FaultProxy
    client: FaultProxy
    paused: bool = False

    @property
    def client_address(self) -> str:
        return f"127.0.0.1:{self.client.listen_port}"


class ChaosCluster:
    def __init__(self, work_dir: Path, brokers: int = 3) -> None:
        self.work_dir = work_dir
        work_dir.mkdir(parents=True, exist_ok=True)
        self.zookeeper = ZooKeeperServer(work_dir / "zookeeper")
        self.loop = LoopThread("chaos-proxies")
        self.brokers: dict[int, ChaosBroker] = {}
        for node_id in range(1, brokers + 1):
            internal_port, client_port = free_port(), free_port()
            internal = FaultProxy(f"broker-{node_id}-internal", free_port(), internal_port)
            client = FaultProxy(f"broker-{node_id}-client", free_port(), client_port)
            settings = dict(BROKER_SETTINGS)
            settings["listeners"] = f"INTERNAL://127.0.0.1:{internal_port},CLIENT://127.0.0.1:{client_port}"
            settings["advertised.listeners"] = (
                f"INTERNAL://127.0.0.1:{internal.listen_port},CLIENT://127.0.0.1:{client.listen_port}"
            )
            process = BrokerProcess(
                node_id,
                internal_port,
                work_dir / f"broker-{node_id}",
                work_dir / f"broker-{node_id}.log",
                self.zookeeper.connect_string,
                settings,
            )
            self.brokers[node_id] = ChaosBroker(node_id, process, internal, client)

    @property
    def bootstrap(self) -> str:
        return ",".join(broker.client_address for broker in self.brokers.values())

    def start(self) -> None:
        (self.work_dir / "zookeeper").mkdir(parents=True, exist_ok=True)
        self.zookeeper.start()
        for broker in self.brokers.values():
            self.loop.run(broker.internal.start())
            self.loop.run(broker.client.start())
            broker.process.start()
        for broker in self.brokers.values():
            broker.process.wait_listening()

    def stop(self) -> None:
        """Everything back to normal, then SIGTERM the brokers one after the other, ZooKeeper, the proxies."""
        for broker in self.brokers.values():
            self.heal_network(broker.node_id)
            self.resume(broker.node_id)
        if not self.zookeeper.running:
            with contextlib.suppress(Exception):
                self.zookeeper.start()
        for broker in self.brokers.values():
            broker.process.stop()
        self.zookeeper.stop()
        for broker in self.brokers.values():
            self.loop.run(broker.internal.close())
            self.loop.run(broker.client.close())
        self.loop.stop()

    # ---- faults -------------------------------------------------------------------------------------

    def kill(self, node_id: int) -> None:
        broker = self.brokers[node_id]
        if broker.paused:
            self.resume(node_id)
        broker.process.kill()

    def restart(self, node_id: int) -> None:
        process = self.brokers[node_id].process
        if not process.running:
            process.start()
            process.wait_listening()

    def pause(self, node_id: int) -> None:
        broker = self.brokers[node_id]
        if broker.process.running:
            broker.process.signal(signal.SIGSTOP)
            broker.paused = True

    def resume(self, node_id: int) -> None:
        broker = self.brokers[node_id]
        if broker.paused:
            broker.process.signal(signal.SIGCONT)
            broker.paused = False

    def partition(self, node_id: int, which: str) -> None:
        """Cut broker ``node_id`` off from the other brokers ("internal") or the clients ("client")."""
        broker = self.brokers[node_id]
        proxy = broker.internal if which == "internal" else broker.client
        self.loop.call_soon(proxy.set_state, "blackhole")

    def heal_network(self, node_id: int) -> None:
        broker = self.brokers[node_id]
        self.loop.call_soon(broker.internal.set_state, "open")
        self.loop.call_soon(broker.client.set_state, "open")

    def kill_zookeeper(self) -> None:
        self.zookeeper.kill()

    def start_zookeeper(self) -> None:
        if not self.zookeeper.running:
            self.zookeeper.start()

    def heal_all(self) -> None:
        """Every fault undone: ZooKeeper up, brokers running and resumed, proxies open."""
        self.start_zookeeper()
        for node_id in self.brokers:
            self.heal_network(node_id)
            self.resume(node_id)
            self.restart(node_id)
