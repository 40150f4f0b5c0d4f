"""How a broker of a cluster takes the controller's commands when it has just registered again
(``ClusterReplication``, no ZooKeeper: the registration is handed to it as the cluster thread
would). After a session expiry the controller sees the new registration in ZooKeeper as soon as the
cluster thread makes it, and its first command can reach the broker before the loop has heard of
its new broker epoch; refused as STALE_BROKER_EPOCH it would be lost (the controller does not send
it again), and a deposed leader would never learn that it was. And a LeaderAndIsr for a new topic
whose config read meets a lost ZooKeeper connection (the session living on) still makes the
replica: the controller does not send it again either."""

from __future__ import annotations

import asyncio
import concurrent.futures
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from strom.base.clock import ManualClock
from strom.broker.cluster.runtime import ClusterReplication, ClusterSettings
from strom.broker.config import BrokerConfig
from strom.broker.state import BrokerState
from strom.cluster.actions import LeaderAndIsrCommand, PartitionInfo, UpdateMetadataCommand
from strom.cluster.model import BrokerRegistration, Endpoint, TopicPartition
from strom.cluster.zk_store import ConnectionLossError
from strom.protocol.errors import ErrorCode

SESSION_TIMEOUT_MS = 4_000
OLD_EPOCH, NEW_EPOCH = 10, 25


@pytest.fixture
def replication(tmp_path: Path) -> Iterator[ClusterReplication]:
    config = BrokerConfig(
        host="127.0.0.1",
        port=0,
        data_dir=tmp_path / "data",
        values={
            "zookeeper.connect": "127.0.0.1:2181",
            "node.id": "1",
            "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
        },
    )
    state = BrokerState(config, ManualClock())
    try:
        yield ClusterReplication(state, ClusterSettings.from_config(config))
    finally:
        state.close()


def registration(epoch: int) -> BrokerRegistration:
    return BrokerRegistration(1, "127.0.0.1", 9092, (Endpoint("PLAINTEXT", "127.0.0.1", 9092),), epoch=epoch)


def update_metadata(broker_epoch: int, controller_epoch: int = 3) -> UpdateMetadataCommand:
    return UpdateMetadataCommand(1, broker_epoch, 2, controller_epoch, (), (registration(broker_epoch),))


def joined(replication: ClusterReplication, epoch: int) -> None:
    replication._on_registered(registration(epoch))
    replication._joined.set()


def test_a_command_for_the_new_registration_waits_until_the_broker_knows_it(
    replication: ClusterReplication,
) -> None:
    async def scenario() -> tuple[bool, ErrorCode]:
        joined(replication, OLD_EPOCH)
        applying = asyncio.ensure_future(replication.on_update_metadata(update_metadata(NEW_EPOCH)))
        await asyncio.sleep(0.05)
        waited = not applying.done()
        replication._on_registered(registration(NEW_EPOCH))  # the cluster thread's news arrives
        return waited, await applying

    waited, error = asyncio.run(scenario())
    assert waited, "applied before the broker knew its new epoch"
    assert error == ErrorCode.NONE
    assert replication.control.broker_epoch == NEW_EPOCH


def test_a_command_for_an_earlier_registration_is_refused_at_once(replication: ClusterReplication) -> None:
    async def scenario() -> ErrorCode:
        joined(replication, NEW_EPOCH)
        async with asyncio.timeout(1):
            return await replication.on_update_metadata(update_metadata(OLD_EPOCH))

    assert asyncio.run(scenario()) == ErrorCode.STALE_BROKER_EPOCH


def test_a_newer_epoch_never_learnt_is_refused_after_a_session_timeout(tmp_path: Path) -> None:
    """The wait is bounded: a registration that never reaches the loop does not hold commands."""
    config = BrokerConfig(
        host="127.0.0.1",
        port=0,
        data_dir=tmp_path / "data",
        values={"zookeeper.connect": "127.0.0.1:2181", "node.id": "1", "zookeeper.session.timeout.ms": "400"},
    )
    state = BrokerState(config, ManualClock())
    try:
        replication = ClusterReplication(state, ClusterSettings.from_config(config))

        async def scenario() -> ErrorCode:
            joined(replication, OLD_EPOCH)
            async with asyncio.timeout(5):
                return await replication.on_update_metadata(update_metadata(NEW_EPOCH))

        assert asyncio.run(scenario()) == ErrorCode.STALE_BROKER_EPOCH
    finally:
        state.close()


class ZooKeeperLosingOneConnection:
    """What the cluster thread's ZooKeeper answers: the first read of topic configs meets a lost
    connection (kazoo fails what was in flight), the next one is answered."""

    def __init__(self) -> None:
        self.reads = 0

    def read_topic_configs(self, names: list[str]) -> dict[str, dict[str, str]]:
        self.reads += 1
        if self.reads == 1:
            raise ConnectionLossError("ConnectionLoss: ")
        return {name: {"retention.ms": "3600000"} for name in names}


class ClusterThread:
    """``ClusterNode.submit`` without a thread: the work runs at once on the given ZooKeeper."""

    def __init__(self, zookeeper: ZooKeeperLosingOneConnection) -> None:
        self.zookeeper = zookeeper

    def submit(
        self, work: Callable[[ZooKeeperLosingOneConnection], object]
    ) -> concurrent.futures.Future[object]:
        future: concurrent.futures.Future[object] = concurrent.futures.Future()
        try:
            future.set_result(work(self.zookeeper))
        except Exception as error:
            future.set_exception(error)
        return future


def test_a_new_topic_whose_config_read_meets_a_lost_connection_is_made_all_the_same(
    replication: ClusterReplication,
) -> None:
    replication._state.load()  # the data directory made, as the broker does at start
    zookeeper = ZooKeeperLosingOneConnection()
    replication.node = ClusterThread(zookeeper)  # type: ignore[assignment]
    info = PartitionInfo(
        "created-during-a-cut", 0, uuid.uuid4(), 1, 0, (1,), 0, (1,), controller_epoch=3, is_new=True
    )
    command = LeaderAndIsrCommand(1, NEW_EPOCH, 2, 3, (info,), (registration(NEW_EPOCH),))

    async def scenario() -> ErrorCode:
        joined(replication, NEW_EPOCH)
        async with asyncio.timeout(5):
            outcome = await replication.on_leader_and_isr(command)
        await replication.roles.close()
        return outcome.partition_errors[info.topic_partition]

    assert asyncio.run(scenario()) == ErrorCode.NONE
    assert zookeeper.reads == 2
    assert replication._state.logs.log(info.topic, info.partition) is not None
    assert TopicPartition(info.topic, info.partition) in replication.control.partitions
