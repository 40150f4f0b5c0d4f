"""Group configs (KIP-848) of a broker of a cluster (``ClusterGroupConfigStore``): a change is
kept in ZooKeeper through the cluster thread before it applies, a change another broker made
reaches the group coordinator through ``BrokerGroupConfigs.update``, and a change ZooKeeper does
not complete is refused for the client to retry. No thread and no kazoo: the cluster thread's work
runs at once on a ``ClusterZooKeeper`` over the in-memory ZooKeeper."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from strom.base.clock import ManualClock
from strom.broker.cluster.runtime import ClusterGroupConfigStore, ClusterReplication, ClusterSettings
from strom.broker.config import BrokerConfig
from strom.broker.refused import Refused
from strom.broker.state import BrokerState
from strom.cluster.memory_zookeeper import MemoryZooKeeper
from strom.cluster.zk_store import ConnectionLossError
from strom.cluster.zookeeper import ClusterZooKeeper
from strom.protocol.errors import ErrorCode

SESSION = {"consumer.session.timeout.ms": "50000"}


class ClusterThread:
    """``ClusterNode.submit`` without a thread: the work runs at once on the given ZooKeeper."""

    def __init__(self, zookeeper: ClusterZooKeeper) -> None:
        self.zookeeper = zookeeper
        self.lost = False  # every call meets a lost connection

    def submit(self, work: Callable[[ClusterZooKeeper], object]) -> concurrent.futures.Future[object]:
        future: concurrent.futures.Future[object] = concurrent.futures.Future()
        try:
            if self.lost:
                raise ConnectionLossError("ConnectionLoss: ")
            future.set_result(work(self.zookeeper))
        except Exception as error:
            future.set_exception(error)
        return future


@pytest.fixture
def state(tmp_path: Path) -> Iterator[BrokerState]:
    config = BrokerConfig(
        host="127.0.0.1",
        port=0,
        data_dir=tmp_path / "data",
        values={"zookeeper.connect": "127.0.0.1:2181", "node.id": "1"},
    )
    state = BrokerState(config, ManualClock())
    try:
        yield state
    finally:
        state.close()


def _joined(state: BrokerState) -> tuple[ClusterReplication, ClusterThread]:
    """A broker whose cluster thread reaches a ZooKeeper with the layout made, and whose group
    configs are ZooKeeper's, as joining leaves them."""
    replication = ClusterReplication(state, ClusterSettings.from_config(state.config))
    zookeeper = ClusterZooKeeper(MemoryZooKeeper().connect("/c"), ManualClock())
    zookeeper.ensure_layout()
    thread = ClusterThread(zookeeper)
    replication.node = thread  # type: ignore[assignment]
    state.group_configs.store = ClusterGroupConfigStore(replication)
    state.group_configs.replace_all(zookeeper.read_group_configs())
    return replication, thread


def test_a_change_is_kept_in_zookeeper_and_applies(state: BrokerState) -> None:
    _, thread = _joined(state)
    asyncio.run(state.group_configs.set_group("a/b", SESSION))
    assert thread.zookeeper.read_group_config("a/b") == SESSION
    assert state.group_configs.overrides("a/b") == SESSION
    asyncio.run(state.group_configs.set_group("a/b", {}))
    assert thread.zookeeper.read_group_configs() == {}
    assert state.group_configs.overrides("a/b") == {}


def test_a_change_another_broker_made_arrives_as_an_update(state: BrokerState) -> None:
    _, thread = _joined(state)
    thread.zookeeper.set_group_config("orders", SESSION)
    # What the cluster thread hands the loop (``NodeOutputs.group_configs``) on the notification.
    state.group_configs.update({"orders": thread.zookeeper.read_group_config("orders")})
    assert state.group_configs.overrides("orders") == SESSION
    state.group_configs.update({"orders": {}})
    assert state.group_configs.overrides("orders") == {}


def test_a_change_zookeeper_does_not_complete_is_refused_and_not_applied(state: BrokerState) -> None:
    _, thread = _joined(state)
    thread.lost = True
    with pytest.raises(Refused) as refused:
        asyncio.run(state.group_configs.set_group("orders", SESSION))
    assert refused.value.error == ErrorCode.REQUEST_TIMED_OUT
    assert state.group_configs.overrides("orders") == {}
    thread.lost = False
    assert thread.zookeeper.read_group_configs() == {}


def test_a_clusters_group_configs_are_read_when_joining_not_loaded(state: BrokerState) -> None:
    replication, _ = _joined(state)
    with pytest.raises(AssertionError):
        ClusterGroupConfigStore(replication).load()
