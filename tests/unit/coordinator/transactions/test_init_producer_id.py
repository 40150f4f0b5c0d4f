"""InitProducerId through the coordinator: new ids, bumps, fencing, rotation, KIP-360, failures."""

from __future__ import annotations

import pytest

from strom.coordinator.transactions import (
    InitProducerIdResult,
    TopicPartition,
    TransactionCoordinatorConfig,
    TransactionState,
)
from strom.coordinator.transactions.metadata import PRODUCER_EPOCH_EXHAUSTED
from strom.coordinator.transactions.records import decode_key, decode_value, record
from strom.protocol.errors import ErrorCode
from tests.unit.coordinator.transactions.harness import Harness


def states_written(harness: Harness, transactional_id: str = "t") -> list[str]:
    written = []
    for key, value in harness.log.records(harness.partition_of(transactional_id)):
        if decode_key(key) == transactional_id:
            written.append("tombstone" if value is None else decode_value(value).state.value)
    return written


def test_a_new_transactional_id_gets_a_new_producer_id_at_epoch_0() -> None:
    harness = Harness()
    assert harness.init().value == InitProducerIdResult(ErrorCode.NONE, 1000, 0)
    snapshot = harness.snapshot()
    assert snapshot.state is TransactionState.EMPTY
    assert (snapshot.producer_id, snapshot.producer_epoch, snapshot.timeout_ms) == (1000, 0, 60_000)
    assert states_written(harness) == ["Empty"]


def test_init_again_bumps_the_epoch_and_keeps_the_producer_id() -> None:
    harness = Harness()
    harness.init_ok()
    assert harness.init(timeout_ms=5_000).value == InitProducerIdResult(ErrorCode.NONE, 1000, 1)
    assert harness.snapshot().timeout_ms == 5_000
    assert harness.allocator.allocated == 1


def test_without_a_transactional_id_an_idempotent_producer_gets_an_id_and_nothing_is_written() -> None:
    harness = Harness(partitions=())
    assert harness.init(None).value == InitProducerIdResult(ErrorCode.NONE, 1000, 0)
    assert harness.init(None).value == InitProducerIdResult(ErrorCode.NONE, 1001, 0)
    assert harness.log.appends == 0
    harness.allocator.fail_with = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert harness.init(None).value.error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS


@pytest.mark.parametrize(
    ("transactional_id", "producer_id", "producer_epoch"),
    [("", -1, -1), ("t", 5, -1), ("t", -1, 5)],
)
def test_invalid_requests(transactional_id: str, producer_id: int, producer_epoch: int) -> None:
    harness = Harness()
    result = harness.init(transactional_id, producer_id=producer_id, producer_epoch=producer_epoch).value
    assert result == InitProducerIdResult(ErrorCode.INVALID_REQUEST)


@pytest.mark.parametrize("timeout_ms", [0, -1, 900_001])
def test_a_timeout_outside_0_to_the_maximum_is_invalid(timeout_ms: int) -> None:
    harness = Harness()
    assert harness.init(timeout_ms=timeout_ms).value.error == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert harness.log.appends == 0


def test_the_maximum_timeout_itself_is_valid_and_configurable() -> None:
    assert Harness().init(timeout_ms=900_000).value.error == ErrorCode.NONE
    config = TransactionCoordinatorConfig(
        transaction_state_log_num_partitions=4, transaction_max_timeout_ms=1_000
    )
    harness = Harness(config)
    assert harness.init(timeout_ms=1_001).value.error == ErrorCode.INVALID_TRANSACTION_TIMEOUT


def test_ownership_errors() -> None:
    harness = Harness(partitions=())
    assert harness.init().value.error == ErrorCode.NOT_COORDINATOR
    harness.coordinator.begin_loading(harness.partition_of("t"), 1)
    assert harness.init().value.error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert harness.allocator.allocated == 0


