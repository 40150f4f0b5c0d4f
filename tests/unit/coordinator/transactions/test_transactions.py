"""AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, and the markers and Complete record after it."""

from __future__ import annotations

import pytest

from strom.coordinator import partition_for_group
from strom.coordinator.transactions import TopicPartition, TransactionCoordinatorConfig, TransactionState
from strom.coordinator.transactions.timers import markers_key
from strom.protocol.errors import ErrorCode
from tests.unit.coordinator.transactions.harness import Harness
from tests.unit.coordinator.transactions.test_init_producer_id import states_written

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


# ---------------------------------------------------------------- AddPartitionsToTxn
def test_adding_partitions_begins_the_transaction_and_later_adds_accumulate() -> None:
    harness = Harness()
    producer_id, epoch = harness.init_ok()
    begun_ms = harness.clock.wall_ms()
    assert harness.add("t", producer_id, epoch, A0).value == {A0: ErrorCode.NONE}
    snapshot = harness.snapshot()
    assert (snapshot.state, snapshot.partitions, snapshot.start_timestamp_ms) == (
        TransactionState.ONGOING,
        frozenset({A0}),
        begun_ms,
    )
    harness.advance(500)
    assert harness.add("t", producer_id, epoch, A1, B0).value == {A1: ErrorCode.NONE, B0: ErrorCode.NONE}
    snapshot = harness.snapshot()
    assert snapshot.partitions == {A0, A1, B0}
    assert snapshot.start_timestamp_ms == begun_ms
    assert snapshot.last_update_timestamp_ms == begun_ms + 500


def test_adding_partitions_already_in_the_transaction_writes_nothing() -> None:
    harness = Harness()
    producer_id, epoch = harness.begin("t", A0, A1)
    appends = harness.log.appends
    assert harness.add_error("t", producer_id, epoch, A1) == ErrorCode.NONE
    assert harness.log.appends == appends


def test_adding_no_partitions_answers_nothing_and_writes_nothing() -> None:
    harness = Harness()
    producer_id, epoch = harness.init_ok()
    box: list[dict[TopicPartition, ErrorCode]] = []
    harness.coordinator.add_partitions("t", producer_id, epoch, [], box.append)
    assert box == [{}]
    assert harness.snapshot().state is TransactionState.EMPTY


def test_add_partitions_errors() -> None:
    harness = Harness()
    producer_id, epoch = harness.init_ok()
    assert harness.add_error("unknown", producer_id, epoch) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert harness.add_error("t", producer_id + 1, epoch) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert harness.add_error("t", producer_id, epoch + 1) == ErrorCode.PRODUCER_FENCED
    assert harness.add_error("", producer_id, epoch) == ErrorCode.INVALID_REQUEST
    harness.init_ok()
    assert harness.add_error("t", producer_id, epoch) == ErrorCode.PRODUCER_FENCED


def test_add_partitions_while_a_write_is_in_flight_is_concurrent() -> None:
    harness = Harness()
    producer_id, epoch = harness.init_ok()
    harness.log.defer = True
    first = harness.add("t", producer_id, epoch, A0)
    assert harness.add_error("t", producer_id, epoch, A1) == ErrorCode.CONCURRENT_TRANSACTIONS
    harness.log.complete_deferred()
    assert first.value == {A0: ErrorCode.NONE}


def test_add_partitions_while_the_previous_transaction_completes_is_concurrent() -> None:
    harness = Harness()
    producer_id, epoch = harness.begin("t", A0)
    harness.markers.defer = True
    assert harness.end_error("t", producer_id, epoch) == ErrorCode.NONE
    assert harness.add_error("t", producer_id, epoch, A1) == ErrorCode.CONCURRENT_TRANSACTIONS
    harness.markers.answer_deferred()
    assert harness.add_error("t", producer_id, epoch, A1) == ErrorCode.NONE
    # The new transaction starts afresh: only its own partitions.
    assert harness.snapshot().partitions == {A1}


