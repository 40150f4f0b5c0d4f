"""The producer's per-batch machinery: rows encoded in one pass, delivery handles, sticky keyless."""

from __future__ import annotations

import random
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.base.clock import ManualClock
from strom.client.cluster import TopicPartition
from strom.client.producer.accumulator import (
    DeliveryCallback,
    ProducerBatch,
    RecordAccumulator,
    RecordMetadata,
)
from strom.client.producer.partitioner import StickyPartitioner
from strom.protocol.records import BatchBuilder, CompressionType, decode_batch
from strom.protocol.records.batch import RecordRow, build_batch_from_rows, estimate_row_bytes

TP0 = TopicPartition("t", 0)

optional_bytes = st.one_of(st.none(), st.binary(max_size=300))
header_lists = st.lists(st.tuples(st.text(max_size=8), optional_bytes), max_size=3)
rows_strategy = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=1 << 45),
        optional_bytes,
        optional_bytes,
        header_lists,
    ),
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(rows=rows_strategy, producer_id=st.integers(min_value=-1, max_value=1 << 40))
def test_rows_build_the_same_bytes_as_the_batch_builder(rows: list[RecordRow], producer_id: int) -> None:
    builder = BatchBuilder(producer_id=producer_id, producer_epoch=3, base_sequence=17)
    for timestamp_ms, key, value, headers in rows:
        builder.append(timestamp_ms, key, value, headers)
    assert build_batch_from_rows(rows, producer_id=producer_id, producer_epoch=3, base_sequence=17) == (
        builder.build()
    )


def test_large_batches_keep_offsets_and_timestamps_beyond_the_small_value_table() -> None:
    """Offset deltas past 8,191 and timestamp deltas past 8,191 ms take the long varint forms."""
    rows: list[RecordRow] = [(1_000 + index * 3, None, b"v%d" % index, ()) for index in range(10_000)]
    decoded = decode_batch(build_batch_from_rows(rows, compression=CompressionType.NONE))
    assert [record.offset_delta for record in decoded.records] == list(range(10_000))
    assert decoded.header.max_timestamp == 1_000 + 9_999 * 3
    assert decoded.records[-1].timestamp_delta == 9_999 * 3
    assert decoded.records[9_000].value == b"v9000"


def test_row_size_estimate_is_close_to_the_encoded_size() -> None:
    rows: list[RecordRow] = [(5, b"key", bytes(100), [("h", b"x")]), (5, None, bytes(100), ())]
    encoded = len(build_batch_from_rows(rows)) - len(build_batch_from_rows([]))
    estimated = sum(estimate_row_bytes(key, value, headers) for _, key, value, headers in rows)
    assert abs(encoded - estimated) <= 8


def make_accumulator(batch_size: int = 1_000) -> tuple[RecordAccumulator, ManualClock]:
    clock = ManualClock()
    return RecordAccumulator(batch_size=batch_size, linger_ms=5, compression="none", clock=clock), clock


def test_handles_resolve_from_their_batch_with_offsets_and_timestamps() -> None:
    accumulator, clock = make_accumulator()
    first = accumulator.append(TP0, None, b"k", b"a", (), None)
    clock.advance(3)
    second = accumulator.append(TP0, 42, None, b"b", (), None)
    assert not first.done() and first.running()
    with pytest.raises(TimeoutError):
        first.result(0)
    batch = accumulator.pop(TP0)
    assert batch is not None
    batch.complete(100, -1)
    assert first.done() and not first.cancelled() and not first.cancel()
    assert first.result(0) == RecordMetadata("t", 0, 100, 1_700_000_000_000)
    assert second.result() == RecordMetadata("t", 0, 101, 42)
    assert second.exception() is None


def test_log_append_time_and_unknown_offsets() -> None:
    accumulator, _ = make_accumulator()
    handle = accumulator.append(TP0, 7, None, b"a", (), None)
    batch = accumulator.pop(TP0)
    assert batch is not None
    batch.complete(-1, 99)
    assert handle.result(0) == RecordMetadata("t", 0, -1, 99)


