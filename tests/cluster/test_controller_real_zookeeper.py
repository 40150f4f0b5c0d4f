"""The controller and its driver on a real ZooKeeper: three brokers' sessions, watches delivered
on kazoo's thread and processed on one thread per broker's queue (here, the test's), as the
broker's cluster thread will. A new topic gets leaders; the controller's broker dies; another
broker takes over within the session timeout and moves the leaderships."""

from __future__ import annotations

import queue
import time
import uuid

from strom.base.clock import SystemClock
from strom.cluster.actions import BrokerCommand, LeaderAndIsrCommand
from strom.cluster.config import ControllerConfig, ZooKeeperConnect
from strom.cluster.controller import Controller
from strom.cluster.controller_driver import ControllerDriver
from strom.cluster.kazoo_store import KazooStore
from strom.cluster.model import BrokerRegistration, Endpoint, TopicAssignment
from strom.cluster.zk_store import Watch, WatchEvent
from strom.cluster.zookeeper import ClusterZooKeeper

from .conftest import TEST_SESSION_TIMEOUT_MS
from .zookeeper_server import ZooKeeperServer


class Broker:
    def __init__(self, node_id: int, connect: ZooKeeperConnect, network: dict[int, Broker]) -> None:
        self.node_id = node_id
        self.events: queue.Queue[str] = queue.Queue()
        self.commands: list[BrokerCommand] = []
        network[node_id] = self
        self.store = KazooStore.connect(
            connect, session_timeout_ms=TEST_SESSION_TIMEOUT_MS, connect_timeout_ms=10_000
        )
        self.zk = ClusterZooKeeper(self.store, SystemClock())
        self.zk.ensure_layout()
        port = 9000 + node_id
        self.zk.register_broker(
            BrokerRegistration(node_id, "127.0.0.1", port, (Endpoint("PLAINTEXT", "127.0.0.1", port),)),
            stale_wait_ms=0,
        )
        self.driver = ControllerDriver(
            self.zk,
            Controller(node_id, ControllerConfig(auto_leader_rebalance_enable=False), SystemClock()),
            watch=self._watch,
            send=lambda command: network[command.broker_id].commands.append(command),
            reply=lambda reply: None,
        )
        self.driver.elect()

    def _watch(self, kind: str) -> Watch:
        def fire(_event: WatchEvent) -> None:
            self.events.put(kind)  # kazoo's thread only posts

        return fire

    def process(self) -> None:
        while True:
            try:
                kind = self.events.get_nowait()
            except queue.Empty:
                return
            self.driver.refresh(kind)


def run_until(brokers: list[Broker], condition, what: str, timeout_s: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while True:
        for broker in brokers:
            broker.process()
        if condition():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.01)


def test_controller_failover_on_a_real_zookeeper(zookeeper_server: ZooKeeperServer) -> None:
    connect = ZooKeeperConnect.parse(zookeeper_server.connect_string + "/controller-failover")
    network: dict[int, Broker] = {}
    brokers = [Broker(node_id, connect, network) for node_id in (1, 2, 3)]
    try:
        assert [b.driver.lease is not None for b in brokers] == [True, False, False]
        reader = brokers[2].zk
        topic = TopicAssignment("events", uuid.uuid4(), {0: (1, 2, 3), 1: (2, 3, 1), 2: (3, 1, 2)})
        reader.create_topic(topic, {})

        def leaders() -> dict[int, int]:
            states = reader.read_partition_states([topic])
            return {tp.partition: state.leader for tp, state in states.items()}

        run_until(brokers, lambda: leaders() == {0: 1, 1: 2, 2: 3}, "the new topic's leaders")
        run_until(
            brokers,
            lambda: any(isinstance(c, LeaderAndIsrCommand) and c.partitions for c in brokers[1].commands),
            "broker 2 to be told its partitions",
        )
        # The controller's broker dies: its session ends, so do its /controller and registration.
        started = time.monotonic()
        brokers[0].store.close()
        survivors = brokers[1:]
        run_until(survivors, lambda: any(b.driver.lease is not None for b in survivors), "a new controller")
        elected_after_s = time.monotonic() - started
        [controller] = [b for b in survivors if b.driver.lease is not None]
        assert controller.driver.lease is not None and controller.driver.lease.epoch == 2
        run_until(survivors, lambda: leaders()[0] == 2, "partition 0 to move to broker 2")
        states = reader.read_partition_states([topic])
        assert {tp.partition: (s.leader_epoch, s.isr) for tp, s in states.items()} == {
            0: (1, (2, 3)),
            1: (0, (2, 3)),
            2: (0, (3, 2)),
        }
        assert elected_after_s < TEST_SESSION_TIMEOUT_MS / 1000 + 1
    finally:
        for broker in brokers:
            broker.store.close()