def test_add_partitions_write_failure_is_mapped_and_changes_nothing() -> None:
    harness = Harness()
    producer_id, epoch = harness.init_ok()
    harness.log.fail_with = ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert harness.add_error("t", producer_id, epoch, A0) == ErrorCode.NOT_COORDINATOR
    assert harness.snapshot().state is TransactionState.EMPTY


def test_add_offsets_adds_the_groups_offsets_partition() -> None:
    harness = Harness()
    producer_id, epoch = harness.init_ok()
    assert harness.add_offsets("t", producer_id, epoch, "my-group").value == ErrorCode.NONE
    expected = TopicPartition("__consumer_offsets", partition_for_group("my-group", 50))
    assert harness.snapshot().partitions == {expected}
    assert harness.add_offsets("t", producer_id, epoch + 1, "my-group").value == ErrorCode.PRODUCER_FENCED


# ---------------------------------------------------------------- EndTxn
@pytest.mark.parametrize("commit", [True, False])
def test_end_transaction_writes_prepare_answers_then_markers_then_complete(commit: bool) -> None:
    harness = Harness()
    producer_id, epoch = harness.begin("t", A0, B0)
    harness.markers.defer = True
    assert harness.end_error("t", producer_id, epoch, commit) == ErrorCode.NONE
    prepare = TransactionState.PREPARE_COMMIT if commit else TransactionState.PREPARE_ABORT
    assert harness.snapshot().state is prepare
    call = harness.markers.calls[-1].markers
    assert (call.producer_id, call.producer_epoch, call.coordinator_epoch, call.commit) == (
        producer_id,
        epoch,
        7,
        commit,
    )
    assert call.partitions == (A0, B0)
    assert call.transaction_log_partition == harness.partition_of("t")
    harness.markers.answer_deferred()
    snapshot = harness.snapshot()
    complete = TransactionState.COMPLETE_COMMIT if commit else TransactionState.COMPLETE_ABORT
    assert (snapshot.state, snapshot.partitions, snapshot.producer_epoch) == (complete, frozenset(), epoch)
    assert harness.metadata().delivery is None
    assert states_written(harness)[-3:] == ["Ongoing", prepare.value, complete.value]


def test_end_transaction_is_answered_only_once_prepare_is_durable() -> None:
    harness = Harness()
    producer_id, epoch = harness.begin("t", A0)
    harness.log.defer = True
    box = harness.end("t", producer_id, epoch)
    assert not box.answered and harness.markers.calls == []
    assert harness.end_error("t", producer_id, epoch) == ErrorCode.CONCURRENT_TRANSACTIONS
    harness.log.complete_deferred(1)
    assert box.value == ErrorCode.NONE
    assert len(harness.markers.calls) == 1


def test_end_transaction_whose_prepare_fails_stays_ongoing_and_writes_no_marker() -> None:
    harness = Harness()
    producer_id, epoch = harness.begin("t", A0)
    harness.log.fail_with = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    assert harness.end_error("t", producer_id, epoch) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert harness.snapshot().state is TransactionState.ONGOING
    assert harness.markers.calls == []
    harness.log.fail_with = ErrorCode.NONE
    assert harness.end_error("t", producer_id, epoch) == ErrorCode.NONE


# The answers to EndTxn outside an open transaction: Kafka's idempotent repeats and refusals.
END_REPEATS = [
    (TransactionState.COMPLETE_COMMIT, True, ErrorCode.NONE),
    (TransactionState.COMPLETE_COMMIT, False, ErrorCode.INVALID_TXN_STATE),
    (TransactionState.COMPLETE_ABORT, False, ErrorCode.NONE),
    (TransactionState.COMPLETE_ABORT, True, ErrorCode.INVALID_TXN_STATE),
    (TransactionState.PREPARE_COMMIT, True, ErrorCode.CONCURRENT_TRANSACTIONS),
    (TransactionState.PREPARE_COMMIT, False, ErrorCode.INVALID_TXN_STATE),
    (TransactionState.PREPARE_ABORT, False, ErrorCode.CONCURRENT_TRANSACTIONS),
    (TransactionState.PREPARE_ABORT, True, ErrorCode.INVALID_TXN_STATE),
    (TransactionState.EMPTY, True, ErrorCode.INVALID_TXN_STATE),
    (TransactionState.EMPTY, False, ErrorCode.INVALID_TXN_STATE),
]


