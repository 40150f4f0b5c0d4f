"""Ownership of __transaction_state partitions: loading (replay), unloading, and a coordinator
that loads the log being where the live one was."""

from __future__ import annotations

import struct

import pytest

from strom.coordinator import java_string_hashcode
from strom.coordinator.transactions import (
    CorruptTransactionRecord,
    InitProducerIdResult,
    TopicPartition,
    TransactionCoordinatorConfig,
    TransactionState,
)
from strom.coordinator.transactions.records import key_bytes, record
from strom.coordinator.transactions.timers import markers_key
from strom.protocol.errors import ErrorCode
from strom.protocol.transaction_records.transaction_log import TransactionLogValue
from tests.unit.coordinator.transactions.harness import Harness
from tests.unit.coordinator.transactions.test_producer_ids import current

A0, B0 = TopicPartition("a", 0), TopicPartition("b", 0)


def assert_same_state(live: Harness, loaded: Harness) -> None:
    """Every id the same, as its record says (the last producer epoch is not in it)."""
    live_ids = live.coordinator.transactions()
    loaded_ids = loaded.coordinator.transactions()
    assert sorted(live_ids) == sorted(loaded_ids)
    for transactional_id, metadata in live_ids.items():
        assert metadata.pending is None and loaded_ids[transactional_id].pending is None
        assert metadata.known.durable() == loaded_ids[transactional_id].known.durable(), transactional_id


def test_the_partition_of_an_id_is_kafkas_hash() -> None:
    harness = Harness(TransactionCoordinatorConfig())
    for transactional_id in ("t", "orders-eos-0", "ü", ""):
        expected = abs(java_string_hashcode(transactional_id)) % 50
        assert harness.coordinator.partition_for(transactional_id) == expected
    # Integer.MIN_VALUE's abs is taken as 0, as Kafka's Utils.abs does.
    assert java_string_hashcode("polygenelubricants") == -(2**31)
    assert harness.coordinator.partition_for("polygenelubricants") == 0


def test_every_request_of_an_id_not_owned_is_not_coordinator() -> None:
    harness = Harness(partitions=())
    assert not harness.coordinator.owns("t")
    assert harness.init().value.error == ErrorCode.NOT_COORDINATOR
    assert harness.add_error("t", 1, 0) == ErrorCode.NOT_COORDINATOR
    assert harness.add_offsets("t", 1, 0, "g").value == ErrorCode.NOT_COORDINATOR
    assert harness.end_error("t", 1, 0) == ErrorCode.NOT_COORDINATOR
    assert harness.coordinator.describe_transactions(["t"])[0].error == ErrorCode.NOT_COORDINATOR


def test_every_request_of_an_id_loading_is_load_in_progress() -> None:
    harness = Harness(partitions=())
    harness.coordinator.begin_loading(harness.partition_of("t"), 1)
    assert harness.coordinator.owns("t")
    assert harness.init().value.error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert harness.add_error("t", 1, 0) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert harness.end_error("t", 1, 0) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert harness.coordinator.describe_transactions(["t"])[0].error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert harness.coordinator.list_transactions().error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    harness.coordinator.finish_loading(harness.partition_of("t"))
    assert harness.init().value.error == ErrorCode.NONE


def test_replay_keeps_the_latest_record_of_each_id_and_tombstones_remove() -> None:
    harness = Harness(partitions=())
    partition = harness.partition_of("t")
    first = current(producer_epoch=1, state=TransactionState.EMPTY)
    second = current(producer_epoch=2, state=TransactionState.ONGOING, partitions=frozenset({A0}))
    harness.coordinator.load(partition, 4, [record("t", first), record("t", second)])
    assert harness.snapshot() == second
    assert harness.coordinator.coordinator_epoch(partition) == 4

    harness.coordinator.unload(partition)
    harness.coordinator.load(partition, 5, [record("t", first), (key_bytes("t"), None)])
    assert harness.coordinator.transaction("t") is None
    harness.coordinator.unload(partition)
    harness.coordinator.load(partition, 6, [(key_bytes("t"), None), record("t", first)])
    assert harness.snapshot() == first


def test_a_dead_value_removes_like_a_tombstone() -> None:
    harness = Harness(partitions=())
    partition = harness.partition_of("t")
    dead = TransactionLogValue(producer_id=100, producer_epoch=5, transaction_status=6)
    dead_value = struct.pack(">h", 1) + dead.encode(1)
    harness.coordinator.load(partition, 1, [record("t", current()), (key_bytes("t"), dead_value)])
    assert harness.coordinator.transaction("t") is None


