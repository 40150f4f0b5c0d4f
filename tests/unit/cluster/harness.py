"""A cluster of simulated brokers on the in-memory ZooKeeper, for controller tests.

Each ``SimBroker`` has its own ZooKeeper session (registration, controller election through a
``ControllerDriver``) and a ``BrokerControl`` that receives the controller's commands, exactly as
a broker will. Watches and session events are queued and run by ``settle()``, one at a time, in
order — the way the broker's controller thread will — so a test controls every interleaving.
Nothing sleeps: time is a ``ManualClock``.
"""

from __future__ import annotations

import uuid
from collections import deque
from dataclasses import dataclass, field

from strom.base.clock import ManualClock
from strom.cluster.actions import (
    BrokerCommand,
    ControllerReply,
    LeaderAndIsrCommand,
    StopReplicaCommand,
    UncleanElection,
    UpdateMetadataCommand,
)
from strom.cluster.broker_control import BrokerControl, CommandOutcome
from strom.cluster.config import ControllerConfig
from strom.cluster.controller import Controller
from strom.cluster.controller_driver import ControllerDriver
from strom.cluster.events import ControllerEvent, Tick
from strom.cluster.memory_zookeeper import MemoryZkClient, MemoryZooKeeper
from strom.cluster.model import BrokerRegistration, Endpoint, PartitionState, TopicAssignment, TopicPartition
from strom.cluster.placement import assign_replicas
from strom.cluster.zk_store import SessionEvent, Watch, WatchEvent
from strom.cluster.zookeeper import ClusterZooKeeper


@dataclass
class SimBroker:
    node_id: int
    rack: str | None
    store: MemoryZkClient
    zk: ClusterZooKeeper
    driver: ControllerDriver
    control: BrokerControl
    registration: BrokerRegistration
    alive: bool = True
    commands: list[BrokerCommand] = field(default_factory=list)
    outcomes: list[CommandOutcome] = field(default_factory=list)

    def leader_and_isr(self) -> list[LeaderAndIsrCommand]:
        return [c for c in self.commands if isinstance(c, LeaderAndIsrCommand)]

    def stop_replica(self) -> list[StopReplicaCommand]:
        return [c for c in self.commands if isinstance(c, StopReplicaCommand)]


