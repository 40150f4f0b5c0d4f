"""Per-partition batching: the cheap half of ``send()`` and what the sender drains. Pure, no I/O.

``append()`` runs on the application's thread and does as little as possible per record: under
one lock it adds a (timestamp, key, value, headers) tuple to the partition's open batch and adds
an estimate of its size. Everything else happens once per batch on the sender's side: encoding all
the records in one pass (``build()``), compressing, sequencing, sending, and resolving. A record's
``DeliveryFuture`` is a small handle onto its batch, not a Future of its own: the batch's single
answer resolves every handle at once. A partition's batches leave in the order they were opened;
a batch that must be retried goes back to the front of its queue.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from strom.base.clock import Clock
from strom.client.cluster import TopicPartition
from strom.client.producer.partitioner import StickyPartitioner
from strom.protocol.records import CompressionType
from strom.protocol.records.batch import (
    ROW_OVERHEAD_BYTES_ESTIMATE,
    RecordRow,
    build_batch_from_rows,
    estimate_row_bytes,
)
from strom.protocol.records.header import HEADER_BYTES, NO_PRODUCER_ID, NO_SEQUENCE

__all__ = ["DeliveryFuture", "ProducerBatch", "RecordAccumulator", "RecordMetadata"]

log = logging.getLogger(__name__)

Header = tuple[str, bytes | None]
DeliveryCallback = Callable[[Exception | None, "RecordMetadata | None"], Any]
DoneCallback = Callable[["DeliveryFuture"], object]

# Creating a batch's Event lazily must not race with another waiter creating it too.
_EVENT_CREATION_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where an acknowledged record landed. ``offset`` is -1 when the broker did not say (acks=0)."""

    topic: str
    partition: int
    offset: int
    timestamp: int


class ProducerBatch:
    """Records for one partition, built together, sent together and resolved together."""

    __slots__ = (
        "_event",
        "attempts",
        "base_offset",
        "base_sequence",
        "callbacks",
        "created_ms",
        "done_callbacks",
        "encoded",
        "error",
        "finished",
        "log_append_time_ms",
        "producer_epoch",
        "producer_id",
        "rows",
        "size_bytes",
        "topic_partition",
    )

    def __init__(self, topic_partition: TopicPartition, created_ms: int) -> None:
        self.topic_partition = topic_partition
        self.rows: list[RecordRow] = []
        # Delivery callbacks by record index: most records have none, so no list per record.
        self.callbacks: dict[int, DeliveryCallback] = {}
        # add_done_callback() registrations, run after the delivery callbacks.
        self.done_callbacks: list[tuple[DeliveryFuture, DoneCallback]] = []
        self.size_bytes = HEADER_BYTES
        self.created_ms = created_ms
        self.attempts = 0
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = -1
        self.base_sequence = NO_SEQUENCE
        # The batch's bytes, built once when first drained so retries resend identical bytes.
        self.encoded: bytes | None = None
        # The answer: set once, before ``finished``; read by the handles.
        self.base_offset = -1
        self.log_append_time_ms = -1
        self.error: BaseException | None = None
        self.finished = False
        self._event: threading.Event | None = None

    @property
    def record_count(self) -> int:
        return len(self.rows)

    def build(self, compression: int = CompressionType.NONE, transactional: bool = False) -> bytes:
        """The batch's bytes (built on first call, the same bytes on every later one)."""
        if self.encoded is None:
            self.encoded = build_batch_from_rows(
                self.rows,
                compression=compression,
                producer_id=self.producer_id,
                producer_epoch=self.producer_epoch,
                base_sequence=self.base_sequence,
                is_transactional=transactional,
            )
        return self.encoded

    # -- resolving -------------------------------------------------------------------------------

    def metadata(self, index: int) -> RecordMetadata:
        topic, partition = self.topic_partition
        base_offset = self.base_offset
        return RecordMetadata(
            topic,
            partition,
            base_offset + index if base_offset >= 0 else -1,
            self.log_append_time_ms if self.log_append_time_ms >= 0 else self.rows[index][0],
        )

    def complete(self, base_offset: int, log_append_time_ms: int) -> None:
        """Resolve every record (and call its callback) with its offset."""
        self.base_offset = base_offset
        self.log_append_time_ms = log_append_time_ms
        self._finish()
        metadata = self.metadata
        for index, callback in self.callbacks.items():
            _run_callback(callback, None, metadata(index))
        self._run_done_callbacks()

    def fail(self, error: Exception) -> None:
        self.error = error
        self._finish()
        for callback in self.callbacks.values():
            _run_callback(callback, error, None)
        self._run_done_callbacks()

    def _finish(self) -> None:
        # ``finished`` first, then the event: a waiter makes the event first, then reads
        # ``finished``; so either it sees the batch finished or this sees its event.
        self.finished = True
        event = self._event
        if event is not None:
            event.set()

    def _run_done_callbacks(self) -> None:
        registered, self.done_callbacks = self.done_callbacks, []
        for future, callback in registered:
            try:
                callback(future)
            except Exception:
                log.exception("future done callback raised")

    def wait(self, timeout_s: float | None) -> bool:
        if self.finished:
            return True
        event = self._event
        if event is None:
            with _EVENT_CREATION_LOCK:
                event = self._event
                if event is None:
                    event = self._event = threading.Event()
        if self.finished:
            return True
        return event.wait(timeout_s)


