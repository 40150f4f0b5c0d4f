"""The cluster thread (``ClusterNode``) on the in-memory ZooKeeper: joining, the controllership,
work submitted from another thread, config change notifications, session expiry, leaving."""

from __future__ import annotations

import queue
import threading
import uuid
from collections.abc import Iterator, Mapping

import pytest

from strom.base.clock import ManualClock
from strom.cluster.actions import BrokerCommand, ControllerReply, LeaderAndIsrCommand
from strom.cluster.config import ControllerConfig
from strom.cluster.memory_zookeeper import MemoryZkClient, MemoryZooKeeper
from strom.cluster.model import BrokerRegistration, Endpoint, TopicAssignment
from strom.cluster.node import ClusterNode, NodeOutputs
from strom.cluster.zookeeper import BrokerIdInUseError, ClusterZooKeeper

WAIT_S = 10.0


class Recorder:
    """The node's outputs, queued as they come (from the cluster thread)."""

    def __init__(self) -> None:
        self.events: queue.Queue[tuple[str, object]] = queue.Queue()

    def outputs(self) -> NodeOutputs:
        def record(kind: str):  # type: ignore[no-untyped-def]
            return lambda *arguments: self.events.put((kind, arguments))

        return NodeOutputs(
            command=record("command"),
            reply=record("reply"),
            controller=record("controller"),
            live_brokers=record("live_brokers"),
            registered=record("registered"),
            topic_configs=record("topic_configs"),
        )

    def next(self, kind: str) -> tuple[object, ...]:
        """The arguments of the next output of ``kind`` (others before it are skipped)."""
        while True:
            found, arguments = self.events.get(timeout=WAIT_S)
            if found == kind:
                assert isinstance(arguments, tuple)
                return arguments


def registration(node_id: int) -> BrokerRegistration:
    port = 9000 + node_id
    return BrokerRegistration(node_id, "127.0.0.1", port, (Endpoint("PLAINTEXT", "127.0.0.1", port),))


@pytest.fixture
def server() -> MemoryZooKeeper:
    return MemoryZooKeeper()


@pytest.fixture
def node(server: MemoryZooKeeper) -> Iterator[tuple[ClusterNode, Recorder]]:
    recorder = Recorder()
    started = ClusterNode(
        server.connect("/c"),
        registration(1),
        ControllerConfig(auto_leader_rebalance_enable=False),
        ManualClock(),
        recorder.outputs(),
        stale_registration_wait_ms=0,
        tick_interval_ms=20,
    )
    started.join()
    started.start()
    yield started, recorder
    started.stop()


def test_a_node_registers_becomes_controller_and_runs_work_on_its_thread(
    node: tuple[ClusterNode, Recorder],
) -> None:
    cluster_node, recorder = node
    assert recorder.next("controller") == (True, 1)
    threads: list[str] = []

    def allocate(zk: ClusterZooKeeper) -> tuple[int, int]:
        threads.append(threading.current_thread().name)
        return zk.allocate_producer_ids(1, 10)

    assert cluster_node.submit(allocate).result(WAIT_S) == (0, 9)
    assert cluster_node.submit(allocate).result(WAIT_S) == (10, 19)
    assert threads == ["strom-cluster-1", "strom-cluster-1"]
    live = recorder.next("live_brokers")[0]
    assert isinstance(live, Mapping) and list(live) == [1]


def test_the_controller_sends_commands_for_a_new_topic(node: tuple[ClusterNode, Recorder]) -> None:
    cluster_node, recorder = node
    recorder.next("controller")
    topic = TopicAssignment("t", uuid.uuid4(), {0: (1,)})
    cluster_node.submit(lambda zk: zk.create_topic(topic, {"retention.ms": "1000"})).result(WAIT_S)
    while True:
        command, address = recorder.next("command")
        assert isinstance(command, BrokerCommand)
        if isinstance(command, LeaderAndIsrCommand) and command.partitions:
            break
    assert address == cluster_node.registration
    (info,) = command.partitions
    assert (info.topic, info.leader, info.isr, info.topic_id) == ("t", 1, (1,), topic.topic_id)