def test_a_record_that_does_not_decode_raises_and_changes_nothing() -> None:
    harness = Harness(partitions=())
    partition = harness.partition_of("t")
    harness.coordinator.begin_loading(partition, 1)
    harness.coordinator.replay(partition, *record("t", current()))
    with pytest.raises(CorruptTransactionRecord):
        harness.coordinator.replay(partition, key_bytes("t"), b"\x00\x09garbage")
    with pytest.raises(CorruptTransactionRecord):
        harness.coordinator.replay(partition, b"\x00", None)
    assert harness.coordinator.transaction("t") is not None
    assert harness.coordinator.transaction("t").known == current()  # type: ignore[union-attr]


def test_a_record_in_the_wrong_partition_is_corrupt() -> None:
    harness = Harness(partitions=())
    partition = harness.partition_of("t")
    other = (partition + 1) % harness.config.transaction_state_log_num_partitions
    harness.coordinator.begin_loading(other, 1)
    with pytest.raises(CorruptTransactionRecord, match="belongs to partition"):
        harness.coordinator.replay(other, *record("t", current()))


def test_a_loaded_prepare_commit_writes_its_markers_with_the_new_coordinator_epoch() -> None:
    harness = Harness()
    producer_id, epoch = harness.begin("t", A0, B0)
    harness.markers.defer = True
    harness.end_error("t", producer_id, epoch)
    harness.markers.answer_deferred(1)  # A0 has its marker; B0 does not yet
    harness.coordinator.unload(harness.partition_of("t"))

    successor = harness.reloaded()
    assert successor.snapshot().state is TransactionState.COMPLETE_COMMIT
    # Every partition is written again (a partition that has its marker ignores the second).
    assert successor.markers.written == [
        ("t", producer_id, epoch, 8, True, A0),
        ("t", producer_id, epoch, 8, True, B0),
    ]


def test_a_loaded_prepare_abort_completes_as_an_abort() -> None:
    harness = Harness(partitions=())
    prepared = current(state=TransactionState.PREPARE_ABORT, partitions=frozenset({A0}))
    harness.coordinator.load(harness.partition_of("t"), 2, [record("t", prepared)])
    assert harness.snapshot().state is TransactionState.COMPLETE_ABORT
    assert harness.markers.written == [("t", 100, 5, 2, False, A0)]


def test_unload_answers_a_waiting_write_not_coordinator_and_ignores_its_completion() -> None:
    harness = Harness()
    harness.log.defer = True
    box = harness.init()
    harness.coordinator.unload(harness.partition_of("t"))
    assert box.value == InitProducerIdResult(ErrorCode.NOT_COORDINATOR)
    harness.log.complete_deferred()
    assert len(box.answers) == 1
    assert not harness.coordinator.owns("t")


def test_unload_answers_a_waiting_end_transaction_and_leaves_the_markers_to_the_successor() -> None:
    harness = Harness()
    producer_id, epoch = harness.begin("t", A0)
    harness.log.defer = True
    box = harness.end("t", producer_id, epoch)
    harness.coordinator.unload(harness.partition_of("t"))
    assert box.value == ErrorCode.NOT_COORDINATOR
    harness.log.complete_deferred()  # the PrepareCommit did reach the log
    assert harness.markers.calls == []
    harness.log.defer = False
    successor = harness.reloaded()
    assert successor.snapshot().state is TransactionState.COMPLETE_COMMIT


def test_unload_answers_an_init_waiting_for_a_producer_id() -> None:
    harness = Harness()
    harness.allocator.defer = True
    box = harness.init()
    harness.coordinator.unload(harness.partition_of("t"))
    assert box.value.error == ErrorCode.NOT_COORDINATOR
    harness.allocator.answer_held()
    assert len(box.answers) == 1
    assert harness.log.appends == 0


def test_markers_answered_after_an_unload_are_ignored() -> None:
    harness = Harness()
    producer_id, epoch = harness.begin("t", A0)
    harness.markers.defer = True
    harness.end_error("t", producer_id, epoch)
    appends = harness.log.appends
    harness.coordinator.unload(harness.partition_of("t"))
    harness.markers.answer_deferred()
    assert harness.log.appends == appends  # no Complete from a coordinator that moved away