def test_failure_reaches_results_callbacks_and_done_callbacks_in_order() -> None:
    accumulator, _ = make_accumulator()
    seen: list[object] = []

    def recorder(index: int) -> DeliveryCallback:
        return lambda error, metadata: seen.append((index, error))

    handles = [accumulator.append(TP0, 1, None, b"%d" % index, (), recorder(index)) for index in range(3)]
    handles[1].add_done_callback(lambda future: seen.append(("done", future.exception(0))))
    batch = accumulator.pop(TP0)
    assert batch is not None
    error = RuntimeError("broker said no")
    batch.fail(error)
    assert seen == [(0, error), (1, error), (2, error), ("done", error)]
    with pytest.raises(RuntimeError, match="broker said no"):
        handles[0].result(0)
    late: list[object] = []
    handles[2].add_done_callback(late.append)  # already done: runs at once
    assert late == [handles[2]]


def test_a_raising_callback_does_not_stop_the_others() -> None:
    accumulator, _ = make_accumulator()
    calls: list[int] = []

    def bad(error: Exception | None, metadata: RecordMetadata | None) -> None:
        raise ValueError("application bug")

    accumulator.append(TP0, 1, None, b"a", (), bad)
    accumulator.append(
        TP0, 1, None, b"b", (), lambda error, metadata: calls.append(metadata.offset if metadata else -2)
    )
    batch = accumulator.pop(TP0)
    assert batch is not None
    batch.complete(10, -1)
    assert calls == [11]


def test_a_waiter_on_another_thread_wakes_when_the_batch_completes() -> None:
    accumulator, _ = make_accumulator()
    handle = accumulator.append(TP0, 1, None, b"a", (), None)
    results: list[RecordMetadata] = []
    waiter = threading.Thread(target=lambda: results.append(handle.result(30)))
    waiter.start()
    batch = accumulator.pop(TP0)
    assert batch is not None
    batch.complete(5, -1)
    waiter.join(30)
    assert results == [RecordMetadata("t", 0, 5, 1)]


def test_handles_cannot_be_resolved_by_hand() -> None:
    accumulator, _ = make_accumulator()
    handle = accumulator.append(TP0, 1, None, b"a", (), None)
    with pytest.raises(RuntimeError):
        handle.set_result(RecordMetadata("t", 0, 0, 0))


def test_batches_close_at_batch_size_and_the_sender_is_woken_per_batch() -> None:
    accumulator, _ = make_accumulator(batch_size=300)
    accumulator.wake_needed = False
    accumulator.append(TP0, 1, None, bytes(100), (), None)
    assert accumulator.wake_needed  # a new batch: its linger timer starts
    accumulator.wake_needed = False
    accumulator.append(TP0, 1, None, bytes(100), (), None)
    assert not accumulator.wake_needed
    accumulator.append(TP0, 1, None, bytes(100), (), None)
    assert accumulator.wake_needed  # full
    assert not accumulator.has_open_batch(TP0)
    accumulator.append(TP0, 1, None, bytes(100), (), None)
    first, second = accumulator.pop(TP0), accumulator.pop(TP0)
    assert first is not None and second is not None
    assert (first.record_count, second.record_count) == (3, 1)


def _sticky_partitions(
    accumulator: RecordAccumulator, partitioner: StickyPartitioner, count: int
) -> list[int]:
    partitions = []
    for _ in range(count):
        handle = accumulator.append_keyless("t", 4, partitioner, 1, bytes(100), (), None)
        partitions.append(handle._batch.topic_partition.partition)
    return partitions


def test_keyless_records_stick_until_the_batch_fills_then_move_on() -> None:
    accumulator, _ = make_accumulator(batch_size=300)
    partitioner = StickyPartitioner(random.Random(1))
    partitions = _sticky_partitions(accumulator, partitioner, 6)
    assert partitions[0] == partitions[1] == partitions[2]
    assert partitions[3] == partitions[4] == partitions[5] != partitions[0]


def test_keyless_records_move_on_when_the_batch_is_drained() -> None:
    accumulator, _ = make_accumulator(batch_size=10_000)
    partitioner = StickyPartitioner(random.Random(2))
    (before,) = _sticky_partitions(accumulator, partitioner, 1)
    drained = accumulator.pop(TopicPartition("t", before))
    assert isinstance(drained, ProducerBatch) and drained.record_count == 1
    (after,) = _sticky_partitions(accumulator, partitioner, 1)
    assert after != before


def test_expired_and_drained_batches_take_no_more_records() -> None:
    accumulator, clock = make_accumulator()
    accumulator.append(TP0, 1, None, b"a", (), None)
    clock.advance(1_000)
    (expired,) = accumulator.expired(clock.monotonic_ms(), 500)
    accumulator.append(TP0, 1, None, b"b", (), None)
    assert expired.record_count == 1
    (remaining,) = accumulator.drain_all()
    assert remaining is not expired and remaining.record_count == 1
