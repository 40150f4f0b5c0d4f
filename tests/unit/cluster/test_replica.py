"""A partition's replica state: HW, ISR shrink and expansion, acks=all, truncation points."""

from __future__ import annotations

import pytest

from strom.base.clock import ManualClock
from strom.cluster.model import TopicPartition
from strom.cluster.replica import (
    FollowerPhase,
    PartitionFollower,
    PartitionLeader,
    fence_leader_epoch,
    truncation_offset,
)
from strom.protocol.errors import ErrorCode
from strom.storage.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_OFFSET, LeaderEpochCache

TP = TopicPartition("t", 0)
LAG_MS = 10_000


def leader(
    *,
    isr: tuple[int, ...] = (1, 2, 3),
    log_end_offset: int = 0,
    high_watermark: int = 0,
    min_insync_replicas: int = 1,
    clock: ManualClock | None = None,
) -> PartitionLeader:
    return PartitionLeader(
        TP,
        1,
        leader_epoch=5,
        partition_epoch=3,
        replicas=(1, 2, 3),
        isr=isr,
        log_end_offset=log_end_offset,
        high_watermark=high_watermark,
        min_insync_replicas=min_insync_replicas,
        replica_lag_time_max_ms=LAG_MS,
        now_ms=(clock or ManualClock()).monotonic_ms(),
    )


def test_high_watermark_is_the_lowest_log_end_offset_in_the_isr() -> None:
    state = leader()
    state.on_append(10)
    assert state.high_watermark == 0, "followers' progress is unknown"
    state.on_follower_fetch(2, 10, 0)
    assert state.high_watermark == 0
    state.on_follower_fetch(3, 4, 0)
    assert state.high_watermark == 4
    ready = state.ready()
    assert ready.high_watermark_moved and ready.alter_isr is None
    state.on_follower_fetch(3, 10, 0)
    assert state.high_watermark == 10
    state.on_follower_fetch(3, 9, 0)
    assert state.high_watermark == 10, "the HW never moves back"


def test_a_leader_alone_in_the_isr_moves_the_hw_with_its_appends() -> None:
    state = leader(isr=(1,))
    state.on_append(3)
    assert state.high_watermark == 3


def test_acks_all_completes_when_the_hw_passes_the_batch() -> None:
    state = leader()
    state.on_append(5)
    assert state.wait_for_replication("first", 5, deadline_ms=30_000) is None
    state.on_append(8)
    assert state.wait_for_replication("second", 8, deadline_ms=30_000) is None
    assert state.waiting == 2
    state.on_follower_fetch(2, 8, 0)
    state.on_follower_fetch(3, 6, 0)
    assert state.ready().completed == [("first", ErrorCode.NONE)]
    state.on_follower_fetch(3, 8, 0)
    assert state.ready().completed == [("second", ErrorCode.NONE)]
    assert state.wait_for_replication("already", 7, deadline_ms=1) is ErrorCode.NONE


def test_not_enough_replicas_before_and_after_the_append() -> None:
    state = leader(isr=(1, 2), min_insync_replicas=3)
    assert state.check_acks_all() is ErrorCode.NOT_ENOUGH_REPLICAS
    state = leader(min_insync_replicas=3)
    assert state.check_acks_all() is ErrorCode.NONE
    state.on_append(4)
    assert state.wait_for_replication("w", 4, deadline_ms=30_000) is None
    # The ISR shrinks (confirmed by the controller) before the HW passes the batch.
    state.on_partition_state(leader_epoch=5, partition_epoch=4, isr=(1, 2), replicas=(1, 2, 3))
    state.on_follower_fetch(2, 4, 0)
    assert state.ready().completed == [("w", ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)]


