"""The cluster thread (``ClusterNode``) on the in-memory ZooKeeper: joining, the controllership,
work submitted from another thread, config change notifications, session expiry, leaving."""

from __future__ import annotations

import queue
import threading
import time
import uuid
from collections.abc import Iterator, Mapping

import pytest

from strom.base.clock import ManualClock
from strom.cluster.actions import BrokerCommand, ControllerReply, LeaderAndIsrCommand
from strom.cluster.config import ControllerConfig
from strom.cluster.memory_zookeeper import MemoryZkClient, MemoryZooKeeper
from strom.cluster.model import BrokerRegistration, Endpoint, TopicAssignment
from strom.cluster.node import ClusterNode, NodeOutputs
from strom.cluster.zk_store import ConnectionLossError
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
            user_configs=record("user_configs"),
            group_configs=record("group_configs"),
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


def _joining_node(server: MemoryZooKeeper, client: MemoryZkClient, join_retry_ms: int) -> ClusterNode:
    return ClusterNode(
        client,
        registration(1),
        ControllerConfig(auto_leader_rebalance_enable=False),
        ManualClock(),
        Recorder().outputs(),
        stale_registration_wait_ms=0,
        join_retry_ms=join_retry_ms,
    )


def test_joining_waits_out_a_connection_lost_on_the_way(server: MemoryZooKeeper) -> None:
    # A broker started while ZooKeeper restarts: its session is open but the connection drops
    # before it has registered. It joins once the connection is back, instead of exiting.
    client = server.connect("/c")
    server.disconnect(client)
    back = threading.Timer(0.5, server.reconnect, (client,))
    back.start()
    joining = _joining_node(server, client, join_retry_ms=5_000)
    try:
        cluster_id = joining.join()
        assert cluster_id
        assert server.ephemeral_paths(client) == ["/c/brokers/ids/1"]
        assert joining.registration.epoch > 0
    finally:
        back.join()
        joining.stop()


def test_joining_gives_up_on_a_lost_connection_after_its_wait(server: MemoryZooKeeper) -> None:
    client = server.connect("/c")
    server.disconnect(client)
    joining = _joining_node(server, client, join_retry_ms=300)
    started = time.monotonic()
    with pytest.raises(ConnectionLossError):
        joining.join()
    assert 0.3 <= time.monotonic() - started < 5
    joining.stop()


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


def test_a_users_change_notification_brings_its_configs(node: tuple[ClusterNode, Recorder]) -> None:
    """What every broker reads again when a SCRAM credential changes (Kafka's ``users/<user>``)."""
    cluster_node, recorder = node
    cluster_node.submit(lambda zk: zk.update_user_config("bob", {"SCRAM-SHA-512": "salt=..."})).result(WAIT_S)
    assert recorder.next("user_configs") == ({"bob": {"SCRAM-SHA-512": "salt=..."}},)
    cluster_node.submit(lambda zk: zk.store.delete("/config/users/bob")).result(WAIT_S)
    cluster_node.submit(
        lambda zk: zk.store.create(
            "/config/changes/config_change_", b'{"version":2,"entity_path":"users/bob"}', sequence=True
        )
    ).result(WAIT_S)
    assert recorder.next("user_configs") == ({"bob": None},)  # gone


def test_a_groups_change_notification_brings_its_configs(node: tuple[ClusterNode, Recorder]) -> None:
    """What every broker reads again when a group's configs change (``groups/<group>``)."""
    cluster_node, recorder = node
    values = {"consumer.session.timeout.ms": "50000"}
    cluster_node.submit(lambda zk: zk.set_group_config("a/b", values)).result(WAIT_S)
    assert recorder.next("group_configs") == ({"a/b": values},)
    cluster_node.submit(lambda zk: zk.set_group_config("a/b", {})).result(WAIT_S)
    assert recorder.next("group_configs") == ({"a/b": {}},)  # removed


def test_a_config_change_whose_read_fails_is_read_again(node: tuple[ClusterNode, Recorder]) -> None:
    """A notification counts as seen only once what it names is read: a failed read (a lost
    connection) is not the change lost until the broker restarts."""
    cluster_node, recorder = node
    zk = cluster_node.zk
    read_group_config = zk.read_group_config
    failures: list[str] = []

    def failing_once(group_id: str) -> dict[str, str]:
        if not failures:
            failures.append(group_id)
            raise ConnectionLossError("ConnectionLoss: ")
        return read_group_config(group_id)

    zk.read_group_config = failing_once  # type: ignore[method-assign]
    values = {"consumer.heartbeat.interval.ms": "3000"}
    cluster_node.submit(lambda zk: zk.set_group_config("orders", values)).result(WAIT_S)
    assert recorder.next("group_configs") == ({"orders": values},)
    assert failures == ["orders"]


