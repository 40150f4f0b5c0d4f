"""InitProducerId's decision, rule by rule (KIP-98 fencing, KIP-360 recovery, epoch exhaustion)."""

from __future__ import annotations

import dataclasses

import pytest

from strom.coordinator.transactions import TopicPartition, TransactionSnapshot, TransactionState
from strom.coordinator.transactions.metadata import PRODUCER_EPOCH_EXHAUSTED, epoch_exhausted
from strom.coordinator.transactions.producer_ids import (
    FenceOngoing,
    NeedProducerId,
    ProducerIdAndEpoch,
    Refuse,
    Transit,
    decide_init,
    fresh_snapshot,
    may_claim,
)
from strom.protocol.errors import ErrorCode

NOW_MS = 50_000


def current(**changes: object) -> TransactionSnapshot:
    base = TransactionSnapshot(
        producer_id=100,
        producer_epoch=5,
        last_producer_id=-1,
        last_producer_epoch=-1,
        timeout_ms=10_000,
        state=TransactionState.COMPLETE_COMMIT,
        partitions=frozenset(),
        start_timestamp_ms=1_000,
        last_update_timestamp_ms=2_000,
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def transit(
    snapshot: TransactionSnapshot,
    expected: ProducerIdAndEpoch | None = None,
    new_producer_id: int | None = None,
) -> TransactionSnapshot:
    decision = decide_init("t", snapshot, expected, 30_000, NOW_MS, new_producer_id)
    assert isinstance(decision, Transit), decision
    target = decision.target
    # Every Transit lands in Empty with the new timeout, no partitions, no start.
    assert target.state is TransactionState.EMPTY
    assert (target.timeout_ms, target.partitions, target.start_timestamp_ms) == (30_000, frozenset(), -1)
    assert target.last_update_timestamp_ms == NOW_MS
    return target


@pytest.mark.parametrize(
    "state", [TransactionState.EMPTY, TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT]
)
def test_without_an_epoch_the_epoch_is_bumped_and_no_last_epoch_is_kept(state: TransactionState) -> None:
    target = transit(current(state=state))
    assert (target.producer_id, target.producer_epoch, target.last_producer_epoch) == (100, 6, -1)


def test_a_new_id_starts_at_epoch_0() -> None:
    target = transit(fresh_snapshot(200, 30_000, NOW_MS))
    assert (target.producer_id, target.producer_epoch) == (200, 0)


def test_kip360_the_holder_of_the_current_epoch_gets_a_bump_and_its_retry_the_same_answer() -> None:
    target = transit(current(), ProducerIdAndEpoch(100, 5))
    assert (target.producer_id, target.producer_epoch, target.last_producer_epoch) == (100, 6, 5)
    # The answer was lost and the producer asks again with what it had: the same epoch back.
    again = transit(target, ProducerIdAndEpoch(100, 5))
    assert (again.producer_id, again.producer_epoch, again.last_producer_epoch) == (100, 6, 5)


def test_kip360_an_older_epoch_is_fenced() -> None:
    decision = decide_init("t", current(), ProducerIdAndEpoch(100, 4), 30_000, NOW_MS, None)
    assert decision == Refuse(ErrorCode.PRODUCER_FENCED)


def test_kip360_after_a_plain_bump_the_epoch_before_it_is_fenced() -> None:
    # A new instance bumped 5 -> 6 without KIP-360: the old instance (epoch 5) may not claim 6.
    bumped = transit(current())
    decision = decide_init("t", bumped, ProducerIdAndEpoch(100, 5), 30_000, NOW_MS, None)
    assert decision == Refuse(ErrorCode.PRODUCER_FENCED)


def test_kip360_another_producer_id_is_fenced() -> None:
    decision = decide_init("t", current(), ProducerIdAndEpoch(99, 5), 30_000, NOW_MS, None)
    assert decision == Refuse(ErrorCode.PRODUCER_FENCED)


def test_kip360_a_producer_whose_id_was_lost_takes_the_new_one() -> None:
    # INVALID_PRODUCER_ID_MAPPING (its id expired): it presents its old id; the new id is its.
    target = transit(fresh_snapshot(200, 30_000, NOW_MS), ProducerIdAndEpoch(77, 3))
    assert (target.producer_id, target.producer_epoch) == (200, 0)


def test_an_exhausted_epoch_needs_a_new_producer_id_then_rotates() -> None:
    exhausted = current(producer_epoch=PRODUCER_EPOCH_EXHAUSTED)
    assert decide_init("t", exhausted, None, 30_000, NOW_MS, None) == NeedProducerId()
    target = transit(exhausted, None, new_producer_id=300)
    assert (target.producer_id, target.producer_epoch) == (300, 0)
    assert (target.last_producer_id, target.last_producer_epoch) == (100, -1)


def test_kip360_rotation_remembers_the_old_epoch_and_a_retry_gets_the_same_answer() -> None:
    exhausted = current(producer_epoch=PRODUCER_EPOCH_EXHAUSTED)
    holder = ProducerIdAndEpoch(100, PRODUCER_EPOCH_EXHAUSTED)
    target = transit(exhausted, holder, new_producer_id=300)
    assert (target.producer_id, target.producer_epoch) == (300, 0)
    assert (target.last_producer_id, target.last_producer_epoch) == (100, PRODUCER_EPOCH_EXHAUSTED)
    again = transit(target, holder)
    assert (again.producer_id, again.producer_epoch) == (300, 0)
    # Only the exact (id, epoch) rotated from: the new id at that epoch is nobody's.
    assert decide_init(
        "t", target, ProducerIdAndEpoch(300, PRODUCER_EPOCH_EXHAUSTED), 30_000, NOW_MS, None
    ) == (Refuse(ErrorCode.PRODUCER_FENCED))


def test_exhaustion_threshold_leaves_one_bump_for_the_coordinator() -> None:
    assert not epoch_exhausted(PRODUCER_EPOCH_EXHAUSTED - 1)
    assert epoch_exhausted(PRODUCER_EPOCH_EXHAUSTED)
    # The last bump a client gets lands on the threshold; the coordinator's fence then fits int16.
    target = transit(current(producer_epoch=PRODUCER_EPOCH_EXHAUSTED - 1))
    assert target.producer_epoch == PRODUCER_EPOCH_EXHAUSTED < 2**15 - 1


def test_an_open_transaction_is_fenced_and_completing_ones_are_concurrent() -> None:
    ongoing = current(state=TransactionState.ONGOING, partitions=frozenset({TopicPartition("a", 0)}))
    assert decide_init("t", ongoing, None, 30_000, NOW_MS, None) == FenceOngoing()
    for state in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT):
        decision = decide_init("t", current(state=state), None, 30_000, NOW_MS, None)
        assert decision == Refuse(ErrorCode.CONCURRENT_TRANSACTIONS)


def test_may_claim() -> None:
    snapshot = current(last_producer_id=90)
    assert may_claim(snapshot, ProducerIdAndEpoch(100, 0))
    assert not may_claim(snapshot, ProducerIdAndEpoch(91, 0))
    assert may_claim(snapshot, ProducerIdAndEpoch(90, PRODUCER_EPOCH_EXHAUSTED))
    assert not may_claim(snapshot, ProducerIdAndEpoch(90, 3))
    assert may_claim(fresh_snapshot(1, 1, 1), ProducerIdAndEpoch(12345, 9))
