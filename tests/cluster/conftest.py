"""Fixtures for the cluster tests: a real ZooKeeper, and one interface over it and the stand-in.

``zookeeper_server`` (module scope) is a real ZooKeeper shared by a module's tests; each test
works under its own chroot, so they never see each other's znodes. ``backend`` runs a test twice:
on ``MemoryZooKeeper`` and on the real server, through the same ``ZkStore`` interface — the
stand-in the unit tests rely on is held to the real thing's semantics.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

import pytest
from kazoo.client import KazooClient

from strom.cli.dev_cluster import LocalCluster
from strom.cluster.config import ZooKeeperConnect
from strom.cluster.kazoo_store import KazooStore
from strom.cluster.memory_zookeeper import MemoryZkClient, MemoryZooKeeper
from strom.cluster.zk_store import SessionEvent, ZkStore
from tools.fault_proxy import ZOOKEEPER, Fault, FaultProxy

from .cluster_support import CLUSTER_SETTINGS, heal
from .fault_support import ProxiedCluster, heal_everything
from .zookeeper_server import ZooKeeperServer

# Session timeout asked for by the test clients: short, so an expiry is quick to provoke.
TEST_SESSION_TIMEOUT_MS = 4_000
WAIT_TIMEOUT_S = 20.0
_chroots = itertools.count()


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = WAIT_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.02)


@pytest.fixture(scope="module")
def zookeeper_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


# Clusters alive right now, so a failing test shows their brokers' logs.
_LIVE_CLUSTERS: list[LocalCluster] = []
LOG_TAIL_LINES = 80


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.failed:
        for cluster in _LIVE_CLUSTERS:
            for node_id, broker in cluster.brokers.items():
                report.sections.append(
                    (f"broker {node_id} log ({broker.log_path})", broker.log_tail(LOG_TAIL_LINES))
                )


@pytest.fixture(scope="module")
def cluster_settings() -> dict[str, str]:
    """The brokers' settings of ``running_cluster`` and ``running_proxied_cluster``; a module
    overrides this fixture to change them."""
    return dict(CLUSTER_SETTINGS)


@pytest.fixture(scope="module")
def running_cluster(
    zookeeper_server: ZooKeeperServer,
    tmp_path_factory: pytest.TempPathFactory,
    cluster_settings: dict[str, str],
) -> Iterator[LocalCluster]:
    """Three brokers (node ids 1-3) under a chroot of the module's ZooKeeper; each test starts
    from a whole cluster (``heal``), whatever the previous one killed."""
    cluster = LocalCluster(
        tmp_path_factory.mktemp("cluster"),
        3,
        settings=cluster_settings,
        zookeeper=zookeeper_server,
        chroot=f"/strom-cluster-{next(_chroots)}",
    )
    _LIVE_CLUSTERS.append(cluster)
    try:
        cluster.start()
        yield cluster
    finally:
        _LIVE_CLUSTERS.remove(cluster)
        cluster.stop()


@pytest.fixture
def cluster(running_cluster: LocalCluster) -> LocalCluster:
    heal(running_cluster)
    return running_cluster


@pytest.fixture(scope="module")
def running_proxied_cluster(
    zookeeper_server: ZooKeeperServer,
    tmp_path_factory: pytest.TempPathFactory,
    cluster_settings: dict[str, str],
) -> Iterator[ProxiedCluster]:
    """Three brokers whose links to each other and to ZooKeeper go through a ``FaultProxy``
    (``fault_support``); each test starts with every link healed and a whole cluster."""
    with FaultProxy() as proxy:
        cluster = ProxiedCluster(
            tmp_path_factory.mktemp("proxied-cluster"),
            3,
            settings=cluster_settings,
            zookeeper=zookeeper_server,
            chroot=f"/strom-cluster-{next(_chroots)}",
            proxy=proxy,
        )
        _LIVE_CLUSTERS.append(cluster)
        try:
            cluster.start()
            yield cluster
        finally:
            _LIVE_CLUSTERS.remove(cluster)
            proxy.heal()
            cluster.stop()


@pytest.fixture
def proxied_cluster(running_proxied_cluster: ProxiedCluster) -> ProxiedCluster:
    heal_everything(running_proxied_cluster)
    return running_proxied_cluster


@pytest.fixture
def own_zookeeper_server(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    """A server for one test, which may kill, pause or restart it."""
    server = ZooKeeperServer(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


class Backend(Protocol):
    name: str

    def connect(self, session_timeout_ms: int = TEST_SESSION_TIMEOUT_MS) -> ZkStore: ...

    def expire(self, store: ZkStore) -> None:
        """End ``store``'s session as a server would; returns once the store has a new session."""
        ...

    def lose_connection(self, store: ZkStore) -> None:
        """Drop ``store``'s connection (its session lives on); returns once it is connected again."""
        ...

    def close(self) -> None: ...