@pytest.mark.parametrize(("state", "commit", "error"), END_REPEATS, ids=lambda value: str(value))
def test_end_transaction_repeats(state: TransactionState, commit: bool, error: ErrorCode) -> None:
    harness = Harness()
    producer_id, epoch = harness.init_ok()
    if state is not TransactionState.EMPTY:
        assert harness.add_error("t", producer_id, epoch, A0) == ErrorCode.NONE
        harness.markers.defer = state in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT)
        decided = state in (TransactionState.COMPLETE_COMMIT, TransactionState.PREPARE_COMMIT)
        assert harness.end_error("t", producer_id, epoch, decided) == ErrorCode.NONE
    assert harness.snapshot().state is state
    appends = harness.log.appends
    assert harness.end_error("t", producer_id, epoch, commit) == error
    assert harness.log.appends == appends
    assert harness.snapshot().state is state


def test_end_transaction_errors() -> None:
    harness = Harness()
    producer_id, epoch = harness.begin("t", A0)
    assert harness.end_error("unknown", producer_id, epoch) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert harness.end_error("t", producer_id + 1, epoch) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert harness.end_error("t", producer_id, epoch - 1) == ErrorCode.PRODUCER_FENCED
    assert harness.end_error("t", producer_id, epoch + 1) == ErrorCode.PRODUCER_FENCED
    assert harness.end_error("", producer_id, epoch) == ErrorCode.INVALID_REQUEST
    assert harness.snapshot().state is TransactionState.ONGOING


# ---------------------------------------------------------------- markers
def test_a_marker_refused_with_a_retriable_error_is_written_again_after_the_backoff() -> None:
    harness = Harness()
    producer_id, epoch = harness.begin("t", A0, B0)
    harness.markers.script[B0] = [ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.REQUEST_TIMED_OUT]
    assert harness.end_error("t", producer_id, epoch) == ErrorCode.NONE
    metadata = harness.metadata()
    assert metadata.known.state is TransactionState.PREPARE_COMMIT
    assert metadata.delivery is not None and metadata.delivery.remaining == {B0}
    assert harness.timer.due_in_ms(markers_key("t")) == 100
    harness.advance(99)
    assert len(harness.markers.calls) == 1
    harness.advance(1)
    assert harness.markers.calls[-1].markers.partitions == (B0,)
    harness.advance(100)
    assert harness.snapshot().state is TransactionState.COMPLETE_COMMIT
    assert [call.markers.partitions for call in harness.markers.calls] == [(A0, B0), (B0,), (B0,)]


def test_a_round_waits_for_every_answer_before_retrying() -> None:
    harness = Harness()
    producer_id, epoch = harness.begin("t", A0, B0)
    harness.markers.defer = True
    harness.markers.script[A0] = [ErrorCode.NETWORK_EXCEPTION]
    harness.end_error("t", producer_id, epoch)
    harness.markers.answer_deferred(1)  # A0 fails
    assert harness.timer.due_in_ms(markers_key("t")) is None
    harness.markers.answer_deferred(1)  # B0 written
    assert harness.timer.due_in_ms(markers_key("t")) == 100
    harness.advance(100)
    harness.markers.answer_deferred()
    assert harness.snapshot().state is TransactionState.COMPLETE_COMMIT