def test_unload_cancels_the_marker_retries() -> None:
    harness = Harness()
    producer_id, epoch = harness.begin("t", A0)
    harness.markers.script[A0] = [ErrorCode.NOT_LEADER_OR_FOLLOWER]
    harness.end_error("t", producer_id, epoch)
    assert harness.timer.due_in_ms(markers_key("t")) is not None
    harness.coordinator.unload(harness.partition_of("t"))
    assert harness.timer.due_in_ms(markers_key("t")) is None


def test_a_write_completing_after_the_partition_came_back_is_not_applied() -> None:
    harness = Harness()
    partition = harness.partition_of("t")
    harness.log.defer = True
    box = harness.init()
    harness.coordinator.begin_loading(partition, 9)  # moved away and back: unloads first
    assert box.value.error == ErrorCode.NOT_COORDINATOR
    harness.coordinator.finish_loading(partition)
    harness.log.complete_deferred()
    assert harness.coordinator.transaction("t") is None  # only a load from the log may bring it


def test_unloading_a_partition_not_owned_does_nothing() -> None:
    harness = Harness(partitions=())
    harness.coordinator.unload(3)
    harness.coordinator.shutdown()


def test_a_reloaded_coordinator_is_where_the_live_one_was() -> None:
    config = TransactionCoordinatorConfig(
        transaction_state_log_num_partitions=4,
        transactional_id_expiration_ms=100_000,
        transaction_remove_expired_transaction_cleanup_interval_ms=10_000,
    )
    harness = Harness(config)
    harness.init_ok("empty")
    ongoing = harness.begin("ongoing", A0, B0)
    committed = harness.begin("committed", A0)
    harness.end_error("committed", *committed)
    aborted = harness.begin("aborted", B0)
    harness.end_error("aborted", *aborted, commit=False)
    harness.begin("fenced", A0)
    assert harness.init("fenced").value.error == ErrorCode.CONCURRENT_TRANSACTIONS
    harness.begin("timed-out", A0, timeout_ms=1_000)
    harness.init_ok("expired")
    harness.advance(20_000)
    harness.init_ok("rotated")
    harness.init_ok("kip360", producer_id=4242, producer_epoch=1)
    harness.markers.defer = True
    harness.end_error("ongoing", *ongoing)  # left in PrepareCommit
    harness.advance(90_000)  # "expired" (and "empty") expire; the rest were touched later
    assert harness.coordinator.transaction("expired") is None

    loaded = Harness(config, partitions=(), clock=harness.clock, log=harness.log)
    loaded.markers.defer = True
    for partition in range(config.transaction_state_log_num_partitions):
        loaded.coordinator.load(partition, 8, harness.log.records(partition))
    assert_same_state(harness, loaded)


def test_ids_live_in_the_partitions_the_topic_has_not_in_the_configured_count() -> None:
    """__transaction_state made with 5 partitions, a coordinator whose setting says 50 (a broker
    restarted with another transaction.state.log.num.partitions): told the topic's count, it finds
    each id where it was written — its open transaction is there to be ended. With the configured
    count it looked in abs(hashCode) % 50 and skipped the record as misplaced."""
    made_with_five = Harness(TransactionCoordinatorConfig(transaction_state_log_num_partitions=5))
    producer_id, epoch = made_with_five.begin("t", ("a", 0))
    partition = made_with_five.partition_of("t")
    assert partition == abs(java_string_hashcode("t")) % 5 != abs(java_string_hashcode("t")) % 50

    restarted = Harness(
        TransactionCoordinatorConfig(transaction_state_log_num_partitions=50),
        partitions=(),
        log=made_with_five.log,
    )
    restarted.coordinator.use_partition_count(5)
    assert restarted.coordinator.partition_count == 5
    assert restarted.partition_of("t") == partition
    restarted.coordinator.load(partition, 8, made_with_five.log.records(partition))
    assert restarted.snapshot().state is TransactionState.ONGOING
    assert restarted.end_error("t", producer_id, epoch) == ErrorCode.NONE
    assert restarted.markers.written == [("t", producer_id, epoch, 8, True, A0)]
    assert restarted.snapshot().state is TransactionState.COMPLETE_COMMIT


def test_the_partition_count_is_set_before_any_partition_is_loaded() -> None:
    harness = Harness(TransactionCoordinatorConfig(transaction_state_log_num_partitions=5), partitions=(1,))
    harness.coordinator.use_partition_count(5)  # the same count: nothing to change
    with pytest.raises(AssertionError, match="changed from 5 to 50 with partitions"):
        harness.coordinator.use_partition_count(50)