def test_a_new_instance_fences_the_old_one_aborting_its_open_transaction_first() -> None:
    harness = Harness()
    producer_id, epoch = harness.begin("t", ("a", 0), ("b", 1))
    # The new instance is told to retry while the old transaction is aborted with a bumped epoch.
    assert harness.init().value == InitProducerIdResult(ErrorCode.CONCURRENT_TRANSACTIONS)
    assert harness.markers.written == [
        ("t", producer_id, epoch + 1, 7, False, TopicPartition("a", 0)),
        ("t", producer_id, epoch + 1, 7, False, TopicPartition("b", 1)),
    ]
    assert states_written(harness) == ["Empty", "Ongoing", "PrepareAbort", "CompleteAbort"]
    assert harness.snapshot().producer_epoch == epoch + 1
    # The old instance is fenced everywhere.
    assert harness.end_error("t", producer_id, epoch) == ErrorCode.PRODUCER_FENCED
    assert harness.add_error("t", producer_id, epoch) == ErrorCode.PRODUCER_FENCED
    # The retry gets an epoch above the fencing one.
    assert harness.init().value == InitProducerIdResult(ErrorCode.NONE, producer_id, epoch + 2)


def test_the_retry_of_a_fencing_init_is_concurrent_while_the_abort_markers_are_written() -> None:
    harness = Harness()
    harness.begin("t", ("a", 0))
    harness.markers.defer = True
    assert harness.init().value.error == ErrorCode.CONCURRENT_TRANSACTIONS
    assert harness.snapshot().state is TransactionState.PREPARE_ABORT
    assert harness.init().value.error == ErrorCode.CONCURRENT_TRANSACTIONS
    harness.markers.answer_deferred()
    assert harness.snapshot().state is TransactionState.COMPLETE_ABORT
    assert harness.init().value == InitProducerIdResult(ErrorCode.NONE, 1000, 2)


def test_a_fence_whose_abort_cannot_be_written_tells_the_caller_and_changes_nothing() -> None:
    harness = Harness()
    producer_id, epoch = harness.begin("t", ("a", 0))
    harness.log.fail_with = ErrorCode.NOT_ENOUGH_REPLICAS
    assert harness.init().value.error == ErrorCode.COORDINATOR_NOT_AVAILABLE
    snapshot = harness.snapshot()
    assert (snapshot.state, snapshot.producer_epoch) == (TransactionState.ONGOING, epoch)
    assert harness.markers.calls == []
    # Tried again, the fence bumps from the same epoch: one bump, not two.
    harness.log.fail_with = ErrorCode.NONE
    assert harness.init().value.error == ErrorCode.CONCURRENT_TRANSACTIONS
    assert harness.snapshot().producer_epoch == epoch + 1
    assert harness.init_ok() == (producer_id, epoch + 2)


def test_an_exhausted_epoch_gets_a_new_producer_id() -> None:
    harness = Harness(partitions=())
    exhausted = harness_snapshot_record(PRODUCER_EPOCH_EXHAUSTED)
    harness.coordinator.load(harness.partition_of("t"), 3, [exhausted])
    assert harness.init().value == InitProducerIdResult(ErrorCode.NONE, 1000, 0)
    snapshot = harness.snapshot()
    assert (snapshot.producer_id, snapshot.last_producer_id) == (1000, 500)


def test_the_last_epoch_a_client_gets_is_the_threshold_then_a_new_id() -> None:
    harness = Harness(partitions=())
    harness.coordinator.load(
        harness.partition_of("t"), 3, [harness_snapshot_record(PRODUCER_EPOCH_EXHAUSTED - 1)]
    )
    assert harness.init_ok() == (500, PRODUCER_EPOCH_EXHAUSTED)
    assert harness.init_ok() == (1000, 0)


def test_an_exhausted_epoch_with_an_open_transaction_is_fenced_then_rotated() -> None:
    harness = Harness(partitions=())
    ongoing = harness_snapshot_record(PRODUCER_EPOCH_EXHAUSTED, state=TransactionState.ONGOING)
    harness.coordinator.load(harness.partition_of("t"), 3, [ongoing])
    assert harness.init().value.error == ErrorCode.CONCURRENT_TRANSACTIONS
    assert harness.snapshot().producer_epoch == PRODUCER_EPOCH_EXHAUSTED + 1 == 2**15 - 1
    assert harness.init_ok() == (1000, 0)


def harness_snapshot_record(
    epoch: int, state: TransactionState = TransactionState.COMPLETE_COMMIT
) -> tuple[bytes, bytes | None]:
    from tests.unit.coordinator.transactions.test_producer_ids import current

    partitions = frozenset({TopicPartition("a", 0)}) if state is TransactionState.ONGOING else frozenset()
    return record("t", current(producer_id=500, producer_epoch=epoch, state=state, partitions=partitions))


