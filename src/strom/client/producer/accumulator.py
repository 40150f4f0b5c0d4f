"""Per-partition batching: the cheap half of ``send()`` and what the sender drains. Pure, no I/O.

``append()`` runs on the application's thread under one lock and does per-record work only:
encode the record into the partition's open ``BatchBuilder``. Everything per batch (closing,
compressing, sequencing, sending) happens on the sender's side. A partition's batches leave in
the order they were opened; a batch that must be retried goes back to the front of its queue.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from strom.client.cluster import TopicPartition
from strom.client.producer.partitioner import StickyPartitioner
from strom.protocol.records import BatchBuilder, CompressionType

__all__ = ["DeliveryFuture", "ProducerBatch", "RecordAccumulator", "RecordMetadata"]

Header = tuple[str, bytes | None]
DeliveryCallback = Callable[[Exception | None, "RecordMetadata | None"], Any]


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where an acknowledged record landed. ``offset`` is -1 when the broker did not say (acks=0)."""

    topic: str
    partition: int
    offset: int
    timestamp: int


_CONDITION_CREATION_LOCK = threading.Lock()


class DeliveryFuture(Future["RecordMetadata"]):
    """A ``concurrent.futures.Future`` whose condition variable is made on first use.

    ``Future()`` builds a Condition (an RLock and more) per record, which costs more than
    encoding the record; most delivery futures are never waited on one by one (``flush()`` waits
    for all of them), so the condition is only made when someone does wait or resolve it.
    """

    def __init__(self) -> None:
        self._state = "PENDING"
        self._result = None
        self._exception = None
        self._waiters: list[Any] = []
        self._done_callbacks: list[Any] = []

    @property
    def _condition(self) -> threading.Condition:  # type: ignore[override]
        condition: threading.Condition | None = self.__dict__.get("_lazy_condition")
        if condition is None:
            with _CONDITION_CREATION_LOCK:
                condition = self.__dict__.get("_lazy_condition")
                if condition is None:
                    condition = self.__dict__["_lazy_condition"] = threading.Condition()
        return condition


class ProducerBatch:
    """Records for one partition, built together and sent together."""

    __slots__ = (
        "attempts",
        "builder",
        "callbacks",
        "created_ms",
        "encoded",
        "futures",
        "timestamps",
        "topic_partition",
    )

    def __init__(self, topic_partition: TopicPartition, compression: int, created_ms: int) -> None:
        self.topic_partition = topic_partition
        self.builder = BatchBuilder(compression=compression)
        self.futures: list[Future[RecordMetadata]] = []
        self.callbacks: dict[int, DeliveryCallback] = {}
        self.timestamps: list[int] = []
        self.created_ms = created_ms
        self.attempts = 0
        # The batch's bytes, built once when first drained so retries resend identical bytes.
        self.encoded: bytes | None = None

    @property
    def record_count(self) -> int:
        return len(self.futures)

    @property
    def base_sequence(self) -> int:
        return self.builder.base_sequence

    def build(self) -> bytes:
        if self.encoded is None:
            self.encoded = self.builder.build()
        return self.encoded

    def complete(self, base_offset: int, log_append_time_ms: int) -> None:
        """Resolve every record's future (and callback) with its offset."""
        topic, partition = self.topic_partition
        callbacks = self.callbacks
        for index, (future, timestamp) in enumerate(zip(self.futures, self.timestamps)):
            metadata = RecordMetadata(
                topic,
                partition,
                base_offset + index if base_offset >= 0 else -1,
                log_append_time_ms if log_append_time_ms >= 0 else timestamp,
            )
            if future.set_running_or_notify_cancel():
                future.set_result(metadata)
            callback = callbacks.get(index)
            if callback is not None:
                _run_callback(callback, None, metadata)

    def fail(self, error: Exception) -> None:
        for index, future in enumerate(self.futures):
            if future.set_running_or_notify_cancel():
                future.set_exception(error)
            callback = self.callbacks.get(index)
            if callback is not None:
                _run_callback(callback, error, None)


def _run_callback(
    callback: DeliveryCallback, error: Exception | None, metadata: RecordMetadata | None
) -> None:
    # A failing user callback must not stop the other records' delivery.
    try:
        callback(error, metadata)
    except Exception:
        import logging

        logging.getLogger(__name__).exception("delivery callback raised")


