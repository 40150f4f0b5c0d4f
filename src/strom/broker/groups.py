"""The broker's side of the group coordinator: its timers on the event loop, its writes into
``__consumer_offsets``, and loading that topic back on start.

The coordinator (``strom.coordinator``) is a pure object: requests and time go in, responses and
records come out. This module joins it to storage through the small writer interface the
coordinator defines, and replays the topic through the same ``replay()`` live handling uses.

On a single node a write counts once it is in the log file (as every produce there). A broker of a
cluster writes only to the offsets partitions it leads, and a write counts once it is below the
partition's high watermark — every in-sync replica has it (seed 003 §3.5.1): the writer waits
through the same ``Replication.wait_for_acks`` as an acks=all produce, for at most
``offsets.commit.timeout.ms``, and the coordinator turns a failure into what Kafka tells the client
(``strom.coordinator.records``: COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR) so it retries.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import gc
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol

from strom.base.clock import Clock
from strom.broker.group_topics import BrokerTopics
from strom.broker.refused import Refused
from strom.coordinator import OFFSETS_TOPIC, CoordinatorConfig, GroupCoordinator
from strom.coordinator.log_replay import CompactedPartition
from strom.coordinator.records import CorruptCoordinatorRecord
from strom.protocol.errors import ErrorCode
from strom.protocol.records import BatchBuilder, CorruptBatchError, iter_batches, parse_batch_header
from strom.protocol.records.batch import DecodedBatch
from strom.protocol.records.control import marker_commits
from strom.protocol.records.header import CONTROL_BIT, TRANSACTIONAL_BIT
from strom.storage import LogManager, PartitionLog, StorageError

log = logging.getLogger("strom.broker.groups")

# __consumer_offsets as Kafka creates it: compacted, 100 MiB segments (offsets.topic.segment.bytes).
OFFSETS_TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.bytes": str(100 * 1024 * 1024)}
# How much of a partition is read per step while loading, between which the loop serves others.
LOAD_CHUNK_BYTES = 1024 * 1024
# Records replayed between two turns of the loop while loading (others are served meanwhile).
LOAD_REPLAY_STEP_RECORDS = 20_000
LOAD_ERRORS_LOGGED_MAX = 10
# acks=all: the coordinator's writes in a cluster wait for every in-sync replica.
ACKS_ALL = -1
_TRANSACTIONAL_OR_CONTROL = TRANSACTIONAL_BIT | CONTROL_BIT


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for one synchronous step of a load.

    A load builds hundreds of thousands of long-lived objects (groups, members, offsets, session
    timers) and none of them is garbage; with the collector on, the growing heap is walked again
    and again (a third of the CPU of loading 10,000 groups went to it). The steps are a chunk of
    the log (``LOAD_CHUNK_BYTES``), ``LOAD_REPLAY_STEP_RECORDS`` records, and arming the sessions
    of one partition's members, so what waits for the next collection is bounded by them; the
    collector is left as it was found (off if someone else turned it off)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _skipped(partition: int, error: CorruptCoordinatorRecord, skipped: int) -> int:
    skipped += 1
    if skipped <= LOAD_ERRORS_LOGGED_MAX:
        log.error("%s-%d: skipped a record that does not decode: %s", OFFSETS_TOPIC, partition, error)
    return skipped


def _read_transactional(
    compacted: CompactedPartition, batch: DecodedBatch, from_offset: int, partition: int
) -> int:
    """Read a batch of the load's slow path (transactional, control, or any while a transaction
    is open) into ``compacted``; the records read (markers are not counted)."""
    header = batch.header
    if header.is_control:
        if header.is_transactional and header.last_offset >= from_offset and batch.records:
            commit = marker_commits(batch.records[0].key)
            if commit is None:
                log.error(
                    "%s-%d: control batch at offset %d is no transaction marker: ignored",
                    OFFSETS_TOPIC,
                    partition,
                    header.base_offset,
                )
            else:
                compacted.marker(header.producer_id, commit)
        return 0
    read = 0
    base_offset = header.base_offset
    transactional = header.is_transactional
    for record in batch.records:
        key = record.key
        log_offset = base_offset + record.offset_delta
        if key is not None and log_offset >= from_offset:
            if transactional:
                compacted.transactional(header.producer_id, key, record.value, log_offset)
            else:
                compacted.plain(key, record.value)
            read += 1
    return read


class ReplicatedWrites(Protocol):
    """What the writer uses of a cluster's ``Replication``: the partition's log if this broker
    leads it (else ``Refused``), and the wait until the in-sync replicas have an append."""

    def writable(self, topic: str, partition: int, acks: int) -> PartitionLog: ...

    def wait_for_acks(
        self, appended: Sequence[tuple[PartitionLog, int]], timeout_ms: int
    ) -> Awaitable[list[ErrorCode]]: ...


class TimerHandle(Protocol):
    def when(self) -> float: ...

    def cancel(self) -> None: ...


class TimerLoop(Protocol):
    """What ``AsyncioTimer`` uses of an event loop: its clock and ``call_at`` (asyncio's loop in
    the broker; a manual loop in unit tests, which move its clock instead of sleeping)."""

    def time(self) -> float: ...

    def call_at(self, when: float, callback: Callable[[str], None], key: str, /) -> TimerHandle: ...


class AsyncioTimer:
    """The coordinator's keyed timers on the event loop: scheduling a key replaces its timer.

    Re-arming is the hot case (every heartbeat pushes its member's session deadline back), so a
    later deadline only moves the entry's deadline; the loop callback, when it fires early, arms
    itself again for the remainder instead of being cancelled and re-created each time.
    Timers scheduled before the loop is known (the coordinator arms its first ones when it is
    built) are armed when ``bind(loop)`` is called, with their full delay from then.
    """

    def __init__(self) -> None:
        self._loop: TimerLoop | None = None
        # key -> [deadline in loop time, operation, the loop handle that will look at it, the time
        # that handle fires]. That time is kept here: uvloop answers call_at of a time already past
        # with a plain Handle, which has no when().
        self._entries: dict[str, list[Any]] = {}
        self._unbound: dict[str, tuple[int, Callable[[], None]]] = {}

    def bind(self, loop: TimerLoop) -> None:
        self._loop = loop
        unbound, self._unbound = self._unbound, {}
        for key, (delay_ms, operation) in unbound.items():
            self.schedule(key, delay_ms, operation)

    def schedule(self, key: str, delay_ms: int, operation: Callable[[], None]) -> None:
        loop = self._loop
        if loop is None:
            self._unbound[key] = (delay_ms, operation)
            return
        deadline = loop.time() + max(delay_ms, 0) / 1000
        entry = self._entries.get(key)
        if entry is not None and entry[3] <= deadline:
            entry[0] = deadline
            entry[1] = operation
            return
        if entry is not None:
            entry[2].cancel()
        self._entries[key] = [deadline, operation, loop.call_at(deadline, self._fire, key), deadline]

    def _fire(self, key: str) -> None:
        entry = self._entries.get(key)
        if entry is None:
            return
        assert self._loop is not None
        deadline, operation = entry[0], entry[1]
        if deadline > self._loop.time():
            entry[2] = self._loop.call_at(deadline, self._fire, key)
            entry[3] = deadline
            return
        del self._entries[key]
        try:
            operation()
        except Exception:
            log.exception("coordinator timer %s failed", key)

    def cancel(self, key: str) -> None:
        self._unbound.pop(key, None)
        entry = self._entries.pop(key, None)
        if entry is not None:
            entry[2].cancel()

    def cancel_all(self) -> None:
        for entry in self._entries.values():
            entry[2].cancel()
        self._entries.clear()
        self._unbound.clear()


class CoordinatorTopicWriter:
    """Appends a coordinator's records to its internal topic (``__consumer_offsets``,
    ``__transaction_state``), one batch per call.

    Alone (``replicated`` None) the write completes once appended (and flushed when the flush
    policy says so), as today. In a cluster (``replicate_through``) it appends only as the
    partition's leader and completes once the in-sync replicas have the batch, or with the error
    the replication gives (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS(_AFTER_APPEND),
    REQUEST_TIMED_OUT after ``commit_timeout_ms``). Completions of one partition are delivered in
    the order of the appends, so the coordinator applies its records in log order.
    """

    def __init__(
        self,
        logs: LogManager,
        clock: Clock,
        notify_append: Callable[[str, int], None],
        flush: Callable[[int], asyncio.Future[None] | None],
        topic: str = OFFSETS_TOPIC,
    ) -> None:
        self.topic = topic
        self._logs = logs
        self._clock = clock
        self._notify_append = notify_append
        self._flush = flush
        self.replicated: ReplicatedWrites | None = None
        self.commit_timeout_ms = 0
        # Per partition, the replicated writes not yet delivered, oldest first:
        # [on_complete, its answer once known, the batch's base offset].
        self._in_flight: dict[int, collections.deque[list[Any]]] = {}
        self._waits: set[asyncio.Task[ErrorCode]] = set()

    def replicate_through(self, replicated: ReplicatedWrites, commit_timeout_ms: int) -> None:
        """A broker of a cluster: writes go to the partitions it leads and count once replicated."""
        self.replicated = replicated
        self.commit_timeout_ms = commit_timeout_ms

    def append(
        self,
        partition: int,
        records: list[tuple[bytes, bytes | None]],
        on_complete: Callable[[ErrorCode], None],
    ) -> None:
        self._write(partition, BatchBuilder(), records, lambda error, base_offset: on_complete(error))

    def append_transactional(
        self,
        partition: int,
        records: list[tuple[bytes, bytes | None]],
        producer_id: int,
        producer_epoch: int,
        on_complete: Callable[[ErrorCode, int], None],
    ) -> None:
        """One transactional batch of the producer (TxnOffsetCommit): its records count once its
        marker is written. No sequence number (base sequence -1), as Kafka writes these batches:
        they are not part of the producer's idempotent sequence of its partitions. Completes as
        ``append`` does, with the batch's base offset."""
        builder = BatchBuilder(producer_id=producer_id, producer_epoch=producer_epoch, is_transactional=True)
        self._write(partition, builder, records, on_complete)

    def _write(
        self,
        partition: int,
        builder: BatchBuilder,
        records: list[tuple[bytes, bytes | None]],
        on_complete: Callable[[ErrorCode, int], None],
    ) -> None:
        if self.replicated is not None:
            self._append_replicated(self.replicated, partition, builder, records, on_complete)
            return
        partition_log = self._logs.log(self.topic, partition)
        if partition_log is None:
            on_complete(ErrorCode.NOT_COORDINATOR, -1)
            return
        now_ms = self._clock.wall_ms()
        base_offset = self._append_batch(partition_log, partition, builder, records, now_ms, on_complete)
        if base_offset is None:
            return
        pending = self._flush(partition) if partition_log.needs_flush(now_ms) else None
        if pending is None:
            on_complete(ErrorCode.NONE, base_offset)
        else:
            pending.add_done_callback(
                lambda done: on_complete(
                    ErrorCode.NONE if done.exception() is None else ErrorCode.KAFKA_STORAGE_ERROR, base_offset
                )
            )

    def _append_batch(
        self,
        partition_log: PartitionLog,
        partition: int,
        builder: BatchBuilder,
        records: list[tuple[bytes, bytes | None]],
        now_ms: int,
        on_complete: Callable[[ErrorCode, int], None],
    ) -> int | None:
        """Append the records as one batch; its base offset, or None once told ``on_complete``."""
        for key, value in records:
            builder.append(now_ms, key, value)
        data = bytearray(builder.build())
        base_offset = partition_log.log_end_offset  # what the append gives the batch's first record
        try:
            partition_log.append(data, [parse_batch_header(data)], now_ms)
        except StorageError as error:
            log.error("writing to %s-%d failed: %s", self.topic, partition, error)
            on_complete(ErrorCode.KAFKA_STORAGE_ERROR, -1)
            return None
        self._notify_append(self.topic, partition)
        return base_offset

    def _append_replicated(
        self,
        replicated: ReplicatedWrites,
        partition: int,
        builder: BatchBuilder,
        records: list[tuple[bytes, bytes | None]],
        on_complete: Callable[[ErrorCode, int], None],
    ) -> None:
        try:
            partition_log = replicated.writable(self.topic, partition, ACKS_ALL)
        except Refused as refused:
            on_complete(refused.error, -1)
            return
        now_ms = self._clock.wall_ms()
        base_offset = self._append_batch(partition_log, partition, builder, records, now_ms, on_complete)
        if base_offset is None:
            return
        entry: list[Any] = [on_complete, None, base_offset]
        self._in_flight.setdefault(partition, collections.deque()).append(entry)
        flushed = self._flush(partition) if partition_log.needs_flush(now_ms) else None
        acknowledged = replicated.wait_for_acks(
            [(partition_log, partition_log.log_end_offset)], self.commit_timeout_ms
        )
        task = asyncio.get_running_loop().create_task(self._replicated(acknowledged, flushed))
        self._waits.add(task)
        task.add_done_callback(lambda done: self._answered(partition, entry, done))

    @staticmethod
    async def _replicated(
        acknowledged: Awaitable[list[ErrorCode]], flushed: asyncio.Future[None] | None
    ) -> ErrorCode:
        (error,) = await acknowledged
        if flushed is not None:
            try:
                await flushed
            except Exception:
                return ErrorCode.KAFKA_STORAGE_ERROR
        return error

    def _answered(self, partition: int, entry: list[Any], task: asyncio.Task[ErrorCode]) -> None:
        self._waits.discard(task)
        if task.cancelled():
            entry[1] = ErrorCode.NOT_COORDINATOR
        elif task.exception() is not None:
            log.error("waiting for %s-%d's replicas failed: %s", self.topic, partition, task.exception())
            entry[1] = ErrorCode.NOT_COORDINATOR
        else:
            entry[1] = task.result()
        queue = self._in_flight.get(partition)
        while queue and queue[0][1] is not None:
            on_complete, error, base_offset = queue.popleft()
            on_complete(error, base_offset)
        if queue is not None and not queue:
            del self._in_flight[partition]

    def cancel_all(self) -> None:
        """Stopping: writes still waiting for replicas are answered NOT_COORDINATOR."""
        for task in list(self._waits):
            task.cancel()


