"""The ZooKeeper shell against the in-memory stand-in and a real ZooKeeper, by the same tests:
registration and duplicate node ids, controller election and re-election, epoch fencing of a
deposed controller, conditional-write conflicts, atomic transactions, watches, chroots."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from strom.base.clock import SystemClock
from strom.cluster import znodes
from strom.cluster.actions import ControllerWrite
from strom.cluster.config import ZooKeeperConnect
from strom.cluster.kazoo_store import RECONNECT_DELAY_MAX_S, KazooStore, reconnect_policy
from strom.cluster.model import BrokerRegistration, Endpoint, LeaderAndIsr, TopicAssignment
from strom.cluster.zk_store import (
    BadVersionError,
    Check,
    Create,
    Delete,
    MultiError,
    NodeExistsError,
    NoNodeError,
    SetData,
    WatchEvent,
    WatchKind,
    ZkStore,
    ZkUnavailableError,
)
from strom.cluster.zookeeper import (
    BrokerIdInUseError,
    ClusterZooKeeper,
    ControllerMovedError,
    TopicExistsError,
)

from .conftest import TEST_SESSION_TIMEOUT_MS, Backend, RealBackend, wait_until
from .zookeeper_server import ZooKeeperServer, free_port


def registration(node_id: int, port: int = 9092) -> BrokerRegistration:
    return BrokerRegistration(
        node_id,
        "127.0.0.1",
        port,
        (Endpoint("PLAINTEXT", "127.0.0.1", port),),
        timestamp_ms=1_700_000_000_000,
    )


# The most the test server grants (maxSessionTimeout); a restart of it takes far less.
RESTART_SESSION_TIMEOUT_MS = 30_000


def joined(backend: Backend, session_timeout_ms: int = TEST_SESSION_TIMEOUT_MS) -> ClusterZooKeeper:
    zk = ClusterZooKeeper(backend.connect(session_timeout_ms), SystemClock())
    zk.ensure_layout()
    return zk


def test_registration_and_a_duplicate_node_id_refused(backend: Backend) -> None:
    first = joined(backend)
    second = joined(backend)
    one = first.register_broker(registration(1, 9001), stale_wait_ms=0)
    assert one.epoch > 0
    with pytest.raises(
        BrokerIdInUseError, match=r"node id 1 is already registered .* 127\.0\.0\.1:9001"
    ) as refused:
        second.register_broker(registration(1, 9002), stale_wait_ms=300)
    assert "--node-id" in str(refused.value)
    two = second.register_broker(registration(2, 9002), stale_wait_ms=0)
    brokers = first.read_live_brokers()
    assert sorted(brokers) == [1, 2]
    assert brokers[1] == one and brokers[2] == two
    assert first.register_broker(registration(1, 9001), stale_wait_ms=0) == one, (
        "registering again is idempotent"
    )
    backend.expire(first.store)
    again = second.register_broker(registration(1, 9003), stale_wait_ms=0)
    assert again.epoch != one.epoch, "a new registration is a new broker epoch"
    assert second.read_live_brokers()[1].port == 9003


def test_cluster_id_is_written_once(backend: Backend) -> None:
    first = joined(backend)
    second = joined(backend)
    cluster_id = first.ensure_cluster_id()
    assert len(cluster_id) == 22
    assert second.ensure_cluster_id("another") == cluster_id


def test_controller_election_and_re_election_after_the_session_ends(backend: Backend) -> None:
    a, b = joined(backend), joined(backend)
    lease = a.try_become_controller(1)
    assert lease is not None and lease.epoch == 1
    assert b.try_become_controller(2) is None
    fired = threading.Event()
    assert b.read_controller(watch=lambda event: fired.set()) == 1
    backend.expire(a.store)
    wait_until(fired.is_set, "the /controller watch")
    assert b.read_controller() is None
    second = b.try_become_controller(2)
    assert second is not None and second.epoch == 2
    assert a.read_controller_epoch() == (2, second.epoch_version)
    assert a.try_become_controller(1) is None


def test_a_deposed_controller_cannot_write(backend: Backend) -> None:
    a, b = joined(backend), joined(backend)
    old = a.try_become_controller(1)
    assert old is not None
    path = znodes.partition_state_path("t", 0)
    state = LeaderAndIsr(1, 0, (1,), old.epoch)
    outcome = a.apply_controller_writes(
        old,
        [
            ControllerWrite(
                "p0",
                ops=(Create(path, znodes.encode_partition_state("t", 0, state)),),
                parents=(znodes.topic_path("t"), znodes.partitions_path("t"), znodes.partition_path("t", 0)),
            )
        ],
    )
    assert outcome[0].ok and outcome[0].results == (path,)
    backend.expire(a.store)  # a paused controller: its session ended while it was not looking
    new = b.try_become_controller(2)
    assert new is not None and new.epoch == 2
    stale = LeaderAndIsr(1, 1, (1,), old.epoch)
    with pytest.raises(ControllerMovedError, match="another controller"):
        a.apply_controller_writes(
            old,
            [ControllerWrite("p0", ops=(SetData(path, znodes.encode_partition_state("t", 0, stale), 0),))],
        )
    with pytest.raises(ControllerMovedError):
        a.apply_controller_writes(old, [ControllerWrite("t", delete_trees=(znodes.topic_path("t"),))])
    data, stat = b.store.get(path)
    assert znodes.decode_partition_state("t", 0, data) == state and stat.version == 0


def test_conditional_writes_conflict_and_report_what_is_there(backend: Backend) -> None:
    zk = joined(backend)
    lease = zk.try_become_controller(1)
    assert lease is not None
    path = znodes.partition_state_path("t", 0)
    zk.store.ensure_path(znodes.partition_path("t", 0))
    first = LeaderAndIsr(1, 0, (1, 2), lease.epoch)
    zk.store.create(path, znodes.encode_partition_state("t", 0, first))
    second = LeaderAndIsr(2, 1, (2,), lease.epoch)
    [won] = zk.apply_controller_writes(
        lease, [ControllerWrite("a", ops=(SetData(path, znodes.encode_partition_state("t", 0, second), 0),))]
    )
    assert won.ok
    assert won.results is not None and won.results[0].version == 1  # type: ignore[union-attr]
    third = LeaderAndIsr(1, 1, (1,), lease.epoch)
    [lost, created] = zk.apply_controller_writes(
        lease,
        [
            ControllerWrite("b", ops=(SetData(path, znodes.encode_partition_state("t", 0, third), 0),)),
            ControllerWrite("c", ops=(Create(path, b"{}"),)),
        ],
    )
    assert isinstance(lost.error, BadVersionError)
    assert lost.current is not None and lost.current[1] == 1
    assert znodes.decode_partition_state("t", 0, lost.current[0]) == second
    assert isinstance(created.error, NodeExistsError) and created.current is not None


def test_transactions_are_all_or_nothing(backend: Backend) -> None:
    store = backend.connect()
    store.create("/a", b"1")
    with pytest.raises(MultiError) as failed:
        store.multi([SetData("/a", b"2"), Create("/b"), Check("/a", 0)])
    assert failed.value.index == 2 and isinstance(failed.value.cause, BadVersionError)
    data, stat = store.get("/a")
    assert (data, stat.version) == (b"1", 0)
    assert store.exists("/b") is None
    results = store.multi([SetData("/a", b"2", 0), Create("/b", b"x"), Delete("/b"), Check("/a", 1)])
    assert results[1] == "/b" and results[0].version == 1  # type: ignore[union-attr]
    outcomes = store.multi_many([[Create("/c")], [Create("/c")], [Delete("/nope")]])
    assert outcomes[0] == ["/c"]
    assert isinstance(outcomes[1], MultiError) and isinstance(outcomes[1].cause, NodeExistsError)
    assert isinstance(outcomes[2], MultiError) and isinstance(outcomes[2].cause, NoNodeError)
    assert store.get_many(["/a", "/missing"])[1] is None


def test_watches_fire_once_for_the_other_sessions_changes(backend: Backend) -> None:
    watcher, writer = backend.connect(), backend.connect()
    watcher.ensure_path("/w")
    seen: list[WatchEvent] = []
    lock = threading.Lock()

    def record(event: WatchEvent) -> None:
        with lock:
            seen.append(event)

    assert watcher.get_children("/w", watch=record) == []
    assert watcher.exists("/w/e", watch=record) is None
    writer.create("/w/e", b"", ephemeral=True)
    wait_until(lambda: len(seen) == 2, "two watch events")
    assert {(event.kind, event.path) for event in seen} == {
        (WatchKind.CHILDREN, "/w"),
        (WatchKind.CREATED, "/w/e"),
    }
    writer.set("/w/e", b"x")
    watcher.get("/w/e", watch=record)
    backend.expire(writer)  # its ephemeral goes with it
    wait_until(lambda: len(seen) == 3, "the deletion")
    assert seen[2] == WatchEvent(WatchKind.DELETED, "/w/e")
    assert watcher.exists("/w/e") is None


def test_watches_fire_again_when_a_lost_connection_comes_back(backend: Backend) -> None:
    """The server forgets a connection's watches; within the session, every watch set before the
    connection dropped fires once when it is back (RECONNECTED), so its owner reads again and
    sees what changed meanwhile; a watch set again fires on the next change as usual."""
    watcher, writer = backend.connect(), backend.connect()
    watcher.ensure_path("/lost")
    watcher.create("/lost/mine", b"", ephemeral=True)
    seen: list[WatchEvent] = []
    lock = threading.Lock()

    def record(event: WatchEvent) -> None:
        with lock:
            seen.append(event)

    watcher.get_children("/lost", watch=record)
    watcher.get("/lost/mine", watch=record)
    assert watcher.exists("/lost/absent", watch=record) is None
    backend.lose_connection(watcher)
    wait_until(lambda: len(seen) == 3, "the three watches to fire after the reconnection")
    assert sorted((event.kind, event.path) for event in seen) == [
        (WatchKind.RECONNECTED, "/lost"),
        (WatchKind.RECONNECTED, "/lost/absent"),
        (WatchKind.RECONNECTED, "/lost/mine"),
    ]
    assert watcher.get_children("/lost", watch=record) == ["mine"], "the session, and its ephemeral, live on"
    writer.create("/lost/new")
    wait_until(lambda: len(seen) == 4, "the watch set again to fire")
    assert seen[3] == WatchEvent(WatchKind.CHILDREN, "/lost")


def test_snapshot_and_admin_writes(backend: Backend) -> None:
    zk = joined(backend)
    zk.register_broker(registration(1), stale_wait_ms=0)
    topic_id = uuid.uuid4()
    assignment = TopicAssignment("orders", topic_id, {0: (1,), 1: (1,)})
    zk.create_topic(assignment, {"cleanup.policy": "compact"})
    with pytest.raises(TopicExistsError, match="already exists"):
        zk.create_topic(TopicAssignment("orders", uuid.uuid4(), {0: (1,)}), {})
    zk.store.ensure_path(znodes.partition_path("orders", 0))
    zk.store.create(
        znodes.partition_state_path("orders", 0),
        znodes.encode_partition_state("orders", 0, LeaderAndIsr(1, 0, (1,), 1)),
    )
    zk.request_topic_deletion("gone")
    zk.request_topic_deletion("gone")
    with pytest.raises(TopicExistsError, match="marked for deletion"):
        zk.create_topic(TopicAssignment("gone", uuid.uuid4(), {0: (1,)}), {})
    snapshot = zk.read_snapshot()
    assert list(snapshot.brokers) == [1]
    assert snapshot.topics["orders"].topic_id == topic_id
    assert snapshot.topics["orders"].replicas == {0: (1,), 1: (1,)}
    assert [tp.partition for tp in snapshot.partition_states] == [0]
    assert snapshot.topics_to_delete == {"gone"}
    assert snapshot.topic_configs["orders"] == {"cleanup.policy": "compact"}
    grown = TopicAssignment(
        "orders", topic_id, {0: (1,), 1: (1,), 2: (1,)}, snapshot.topics["orders"].version
    )
    zk.add_partitions(grown)
    assert zk.read_topic("orders") is not None and zk.read_topic("orders").partition_count == 3  # type: ignore[union-attr]
    zk.set_topic_config("orders", {"retention.ms": "1"})
    changes = zk.read_config_changes()
    assert changes.topics == ("orders",) and changes.last is not None
    zk.set_topic_config("other", {"a": "b"})
    assert zk.read_config_changes(after=changes.last).topics == ("other",)


def test_chroot_keeps_clusters_apart(zookeeper_server: ZooKeeperServer) -> None:
    base = zookeeper_server.connect_string
    one = KazooStore.connect(ZooKeeperConnect.parse(base + "/chroot-one/deep"), connect_timeout_ms=10_000)
    two = KazooStore.connect(ZooKeeperConnect.parse(base + "/chroot-two"), connect_timeout_ms=10_000)
    root = KazooStore.connect(ZooKeeperConnect.parse(base), connect_timeout_ms=10_000)
    try:
        for store, node_id in ((one, 1), (two, 2)):
            zk = ClusterZooKeeper(store, SystemClock())
            zk.ensure_layout()
            zk.register_broker(registration(node_id), stale_wait_ms=0)
        assert list(ClusterZooKeeper(one, SystemClock()).read_live_brokers()) == [1]
        assert list(ClusterZooKeeper(two, SystemClock()).read_live_brokers()) == [2]
        assert root.get_children("/chroot-one/deep/brokers/ids") == ["1"]
        assert root.get_children("/chroot-two/brokers/ids") == ["2"]
        seen: list[WatchEvent] = []
        one.get_children("/brokers/ids", watch=seen.append)
        root.delete("/chroot-one/deep/brokers/ids/1")
        wait_until(lambda: bool(seen), "the watch inside the chroot")
        assert seen == [WatchEvent(WatchKind.CHILDREN, "/brokers/ids")], "paths are relative to the chroot"
    finally:
        for store in (one, two, root):
            store.close()


def test_unreachable_zookeeper_fails_clearly_within_the_bounded_wait() -> None:
    port = free_port()
    started = time.monotonic()
    with pytest.raises(
        ZkUnavailableError, match=rf"no ZooKeeper server answered at 127\.0\.0\.1:{port} within 1000 ms"
    ):
        KazooStore.connect(ZooKeeperConnect.parse(f"127.0.0.1:{port}"), connect_timeout_ms=1_000)
    assert time.monotonic() - started < 10, "the wait is bounded"


def test_a_restarted_broker_waits_for_its_stale_registration(zookeeper_server: ZooKeeperServer) -> None:
    """kill -9 and restart: the old session still holds /brokers/ids/N until it expires; the new
    process waits for that (up to the session timeout) instead of refusing to start."""
    backend = RealBackend(zookeeper_server, "/restart-wait")
    try:
        old = joined(backend)
        old.register_broker(registration(5, 9005), stale_wait_ms=0)
        new = joined(backend)
        result: list[BrokerRegistration | BaseException] = []

        def register() -> None:
            try:
                result.append(new.register_broker(registration(5, 9105), stale_wait_ms=15_000))
            except BaseException as error:  # reported by the assertion below
                result.append(error)

        waiting = threading.Thread(target=register)
        waiting.start()
        waiting.join(0.5)
        assert waiting.is_alive() and not result, "it waits while the old registration lives"
        backend.expire(old.store)
        waiting.join(20)
        assert len(result) == 1 and isinstance(result[0], BrokerRegistration), result
        assert new.read_live_brokers()[5].port == 9105
    finally:
        backend.close()


def test_sessions_survive_a_short_zookeeper_pause_and_see_a_restart(
    own_zookeeper_server: ZooKeeperServer,
) -> None:
    backend = RealBackend(own_zookeeper_server, "/restart")
    try:
        # The session must outlast a whole server restart (a JVM start, seconds on a loaded machine):
        # a restart longer than the session timeout rightly expires it, which is not what this tests.
        zk = joined(backend, session_timeout_ms=RESTART_SESSION_TIMEOUT_MS)
        zk.register_broker(registration(1), stale_wait_ms=0)
        own_zookeeper_server.pause()
        time.sleep(0.5)  # a pause shorter than the session timeout (the fault being injected)
        own_zookeeper_server.resume()
        wait_until(lambda: _reads(zk.store), "reads to work again after the pause")
        assert list(zk.read_live_brokers()) == [1], "a pause shorter than the session keeps the session"
        own_zookeeper_server.restart()
        try:
            wait_until(lambda: _reads(zk.store), "reconnecting after the restart")
        except AssertionError as error:
            raise AssertionError(f"{error}; ZooKeeper's log:\n{own_zookeeper_server.log_tail(120)}") from None
        assert list(zk.read_live_brokers()) == [1], (
            "the persistent tree and the live session survive a restart"
        )
    finally:
        backend.close()


def _reads(store: ZkStore) -> bool:
    try:
        store.get_children("/")
    except Exception:
        return False
    return True


def test_the_client_tries_the_servers_again_at_least_every_quarter_session() -> None:
    """kazoo's own policy doubles the pause up to an hour: after a ZooKeeper outage of a few
    seconds the brokers came back only once their sessions had expired."""
    for session_timeout_ms in (1_000, 4_000, 18_000, 60_000):
        policy = reconnect_policy(session_timeout_ms)
        longest_pause_s = policy.max_delay * (1 + policy.max_jitter)
        assert policy.max_tries == -1
        assert longest_pause_s <= min(RECONNECT_DELAY_MAX_S, session_timeout_ms / 1000 / 4) + 1e-9
        assert policy.delay <= longest_pause_s
