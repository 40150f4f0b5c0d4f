"""Time: transactions past their timeout are aborted and their producer fenced; idle
transactional ids expire; both jobs run on their own timers."""

from __future__ import annotations

from strom.coordinator.transactions import TopicPartition, TransactionCoordinatorConfig, TransactionState
from strom.coordinator.transactions.timers import abort_timed_out_key, expire_transactional_ids_key
from strom.protocol.errors import ErrorCode
from tests.unit.coordinator.transactions.harness import Harness
from tests.unit.coordinator.transactions.test_init_producer_id import states_written

A0 = TopicPartition("a", 0)

EXPIRING = TransactionCoordinatorConfig(
    transaction_state_log_num_partitions=4,
    transactional_id_expiration_ms=60_000,
    transaction_remove_expired_transaction_cleanup_interval_ms=10_000,
)


def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced() -> None:
    harness = Harness()
    producer_id, epoch = harness.begin("t", A0, timeout_ms=15_000)
    # Checked every 10 s: at 10 s it has 5 s left; at 20 s it is 5 s over.
    harness.advance(10_000)
    assert harness.snapshot().state is TransactionState.ONGOING
    harness.advance(10_000)
    snapshot = harness.snapshot()
    assert (snapshot.state, snapshot.producer_epoch) == (TransactionState.COMPLETE_ABORT, epoch + 1)
    assert harness.markers.written == [("t", producer_id, epoch + 1, 7, False, A0)]
    assert states_written(harness)[-2:] == ["PrepareAbort", "CompleteAbort"]
    # The zombie is fenced wherever it turns; a new instance gets the next epoch.
    assert harness.add_error("t", producer_id, epoch, A0) == ErrorCode.PRODUCER_FENCED
    assert harness.end_error("t", producer_id, epoch) == ErrorCode.PRODUCER_FENCED
    assert harness.init_ok() == (producer_id, epoch + 2)


def test_the_timeout_counts_from_the_first_partition_added_not_the_last() -> None:
    harness = Harness()
    producer_id, epoch = harness.begin("t", A0, timeout_ms=15_000)
    harness.advance(9_000)
    assert harness.add_error("t", producer_id, epoch, ("b", 0)) == ErrorCode.NONE
    harness.advance(11_000)
    assert harness.snapshot().state is TransactionState.COMPLETE_ABORT


def test_a_transaction_exactly_at_its_timeout_is_left_alone() -> None:
    harness = Harness()
    harness.begin("t", A0, timeout_ms=10_000)
    harness.advance(10_000)
    assert harness.snapshot().state is TransactionState.ONGOING
    harness.advance(1)
    harness.coordinator.abort_timed_out_transactions()
    assert harness.snapshot().state is TransactionState.COMPLETE_ABORT


def test_only_open_transactions_time_out() -> None:
    harness = Harness()
    _, epoch = harness.init_ok("empty", timeout_ms=1_000)
    committed = harness.begin("committed", A0, timeout_ms=1_000)
    harness.end_error("committed", *committed)
    harness.advance(60_000)
    assert harness.snapshot("empty").state is TransactionState.EMPTY
    assert harness.snapshot("committed").state is TransactionState.COMPLETE_COMMIT
    assert harness.snapshot("empty").producer_epoch == epoch


def test_a_transaction_with_a_write_in_flight_is_aborted_on_a_later_run() -> None:
    harness = Harness()
    producer_id, epoch = harness.begin("t", A0, timeout_ms=1_000)
    harness.log.defer = True
    box = harness.add("t", producer_id, epoch, ("b", 0))
    harness.advance(10_000)
    assert harness.snapshot().state is TransactionState.ONGOING
    harness.log.complete_deferred()
    harness.log.defer = False
    assert box.value == {TopicPartition("b", 0): ErrorCode.NONE}
    harness.advance(10_000)
    assert harness.snapshot().state is TransactionState.COMPLETE_ABORT


def test_a_timeout_abort_that_cannot_be_written_is_tried_again_next_run() -> None:
    harness = Harness()
    harness.begin("t", A0, timeout_ms=1_000)
    harness.log.fail_with = ErrorCode.NOT_ENOUGH_REPLICAS
    harness.advance(10_000)
    assert harness.snapshot().state is TransactionState.ONGOING
    harness.log.fail_with = ErrorCode.NONE
    harness.advance(10_000)
    assert harness.snapshot().state is TransactionState.COMPLETE_ABORT


