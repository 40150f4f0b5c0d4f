"""The cluster a campaign attacks: a ZooKeeper and N ``strom broker`` processes on 127.0.0.1, every
link between them, and between them and the clients, through one fault proxy
(``tools/fault_proxy.py``, in the campaign's process).

Each broker has two listeners: INTERNAL (the first: what its registration names, so the other
brokers — the controller's commands, the followers' fetches, requests to the controller — reach it
there) and CLIENT (what clients bootstrap from and are told in Metadata). Both are advertised at a
proxy route: INTERNAL at a route that learns each connection's source from the client id of its
first request (``broker-M``), CLIENT at a route whose source is ``client``. Its ZooKeeper connect
string names a route of its own (source ``broker-N``, destination ``zookeeper``). So the campaign
can cut broker N from the other brokers (both ways: what N sends them and what they send N), from
the clients, or from ZooKeeper, and leave every other link alone. Processes are started and
stopped by PID.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from strom.cli.dev_cluster import BROKER_START_TIMEOUT_S, BrokerProcess, BrokerStartError
from strom.cli.local_zookeeper import ZooKeeperServer, free_port
from strom.cluster.config import ZooKeeperConnect
from strom.cluster.kazoo_store import KazooStore
from strom.cluster.zk_store import NoNodeError
from tools.fault_proxy import UNKNOWN_SOURCE, ZOOKEEPER, Fault, FaultProxy, broker_name

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
# The source the proxy gives every connection that is not a strom broker's.
CLIENTS = UNKNOWN_SOURCE
# A partition as TCP sees it: no answer, no reset, connections stay open and new ones hang. When it
# heals the bytes held meanwhile are delivered (TCP's retransmissions after a partition shorter
# than its give-up time); a peer that gave up has closed its end, and that connection ends.
PARTITION_FAULT = Fault.BLACKHOLE
# Each broker's listeners (INTERNAL, CLIENT), and how often a start that lost a port to another
# process is tried again on other ports.
LISTENERS = 2
START_ATTEMPTS = 3
# The campaign's own look at a broker's registration, straight to ZooKeeper (not proxied).
REGISTRATION_SESSION_TIMEOUT_MS = 10_000


@dataclass
class ChaosBroker:
    node_id: int
    process: BrokerProcess
    client_port: int  # the proxy's route in front of its CLIENT listener
    paused: bool = False

    @property
    def name(self) -> str:
        return broker_name(self.node_id)

    @property
    def client_address(self) -> str:
        return f"127.0.0.1:{self.client_port}"


class ChaosCluster:
    def __init__(self, work_dir: Path, brokers: int = 3) -> None:
        self.work_dir = work_dir
        work_dir.mkdir(parents=True, exist_ok=True)
        self.node_ids = list(range(1, brokers + 1))
        self.zookeeper = ZooKeeperServer(work_dir / "zookeeper")
        self.proxy = FaultProxy()
        # Filled by start(): the proxy's routes (and so the brokers' settings) need it running.
        self.brokers: dict[int, ChaosBroker] = {}
        self._log_starts: dict[int, int] = {}  # where each broker's log was when it was last launched

    @property
    def bootstrap(self) -> str:
        return ",".join(broker.client_address for broker in self.brokers.values())

    def start(self) -> None:
        (self.work_dir / "zookeeper").mkdir(parents=True, exist_ok=True)
        self.proxy.start()
        self.zookeeper.start()
        for node_id in self.node_ids:
            self._launch(node_id)
        for node_id in self.node_ids:
            self._wait_started(node_id)

    def _launch(self, node_id: int) -> None:
        """Start broker ``node_id`` on fresh ports, behind fresh proxy routes."""
        name = broker_name(node_id)
        internal_port, client_port = free_port(), free_port()
        zookeeper_route = self.proxy.add_route(ZOOKEEPER, self.zookeeper.port, source=name)
        internal_route = self.proxy.add_route(name, internal_port)  # source: from the client id
        client_route = self.proxy.add_route(name, client_port, source=CLIENTS)
        settings = dict(BROKER_SETTINGS)
        settings["listeners"] = f"INTERNAL://127.0.0.1:{internal_port},CLIENT://127.0.0.1:{client_port}"
        settings["advertised.listeners"] = (
            f"INTERNAL://127.0.0.1:{internal_route},CLIENT://127.0.0.1:{client_route}"
        )
        log_path = self.work_dir / f"broker-{node_id}.log"
        process = BrokerProcess(
            node_id,
            internal_port,
            self.work_dir / f"broker-{node_id}",
            log_path,
            f"127.0.0.1:{zookeeper_route}",
            settings,
        )
        self._log_starts[node_id] = log_path.stat().st_size if log_path.exists() else 0
        self.brokers[node_id] = ChaosBroker(node_id, process, client_route)
        process.start()

    def _wait_started(self, node_id: int) -> None:
        """Until broker ``node_id`` says it listens on both its listeners. A port that answers is
        not enough: free_port() only found it free, and another process (another test's
        connection) may have taken it before the broker bound it; the broker then exits, and
        is started again on other ports."""
        for attempt in range(1, START_ATTEMPTS + 1):
            process = self.brokers[node_id].process
            try:
                process.wait_listening()
                self._wait_logged_listening(node_id)
                return
            except BrokerStartError as error:
                if attempt == START_ATTEMPTS or "address already in use" not in str(error):
                    raise
                self._launch(node_id)  # a new BrokerProcess; the one that exited is dropped

    def _wait_logged_listening(self, node_id: int) -> None:
        process = self.brokers[node_id].process
        deadline = time.monotonic() + BROKER_START_TIMEOUT_S
        while True:
            with process.log_path.open("rb") as log_file:
                log_file.seek(self._log_starts[node_id])
                said = log_file.read().decode(errors="replace")
            if said.count(f"strom broker {node_id} listening on") >= LISTENERS:
                return
            if not process.running:
                raise BrokerStartError(f"broker {node_id} exited:\n{process.log_tail()}")
            if time.monotonic() > deadline:
                raise BrokerStartError(f"broker {node_id} did not say it listens:\n{process.log_tail()}")
            time.sleep(0.05)

    def stop(self) -> None:
        """Everything back to normal, then SIGTERM the brokers one after the other, ZooKeeper, the
        proxy. Also after a start() that failed half-way."""
        if self.brokers:  # the proxy runs
            self.proxy.heal()
        for broker in self.brokers.values():
            self.resume(broker.node_id)
        if not self.zookeeper.running:
            with contextlib.suppress(Exception):
                self.zookeeper.start()
        for broker in self.brokers.values():
            broker.process.stop()
        self.zookeeper.stop()
        self.proxy.stop()

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

    def exited_on_their_own(self) -> list[str]:
        """Brokers whose process ended without the campaign killing or stopping it (a crash, or
        a start that gave up), each said once and started again."""
        found = []
        for broker in self.brokers.values():
            process = broker.process.process
            if process is not None and process.poll() is not None:
                found.append(f"broker {broker.node_id} exited on its own (exit code {process.returncode})")
                broker.process.process = None
                broker.paused = False
                self.restart(broker.node_id)
        return found

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

    def cut_from_brokers(self, node_id: int) -> None:
        """Broker ``node_id`` and every other broker stop hearing each other, both ways: its
        fetches, its requests to the controller (or, if it is the controller, its commands) and
        their answers, and the others' fetches from it and requests to it. ZooKeeper and the
        clients still reach it."""
        others = [broker_name(other) for other in self.brokers if other != node_id]
        self.proxy.isolate(broker_name(node_id), others, PARTITION_FAULT)

    def cut_from_clients(self, node_id: int) -> None:
        """No client reaches broker ``node_id``, nor hears from it; the brokers and ZooKeeper do."""
        self.proxy.cut(CLIENTS, broker_name(node_id), PARTITION_FAULT)

    def cut_from_zookeeper(self, node_id: int) -> None:
        """Broker ``node_id``'s ZooKeeper connection cut both ways: its session ends if the cut
        outlasts it, while the broker goes on serving the other brokers and the clients."""
        self.proxy.cut(broker_name(node_id), ZOOKEEPER, PARTITION_FAULT)

    def heal_network(self, node_id: int) -> None:
        """Every cut link from or to broker ``node_id`` whole again."""
        self.proxy.heal(source=broker_name(node_id))
        self.proxy.heal(destination=broker_name(node_id))

    def registration_session(self, node_id: int) -> int | None:
        """The ZooKeeper session that holds broker ``node_id``'s registration (``/brokers/ids/N``)
        as ZooKeeper answers right now, or None when it is not registered."""
        store = KazooStore.connect(
            ZooKeeperConnect.parse(self.zookeeper.connect_string),
            session_timeout_ms=REGISTRATION_SESSION_TIMEOUT_MS,
            connect_timeout_ms=REGISTRATION_SESSION_TIMEOUT_MS,
        )
        try:
            _, stat = store.get(f"/brokers/ids/{node_id}")
            return stat.ephemeral_owner
        except NoNodeError:
            return None
        finally:
            store.close()

    def kill_zookeeper(self) -> None:
        self.zookeeper.kill()

    def start_zookeeper(self) -> None:
        if not self.zookeeper.running:
            self.zookeeper.start()

    def heal_all(self) -> None:
        """Every fault undone: ZooKeeper up, no link cut, brokers running and resumed."""
        self.start_zookeeper()
        self.proxy.heal()
        for node_id in self.brokers:
            self.resume(node_id)
            self.restart(node_id)