class ClusterHarness:
    def __init__(self, config: ControllerConfig | None = None) -> None:
        self.config = config or ControllerConfig(auto_leader_rebalance_enable=False)
        self.clock = ManualClock()
        self.server = MemoryZooKeeper()
        self.reader = ClusterZooKeeper(self.server.connect("/cluster"), self.clock)
        self.reader.ensure_layout()
        self.brokers: dict[int, SimBroker] = {}
        self.queue: deque[tuple[int, str]] = deque()
        self.replies: list[ControllerReply] = []
        self.unclean: list[UncleanElection] = []
        # Every partition state seen in ZooKeeper after each settle: (topic-partition, state).
        self.history: list[tuple[TopicPartition, PartitionState]] = []

    # ---- brokers ----------------------------------------------------------------------------------

    def start(self, node_id: int, rack: str | None = None) -> SimBroker:
        store = self.server.connect("/cluster")
        zk = ClusterZooKeeper(store, self.clock)
        zk.ensure_layout()
        port = 9000 + node_id
        registration = zk.register_broker(
            BrokerRegistration(node_id, "127.0.0.1", port, (Endpoint("PLAINTEXT", "127.0.0.1", port),), rack),
            stale_wait_ms=0,
        )

        def watch(kind: str, node_id: int = node_id) -> Watch:
            def fire(_event: WatchEvent) -> None:
                self.queue.append((node_id, kind))

            return fire

        driver = ControllerDriver(
            zk,
            Controller(node_id, self.config, self.clock),
            watch=watch,
            send=self._deliver,
            reply=self.replies.append,
            on_unclean=self.unclean.append,
        )
        broker = SimBroker(
            node_id, rack, store, zk, driver, BrokerControl(node_id, registration.epoch), registration
        )
        self.brokers[node_id] = broker
        store.add_listener(lambda event, node_id=node_id: self._session_event(node_id, event))
        driver.elect()
        self.settle()
        return broker

    def _session_event(self, node_id: int, event: SessionEvent) -> None:
        if event is SessionEvent.EXPIRED:
            self.queue.append((node_id, "session-expired"))

    def crash(self, node_id: int) -> None:
        """kill -9: the process is gone; its session ends (as it would at its timeout)."""
        broker = self.brokers[node_id]
        broker.alive = False
        broker.store.close()
        self.settle()

    def expire(self, node_id: int) -> None:
        """The broker lives on but its session expired: it registers again and competes again."""
        self.server.expire(self.brokers[node_id].store)

    def _rejoin(self, broker: SimBroker) -> None:
        if broker.driver.lease is not None:
            broker.driver.resign("the ZooKeeper session expired")
        broker.registration = broker.zk.register_broker(broker.registration, stale_wait_ms=0)
        broker.control.broker_epoch = broker.registration.epoch
        broker.driver.elect()

    def _deliver(self, command: BrokerCommand) -> None:
        broker = self.brokers.get(command.broker_id)
        if broker is None or not broker.alive:
            return
        broker.commands.append(command)
        if isinstance(command, LeaderAndIsrCommand):
            broker.outcomes.append(broker.control.on_leader_and_isr(command))
        elif isinstance(command, UpdateMetadataCommand):
            broker.control.on_update_metadata(command)
        else:
            broker.outcomes.append(broker.control.on_stop_replica(command))

    def settle(self, limit: int = 10_000) -> None:
        for _ in range(limit):
            if not self.queue:
                self._record_history()
                return
            node_id, kind = self.queue.popleft()
            broker = self.brokers.get(node_id)
            if broker is None or not broker.alive:
                continue
            if kind == "session-expired":
                self._rejoin(broker)
            else:
                broker.driver.refresh(kind)
        raise AssertionError("the cluster did not settle")

    def _record_history(self) -> None:
        topics = self.reader.read_topics(self.reader.read_topic_names())
        for tp, state in sorted(self.reader.read_partition_states(topics.values()).items()):
            if not self.history or (tp, state) not in self.history[-200:]:
                self.history.append((tp, state))

    # ---- the controller ----------------------------------------------------------------------------------

    def controller(self) -> SimBroker:
        active = [b for b in self.brokers.values() if b.alive and b.driver.lease is not None]
        assert len(active) == 1, f"expected one active controller, got {[b.node_id for b in active]}"
        return active[0]

    def handle(self, event: ControllerEvent) -> list[ControllerReply]:
        """Give ``event`` to the active controller; the replies it produced."""
        before = len(self.replies)
        self.controller().driver.handle(event)
        self.settle()
        return self.replies[before:]

    def tick(self, ms: int) -> None:
        self.clock.advance(ms)
        for broker in self.brokers.values():
            if broker.alive and broker.driver.lease is not None:
                broker.driver.handle(Tick())
        self.settle()

    # ---- topics -----------------------------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int = 3,
        *,
        assignment: dict[int, tuple[int, ...]] | None = None,
        config: dict[str, str] | None = None,
    ) -> TopicAssignment:
        live = self.reader.read_live_brokers()
        replicas = assignment or assign_replicas(
            {node_id: broker.rack for node_id, broker in live.items()}, partitions, replication_factor
        )
        topic = TopicAssignment(name, uuid.uuid4(), replicas)
        self.reader.create_topic(topic, config or {})
        self.settle()
        return topic

    def state(self, topic: str, partition: int = 0) -> PartitionState:
        assignment = self.reader.read_topic(topic)
        assert assignment is not None, f"no topic {topic}"
        states = self.reader.read_partition_states([assignment])
        return states[TopicPartition(topic, partition)]

    def epochs_and_leaders(self, tp: TopicPartition) -> list[tuple[int, int]]:
        return [(state.leader_epoch, state.leader) for seen, state in self.history if seen == tp]