def test_a_partition_whose_topic_is_gone_is_dropped() -> None:
    harness = Harness()
    producer_id, epoch = harness.begin("t", A0, B0)
    harness.markers.script[B0] = [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    harness.end_error("t", producer_id, epoch)
    assert harness.snapshot().state is TransactionState.COMPLETE_COMMIT
    assert [written[-1] for written in harness.markers.written] == [A0]
    assert len(harness.markers.calls) == 1


@pytest.mark.parametrize(
    "error",
    [ErrorCode.TRANSACTION_COORDINATOR_FENCED, ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH],
)
def test_a_marker_refused_as_stale_stops_the_delivery(error: ErrorCode) -> None:
    harness = Harness()
    producer_id, epoch = harness.begin("t", A0, B0)
    harness.markers.script[B0] = [error]
    harness.end_error("t", producer_id, epoch)
    assert harness.snapshot().state is TransactionState.PREPARE_COMMIT
    assert harness.timer.due_in_ms(markers_key("t")) is None
    harness.advance(10_000)
    assert len(harness.markers.calls) == 1
    assert harness.snapshot().state is TransactionState.PREPARE_COMMIT


def test_an_empty_round_of_markers_completes_at_once() -> None:
    harness = Harness()
    producer_id, epoch = harness.begin("t", A0)
    harness.markers.script[A0] = [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    harness.end_error("t", producer_id, epoch, commit=False)
    assert harness.snapshot().state is TransactionState.COMPLETE_ABORT


def test_duplicate_or_unasked_marker_answers_are_ignored() -> None:
    harness = Harness()
    producer_id, epoch = harness.begin("t", A0, B0)
    harness.markers.defer = True
    harness.end_error("t", producer_id, epoch)
    call = harness.markers.calls[-1]
    call.on_written(A0, ErrorCode.NONE)
    call.on_written(A0, ErrorCode.NETWORK_EXCEPTION)
    call.on_written(TopicPartition("elsewhere", 9), ErrorCode.NONE)
    metadata = harness.metadata()
    assert metadata.delivery is not None and metadata.delivery.remaining == {B0}
    call.on_written(B0, ErrorCode.NONE)
    assert harness.snapshot().state is TransactionState.COMPLETE_COMMIT


def test_a_complete_record_that_fails_is_written_again() -> None:
    harness = Harness()
    producer_id, epoch = harness.begin("t", A0)
    harness.markers.defer = True
    harness.end_error("t", producer_id, epoch)
    harness.log.fail_with = ErrorCode.NOT_ENOUGH_REPLICAS
    harness.markers.answer_deferred()
    assert harness.snapshot().state is TransactionState.PREPARE_COMMIT
    # Meanwhile the transaction is still completing for its producer.
    assert harness.end_error("t", producer_id, epoch) == ErrorCode.CONCURRENT_TRANSACTIONS
    harness.advance(100)
    assert harness.snapshot().state is TransactionState.PREPARE_COMMIT
    harness.log.fail_with = ErrorCode.NONE
    harness.advance(100)
    assert harness.snapshot().state is TransactionState.COMPLETE_COMMIT
    assert harness.end_error("t", producer_id, epoch) == ErrorCode.NONE


def test_the_backoff_is_configurable() -> None:
    config = TransactionCoordinatorConfig(
        transaction_state_log_num_partitions=4, transaction_marker_retry_backoff_ms=5
    )
    harness = Harness(config)
    producer_id, epoch = harness.begin("t", A0)
    harness.markers.script[A0] = [ErrorCode.NOT_ENOUGH_REPLICAS]
    harness.end_error("t", producer_id, epoch)
    assert harness.timer.due_in_ms(markers_key("t")) == 5


def test_transactions_follow_one_another_on_one_producer_epoch() -> None:
    harness = Harness()
    producer_id, epoch = harness.init_ok()
    for commit in (True, False, True):
        assert harness.add_error("t", producer_id, epoch, A0) == ErrorCode.NONE
        assert harness.end_error("t", producer_id, epoch, commit) == ErrorCode.NONE
    assert [written[4] for written in harness.markers.written] == [True, False, True]
    assert states_written(harness) == [
        "Empty",
        *["Ongoing", "PrepareCommit", "CompleteCommit"],
        *["Ongoing", "PrepareAbort", "CompleteAbort"],
        *["Ongoing", "PrepareCommit", "CompleteCommit"],
    ]