def _run_callback(
    callback: DeliveryCallback, error: Exception | None, metadata: RecordMetadata | None
) -> None:
    # A failing user callback must not stop the other records' delivery.
    try:
        callback(error, metadata)
    except Exception:
        log.exception("delivery callback raised")


class DeliveryFuture(Future[RecordMetadata]):
    """A record's delivery: a ``concurrent.futures.Future`` in interface, a (batch, index) pair inside.

    A real Future per record (a Condition, an RLock, lists) costs more than encoding the record;
    this handle costs two slots and resolves from its batch's one answer. It supports what
    applications use: ``result``, ``exception``, ``done``, ``add_done_callback``. It is never
    cancelled (a queued record cannot be taken back) and ``concurrent.futures.wait`` /
    ``as_completed`` do not accept it; wait with ``result()`` or ``Producer.flush()`` instead.
    """

    __slots__ = ("_batch", "_index")

    def __init__(self, batch: ProducerBatch, index: int) -> None:  # no super().__init__: see above
        self._batch = batch
        self._index = index

    def __repr__(self) -> str:
        state = "finished" if self._batch.finished else "pending"
        return f"<DeliveryFuture {self._batch.topic_partition} #{self._index} {state}>"

    def cancel(self) -> bool:
        return False

    def cancelled(self) -> bool:
        return False

    def running(self) -> bool:
        return not self._batch.finished

    def done(self) -> bool:
        return self._batch.finished

    def result(self, timeout: float | None = None) -> RecordMetadata:
        batch = self._batch
        if not batch.wait(timeout):
            raise TimeoutError(f"record not delivered within {timeout} s")
        if batch.error is not None:
            raise batch.error
        return batch.metadata(self._index)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        batch = self._batch
        if not batch.wait(timeout):
            raise TimeoutError(f"record not delivered within {timeout} s")
        return batch.error

    def add_done_callback(self, fn: DoneCallback) -> None:
        batch = self._batch
        if not batch.finished:
            with _EVENT_CREATION_LOCK:
                if not batch.finished:
                    batch.done_callbacks.append((self, fn))
                    return
        try:
            fn(self)
        except Exception:
            log.exception("future done callback raised")

    def set_running_or_notify_cancel(self) -> bool:
        raise RuntimeError("a DeliveryFuture is resolved by its producer")

    def set_result(self, result: RecordMetadata) -> None:
        raise RuntimeError("a DeliveryFuture is resolved by its producer")

    def set_exception(self, exception: BaseException | None) -> None:
        raise RuntimeError("a DeliveryFuture is resolved by its producer")