def test_kip360_recovery_bumps_and_a_retry_gets_the_same_epoch() -> None:
    harness = Harness()
    harness.init_ok()
    producer_id, epoch = harness.init_ok()
    assert epoch == 1
    assert harness.init_ok(producer_id=producer_id, producer_epoch=epoch) == (producer_id, epoch + 1)
    assert harness.init_ok(producer_id=producer_id, producer_epoch=epoch) == (producer_id, epoch + 1)
    assert (
        harness.init(producer_id=producer_id, producer_epoch=epoch - 1).value.error
        == ErrorCode.PRODUCER_FENCED
    )
    assert (
        harness.init(producer_id=producer_id + 1, producer_epoch=epoch).value.error
        == ErrorCode.PRODUCER_FENCED
    )


def test_kip360_retry_after_a_coordinator_move_is_fenced_as_in_kafka() -> None:
    # The epoch bumped from is not in the record: a coordinator that loads the id cannot tell a
    # retry from a zombie, and fences (Kafka's log has no field for it either).
    harness = Harness()
    producer_id, epoch = harness.init_ok()
    harness.init_ok(producer_id=producer_id, producer_epoch=epoch)
    reloaded = harness.reloaded()
    result = reloaded.init(producer_id=producer_id, producer_epoch=epoch).value
    assert result.error == ErrorCode.PRODUCER_FENCED


def test_kip360_a_producer_whose_id_expired_gets_a_new_one() -> None:
    harness = Harness()
    assert harness.init(producer_id=4242, producer_epoch=3).value == InitProducerIdResult(
        ErrorCode.NONE, 1000, 0
    )


def test_a_new_id_whose_first_record_fails_is_forgotten() -> None:
    harness = Harness()
    harness.log.fail_with = ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert harness.init().value.error == ErrorCode.NOT_COORDINATOR
    assert harness.coordinator.transaction("t") is None
    harness.log.fail_with = ErrorCode.NONE
    assert harness.init().value == InitProducerIdResult(ErrorCode.NONE, 1001, 0)


def test_a_bump_that_fails_leaves_the_epoch_as_it_was() -> None:
    harness = Harness()
    harness.init_ok()
    harness.log.fail_with = ErrorCode.REQUEST_TIMED_OUT
    assert harness.init().value.error == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert harness.snapshot().producer_epoch == 0
    harness.log.fail_with = ErrorCode.NONE
    assert harness.init_ok() == (1000, 1)


def test_init_while_a_write_is_in_flight_is_concurrent_and_answered_when_durable() -> None:
    harness = Harness()
    harness.log.defer = True
    first = harness.init()
    assert not first.answered
    assert harness.init().value.error == ErrorCode.CONCURRENT_TRANSACTIONS
    harness.log.complete_deferred()
    assert first.value == InitProducerIdResult(ErrorCode.NONE, 1000, 0)


def test_two_inits_of_a_new_id_racing_for_producer_ids() -> None:
    harness = Harness()
    harness.allocator.defer = True
    first, second = harness.init(), harness.init()
    harness.log.defer = True
    harness.allocator.answer_held()
    # The second finds the id the first created, its record still being written.
    assert second.value.error == ErrorCode.CONCURRENT_TRANSACTIONS
    harness.log.complete_deferred()
    assert first.value == InitProducerIdResult(ErrorCode.NONE, 1000, 0)


def test_a_racing_init_that_finds_the_new_id_durable_bumps_it() -> None:
    harness = Harness()
    harness.allocator.defer = True
    first, second = harness.init(), harness.init()
    harness.allocator.answer_held()
    assert first.value == InitProducerIdResult(ErrorCode.NONE, 1000, 0)
    # Its own allocated id (1001) goes unused.
    assert second.value == InitProducerIdResult(ErrorCode.NONE, 1000, 1)


def test_an_allocator_error_is_passed_to_the_caller() -> None:
    harness = Harness()
    harness.allocator.fail_with = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert harness.init().value.error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert harness.coordinator.transaction("t") is None
