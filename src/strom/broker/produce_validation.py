"""Produced records checked off the event loop when that costs much, appended in arrival order.

Every produced batch is checked completely before it is stored (``strom.protocol.records.validate``),
which costs about its decompressed bytes and its records: a batch of a few KiB on the wire that
decompresses to the 256 MiB cap took the loop for seconds, and every other client waited. So:

- A partition's records are first checked on the loop with a ``WorkBound``
  (``limits.produce_validation_inline_*``): what producers batch by default fits, is checked at
  once and appended without a thread hop or an await, as before.
- Records beyond the bound are checked in a worker thread (``limits.produce_validation_threads``)
  while the loop serves everyone else, decompressed into a memory mapping (``decompress_mapped``:
  freeing hundreds of MiB of ``bytes`` would hold the GIL, and so the loop, for ~100 ms). A
  compressed batch first reserves the most it may decompress to (the cap) from a budget of
  decompressed bytes in flight (``limits.produce_validation_bytes_in_flight_max``), waiting in its
  thread until the budget has room, and keeps only what it really decompressed to once that is
  known, until it is checked.
- Appends to one partition keep the order in which their produces reached ``check``: while a
  partition has records being checked in a thread, every later produce to it queues behind them
  (its own records still checked at once if cheap, or in a thread meanwhile) and appends only once
  the earlier ones have appended or failed. Produces to other partitions are not held up. (Across
  connections no order is promised beyond that, as in Kafka; one connection's requests are handled
  one at a time.)

A produce that waited must look its partition up again before appending: the topic may have been
deleted, or this broker may have stopped leading it, meanwhile (``Turn.waited``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from concurrent.futures import Executor, ThreadPoolExecutor

from strom.base import limits
from strom.protocol.records.header import COMPRESSION_MASK, BatchHeader
from strom.protocol.records.validate import ValidationTooCostly, WorkBound, validate_produced_batches

__all__ = ["DecompressionBudget", "ProduceValidation", "Turn"]

TopicPartition = tuple[str, int]
Records = bytearray | memoryview


class DecompressionBudget:
    """Decompressed bytes worker threads may hold at once: ``reserve`` blocks its thread until the
    bytes are free (a reservation larger than the whole budget takes the whole budget)."""

    def __init__(self, bytes_max: int) -> None:
        if bytes_max <= 0:
            raise ValueError(f"a budget of {bytes_max} bytes")
        self.bytes_max = bytes_max
        self._free_bytes = bytes_max
        self._changed = threading.Condition()

    @property
    def held_bytes(self) -> int:
        with self._changed:
            return self.bytes_max - self._free_bytes

    def reserve(self, nbytes: int) -> Reservation:
        nbytes = min(max(nbytes, 0), self.bytes_max)
        with self._changed:
            while self._free_bytes < nbytes:
                self._changed.wait()
            self._free_bytes -= nbytes
        return Reservation(self, nbytes)

    def _give_back(self, nbytes: int) -> None:
        if nbytes:
            with self._changed:
                self._free_bytes += nbytes
                self._changed.notify_all()


class Reservation:
    """Bytes held from a ``DecompressionBudget`` until ``release``."""

    def __init__(self, budget: DecompressionBudget, nbytes: int) -> None:
        self._budget = budget
        self.held_bytes = nbytes

    def shrink_to(self, nbytes: int) -> None:
        """Keep only ``nbytes`` of what is held (it never grows)."""
        surplus = self.held_bytes - max(nbytes, 0)
        if surplus > 0:
            self.held_bytes -= surplus
            self._budget._give_back(surplus)

    def release(self) -> None:
        self.shrink_to(0)


class Turn:
    """Checked records' place in their partition's order: ``headers`` are what the check returned;
    the caller appends (or gives up) and then calls ``done``, always (a ``finally``)."""

    def __init__(
        self,
        headers: list[BatchHeader],
        owner: ProduceValidation | None = None,
        partition: TopicPartition | None = None,
        before: asyncio.Future[None] | None = None,
        mine: asyncio.Future[None] | None = None,
    ) -> None:
        self.headers = headers
        # True when the check awaited (a worker thread, or earlier produces to the partition).
        self.waited = False
        self._owner = owner
        self._partition = partition
        self._before = before
        self._mine = mine

    def done(self) -> None:
        """The records were appended or will not be: later produces to the partition may go once
        the earlier ones have (at once, if they have)."""
        owner, mine, partition = self._owner, self._mine, self._partition
        if owner is None or mine is None or partition is None:
            return
        self._owner = None
        before = self._before
        if before is None or before.done():
            owner._finish(partition, mine)
        else:
            before.add_done_callback(lambda _: owner._finish(partition, mine))


class ProduceValidation:
    """The broker's produce checks: on the loop when cheap, in worker threads when not, in order
    per partition (see the module docs). Loop thread only, except the work it hands to threads."""

    def __init__(
        self,
        *,
        threads: int = limits.produce_validation_threads,
        bytes_in_flight_max: int = limits.produce_validation_bytes_in_flight_max,
        inline_bound: WorkBound | None = None,
        decompressed_bytes_max: int = limits.decompressed_batch_bytes_max,
        executor: Executor | None = None,
    ) -> None:
        self.inline_bound = inline_bound or WorkBound(
            bytes_max=limits.produce_validation_inline_bytes_max,
            records_max=limits.produce_validation_inline_records_max,
        )
        self.decompressed_bytes_max = decompressed_bytes_max
        self.budget = DecompressionBudget(bytes_in_flight_max)
        self._executor = executor or ThreadPoolExecutor(
            max_workers=threads, thread_name_prefix="strom-validate"
        )
        # The last produce to each partition that is not done yet (``Turn.done``): the next one
        # waits for it. A partition absent here has none: its cheap records need not queue.
        self._last: dict[TopicPartition, asyncio.Future[None]] = {}
        self.checked_in_threads = 0

    def busy(self, partition: TopicPartition) -> bool:
        """Whether produces to ``partition`` are still being checked or waiting to append."""
        return partition in self._last

    def check_at_once(
        self,
        partition: TopicPartition,
        records: Records,
        headers: Sequence[BatchHeader],
        *,
        keys_required: bool,
    ) -> list[BatchHeader] | None:
        """``check``'s commonest case without a coroutine or a ``Turn``: uncompressed records
        within the inline bound, to a partition with no earlier produce in progress, are checked
        now (their checked headers returned, or what ``validate_produced_batches`` raises, raised).
        None when they are not of that case: nothing was decided, and the caller awaits ``check``
        (only the work bound's header test may run twice; nothing is decompressed here)."""
        if partition in self._last:
            return None
        for header in headers:
            if header.attributes & COMPRESSION_MASK:
                return None
        return self._check_inline(records, headers, keys_required)

    def _check_inline(
        self, records: Records, headers: Sequence[BatchHeader], keys_required: bool
    ) -> list[BatchHeader] | None:
        """The records checked on the loop within the work bound; None when they exceed it."""
        try:
            return validate_produced_batches(
                records,
                headers,
                keys_required=keys_required,
                decompressed_bytes_max=self.decompressed_bytes_max,
                work_bound=self.inline_bound,
            )
        except ValidationTooCostly:
            return None

    async def check(
        self,
        partition: TopicPartition,
        records: Records,
        headers: Sequence[BatchHeader],
        *,
        keys_required: bool,
    ) -> Turn:
        """Check ``records`` (whose batch headers and CRCs ``headers`` are) completely; returns
        once they may be appended, or raises what ``validate_produced_batches`` raises."""
        busy = partition in self._last
        checked_here = self._check_inline(records, headers, keys_required)
        if checked_here is not None and not busy:
            return Turn(checked_here)  # the common case: no thread, nothing to wait for
        loop = asyncio.get_running_loop()
        before = self._last.get(partition)
        mine: asyncio.Future[None] = loop.create_future()
        self._last[partition] = mine
        turn = Turn([], self, partition, before, mine)
        try:
            if checked_here is None:
                turn.headers = await self._check_in_thread(records, headers, keys_required)
                turn.waited = True
            else:
                turn.headers = checked_here
            if before is not None and not before.done():
                # Shielded: a cancelled produce must not cancel the one it waits for.
                await asyncio.shield(before)
                turn.waited = True
        except BaseException:
            turn.done()
            raise
        return turn

    async def _check_in_thread(
        self, records: Records, headers: Sequence[BatchHeader], keys_required: bool
    ) -> list[BatchHeader]:
        compressed = any(header.attributes & COMPRESSION_MASK for header in headers)
        budget = self.budget
        decompressed_bytes_max = self.decompressed_bytes_max

        def work() -> list[BatchHeader]:
            reservation = budget.reserve(decompressed_bytes_max if compressed else 0)
            try:
                return validate_produced_batches(
                    records,
                    headers,
                    keys_required=keys_required,
                    decompressed_bytes_max=decompressed_bytes_max,
                    # One batch's records are all that is held once decompressed; of several, the
                    # next one's may be as large again: the reservation stays whole.
                    on_decompressed=reservation.shrink_to if len(headers) == 1 else None,
                    # Made and unmapped without holding the GIL for long: the loop keeps serving.
                    mapped=True,
                )
            finally:
                reservation.release()

        self.checked_in_threads += 1
        return await asyncio.wrap_future(self._executor.submit(work))

    def _finish(self, partition: TopicPartition, mine: asyncio.Future[None]) -> None:
        if not mine.done():
            mine.set_result(None)
        if self._last.get(partition) is mine:
            del self._last[partition]

    def close(self) -> None:
        """Stop the threads: checks not started are dropped, those under way finish."""
        self._executor.shutdown(wait=True, cancel_futures=True)