def test_isr_shrink_during_acks_all_waits_for_the_controller() -> None:
    """While a shrink is only proposed, the HW still counts the follower leaving: nothing is
    acknowledged that the old ISR (from which the controller may still elect) does not have."""
    clock = ManualClock()
    state = leader(clock=clock, min_insync_replicas=2)
    state.on_append(5)
    state.on_follower_fetch(2, 5, clock.monotonic_ms())
    state.on_follower_fetch(3, 0, clock.monotonic_ms())
    assert state.wait_for_replication("w", 5, deadline_ms=60_000) is None
    clock.advance(LAG_MS // 2)
    state.on_follower_fetch(2, 5, clock.monotonic_ms())
    clock.advance(LAG_MS // 2 + 1)
    state.tick(clock.monotonic_ms())
    ready = state.ready()
    assert ready.alter_isr is not None and ready.alter_isr.new_isr == (1, 2)
    assert (ready.alter_isr.leader_epoch, ready.alter_isr.partition_epoch) == (5, 3)
    assert ready.completed == [] and state.high_watermark == 0, "3 still counts while the shrink is pending"
    assert state.ready().alter_isr is None, "sent once"
    state.on_alter_isr_response(ErrorCode.NONE, leader_epoch=5, isr=(1, 2), partition_epoch=4)
    assert state.isr == (1, 2) and state.pending_isr is None
    assert state.high_watermark == 5
    assert state.ready().completed == [("w", ErrorCode.NONE)]


def test_a_follower_that_keeps_catching_up_stays_in_the_isr() -> None:
    clock = ManualClock()
    state = leader(clock=clock)
    for step in range(10):
        state.on_append(10 * (step + 1))
        for follower in (2, 3):
            # Each fetch is at the LEO the leader had at the follower's previous fetch.
            state.on_follower_fetch(follower, 10 * step, clock.monotonic_ms())
        clock.advance(LAG_MS // 3)
        state.tick(clock.monotonic_ms())
    assert state.ready().alter_isr is None


def test_a_follower_that_stops_fetching_leaves_the_isr() -> None:
    clock = ManualClock()
    state = leader(clock=clock)
    clock.advance(LAG_MS)
    state.tick(clock.monotonic_ms())
    assert state.ready().alter_isr is None, "exactly the lag is still in sync"
    state.on_follower_fetch(2, 0, clock.monotonic_ms())
    clock.advance(1)
    state.tick(clock.monotonic_ms())
    proposal = state.ready().alter_isr
    assert proposal is not None and proposal.new_isr == (1, 2)


def test_a_follower_rejoins_once_it_reaches_the_hw_and_the_epoch_start() -> None:
    state = leader(isr=(1, 2), log_end_offset=20, high_watermark=15)
    assert state.epoch_start_offset == 20
    state.on_follower_fetch(2, 20, 0)
    assert state.high_watermark == 20
    state.on_follower_fetch(3, 12, 0)
    assert state.ready().alter_isr is None, "3 is behind the HW"
    state.on_append(30)
    state.on_follower_fetch(3, 19, 0)
    assert state.ready().alter_isr is None, "3 is behind the epoch start"
    state.on_follower_fetch(3, 20, 0)
    proposal = state.ready().alter_isr
    assert proposal is not None and proposal.new_isr == (1, 2, 3), "at the HW and the epoch start"
    assert state.maximal_isr == (1, 2, 3)


def test_expansion_counts_the_joining_follower_for_the_hw_at_once() -> None:
    state = leader(isr=(1, 2), log_end_offset=10, high_watermark=10)
    state.on_follower_fetch(2, 10, 0)
    state.on_follower_fetch(3, 10, 0)
    assert state.pending_isr == (1, 2, 3)
    state.on_append(12)
    state.on_follower_fetch(2, 12, 0)
    assert state.high_watermark == 10, "3 is counted while its joining is pending"
    state.on_follower_fetch(3, 12, 0)
    assert state.high_watermark == 12


@pytest.mark.parametrize(
    ("error", "resent", "dropped"),
    [
        (ErrorCode.INVALID_UPDATE_VERSION, False, True),
        (ErrorCode.FENCED_LEADER_EPOCH, False, True),
        (ErrorCode.NOT_CONTROLLER, True, False),
        (ErrorCode.REQUEST_TIMED_OUT, True, False),
    ],
)
def test_alter_isr_errors(error: ErrorCode, resent: bool, dropped: bool) -> None:
    clock = ManualClock()
    state = leader(clock=clock)
    clock.advance(LAG_MS + 1)
    state.on_follower_fetch(2, 0, clock.monotonic_ms())
    state.tick(clock.monotonic_ms())
    assert state.ready().alter_isr is not None
    state.on_alter_isr_response(error)
    assert (state.ready().alter_isr is not None) == resent
    assert (state.pending_isr is None) == dropped


def test_leader_and_isr_of_the_same_epoch_replaces_the_isr_and_drops_a_stale_proposal() -> None:
    clock = ManualClock()
    state = leader(clock=clock)
    clock.advance(LAG_MS + 1)
    state.tick(clock.monotonic_ms())
    assert state.pending_isr == (1,)
    assert not state.on_partition_state(leader_epoch=5, partition_epoch=3, isr=(1, 2), replicas=(1, 2, 3))
    assert state.on_partition_state(leader_epoch=5, partition_epoch=4, isr=(1, 2), replicas=(1, 2, 3))
    assert state.isr == (1, 2) and state.pending_isr is None


def test_timeouts_and_resignation_answer_parked_requests() -> None:
    state = leader()
    state.on_append(3)
    state.wait_for_replication("soon", 3, deadline_ms=100)
    state.wait_for_replication("later", 3, deadline_ms=500)
    state.wait_for_replication("gone", 3, deadline_ms=500)
    state.cancel("gone")
    state.tick(100)
    assert state.ready().completed == [("soon", ErrorCode.REQUEST_TIMED_OUT)]
    assert state.resign() == [("later", ErrorCode.NOT_LEADER_OR_FOLLOWER)]
    assert state.waiting == 0


def test_follower_fetch_refusals() -> None:
    state = leader(log_end_offset=5)
    assert state.on_follower_fetch(9, 0, 0) is ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert state.on_follower_fetch(2, 6, 0) is ErrorCode.OFFSET_OUT_OF_RANGE
    assert state.follower(2).log_end_offset == -1, "a refused fetch does not count as progress"


@pytest.mark.parametrize(
    ("requested", "current", "expected"),
    [
        (-1, 5, ErrorCode.NONE),
        (5, 5, ErrorCode.NONE),
        (4, 5, ErrorCode.FENCED_LEADER_EPOCH),
        (6, 5, ErrorCode.UNKNOWN_LEADER_EPOCH),
    ],
)
def test_fence_leader_epoch(requested: int, current: int, expected: ErrorCode) -> None:
    assert fence_leader_epoch(requested, current) is expected


# ---- follower -----------------------------------------------------------------------------------------


def test_truncation_keeps_what_both_logs_agree_on() -> None:
    # The old leader wrote 90..99 in epoch 0 that the new leader (epoch 6 from 90) never had,
    # then led epoch 5 from 100.
    follower_cache = LeaderEpochCache([(0, 0), (5, 100)])
    leader_cache = LeaderEpochCache([(0, 0), (6, 90)])
    answer = leader_cache.end_offset_for(follower_cache.latest_epoch, log_end_offset=150)
    assert answer == (0, 90)
    assert truncation_offset(*answer, follower_cache, local_log_end_offset=120, local_high_watermark=80) == 90


def test_truncation_when_the_follower_is_simply_behind_or_ahead() -> None:
    cache = LeaderEpochCache([(0, 0), (3, 40)])
    assert truncation_offset(3, 100, cache, local_log_end_offset=60, local_high_watermark=10) == 60, (
        "behind: keep all"
    )
    assert truncation_offset(3, 50, cache, local_log_end_offset=60, local_high_watermark=10) == 50, (
        "a divergent tail"
    )
    assert truncation_offset(2, 45, LeaderEpochCache([(0, 0), (2, 30), (3, 40)]), 60, 0) == 40


def test_truncation_without_an_answer_falls_back_to_the_hw() -> None:
    cache = LeaderEpochCache([(4, 0)])
    assert truncation_offset(UNDEFINED_EPOCH, UNDEFINED_OFFSET, cache, 60, 25) == 25
    # An epoch older than all of ours: the leader's end of it is where our first epoch starts.
    assert truncation_offset(1, 10, LeaderEpochCache([(4, 10)]), 60, 25) == 10
    assert truncation_offset(1, 8, LeaderEpochCache([(4, 10)]), 60, 25) == 8


def test_follower_phases() -> None:
    follower = PartitionFollower(TP, leader_id=2, leader_epoch=6, high_watermark=80)
    cache = LeaderEpochCache([(0, 0), (5, 100)])
    assert follower.epoch_question(cache) == 5
    assert follower.epoch_question(LeaderEpochCache()) is None
    assert follower.on_epoch_answer(ErrorCode.UNKNOWN_LEADER_EPOCH, -1, -1, cache, 120) is None
    assert follower.phase is FollowerPhase.TRUNCATING
    assert follower.on_epoch_answer(ErrorCode.NONE, 0, 90, cache, 120) == 90
    assert follower.phase is FollowerPhase.FETCHING
    assert follower.on_fetch_response(leader_high_watermark=130, local_log_end_offset=110) == 110
    assert follower.on_fetch_response(leader_high_watermark=100, local_log_end_offset=130) == 110, (
        "never back"
    )
    fresh = PartitionFollower(TP, leader_id=2, leader_epoch=6, high_watermark=0)
    assert fresh.skip_truncation(local_log_end_offset=0) == 0