def test_a_loaded_transaction_past_its_timeout_is_aborted() -> None:
    harness = Harness()
    harness.begin("t", A0, timeout_ms=5_000)
    harness.clock.advance(60_000)  # the coordinator was away
    reloaded = harness.reloaded()
    reloaded.coordinator.abort_timed_out_transactions()
    assert reloaded.snapshot().state is TransactionState.COMPLETE_ABORT
    assert reloaded.markers.written[-1][3] == 8  # the new coordinator epoch


def test_idle_transactional_ids_expire_with_a_tombstone() -> None:
    harness = Harness(EXPIRING)
    harness.init_ok("idle")
    committed = harness.begin("committed", A0)
    harness.end_error("committed", *committed)
    aborted = harness.begin("aborted", A0)
    harness.end_error("aborted", *aborted, commit=False)
    harness.advance(50_000)
    assert set(harness.coordinator.transactions()) == {"idle", "committed", "aborted"}
    # Idle for the whole expiration (60 s) at the run at 60 s: expired, as in Kafka.
    harness.advance(10_000)
    assert harness.coordinator.transactions() == {}
    for transactional_id in ("idle", "committed", "aborted"):
        assert states_written(harness, transactional_id)[-1] == "tombstone"
    # An expired id starts afresh, with a new producer id.
    assert harness.init_ok("idle") == (1003, 0)


def test_an_open_transaction_never_expires_and_activity_postpones_expiry() -> None:
    config = TransactionCoordinatorConfig(
        transaction_state_log_num_partitions=4,
        transactional_id_expiration_ms=60_000,
        transaction_max_timeout_ms=10_000_000,
        transaction_remove_expired_transaction_cleanup_interval_ms=10_000,
    )
    harness = Harness(config)
    harness.begin("open", A0, timeout_ms=10_000_000)
    harness.init_ok("active")
    harness.advance(50_000)
    harness.init_ok("active")
    harness.advance(50_000)
    assert harness.snapshot("open").state is TransactionState.ONGOING
    assert harness.snapshot("active").producer_epoch == 1
    harness.advance(20_000)
    assert harness.coordinator.transaction("active") is None
    assert harness.coordinator.transaction("open") is not None


def test_an_id_completing_its_transaction_does_not_expire() -> None:
    harness = Harness(EXPIRING)
    producer_id, epoch = harness.begin("t", A0)
    harness.markers.script[A0] = [ErrorCode.NOT_LEADER_OR_FOLLOWER] * 10_000
    harness.end_error("t", producer_id, epoch)
    harness.advance(200_000)
    assert harness.snapshot().state is TransactionState.PREPARE_COMMIT


def test_an_expiry_that_cannot_be_written_keeps_the_id_until_the_next_run() -> None:
    harness = Harness(EXPIRING)
    harness.init_ok()
    harness.log.fail_with = ErrorCode.NOT_ENOUGH_REPLICAS
    harness.advance(70_000)
    assert harness.coordinator.transaction("t") is not None
    harness.log.fail_with = ErrorCode.NONE
    harness.advance(10_000)
    assert harness.coordinator.transaction("t") is None


def test_requests_during_the_expiry_write_are_concurrent() -> None:
    harness = Harness(EXPIRING)
    producer_id, epoch = harness.init_ok()
    harness.clock.advance(60_000)
    harness.log.defer = True
    harness.coordinator.expire_transactional_ids()
    assert harness.init().value.error == ErrorCode.CONCURRENT_TRANSACTIONS
    assert harness.add_error("t", producer_id, epoch, A0) == ErrorCode.CONCURRENT_TRANSACTIONS
    harness.log.complete_deferred()
    assert harness.coordinator.transaction("t") is None
    assert harness.add_error("t", producer_id, epoch, A0) == ErrorCode.INVALID_PRODUCER_ID_MAPPING


def test_tick_runs_both_jobs_now() -> None:
    harness = Harness(EXPIRING)
    harness.init_ok("idle")
    harness.begin("open", A0, timeout_ms=1_000)
    harness.clock.advance(60_000)
    harness.coordinator.tick()
    assert harness.coordinator.transaction("idle") is None
    assert harness.snapshot("open").state is TransactionState.COMPLETE_ABORT


def test_the_jobs_run_at_their_intervals_and_stop_at_shutdown() -> None:
    harness = Harness()
    assert harness.timer.due_in_ms(abort_timed_out_key()) == 10_000
    assert harness.timer.due_in_ms(expire_transactional_ids_key()) == 3_600_000
    harness.advance(10_000)
    assert harness.timer.due_in_ms(abort_timed_out_key()) == 10_000
    assert all(key.startswith("txn/") for key in harness.timer.pending_keys())
    harness.coordinator.shutdown()
    assert harness.timer.pending_keys() == []