def test_config_changes_reach_every_broker(node: tuple[ClusterNode, Recorder]) -> None:
    cluster_node, recorder = node
    topic = TopicAssignment("t", uuid.uuid4(), {0: (1,)})
    cluster_node.submit(lambda zk: zk.create_topic(topic, {})).result(WAIT_S)
    cluster_node.submit(lambda zk: zk.set_topic_config("t", {"min.insync.replicas": "2"})).result(WAIT_S)
    assert recorder.next("topic_configs") == ({"t": {"min.insync.replicas": "2"}},)


def test_after_a_session_expiry_the_node_registers_again_and_competes_again(
    server: MemoryZooKeeper, node: tuple[ClusterNode, Recorder]
) -> None:
    cluster_node, recorder = node
    assert recorder.next("controller") == (True, 1)
    first_epoch = cluster_node.registration.epoch
    store = cluster_node.store
    assert isinstance(store, MemoryZkClient)
    # Expired on the node's own thread: the in-memory server is not shared between threads.
    cluster_node.submit(lambda _zk: server.expire(store)).result(WAIT_S)
    assert recorder.next("controller") == (False, -1)
    (again,) = recorder.next("registered")
    assert isinstance(again, BrokerRegistration) and again.epoch > first_epoch
    assert recorder.next("controller") == (True, 2)


def test_a_second_broker_with_the_same_node_id_is_refused(
    server: MemoryZooKeeper, node: tuple[ClusterNode, Recorder]
) -> None:
    twin = ClusterNode(
        server.connect("/c"),
        registration(1),
        ControllerConfig(),
        ManualClock(),
        Recorder().outputs(),
        stale_registration_wait_ms=0,
    )
    # Joined on the running node's thread: the in-memory server is used by one thread at a time.
    cluster_node = node[0]
    with pytest.raises(BrokerIdInUseError, match="node id 1 is already registered"):
        cluster_node.submit(lambda _zk: twin.join()).result(WAIT_S)
    cluster_node.submit(lambda _zk: twin.stop()).result(WAIT_S)


def test_leaving_deregisters_and_resigns(server: MemoryZooKeeper) -> None:
    recorder = Recorder()
    leaving = ClusterNode(
        server.connect("/c"),
        registration(2),
        ControllerConfig(),
        ManualClock(),
        recorder.outputs(),
        stale_registration_wait_ms=0,
    )
    leaving.join()
    leaving.start()
    assert recorder.next("controller") == (True, 1)
    leaving.stop()
    reader = ClusterZooKeeper(server.connect("/c"), ManualClock())
    assert reader.read_live_brokers() == {}
    assert reader.read_controller() is None


def test_requests_for_the_controller_are_refused_by_a_broker_that_is_not(server: MemoryZooKeeper) -> None:
    from strom.cluster import znodes
    from strom.cluster.events import ControlledShutdownReceived
    from strom.protocol.errors import ErrorCode

    # Another broker (a session of the test's) holds the controllership; only then does the node's
    # thread start, so the in-memory server is used by one thread at a time.
    holder = server.connect("/c")
    ClusterZooKeeper(holder, ManualClock()).ensure_layout()
    holder.create(znodes.CONTROLLER_PATH, znodes.encode_controller(9, 0), ephemeral=True)
    recorder = Recorder()
    follower = ClusterNode(
        server.connect("/c"),
        registration(2),
        ControllerConfig(),
        ManualClock(),
        recorder.outputs(),
        stale_registration_wait_ms=0,
    )
    follower.join()
    follower.start()
    follower.post(ControlledShutdownReceived("k", 2, follower.registration.epoch))
    (reply,) = recorder.next("reply")
    assert isinstance(reply, ControllerReply)
    assert (reply.key, reply.error) == ("k", ErrorCode.NOT_CONTROLLER)
    follower.stop()