class SessionRecorder:
    def __init__(self) -> None:
        self.events: list[SessionEvent] = []
        self._lock = threading.Lock()

    def __call__(self, event: SessionEvent) -> None:
        with self._lock:
            self.events.append(event)

    def count(self, event: SessionEvent) -> int:
        with self._lock:
            return self.events.count(event)


class MemoryBackend:
    name = "memory"

    def __init__(self, chroot: str) -> None:
        self.server = MemoryZooKeeper()
        self.chroot = chroot

    def connect(self, session_timeout_ms: int = TEST_SESSION_TIMEOUT_MS) -> ZkStore:
        return self.server.connect(self.chroot)

    def expire(self, store: ZkStore) -> None:
        assert isinstance(store, MemoryZkClient)
        self.server.expire(store)

    def lose_connection(self, store: ZkStore) -> None:
        assert isinstance(store, MemoryZkClient)
        self.server.disconnect(store)
        self.server.reconnect(store)

    def close(self) -> None:
        pass


class RealBackend:
    """Stores connect through a ``FaultProxy`` (one route per store), so a test can drop one
    store's connection without touching the server; ``expire`` talks to the server itself."""

    name = "real"

    def __init__(self, server: ZooKeeperServer, chroot: str) -> None:
        self.server = server
        self.chroot = chroot
        self.connect_string = ZooKeeperConnect.parse(server.connect_string + chroot)
        self._proxy = FaultProxy()
        self._proxy.start()
        self._stores: list[KazooStore] = []
        self._sources: dict[int, str] = {}
        self._recorders: dict[int, SessionRecorder] = {}

    def connect(self, session_timeout_ms: int = TEST_SESSION_TIMEOUT_MS) -> ZkStore:
        source = f"store-{len(self._stores)}"
        port = self._proxy.add_route(ZOOKEEPER, self.server.port, source=source)
        store = KazooStore.connect(
            ZooKeeperConnect.parse(f"127.0.0.1:{port}{self.chroot}"),
            session_timeout_ms=session_timeout_ms,
            connect_timeout_ms=10_000,
        )
        self._sources[id(store)] = source
        recorder = SessionRecorder()
        store.add_listener(recorder)
        self._recorders[id(store)] = recorder
        self._stores.append(store)
        return store

    def expire(self, store: ZkStore) -> None:
        """ZooKeeper's own way: a second client attaches to the session and closes it."""
        assert isinstance(store, KazooStore)
        client_id = store.client_id
        assert client_id is not None
        recorder = self._recorders[id(store)]
        expired_before = recorder.count(SessionEvent.EXPIRED)
        connected_before = recorder.count(SessionEvent.CONNECTED)
        intruder = KazooClient(hosts=self.connect_string.servers, client_id=client_id, timeout=10)
        intruder.start(timeout=10)
        intruder.stop()
        intruder.close()
        wait_until(lambda: recorder.count(SessionEvent.EXPIRED) > expired_before, "the session to expire")
        wait_until(lambda: recorder.count(SessionEvent.CONNECTED) > connected_before, "a new session")

    def lose_connection(self, store: ZkStore) -> None:
        """Its connection reset and refused until the client noticed; then let through again."""
        source = self._sources[id(store)]
        recorder = self._recorders[id(store)]
        suspended_before = recorder.count(SessionEvent.SUSPENDED)
        connected_before = recorder.count(SessionEvent.CONNECTED)
        self._proxy.cut(source, ZOOKEEPER, Fault.REFUSE)
        wait_until(lambda: recorder.count(SessionEvent.SUSPENDED) > suspended_before, "the connection lost")
        self._proxy.heal()
        wait_until(lambda: recorder.count(SessionEvent.CONNECTED) > connected_before, "the connection back")
        assert recorder.count(SessionEvent.EXPIRED) == 0, "the session expired"

    def close(self) -> None:
        for store in self._stores:
            store.close()
        self._proxy.stop()


@pytest.fixture(params=["memory", "real"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    chroot = f"/strom-test-{next(_chroots)}"
    chosen: Backend
    if request.param == "memory":
        chosen = MemoryBackend(chroot)
    else:
        chosen = RealBackend(request.getfixturevalue("zookeeper_server"), chroot)
    try:
        yield chosen
    finally:
        chosen.close()
