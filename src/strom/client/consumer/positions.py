"""Which partitions the consumer reads, where it stands in each, and what is buffered. Pure, no I/O.

Shared by the application thread (poll, seek, pause) and the loop thread (fetching), so every
method takes the one lock. A partition without a position waits for a reset (``auto.offset.reset``
or a seek to the beginning/end) before it is fetched. Fetched records are buffered per partition
together with the offset they were fetched at; a seek makes them stale and they are dropped.
"""

from __future__ import annotations

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


@dataclass(slots=True)
class _PartitionState:
    position: int | None = None
    # "earliest", "latest" or None: how to find a position when there is none.
    reset_to: str | None = None
    paused: bool = False
    # A group assignment: the committed offset is being fetched, so no reset may run yet.
    awaiting_committed: bool = False
    buffered: FetchedRecords | None = None
    high_watermark: int = -1


@dataclass
class SubscriptionState:
    default_reset: str
    lock: threading.Condition = field(default_factory=threading.Condition)
    _partitions: dict[TopicPartition, _PartitionState] = field(default_factory=dict)

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
                    state.position = offset
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
            state.position = offset
            state.reset_to = None
            state.awaiting_committed = False
            state.buffered = None

    def request_reset(self, topic_partitions: Iterable[TopicPartition], reset_to: str) -> None:
        with self.lock:
            for topic_partition in topic_partitions:
                state = self._state(topic_partition)
                state.position = None
                state.reset_to = reset_to
                state.awaiting_committed = False
                state.buffered = None

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
                state.position = offset
                state.reset_to = None
                self.lock.notify_all()

    def out_of_range(self, topic_partition: TopicPartition, fetch_offset: int) -> None:
        """The broker has no records at ``fetch_offset``: reset by the default policy."""
        with self.lock:
            state = self._partitions.get(topic_partition)
            if state is not None and state.position == fetch_offset:
                state.position = None
                state.reset_to = None
                state.buffered = None

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

    def fetchable(self) -> dict[TopicPartition, int]:
        """Partitions to fetch now, at their positions: assigned, positioned, not paused, and
        with nothing buffered (one fetch's worth of records per partition is held at most)."""
        with self.lock:
            return {
                tp: state.position
                for tp, state in self._partitions.items()
                if state.position is not None and not state.paused and state.buffered is None
            }

    def add_fetched(
        self, topic_partition: TopicPartition, fetched: FetchedRecords, high_watermark: int
    ) -> None:
        """Buffer a fetch's records if the partition is still at the offset they were fetched at."""
        with self.lock:
            state = self._partitions.get(topic_partition)
            if state is None or state.position != fetched.fetch_offset:
                return
            state.high_watermark = high_watermark
            if not fetched.records:
                # Only filtered records (control batches): move past them without a poll.
                if fetched.next_offset > fetched.fetch_offset:
                    state.position = fetched.next_offset
                return
            state.buffered = fetched
            self.lock.notify_all()

    # -- polling (application thread) ----------------------------------------------------------

    def take(self, max_records: int) -> list[ConsumerRecord]:
        """Up to ``max_records`` buffered records, advancing positions past them."""
        taken: list[ConsumerRecord] = []
        with self.lock:
            for state in self._partitions.values():
                if len(taken) >= max_records:
                    break
                fetched = state.buffered
                if fetched is None or state.paused:
                    continue
                start = fetched.consumed
                end = min(len(fetched.records), start + max_records - len(taken))
                chunk = fetched.records[start:end]
                taken.extend(chunk)
                fetched.consumed = end
                if end >= len(fetched.records):
                    state.position = max(fetched.next_offset, chunk[-1].offset + 1 if chunk else 0)
                    state.buffered = None
                elif chunk:
                    state.position = chunk[-1].offset + 1
        return taken

    def has_buffered(self) -> bool:
        with self.lock:
            return any(state.buffered is not None and not state.paused for state in self._partitions.values())
