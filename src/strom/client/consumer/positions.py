"""Which partitions the consumer reads, where it stands in each, and what is buffered. Pure, no I/O.

Shared by the application thread (poll, seek, pause) and the loop thread (fetching), so every
method takes the one lock. A partition without a position waits for a reset (``auto.offset.reset``
or a seek to the beginning/end) before it is fetched. Fetched records are buffered per partition
together with the offset they were fetched at; a seek makes them stale and they are dropped.

Two offsets per partition: the position (the next record ``poll()`` returns) and the fetch position
(where the next fetch starts: after everything buffered). The fetcher keeps fetching ahead while
the application works through the buffer, up to a bound on the buffered bytes, so that fetching
and consuming overlap.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from strom.client.cluster import TopicPartition

__all__ = ["ConsumerRecord", "FetchedRecords", "SubscriptionState"]

Header = tuple[str, bytes | None]


class ConsumerRecord(NamedTuple):
    """One record as ``poll()`` returns it. ``headers`` is a tuple (the shared empty tuple for a
    record without headers, so that most records cost no container of their own)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]


@dataclass(slots=True)
class FetchedRecords:
    """Records of one partition from one fetch, starting at ``fetch_offset``.

    ``next_offset`` is where the partition's next fetch starts once these are consumed (after the
    last batch, which may end in records that were filtered out, such as control records)."""

    fetch_offset: int
    records: list[ConsumerRecord]
    next_offset: int
    consumed: int = 0
    # The fetched bytes these records came from: what the prefetch bound counts.
    size_bytes: int = field(default=0, compare=False)


@dataclass(slots=True)
class _PartitionState:
    position: int | None = None
    # "earliest", "latest" or None: how to find a position when there is none.
    reset_to: str | None = None
    paused: bool = False
    # A group assignment: the committed offset is being fetched, so no reset may run yet.
    awaiting_committed: bool = False
    # Fetches not yet wholly taken by poll(), oldest first, and their size_bytes summed.
    buffered: collections.deque[FetchedRecords] = field(default_factory=collections.deque)
    buffered_bytes: int = 0
    # Where the next fetch starts: the position, or after the last buffered fetch.
    fetch_position: int | None = None
    # The broker answered OFFSET_OUT_OF_RANGE at the fetch position while records before it were
    # still buffered: no fetch until they are taken (then the fetch at the position decides).
    out_of_range_ahead: bool = False
    high_watermark: int = -1

    def set_position(self, position: int | None) -> None:
        """Move to ``position``, dropping whatever was buffered."""
        self.position = position
        self.fetch_position = position
        self.buffered.clear()
        self.buffered_bytes = 0
        self.out_of_range_ahead = False


