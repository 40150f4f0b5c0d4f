"""Produce checks off the event loop (``strom.broker.produce_validation``): cheap records checked at
once, costly ones in a thread (here a held executor the test runs by hand), appends to a partition
in arrival order, and the decompressed-bytes budget those threads share. No sleeping: each step is
driven to where it must wait, then released."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

import pytest

from strom.broker.produce_validation import DecompressionBudget, ProduceValidation, Turn
from strom.protocol.records import CompressionType, compress
from strom.protocol.records.header import BatchHeader, CorruptBatchError, validate_batches
from strom.protocol.records.validate import InvalidRecordError, WorkBound
from tests.poison_batches import assemble, record, records

T = TypeVar("T")
DEADLINE_S = 30.0


class HeldExecutor(Executor):
    """Work submitted waits until the test runs it."""

    def __init__(self) -> None:
        self.pending: list[tuple[Callable[[], Any], Future[Any]]] = []

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        future: Future[T] = Future()
        self.pending.append((lambda: fn(*args, **kwargs), future))
        return future

    def run_next(self) -> None:
        work, future = self.pending.pop(0)
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(work())
        except BaseException as error:
            future.set_exception(error)


def small(count: int = 3) -> bytearray:
    return bytearray(assemble(records(count), count=count))


def costly(count: int = 30) -> bytearray:
    return bytearray(assemble(records(count), count=count))


def poison() -> bytearray:
    return bytearray(assemble(records(29) + record(31), count=30))


BOUND = WorkBound(bytes_max=1 << 20, records_max=10)


class Harness:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.executor = HeldExecutor()
        self.validation = ProduceValidation(inline_bound=BOUND, executor=self.executor)

    def check(self, partition: tuple[str, int], batch: bytearray) -> asyncio.Task[Turn]:
        headers: list[BatchHeader] = validate_batches(batch)
        return self.loop.create_task(self.validation.check(partition, batch, headers, keys_required=False))

    def settle(self) -> None:
        """Run the loop until nothing more can happen without the test."""
        for _ in range(20):
            self.loop.run_until_complete(asyncio.sleep(0))

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coroutine)

    def close(self) -> None:
        self.loop.close()


@pytest.fixture
def harness() -> Any:
    instance = Harness()
    yield instance
    instance.close()


def test_cheap_records_are_checked_at_once_and_leave_nothing_behind(harness: Harness) -> None:
    task = harness.check(("t", 0), small())
    harness.settle()
    assert task.done() and not task.result().waited
    task.result().done()
    assert not harness.validation.busy(("t", 0))
    assert harness.executor.pending == [] and harness.validation.checked_in_threads == 0


def test_a_cheap_poison_is_refused_on_the_loop(harness: Harness) -> None:
    task = harness.check(("t", 0), bytearray(assemble(record(1), count=1)))
    harness.settle()
    with pytest.raises(InvalidRecordError):
        task.result()
    assert not harness.validation.busy(("t", 0))


def test_check_at_once_decides_only_cheap_uncompressed_records_to_an_idle_partition(harness: Harness) -> None:
    """The coroutine-free path of the common case: it checks what ``check`` would check at once
    without a thread or a wait, and hands everything else back undecided."""
    validation = harness.validation

    def at_once(partition: tuple[str, int], batch: bytearray) -> list[BatchHeader] | None:
        return validation.check_at_once(partition, batch, validate_batches(batch), keys_required=False)

    cheap = small()
    assert at_once(("t", 0), cheap) == validate_batches(cheap)
    with pytest.raises(InvalidRecordError):
        at_once(("t", 0), bytearray(assemble(record(1), count=1)))
    assert at_once(("t", 0), costly()) is None  # beyond the inline bound: a thread's work
    compressed = bytearray(assemble(compress(CompressionType.GZIP, records(3)), count=3, attributes=1))
    assert at_once(("t", 0), compressed) is None  # never decompressed here
    busy = harness.check(("t", 0), costly())
    harness.settle()
    assert validation.busy(("t", 0))
    assert at_once(("t", 0), small()) is None  # it must queue behind the costly one
    assert at_once(("t", 1), small()) is not None  # other partitions are not held up
    assert validation.checked_in_threads == 1 and len(harness.executor.pending) == 1
    harness.executor.run_next()
    harness.settle()
    busy.result().done()
    assert not validation.busy(("t", 0))


def test_a_later_produce_to_the_partition_waits_for_the_costly_one(harness: Harness) -> None:
    first = harness.check(("t", 0), costly())
    second = harness.check(("t", 0), small())  # cheap, but the partition is busy
    elsewhere = harness.check(("t", 1), small())  # another partition: not held up
    harness.settle()
    assert elsewhere.done() and not elsewhere.result().waited
    assert not first.done() and not second.done()
    assert len(harness.executor.pending) == 1
    harness.executor.run_next()  # the costly records are checked...
    harness.settle()
    assert first.done() and first.result().waited
    assert not second.done(), "the second may not go before the first has appended"
    first.result().done()  # ...and appended
    harness.settle()
    assert second.done() and second.result().waited
    assert [header.record_count for header in second.result().headers] == [3]
    second.result().done()
    assert not harness.validation.busy(("t", 0))


def test_several_costly_produces_are_checked_side_by_side_and_append_in_order(harness: Harness) -> None:
    tasks = [harness.check(("t", 0), costly(20 + index)) for index in range(3)]
    harness.settle()
    assert len(harness.executor.pending) == 3  # all three checked meanwhile, not one after another
    for _ in range(3):
        harness.executor.run_next()
    harness.settle()
    for index in range(3):
        done = [task.done() for task in tasks]
        assert done == [position <= index for position in range(3)], "only the next one in order"
        tasks[index].result().done()  # appended
        harness.settle()
    assert not harness.validation.busy(("t", 0))


def test_a_refused_costly_produce_lets_the_next_one_go_once_it_is_decided(harness: Harness) -> None:
    first = harness.check(("t", 0), poison())
    second = harness.check(("t", 0), small())
    harness.settle()
    harness.executor.run_next()
    harness.settle()
    with pytest.raises(InvalidRecordError, match="record 29"):
        first.result()
    assert second.done()
    second.result().done()
    assert not harness.validation.busy(("t", 0))


def test_a_refused_produce_behind_a_costly_one_does_not_release_the_queue_early(harness: Harness) -> None:
    first = harness.check(("t", 0), costly())
    bad = harness.check(("t", 0), poison())  # checked in a thread too, and refused
    third = harness.check(("t", 0), small())
    harness.settle()
    harness.executor.run_next()  # the first's check
    harness.executor.run_next()  # the poison's check
    harness.settle()
    with pytest.raises(InvalidRecordError):
        bad.result()
    assert first.done() and not third.done(), "the first has not appended yet"
    first.result().done()
    harness.settle()
    assert third.done()


def test_a_cancelled_produce_keeps_the_order_of_the_others(harness: Harness) -> None:
    first = harness.check(("t", 0), costly())
    second = harness.check(("t", 0), costly())
    third = harness.check(("t", 0), small())
    harness.settle()
    second.cancel()
    harness.settle()
    assert second.cancelled() and not third.done()
    harness.executor.run_next()
    harness.settle()
    assert not third.done()
    first.result().done()
    harness.settle()
    assert third.done()
    third.result().done()
    harness.executor.run_next()  # the cancelled one's work, cancelled before it ran: dropped
    assert not harness.validation.busy(("t", 0))


def test_a_bomb_checked_in_a_thread_is_corrupt_and_holds_no_budget_after() -> None:
    harness = Harness()
    harness.validation = ProduceValidation(
        inline_bound=BOUND,
        executor=harness.executor,
        decompressed_bytes_max=2 << 20,
        bytes_in_flight_max=3 << 20,
    )
    try:
        bomb = bytearray(
            assemble(compress(CompressionType.ZSTD, records(5, value=bytes(1 << 20))), count=5, attributes=4)
        )
        task = harness.check(("t", 0), bomb)
        harness.settle()
        harness.executor.run_next()
        harness.settle()
        with pytest.raises(CorruptBatchError, match="exceeds 2097152"):
            task.result()
        assert harness.validation.budget.held_bytes == 0
    finally:
        harness.close()


# ---- the budget ---------------------------------------------------------------------------------


def test_a_reservation_waits_for_room_and_shrinks_to_what_it_holds() -> None:
    budget = DecompressionBudget(100)
    first = budget.reserve(100)
    reserved = threading.Event()
    holder: list[Any] = []

    def second() -> None:
        holder.append(budget.reserve(60))
        reserved.set()

    thread = threading.Thread(target=second)
    thread.start()
    assert not reserved.wait(0.05), "no room: the second waits"
    first.shrink_to(40)  # the first decompressed to 40: room for the second, not before
    assert reserved.wait(DEADLINE_S)
    thread.join(DEADLINE_S)
    assert budget.held_bytes == 100
    first.release()
    holder[0].release()
    assert budget.held_bytes == 0
    assert budget.reserve(1_000).held_bytes == 100, "more than the budget takes the whole budget"