class RecordAccumulator:
    """Open and closed batches per partition; thread-safe."""

    def __init__(self, *, batch_size: int, linger_ms: int, compression: str | int) -> None:
        self.batch_size = batch_size
        self.linger_ms = linger_ms
        self.compression = (
            CompressionType[compression.upper()]
            if isinstance(compression, str)
            else CompressionType(compression)
        )
        # Re-entrant so append_keyless() can choose the partition and append under one hold.
        self.lock = threading.RLock()
        self._queues: dict[TopicPartition, deque[ProducerBatch]] = {}
        # Batches whose records have not all been resolved; flush() waits for zero.
        self._incomplete = 0
        self._incomplete_changed = threading.Condition(self.lock)
        self.flushing = 0

    # -- the application's side ----------------------------------------------------------------

    def append_keyless(
        self,
        topic: str,
        partition_count: int,
        partitioner: StickyPartitioner,
        timestamp_ms: int,
        value: bytes | None,
        headers: Iterable[Header],
        future: Future[RecordMetadata],
        callback: DeliveryCallback | None,
        now_ms: int,
    ) -> bool:
        """``append()`` to the topic's sticky partition, moving on when its batch is closed (KIP-480)."""
        with self.lock:
            partition = partitioner.current(topic)
            if partition is None or partition >= partition_count:
                partition = partitioner.next_partition(topic, partition_count)
            else:
                queue = self._queues.get(TopicPartition(topic, partition))
                if (
                    not queue
                    or queue[-1].encoded is not None
                    or queue[-1].builder.size_bytes >= self.batch_size
                ):
                    partition = partitioner.next_partition(topic, partition_count)
            return self.append(
                TopicPartition(topic, partition), timestamp_ms, None, value, headers, future, callback, now_ms
            )

    def append(
        self,
        topic_partition: TopicPartition,
        timestamp_ms: int,
        key: bytes | None,
        value: bytes | None,
        headers: Iterable[Header],
        future: Future[RecordMetadata],
        callback: DeliveryCallback | None,
        now_ms: int,
    ) -> bool:
        """Add one record. Returns True when the sender should look now: a batch was opened (its
        linger timer starts) or filled up."""
        with self.lock:
            queue = self._queues.get(topic_partition)
            if queue is None:
                queue = self._queues[topic_partition] = deque()
            batch = queue[-1] if queue and queue[-1].encoded is None else None
            wake = False
            if batch is None or batch.builder.size_bytes >= self.batch_size:
                batch = ProducerBatch(topic_partition, self.compression, now_ms)
                queue.append(batch)
                self._incomplete += 1
                wake = True
            batch.builder.append(timestamp_ms, key, value, headers)
            if callback is not None:
                batch.callbacks[len(batch.futures)] = callback
            batch.futures.append(future)
            batch.timestamps.append(timestamp_ms)
            if batch.builder.size_bytes >= self.batch_size:
                wake = True
            return wake

    def has_open_batch(self, topic_partition: TopicPartition) -> bool:
        """The partition has a batch that still takes records (KIP-480's "until the batch is sent")."""
        with self.lock:
            queue = self._queues.get(topic_partition)
            if not queue:
                return False
            last = queue[-1]
            return last.encoded is None and last.builder.size_bytes < self.batch_size

    # -- the sender's side ---------------------------------------------------------------------

    def ready(
        self, now_ms: int, blocked: Callable[[TopicPartition], bool]
    ) -> tuple[list[TopicPartition], int | None]:
        """Partitions with a batch to send now (full, lingered long enough, a retry, or a flush in
        progress), and the ms until the next one will be, or None when nothing is waiting."""
        ready: list[TopicPartition] = []
        next_ms: int | None = None
        with self.lock:
            for topic_partition, queue in self._queues.items():
                if not queue or blocked(topic_partition):
                    continue
                first = queue[0]
                if (
                    first.encoded is not None
                    or len(queue) > 1
                    or first.builder.size_bytes >= self.batch_size
                    or self.flushing
                ):
                    ready.append(topic_partition)
                    continue
                wait_ms = first.created_ms + self.linger_ms - now_ms
                if wait_ms <= 0:
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
        return batch

    def peek_size(self, topic_partition: TopicPartition) -> int:
        with self.lock:
            queue = self._queues.get(topic_partition)
            if not queue:
                return 0
            first = queue[0]
            return len(first.encoded) if first.encoded is not None else first.builder.size_bytes

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
                    expired.append(queue.popleft())
                if not queue:
                    del self._queues[topic_partition]
        return expired

    def drain_all(self) -> list[ProducerBatch]:
        with self.lock:
            batches = [batch for queue in self._queues.values() for batch in queue]
            self._queues.clear()
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