@dataclass
class SubscriptionState:
    default_reset: str
    lock: threading.Condition = field(default_factory=threading.Condition)
    _partitions: dict[TopicPartition, _PartitionState] = field(default_factory=dict)
    # Where the next take() starts among the partitions (they take turns).
    _take_cursor: int = 0
    # The last fetchable() left a positioned partition out because of what it had buffered: a
    # take() may make room, and then the fetcher must be woken (otherwise it need not be).
    held_back: bool = False

    # -- assignment ----------------------------------------------------------------------------

    def assign(self, topic_partitions: Iterable[TopicPartition]) -> None:
        """Replace the assignment; partitions kept keep their position."""
        wanted = list(dict.fromkeys(topic_partitions))
        with self.lock:
            self._partitions = {tp: self._partitions.get(tp) or _PartitionState() for tp in wanted}

    def add_partitions(self, topic_partitions: Iterable[TopicPartition]) -> None:
        """Add partitions given by a group rebalance; they wait for their committed offsets."""
        with self.lock:
            for tp in topic_partitions:
                if tp not in self._partitions:
                    self._partitions[tp] = _PartitionState(awaiting_committed=True)

    def remove_partitions(self, topic_partitions: Iterable[TopicPartition]) -> None:
        with self.lock:
            for tp in topic_partitions:
                self._partitions.pop(tp, None)

    def awaiting_committed(self, topic_partitions: Iterable[TopicPartition]) -> list[TopicPartition]:
        with self.lock:
            return [
                tp
                for tp in topic_partitions
                if (state := self._partitions.get(tp)) is not None and state.awaiting_committed
            ]

    def committed_loaded(self, committed: dict[TopicPartition, int | None]) -> None:
        """Start from the committed offsets; partitions without one fall to auto.offset.reset."""
        with self.lock:
            for tp, offset in committed.items():
                state = self._partitions.get(tp)
                if state is None or not state.awaiting_committed:
                    continue
                state.awaiting_committed = False
                if offset is not None:
                    state.set_position(offset)
            self.lock.notify_all()

    def positions(self) -> dict[TopicPartition, int]:
        """Every assigned partition that has a position, at it (what a commit stores)."""
        with self.lock:
            return {
                tp: state.position for tp, state in self._partitions.items() if state.position is not None
            }

    def assignment(self) -> set[TopicPartition]:
        with self.lock:
            return set(self._partitions)

    def _state(self, topic_partition: TopicPartition) -> _PartitionState:
        state = self._partitions.get(topic_partition)
        if state is None:
            raise KeyError(f"{topic_partition} is not assigned to this consumer")
        return state

    # -- positions -----------------------------------------------------------------------------

    def position(self, topic_partition: TopicPartition) -> int | None:
        with self.lock:
            return self._state(topic_partition).position

    def seek(self, topic_partition: TopicPartition, offset: int) -> None:
        with self.lock:
            state = self._state(topic_partition)
            state.set_position(offset)
            state.reset_to = None
            state.awaiting_committed = False

    def request_reset(self, topic_partitions: Iterable[TopicPartition], reset_to: str) -> None:
        with self.lock:
            for topic_partition in topic_partitions:
                state = self._state(topic_partition)
                state.set_position(None)
                state.reset_to = reset_to
                state.awaiting_committed = False

    def needing_reset(self) -> dict[TopicPartition, str]:
        """Partitions without a position and the strategy to find one."""
        with self.lock:
            return {
                tp: state.reset_to or self.default_reset
                for tp, state in self._partitions.items()
                if state.position is None and not state.awaiting_committed
            }

    def reset_done(self, topic_partition: TopicPartition, offset: int, reset_to: str) -> None:
        """Set a position found by a reset, unless a seek or another reset came in meanwhile."""
        with self.lock:
            state = self._partitions.get(topic_partition)
            if (
                state is not None
                and state.position is None
                and (state.reset_to or self.default_reset) == reset_to
            ):
                state.set_position(offset)
                state.reset_to = None
                self.lock.notify_all()

    def out_of_range(self, topic_partition: TopicPartition, fetch_offset: int) -> None:
        """The broker has no records at ``fetch_offset``: reset by the default policy (once the
        records buffered before it are taken)."""
        with self.lock:
            state = self._partitions.get(topic_partition)
            if state is None or state.fetch_position != fetch_offset:
                return  # a stale fetch: a seek or a reset came in meanwhile
            if state.buffered:
                state.out_of_range_ahead = True
                return
            state.set_position(None)
            state.reset_to = None

    # -- pause ---------------------------------------------------------------------------------

    def pause(self, topic_partitions: Iterable[TopicPartition]) -> None:
        with self.lock:
            for topic_partition in topic_partitions:
                self._state(topic_partition).paused = True

    def resume(self, topic_partitions: Iterable[TopicPartition]) -> None:
        with self.lock:
            for topic_partition in topic_partitions:
                self._state(topic_partition).paused = False
            self.lock.notify_all()

    def paused(self) -> set[TopicPartition]:
        with self.lock:
            return {tp for tp, state in self._partitions.items() if state.paused}

    # -- fetching (loop thread) ----------------------------------------------------------------

    def fetchable(
        self, partition_buffer_bytes_max: int = 0, total_buffer_bytes_max: int = 0
    ) -> dict[TopicPartition, int]:
        """Partitions to fetch now, at their fetch positions: assigned, positioned, not paused, and
        with fewer than ``partition_buffer_bytes_max`` bytes buffered (or nothing), while all
        partitions together hold fewer than ``total_buffer_bytes_max`` (or nothing). The defaults
        fetch only partitions with nothing buffered."""
        with self.lock:
            states = self._partitions
            if sum(state.buffered_bytes for state in states.values()) >= total_buffer_bytes_max:
                partition_buffer_bytes_max = 0
            wanted: dict[TopicPartition, int] = {}
            held_back = False
            for tp, state in states.items():
                fetch_position = state.fetch_position
                if fetch_position is None or state.paused:
                    continue
                if state.buffered:
                    if state.out_of_range_ahead or state.buffered_bytes >= partition_buffer_bytes_max:
                        held_back = True
                        continue
                else:
                    state.out_of_range_ahead = False
                wanted[tp] = fetch_position
            self.held_back = held_back
            return wanted

    def add_fetched(
        self, topic_partition: TopicPartition, fetched: FetchedRecords, high_watermark: int
    ) -> None:
        """Buffer a fetch's records if the partition's fetch position is still the offset they
        were fetched at."""
        with self.lock:
            state = self._partitions.get(topic_partition)
            if state is None or state.fetch_position != fetched.fetch_offset:
                return
            state.high_watermark = high_watermark
            if not fetched.records:
                # Only filtered records (control batches): move past them without a poll.
                if fetched.next_offset > fetched.fetch_offset:
                    state.fetch_position = fetched.next_offset
                    if state.buffered:
                        # Kept (empty) so that the position passes them once what precedes is taken.
                        state.buffered.append(fetched)
                    else:
                        state.position = fetched.next_offset
                return
            last_offset = fetched.records[-1].offset
            state.fetch_position = max(fetched.next_offset, last_offset + 1)
            state.buffered.append(fetched)
            state.buffered_bytes += fetched.size_bytes
            self.lock.notify_all()

    # -- polling (application thread) ----------------------------------------------------------

    def take(self, max_records: int) -> list[ConsumerRecord]:
        """Up to ``max_records`` buffered records, advancing positions past them. Partitions take
        turns: each call starts after the partition the previous one took from last, so a
        partition that is always refilled by fetching ahead cannot starve the others."""
        taken: list[ConsumerRecord] = []
        with self.lock:
            states = list(self._partitions.values())
            if not states:
                return taken
            first = self._take_cursor % len(states)
            for index in range(first, first + len(states)):
                state = states[index % len(states)]
                buffered = state.buffered
                if not buffered or state.paused:
                    continue
                self._take_cursor = index + 1
                while buffered:
                    room = max_records - len(taken)
                    if room <= 0:
                        return taken
                    fetched = buffered[0]
                    records = fetched.records
                    start = fetched.consumed
                    end = min(len(records), start + room)
                    if end > start:
                        taken.extend(records[start:end] if start or end < len(records) else records)
                        state.position = records[end - 1].offset + 1
                    fetched.consumed = end
                    if end < len(records):
                        return taken
                    # A whole fetch taken: the position moves past what it filtered out too.
                    state.position = max(fetched.next_offset, state.position or 0)
                    buffered.popleft()
                    state.buffered_bytes -= fetched.size_bytes
        return taken

    def has_buffered(self) -> bool:
        with self.lock:
            return any(state.buffered and not state.paused for state in self._partitions.values())