class RecordAccumulator:
    """Open and closed batches per partition; thread-safe."""

    def __init__(self, *, batch_size: int, linger_ms: int, compression: str | int, clock: Clock) -> None:
        self.batch_size = batch_size
        self.linger_ms = linger_ms
        self.compression = (
            CompressionType[compression.upper()]
            if isinstance(compression, str)
            else CompressionType(compression)
        )
        self._clock = clock
        self.lock = threading.Lock()
        self._queues: dict[TopicPartition, deque[ProducerBatch]] = {}
        # The batch each partition is filling (the last of its queue, not yet drained).
        self._open: dict[TopicPartition, ProducerBatch] = {}
        # Per topic, the open batch keyless records go to (its sticky partition's).
        self._sticky: dict[str, ProducerBatch] = {}
        # Batches whose records have not all been resolved; flush() waits for zero.
        self._incomplete = 0
        self._incomplete_changed = threading.Condition(self.lock)
        self.flushing = 0
        # Set by append() when the sender should look now (a batch opened, so its linger timer
        # starts, or one filled up); the producer wakes the sender and clears it.
        self.wake_needed = False
        # Partitions with a request in flight, kept by the sender. With linger_ms 0 a batch opened
        # for one of them needs no wake-up (waking the loop thread costs a self-pipe write and a
        # turn of the loop): it leaves when that request is answered, and the answer wakes the
        # sender when anything is queued. Read here without the sender's lock: the sender removes
        # a partition before it counts what is queued, and a batch is counted (``_incomplete``)
        # before this is read, so one side or the other always wakes the sender.
        self.busy: set[TopicPartition] = set()

    # -- the application's side ----------------------------------------------------------------

    def append_keyless(
        self,
        topic: str,
        partition_count: int,
        partitioner: StickyPartitioner,
        timestamp_ms: int | None,
        value: bytes | None,
        headers: Sequence[Header],
        callback: DeliveryCallback | None,
    ) -> DeliveryFuture:
        """``append()`` to the topic's sticky partition, moving on when its batch is full or
        drained (KIP-480)."""
        if timestamp_ms is None:
            timestamp_ms = self._clock.wall_ms()
        with self.lock:
            batch = self._sticky.get(topic)
            if (
                batch is None
                or batch.encoded is not None
                or batch.size_bytes >= self.batch_size
                or batch.topic_partition.partition >= partition_count
            ):
                partition = partitioner.next_partition(topic, partition_count)
                batch = self._open_batch(TopicPartition(topic, partition))
                self._sticky[topic] = batch
            rows = batch.rows
            index = len(rows)
            rows.append((timestamp_ms, None, value, headers))
            if headers:
                batch.size_bytes += estimate_row_bytes(None, value, headers)
            else:
                batch.size_bytes += ROW_OVERHEAD_BYTES_ESTIMATE + (0 if value is None else len(value))
            if callback is not None:
                batch.callbacks[index] = callback
            if batch.size_bytes >= self.batch_size:
                self.wake_needed = True
        return DeliveryFuture(batch, index)

    def append(
        self,
        topic_partition: TopicPartition,
        timestamp_ms: int | None,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header],
        callback: DeliveryCallback | None,
    ) -> DeliveryFuture:
        """Add one record to the partition's open batch (opening one when needed)."""
        if timestamp_ms is None:
            timestamp_ms = self._clock.wall_ms()
        with self.lock:
            batch = self._open_batch(topic_partition)
            rows = batch.rows
            index = len(rows)
            rows.append((timestamp_ms, key, value, headers))
            batch.size_bytes += estimate_row_bytes(key, value, headers)
            if callback is not None:
                batch.callbacks[index] = callback
            if batch.size_bytes >= self.batch_size:
                self.wake_needed = True
        return DeliveryFuture(batch, index)

    def _open_batch(self, topic_partition: TopicPartition) -> ProducerBatch:
        """The partition's open batch, a new one if it has none. Called holding the lock."""
        batch = self._open.get(topic_partition)
        if batch is None or batch.size_bytes >= self.batch_size:
            batch = self._new_batch(topic_partition)
        return batch

    def _new_batch(self, topic_partition: TopicPartition) -> ProducerBatch:
        batch = ProducerBatch(topic_partition, self._clock.monotonic_ms())
        queue = self._queues.get(topic_partition)
        if queue is None:
            queue = self._queues[topic_partition] = deque()
        queue.append(batch)
        self._open[topic_partition] = batch
        self._incomplete += 1
        if self.linger_ms or topic_partition not in self.busy:
            self.wake_needed = True
        return batch

    def has_queue_not_busy(self) -> bool:
        """A partition without a request in flight has a batch queued."""
        busy = self.busy
        with self.lock:
            return any(
                queue and topic_partition not in busy for topic_partition, queue in self._queues.items()
            )

    def has_open_batch(self, topic_partition: TopicPartition) -> bool:
        """The partition has a batch that still takes records (KIP-480's "until the batch is sent")."""
        with self.lock:
            batch = self._open.get(topic_partition)
            return batch is not None and batch.size_bytes < self.batch_size

    # -- the sender's side ---------------------------------------------------------------------

    def ready(
        self,
        now_ms: int,
        blocked: Callable[[TopicPartition], bool],
        busy: Callable[[TopicPartition], bool] | None = None,
    ) -> tuple[list[TopicPartition], int | None]:
        """Partitions with a batch to send now (full, lingered long enough, a retry, or a flush in
        progress), and the ms until the next one will be, or None when nothing is waiting.

        With ``linger_ms`` 0 a batch that is not full goes at once when its partition is not
        ``busy`` (has no request in flight); otherwise it goes when the answer comes (the caller
        looks again then), taking every record that arrived meanwhile: records that arrive while
        one request is out travel together in the next, as Kafka's linger.ms describes, instead
        of a request each (no timer: the answer is what sends it)."""
        ready: list[TopicPartition] = []
        next_ms: int | None = None
        hold_while_busy = busy is not None and self.linger_ms == 0
        with self.lock:
            for topic_partition, queue in self._queues.items():
                if not queue or blocked(topic_partition):
                    continue
                first = queue[0]
                if (
                    first.encoded is not None
                    or len(queue) > 1
                    or first.size_bytes >= self.batch_size
                    or self.flushing
                ):
                    ready.append(topic_partition)
                    continue
                wait_ms = first.created_ms + self.linger_ms - now_ms
                if wait_ms <= 0:
                    if hold_while_busy and busy(topic_partition):  # type: ignore[misc]
                        continue
                    ready.append(topic_partition)
                elif next_ms is None or wait_ms < next_ms:
                    next_ms = wait_ms
        return ready, next_ms

    def pop(self, topic_partition: TopicPartition) -> ProducerBatch | None:
        """Take the partition's first batch; it no longer takes records. The caller sets its
        producer id and sequence (when new) and calls ``build()``."""
        with self.lock:
            queue = self._queues.get(topic_partition)
            if not queue:
                return None
            batch = queue.popleft()
            if not queue:
                del self._queues[topic_partition]
            self._close(batch)
        return batch

    def _close(self, batch: ProducerBatch) -> None:
        """``batch`` takes no more records. Called holding the lock."""
        topic_partition = batch.topic_partition
        if self._open.get(topic_partition) is batch:
            del self._open[topic_partition]
        if self._sticky.get(topic_partition.topic) is batch:
            del self._sticky[topic_partition.topic]

    def peek_size(self, topic_partition: TopicPartition) -> int:
        with self.lock:
            queue = self._queues.get(topic_partition)
            if not queue:
                return 0
            first = queue[0]
            return len(first.encoded) if first.encoded is not None else first.size_bytes

    def requeue(self, batch: ProducerBatch) -> None:
        """Put a batch to retry back at the front of its partition, ordered by sequence."""
        with self.lock:
            queue = self._queues.get(batch.topic_partition)
            if queue is None:
                queue = self._queues[batch.topic_partition] = deque()
            index = 0
            while (
                index < len(queue)
                and queue[index].encoded is not None
                and queue[index].base_sequence < batch.base_sequence
            ):
                index += 1
            queue.insert(index, batch)

    def expired(self, now_ms: int, delivery_timeout_ms: int) -> list[ProducerBatch]:
        """Remove and return queued batches older than ``delivery.timeout.ms``."""
        expired: list[ProducerBatch] = []
        with self.lock:
            for topic_partition in list(self._queues):
                queue = self._queues[topic_partition]
                while queue and now_ms - queue[0].created_ms >= delivery_timeout_ms:
                    batch = queue.popleft()
                    self._close(batch)
                    expired.append(batch)
                if not queue:
                    del self._queues[topic_partition]
        return expired

    def drain_all(self) -> list[ProducerBatch]:
        with self.lock:
            batches = [batch for queue in self._queues.values() for batch in queue]
            self._queues.clear()
            self._open.clear()
            self._sticky.clear()
        return batches

    def done(self, batch: ProducerBatch) -> None:
        """A batch's records are all resolved."""
        with self.lock:
            self._incomplete -= 1
            if self._incomplete == 0:
                self._incomplete_changed.notify_all()

    @property
    def incomplete(self) -> int:
        return self._incomplete

    def wait_all_done(self, timeout_s: float | None) -> bool:
        with self.lock:
            return self._incomplete_changed.wait_for(lambda: self._incomplete == 0, timeout_s)
