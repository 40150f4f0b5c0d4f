"""A broker's role for a partition it replicates (``PartitionRoles``), over real partition logs
and a manual clock: acks=all parked until the followers have the batch, consumers capped at the
high watermark and woken when it moves, ISR changes proposed, leadership lost; the follower's
fetcher helpers; and which APIs a single node and a cluster broker serve."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from strom.base.clock import ManualClock
from strom.broker import handlers
from strom.broker.cluster.fetcher import whole_batches
from strom.broker.cluster.partitions import PartitionRoles
from strom.broker.registry import HANDLERS, handler_table
from strom.broker.replication import ReadAccess
from strom.cluster.actions import PartitionInfo
from strom.cluster.config import ReplicationConfig
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.alter_partition import AlterPartitionRequest
from strom.protocol.messages.leader_and_isr import LeaderAndIsrRequest
from strom.protocol.messages.offset_for_leader_epoch import OffsetForLeaderEpochRequest
from strom.protocol.records.header import iter_batch_headers, validate_batches
from strom.storage.config import LogConfig
from strom.storage.partition_log import PartitionLog

from ..storage.helpers import T0_MS, make_batch

TOPIC_ID = uuid.uuid4()
LAG_MS = 1_000


class Woken:
    def __init__(self) -> None:
        self.readers: list[tuple[str, int]] = []
        self.replicas: list[tuple[str, int]] = []
        self.alter_isr = 0


def roles_and_log(
    tmp_path: Path, min_insync_replicas: int = 1
) -> tuple[PartitionRoles, PartitionLog, ManualClock, Woken]:
    clock = ManualClock()
    woken = Woken()

    def count_alter() -> None:
        woken.alter_isr += 1

    roles = PartitionRoles(
        1,
        ReplicationConfig(replica_lag_time_max_ms=LAG_MS),
        clock,
        wake_readers=lambda topic, partition: woken.readers.append((topic, partition)),
        wake_replicas=lambda topic, partition: woken.replicas.append((topic, partition)),
        alter_isr=count_alter,
    )
    log = PartitionLog.open(tmp_path / "t-0", "t", 0, LogConfig(min_insync_replicas=min_insync_replicas))
    log.track_high_watermark()
    return roles, log, clock, woken


def info(leader: int, leader_epoch: int, isr: tuple[int, ...] = (1, 2, 3)) -> PartitionInfo:
    return PartitionInfo("t", 0, TOPIC_ID, leader, leader_epoch, isr, 0, (1, 2, 3), 1)


def append(roles: PartitionRoles, log: PartitionLog, *values: bytes) -> int:
    data = bytearray(make_batch(list(values)))
    log.append(data, validate_batches(data), T0_MS)
    roles.on_append("t", 0)
    return log.log_end_offset


def test_acks_all_waits_for_every_in_sync_follower_and_the_high_watermark_wakes_consumers(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        roles, log, _clock, woken = roles_and_log(tmp_path)
        roles.become_leader(info(1, 3), log)
        end = append(roles, log, b"a", b"b")
        assert _epochs(log) == [3]  # the leader stamps its epoch
        assert woken.replicas == [("t", 0)]  # followers are woken by the append itself
        assert log.high_watermark == 0  # the followers' ends are not known yet
        waiting = asyncio.ensure_future(roles.wait_for_acks([(log, end)], 30_000))
        await asyncio.sleep(0)
        assert not waiting.done()
        access = ReadAccess(log, None, 3)
        assert roles.follower_fetched(access, 2, end) == ErrorCode.NONE
        await asyncio.sleep(0)
        assert not waiting.done() and woken.readers == []  # follower 3 has not got it yet
        assert roles.follower_fetched(access, 3, end) == ErrorCode.NONE
        assert await waiting == [ErrorCode.NONE]
        assert log.high_watermark == end and woken.readers == [("t", 0)]
        assert roles.follower_fetched(access, 7, end) == ErrorCode.NOT_LEADER_OR_FOLLOWER
        await roles.close()
        log.close()

    asyncio.run(scenario())


def test_a_lagging_follower_is_proposed_out_of_the_isr_and_acks_all_answers_after_append(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        roles, log, clock, woken = roles_and_log(tmp_path, min_insync_replicas=3)
        roles.become_leader(info(1, 0), log)
        access = ReadAccess(log, None, 0)
        end = append(roles, log, b"x")
        roles.follower_fetched(access, 2, 0)
        roles.follower_fetched(access, 3, 0)
        clock.advance(LAG_MS // 2)
        roles.follower_fetched(access, 2, end)  # 2 keeps up, 3 does not
        clock.advance(LAG_MS)
        roles.tick(all_leaders=True)
        assert woken.alter_isr == 1
        ((topic_id, proposal),) = roles.alter_isr_proposals.values()
        assert topic_id == TOPIC_ID and proposal.new_isr == (1, 2)
        # The controller agreed: the ISR is now below min.insync.replicas=3.
        roles.alter_isr_answered(
            proposal.topic_partition, proposal, ErrorCode.NONE, leader_epoch=0, isr=(1, 2), partition_epoch=1
        )
        assert roles.led[proposal.topic_partition].leader.isr == (1, 2)
        end = append(roles, log, b"y")
        answers = asyncio.ensure_future(roles.wait_for_acks([(log, end)], 30_000))
        roles.follower_fetched(access, 2, end)
        assert await answers == [ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND]
        await roles.close()
        log.close()

    asyncio.run(scenario())


def test_losing_the_leadership_answers_parked_requests_and_stops_stamping(tmp_path: Path) -> None:
    async def scenario() -> None:
        roles, log, clock, _woken = roles_and_log(tmp_path)
        roles.become_leader(info(1, 2), log)
        end = append(roles, log, b"z")
        parked = asyncio.ensure_future(roles.wait_for_acks([(log, end)], 30_000))
        await asyncio.sleep(0)
        roles.become_follower(info(2, 3), log, None)  # no leader address: nothing is fetched
        assert await parked == [ErrorCode.NOT_LEADER_OR_FOLLOWER]
        assert log.leader_epoch is None and "t" not in {tp.topic for tp in roles.led}
        assert await roles.wait_for_acks([(log, end)], 1_000) == [ErrorCode.NOT_LEADER_OR_FOLLOWER]
        # A deadline passes: REQUEST_TIMED_OUT from the tick.
        roles.become_leader(info(1, 4), log)
        end = append(roles, log, b"late")
        timed = asyncio.ensure_future(roles.wait_for_acks([(log, end)], 500))
        await asyncio.sleep(0)
        clock.advance(600)
        roles.tick(all_leaders=False)
        assert await timed == [ErrorCode.REQUEST_TIMED_OUT]
        await roles.close()
        log.close()

    asyncio.run(scenario())


def test_whole_batches_keeps_complete_batches_and_refuses_a_bad_crc() -> None:
    first, second = make_batch([b"a"]), make_batch([b"b", b"c"])
    data = first + second + second[:20]
    headers, length = whole_batches(data)
    assert len(headers) == 2 and length == len(first) + len(second)
    broken = bytearray(first)
    broken[-1] ^= 0xFF
    try:
        whole_batches(bytes(broken))
    except ValueError as error:
        assert "CRC" in str(error)
    else:
        raise AssertionError("a corrupt batch was accepted")


def test_a_single_node_neither_serves_nor_advertises_the_cluster_apis() -> None:
    handlers.register_all()
    cluster_only = {
        LeaderAndIsrRequest.API_KEY,
        AlterPartitionRequest.API_KEY,
        OffsetForLeaderEpochRequest.API_KEY,
        5,  # StopReplica
        6,  # UpdateMetadata
        7,  # ControlledShutdown
    }
    assert not cluster_only & set(handler_table(cluster=False))
    assert handler_table(cluster=False) is HANDLERS
    assert cluster_only <= set(handler_table(cluster=True))
    # ElectLeaders is served by both (a single node: ELECTION_NOT_NEEDED, tests/unit/broker/test_dispatch.py).
    assert 43 in handler_table(cluster=False) and 43 in handler_table(cluster=True)


def _epochs(log: PartitionLog) -> list[int]:
    data = log.read(0, 1 << 20).records
    return [header.partition_leader_epoch for header in iter_batch_headers(data)]


def fetched_partitions(roles: PartitionRoles) -> set[tuple[str, int]]:
    return {(followed.log.topic, followed.log.partition) for followed in roles.fetchers.followed()}


def test_a_broker_shutting_down_fetches_only_while_the_isr_holds_it(tmp_path: Path) -> None:
    """Out of the ISR during a controlled shutdown, a follower does not fetch: the leader would
    propose it back into the ISR and count it in the high watermark just as it goes away."""

    async def scenario() -> None:
        roles, log, _clock, _woken = roles_and_log(tmp_path)
        roles.become_follower(info(2, 1, isr=(1, 2, 3)), log, ("127.0.0.1", 9))
        assert fetched_partitions(roles) == {("t", 0)}
        roles.begin_shutdown(lambda _tp: (1, 2, 3))
        assert fetched_partitions(roles) == {("t", 0)}, "in the ISR: the leader's HW needs it"
        # The controller takes the broker out of the ISR (same leader epoch, new partition epoch).
        roles.isr_changed(PartitionInfo("t", 0, TOPIC_ID, 2, 1, (2, 3), 1, (1, 2, 3), 1))
        assert fetched_partitions(roles) == set()
        # A leadership moved away from it arrives as a follower state without it in the ISR.
        roles.become_follower(info(3, 2, isr=(2, 3)), log, ("127.0.0.1", 9))
        assert fetched_partitions(roles) == set()
        assert ("t", 0) in {(tp.topic, tp.partition) for tp in roles.followed}
        await roles.close()

    asyncio.run(scenario())


def test_a_broker_not_shutting_down_fetches_out_of_the_isr_to_catch_up(tmp_path: Path) -> None:
    async def scenario() -> None:
        roles, log, _clock, _woken = roles_and_log(tmp_path)
        roles.become_follower(info(2, 1, isr=(2, 3)), log, ("127.0.0.1", 9))
        roles.isr_changed(PartitionInfo("t", 0, TOPIC_ID, 2, 1, (2,), 1, (1, 2, 3), 1))
        assert fetched_partitions(roles) == {("t", 0)}
        roles.begin_shutdown(lambda _tp: (2,))
        assert fetched_partitions(roles) == set()
        await roles.close()

    asyncio.run(scenario())