def test_changes_made_while_the_session_was_expired_are_read_after_registering_again(
    server: MemoryZooKeeper, node: tuple[ClusterNode, Recorder]
) -> None:
    cluster_node, recorder = node
    store = cluster_node.store
    assert isinstance(store, MemoryZkClient)
    other = ClusterZooKeeper(server.connect("/c"), ManualClock())

    def expire_then_change(_zk: ClusterZooKeeper) -> None:
        # On the node's thread (the in-memory server is not shared between threads): the watch of
        # the expired session cannot fire for this change.
        server.expire(store)
        other.update_user_config("carol", {"SCRAM-SHA-256": "salt=..."})

    cluster_node.submit(expire_then_change).result(WAIT_S)
    recorder.next("registered")
    assert recorder.next("user_configs") == ({"carol": {"SCRAM-SHA-256": "salt=..."}},)


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


def follower_of_another_controller(
    server: MemoryZooKeeper, recorder: Recorder
) -> tuple[ClusterNode, MemoryZkClient]:
    """A started node for broker 2 while another broker (a session of the test's, returned) holds
    the controllership; the holder is made before the node's thread starts, so the in-memory
    server is used by one thread at a time."""
    from strom.cluster import znodes

    holder = server.connect("/c")
    ClusterZooKeeper(holder, ManualClock()).ensure_layout()
    holder.create(znodes.CONTROLLER_PATH, znodes.encode_controller(9, 0), ephemeral=True)
    follower = ClusterNode(
        server.connect("/c"),
        registration(2),
        ControllerConfig(),
        ManualClock(),
        recorder.outputs(),
        stale_registration_wait_ms=0,
        tick_interval_ms=20,
    )
    follower.join()
    follower.start()
    return follower, holder


def test_requests_for_the_controller_are_refused_by_a_broker_that_is_not(server: MemoryZooKeeper) -> None:
    from strom.cluster.events import ControlledShutdownReceived
    from strom.protocol.errors import ErrorCode

    recorder = Recorder()
    follower, _holder = follower_of_another_controller(server, recorder)
    follower.post(ControlledShutdownReceived("k", 2, follower.registration.epoch))
    (reply,) = recorder.next("reply")
    assert isinstance(reply, ControllerReply)
    assert (reply.key, reply.error) == ("k", ErrorCode.NOT_CONTROLLER)
    follower.stop()


def test_a_lost_watch_notification_costs_the_controller_one_resync_not_its_hearing(
    server: MemoryZooKeeper, node: tuple[ClusterNode, Recorder], caplog: pytest.LogCaptureFixture
) -> None:
    cluster_node, recorder = node
    assert recorder.next("controller") == (True, 1)
    store = cluster_node.store
    assert isinstance(store, MemoryZkClient)
    # On the node's thread: the in-memory server is used by one thread at a time.
    cluster_node.submit(lambda _zk: server.drop_watches(store)).result(WAIT_S)
    other = cluster_node.submit(lambda _zk: server.connect("/c")).result(WAIT_S)
    cluster_node.submit(
        lambda _zk: ClusterZooKeeper(other, ManualClock()).register_broker(registration(2), stale_wait_ms=0)
    ).result(WAIT_S)
    while True:
        (live,) = recorder.next("live_brokers")
        assert isinstance(live, Mapping)
        if sorted(live) == [1, 2]:
            break
    assert "differ from what the watch reported" in caplog.text


def test_ticks_come_on_time_while_the_queue_never_empties(node: tuple[ClusterNode, Recorder]) -> None:
    cluster_node, recorder = node
    recorder.next("controller")
    ticks_before = cluster_node._ticks
    # Ticks every 20 ms while the queue never empties: ten of them come, however slowly a loaded
    # machine runs the thread (before the fix none came until the queue emptied).
    deadline = time.monotonic() + WAIT_S
    while cluster_node._ticks - ticks_before < 10:
        assert time.monotonic() < deadline, f"{cluster_node._ticks - ticks_before} ticks in {WAIT_S} s"
        # Always more work queued than the thread can take: the queue is never empty.
        for _ in range(100):
            cluster_node.submit(lambda _zk: None)
        cluster_node.submit(lambda _zk: None).result(WAIT_S)


def test_a_broker_whose_controller_watch_fails_to_read_competes_again(server: MemoryZooKeeper) -> None:
    recorder = Recorder()
    follower, holder = follower_of_another_controller(server, recorder)
    store = follower.store
    assert isinstance(store, MemoryZkClient)

    def controller_goes_while_the_connection_is_down(_zk: ClusterZooKeeper) -> None:
        holder.close()  # /controller goes: the node's watch fires (its read comes later)
        server.disconnect(store)  # ... and that read fails

    # On the node's thread: the in-memory server is used by one thread at a time.
    follower.submit(controller_goes_while_the_connection_is_down).result(WAIT_S)
    follower.submit(lambda _zk: server.reconnect(store)).result(WAIT_S)
    assert recorder.next("controller") == (True, 1)
    follower.stop()