class GroupService:
    """Owns the coordinator and ``__consumer_offsets`` on this broker."""

    def __init__(
        self,
        config: CoordinatorConfig,
        logs: LogManager,
        clock: Clock,
        notify_append: Callable[[str, int], None],
        flush: Callable[[int], asyncio.Future[None] | None],
        topics: BrokerTopics,
    ) -> None:
        self.config = config
        self._logs = logs
        self.timer = AsyncioTimer()
        self.writer = CoordinatorTopicWriter(logs, clock, notify_append, flush)
        self.topics = topics
        self.coordinator = GroupCoordinator(config, clock, self.timer, self.writer, topics=topics)
        self._loading: asyncio.Task[None] | None = None
        self._partition_loads: dict[int, asyncio.Task[int]] = {}

    @property
    def partitions(self) -> int:
        """The partitions the groups are spread over: ``__consumer_offsets``'s own count once it
        exists (``use_partition_count``), offsets.topic.num.partitions until then."""
        return self.coordinator.partition_count

    def use_partition_count(self, partitions: int) -> None:
        """``__consumer_offsets`` exists with ``partitions`` partitions: the groups live in those,
        whatever offsets.topic.num.partitions says now (it is the count the topic is made with)."""
        if partitions != self.coordinator.partition_count:
            log.warning(
                "%s has %d partitions; offsets.topic.num.partitions=%d applies only when it is "
                "created: groups stay in the topic's %d partitions",
                OFFSETS_TOPIC,
                partitions,
                self.config.offsets_topic_num_partitions,
                partitions,
            )
        self.coordinator.use_partition_count(partitions)

    def topics_changed(self, names: Iterable[str] | None) -> None:
        """Topics were created, deleted or gained partitions (``names``; None: any may have): the
        consumer-protocol groups subscribed to them get a new target assignment, and regular
        expression subscriptions are matched again."""
        names = None if names is None else list(names)
        self.topics.forget(names)
        self.coordinator.topics_changed(names)

    def replicate_through(self, replicated: ReplicatedWrites) -> None:
        """A broker of a cluster: the coordinator's writes count once its offsets partition's
        in-sync replicas have them (at most ``offsets.commit.timeout.ms``)."""
        self.writer.replicate_through(replicated, self.config.offsets_commit_timeout_ms)

    def partition_for(self, group_id: str) -> int:
        from strom.coordinator import partition_for_group

        return partition_for_group(group_id, self.partitions)

    def start(self, *, load: bool = True) -> None:
        """If ``__consumer_offsets`` exists, load it in the background (requests for its groups get
        COORDINATOR_LOAD_IN_PROGRESS meanwhile). A broker in a cluster passes ``load=False``: it
        coordinates only the partitions it leads (``become_coordinator``)."""
        self.timer.bind(asyncio.get_running_loop())
        if not load:
            return
        topic = self._logs.topic(OFFSETS_TOPIC)
        if topic is None:
            return
        self.use_partition_count(topic.partitions)
        self._begin_load(topic.partitions)

    def ensure_offsets_topic(self) -> None:
        """Create ``__consumer_offsets`` on first need (FindCoordinator), as Kafka does."""
        if self._logs.topic(OFFSETS_TOPIC) is not None:
            return
        self._logs.create_topic(OFFSETS_TOPIC, self.partitions, OFFSETS_TOPIC_CONFIG, internal=True)
        log.info("created %s with %d partitions", OFFSETS_TOPIC, self.partitions)
        for partition in range(self.partitions):
            self.coordinator.begin_loading(partition)
            self.coordinator.finish_loading(partition)

    def _begin_load(self, partitions: int) -> None:
        for partition in range(partitions):
            self.coordinator.begin_loading(partition)
        self._loading = asyncio.get_running_loop().create_task(self._load(partitions))

    async def _load(self, partitions: int) -> None:
        records_total = 0
        for partition in range(partitions):
            records_total += await self._load_partition(partition)
        log.info("loaded %s: %d records replayed", OFFSETS_TOPIC, records_total)

    async def _load_partition(self, partition: int) -> int:
        """Replay one partition of ``__consumer_offsets`` into the coordinator; the records read.

        The partition is read once, keeping the latest value of each key (what compaction would
        keep), and only those are decoded and replayed (``compacted_replay_order``): a log where
        every offset was committed many times costs one decode per offset. Records of
        transactional batches (TxnOffsetCommit) wait for their producer's marker in the partition
        (``CompactedPartition``): committed they count as any other, aborted they are dropped, and
        those with no marker yet are replayed last as pending offsets. The loop serves other
        requests between chunks of the log and steps of the replay; during each step the cyclic
        garbage collector is paused (``collector_paused``). A record that does not decode is
        skipped with an error line (the rest of the partition still loads)."""
        records_total = 0
        compacted = CompactedPartition()
        latest = compacted.latest
        partition_log = self._logs.log(OFFSETS_TOPIC, partition)
        offset = partition_log.log_start_offset if partition_log is not None else 0
        while partition_log is not None and offset < partition_log.log_end_offset:
            data = partition_log.read(offset, LOAD_CHUNK_BYTES).records
            if not data:
                break
            try:
                with collector_paused():
                    for batch in iter_batches(data):
                        header = batch.header
                        if header.attributes & _TRANSACTIONAL_OR_CONTROL or compacted.open_transactions:
                            records_total += _read_transactional(compacted, batch, offset, partition)
                        else:
                            base_offset = header.base_offset
                            for record in batch.records:
                                key = record.key
                                if key is not None and base_offset + record.offset_delta >= offset:
                                    latest[key] = record.value
                                    records_total += 1
                        offset = header.last_offset + 1
            except CorruptBatchError as error:
                log.error("%s-%d: stopped loading at offset %d: %s", OFFSETS_TOPIC, partition, offset, error)
                break
            await asyncio.sleep(0)
        skipped = 0
        records = compacted.replay_order()
        open_records = compacted.open_records()
        del latest, compacted
        for start in range(0, len(records), LOAD_REPLAY_STEP_RECORDS):
            with collector_paused():
                skipped = self._replay_step(
                    partition, records[start : start + LOAD_REPLAY_STEP_RECORDS], skipped
                )
            await asyncio.sleep(0)
        with collector_paused():
            for producer_id, key, value, log_offset in open_records:
                try:
                    self.coordinator.replay_transactional(partition, producer_id, key, value, log_offset)
                except CorruptCoordinatorRecord as error:
                    skipped = _skipped(partition, error, skipped)
        if open_records:
            log.info(
                "%s-%d: %d offset(s) of open transactions pending their markers",
                OFFSETS_TOPIC,
                partition,
                len(open_records),
            )
        if skipped:
            log.error("%s-%d: %d record(s) skipped while loading", OFFSETS_TOPIC, partition, skipped)
        with collector_paused():
            self.coordinator.finish_loading(partition)
        return records_total

    def _replay_step(
        self, partition: int, records: Sequence[tuple[bytes, bytes | None]], skipped: int
    ) -> int:
        """Replay ``records`` into the coordinator; the count of records skipped so far."""
        for key, value in records:
            try:
                self.coordinator.replay(partition, key, value)
            except CorruptCoordinatorRecord as error:
                skipped = _skipped(partition, error, skipped)
        return skipped

    def complete_transaction(self, partition: int, producer_id: int, commit: bool) -> None:
        """A transaction marker (COMMIT if ``commit``) of ``producer_id`` is written to
        ``partition`` of ``__consumer_offsets``: its pending offsets there count, or are dropped
        (``GroupCoordinator.complete_transaction``). Whoever writes markers calls it once the
        marker is appended."""
        self.coordinator.complete_transaction(partition, producer_id, commit)

    # ---- a broker in a cluster: coordinating the partitions it leads ------------------------------

    def become_coordinator(self, partition: int) -> None:
        """This broker now leads ``partition`` of ``__consumer_offsets``: load its groups (their
        requests get COORDINATOR_LOAD_IN_PROGRESS meanwhile)."""
        self.resign_coordinator(partition)
        self.coordinator.begin_loading(partition)
        task = asyncio.get_running_loop().create_task(self._load_partition(partition))
        self._partition_loads[partition] = task
        started = time.perf_counter()
        task.add_done_callback(lambda done: self._loaded(partition, done, started))

    def loading_partitions(self) -> list[int]:
        """The offsets partitions this broker leads whose groups are still being loaded."""
        return sorted(self._partition_loads)

    def _loaded(self, partition: int, task: asyncio.Task[int], started: float) -> None:
        if self._partition_loads.get(partition) is task:
            del self._partition_loads[partition]
        if not task.cancelled() and task.exception() is None:
            log.info(
                "coordinating %s-%d: loaded from %d records in %.0f ms",
                OFFSETS_TOPIC,
                partition,
                task.result(),
                (time.perf_counter() - started) * 1000,
            )
        elif not task.cancelled():
            log.error("loading %s-%d failed: %s", OFFSETS_TOPIC, partition, task.exception())

    def resign_coordinator(self, partition: int) -> None:
        """Another broker leads ``partition`` now: forget its groups; parked requests are answered
        NOT_COORDINATOR and their clients look the coordinator up again."""
        task = self._partition_loads.pop(partition, None)
        if task is not None:
            task.cancel()
        self.coordinator.unload(partition)

    async def wait_loaded(self) -> None:
        if self._loading is not None:
            await self._loading

    def shutdown(self) -> None:
        if self._loading is not None:
            self._loading.cancel()
        for task in self._partition_loads.values():
            task.cancel()
        self.coordinator.shutdown()
        self.writer.cancel_all()
        self.timer.cancel_all()
