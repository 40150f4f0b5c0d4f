"""The transaction coordinator on this broker: ``__transaction_state``, its loading, and markers.

``TransactionService`` hosts the pure ``TransactionCoordinator`` (``strom.coordinator.transactions``)
the way ``GroupService`` hosts the group coordinator: its records go to ``__transaction_state``
through a ``CoordinatorTopicWriter`` (in a cluster they count once the partition's in-sync replicas
have them), its timers run on the event loop, and it coordinates the transactional ids of the
``__transaction_state`` partitions this broker leads — all of them on a single node, loaded at
start; in a cluster those it leads, loaded on becoming their leader (the leader epoch is the
coordinator epoch stamped in every marker).

Markers: a single node writes them into its own partition logs (``write_marker``); a cluster
broker sends each partition leader a WriteTxnMarkers (``strom.broker.cluster.markers``), whose
handler calls the same ``write_marker`` there. A marker on a ``__consumer_offsets`` partition also
tells the group coordinator, which then commits or drops the producer's transactional offsets.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from strom.base.clock import Clock
from strom.broker.groups import ACKS_ALL, AsyncioTimer, CoordinatorTopicWriter, GroupService, ReplicatedWrites
from strom.broker.refused import Refused
from strom.coordinator import OFFSETS_TOPIC
from strom.coordinator.transactions import (
    TRANSACTION_STATE_TOPIC,
    CorruptTransactionRecord,
    MarkerWriter,
    PartitionWritten,
    TopicPartition,
    TransactionCoordinator,
    TransactionCoordinatorConfig,
    TransactionMarkers,
)
from strom.protocol.errors import ErrorCode
from strom.protocol.records.batch import iter_batches
from strom.storage import LogManager, StorageError
from strom.storage.errors import InvalidProducerEpochError, TransactionCoordinatorFencedError

if TYPE_CHECKING:
    from strom.broker.state import BrokerState

log = logging.getLogger("strom.broker.transactions")

TRANSACTION_STATE_SEGMENT_BYTES = 100 * 1024 * 1024
LOAD_CHUNK_BYTES = 1024 * 1024
# Kafka's transaction.state.log defaults (the replication factor and min ISR apply in a cluster).
TRANSACTION_STATE_REPLICATION_FACTOR = 3
TRANSACTION_STATE_MIN_ISR = 2
# A single node's coordinator epoch (there is no other coordinator to fence).
SINGLE_NODE_COORDINATOR_EPOCH = 0


def transaction_state_topic_config(min_insync_replicas: int | None = None) -> dict[str, str]:
    config = {"cleanup.policy": "compact", "segment.bytes": str(TRANSACTION_STATE_SEGMENT_BYTES)}
    if min_insync_replicas is not None:
        config["min.insync.replicas"] = str(min_insync_replicas)
    return config


def marker_error(error: StorageError) -> ErrorCode:
    """The error a partition answers a marker it cannot take with."""
    if isinstance(error, TransactionCoordinatorFencedError):
        return ErrorCode.TRANSACTION_COORDINATOR_FENCED
    if isinstance(error, InvalidProducerEpochError):
        return ErrorCode.PRODUCER_FENCED
    return ErrorCode.KAFKA_STORAGE_ERROR


async def write_marker(
    state: BrokerState, partition: TopicPartition, markers: TransactionMarkers, timeout_ms: int
) -> ErrorCode:
    """Write the COMMIT or ABORT marker of ``markers`` at the end of ``partition`` (its leader
    only, an acks=all write: answered once flushed per the log's policy on one node, once below
    the high watermark in a cluster); on ``__consumer_offsets`` the group coordinator then
    completes the producer's transactional offsets. The error the partition answers."""
    topic, index = partition
    replication = state.replication
    try:
        partition_log = replication.writable(topic, index, ACKS_ALL)
    except Refused as refused:
        return refused.error
    now_ms = state.clock.wall_ms()
    try:
        partition_log.append_marker(
            markers.producer_id, markers.producer_epoch, markers.commit, markers.coordinator_epoch, now_ms
        )
    except StorageError as failure:
        answer = marker_error(failure)
        if answer is ErrorCode.KAFKA_STORAGE_ERROR:
            log.error("writing a transaction marker to %s-%d failed: %s", topic, index, failure)
        return answer
    state.notify_append(topic, index)
    if replication.waits_for_replicas:
        (error,) = await replication.wait_for_acks(
            [(partition_log, partition_log.log_end_offset)], timeout_ms
        )
    else:
        error = ErrorCode.NONE
        if partition_log.needs_flush(now_ms):
            try:
                await state.flush(partition_log)
            except Exception:
                error = ErrorCode.KAFKA_STORAGE_ERROR
    if error == ErrorCode.NONE and topic == OFFSETS_TOPIC:
        state.groups.complete_transaction(index, markers.producer_id, markers.commit)
    return error


class LocalMarkers:
    """A single node's marker delivery: every partition is here."""

    def __init__(self, state: BrokerState, timeout_ms: int) -> None:
        self._state = state
        self._timeout_ms = timeout_ms
        self._tasks: set[asyncio.Task[None]] = set()

    def write_markers(self, markers: TransactionMarkers, on_partition_written: PartitionWritten) -> None:
        for partition in markers.partitions:
            task = asyncio.ensure_future(self._one(partition, markers, on_partition_written))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _one(
        self, partition: TopicPartition, markers: TransactionMarkers, on_partition_written: PartitionWritten
    ) -> None:
        error = await write_marker(self._state, partition, markers, self._timeout_ms)
        on_partition_written(partition, error)

    def cancel_all(self) -> None:
        for task in list(self._tasks):
            task.cancel()


class _Allocator:
    """The coordinator's ``ProducerIdAllocator`` over the broker's (asynchronous) allocation."""

    def __init__(self, allocate: Callable[[], Awaitable[int]]) -> None:
        self._allocate = allocate
        self._tasks: set[asyncio.Task[None]] = set()

    def allocate(self, on_allocated: Callable[[ErrorCode, int], None]) -> None:
        async def run() -> None:
            try:
                producer_id = await self._allocate()
            except Refused as refused:
                on_allocated(refused.error, -1)
                return
            except Exception:
                log.exception("allocating a producer id failed")
                on_allocated(ErrorCode.COORDINATOR_NOT_AVAILABLE, -1)
                return
            on_allocated(ErrorCode.NONE, producer_id)

        task = asyncio.ensure_future(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


class TransactionService:
    """Owns the transaction coordinator and ``__transaction_state`` on this broker."""

    def __init__(
        self,
        config: TransactionCoordinatorConfig,
        logs: LogManager,
        clock: Clock,
        notify_append: Callable[[str, int], None],
        flush: Callable[[int], asyncio.Future[None] | None],
        groups: GroupService,
        allocate_producer_id: Callable[[], Awaitable[int]],
        markers: MarkerWriter | None = None,
    ) -> None:
        self.config = config
        self._logs = logs
        self.timer = AsyncioTimer()
        self.writer = CoordinatorTopicWriter(logs, clock, notify_append, flush, topic=TRANSACTION_STATE_TOPIC)
        self._markers = markers or _NoMarkers()
        self.coordinator = TransactionCoordinator(
            config,
            clock,
            self.timer,
            self.writer,
            _Deferred(self),
            _Allocator(allocate_producer_id),
            groups.partition_for,
        )
        self._loads: dict[int, asyncio.Task[int]] = {}

    @property
    def partitions(self) -> int:
        """The partitions ``__transaction_state`` is created with (transaction.state.log.num.partitions);
        once it exists, its own count decides where ids live (``partition_for``)."""
        return self.config.transaction_state_log_num_partitions

    def use_partition_count(self, partitions: int) -> None:
        """``__transaction_state`` exists with ``partitions`` partitions: the ids live in those,
        whatever transaction.state.log.num.partitions says now."""
        if partitions != self.coordinator.partition_count:
            log.warning(
                "%s has %d partitions; transaction.state.log.num.partitions=%d applies only when it is "
                "created: transactional ids stay in the topic's %d partitions",
                TRANSACTION_STATE_TOPIC,
                partitions,
                self.partitions,
                partitions,
            )
        self.coordinator.use_partition_count(partitions)

    def deliver_markers_through(self, markers: MarkerWriter) -> None:
        """How markers reach their partitions (set once the broker knows: local or a cluster's)."""
        self._markers = markers

    def write_markers(self, markers: TransactionMarkers, on_partition_written: PartitionWritten) -> None:
        self._markers.write_markers(markers, on_partition_written)

    def replicate_through(self, replicated: ReplicatedWrites, commit_timeout_ms: int) -> None:
        """A broker of a cluster: the coordinator's records count once replicated."""
        self.writer.replicate_through(replicated, commit_timeout_ms)

    def partition_for(self, transactional_id: str) -> int:
        return self.coordinator.partition_for(transactional_id)

    # ---- a single node ----------------------------------------------------------------------------

    def start(self, *, load: bool = True) -> None:
        """If ``__transaction_state`` exists, load every partition (a single node); a cluster broker
        passes ``load=False`` and loads the partitions it comes to lead."""
        self.timer.bind(asyncio.get_running_loop())
        if not load:
            return
        topic = self._logs.topic(TRANSACTION_STATE_TOPIC)
        if topic is None:
            return
        self.use_partition_count(topic.partitions)
        for partition in range(topic.partitions):
            self.become_coordinator(partition, SINGLE_NODE_COORDINATOR_EPOCH)

    def ensure_topic(self) -> None:
        """Create ``__transaction_state`` on first need (FindCoordinator for a transactional id)."""
        if self._logs.topic(TRANSACTION_STATE_TOPIC) is not None:
            return
        self._logs.create_topic(
            TRANSACTION_STATE_TOPIC, self.partitions, transaction_state_topic_config(), internal=True
        )
        log.info("created %s with %d partitions", TRANSACTION_STATE_TOPIC, self.partitions)
        for partition in range(self.partitions):
            self.coordinator.begin_loading(partition, SINGLE_NODE_COORDINATOR_EPOCH)
            self.coordinator.finish_loading(partition)

    # ---- coordinating a partition -------------------------------------------------------------------

    def become_coordinator(self, partition: int, coordinator_epoch: int) -> None:
        """This broker leads ``partition`` of ``__transaction_state`` (at ``coordinator_epoch``):
        load its transactional ids (COORDINATOR_LOAD_IN_PROGRESS meanwhile)."""
        count = self.coordinator.partition_count
        if not 0 <= partition < count:
            # A cluster whose topic was made by brokers configured with more partitions: an
            # operator's setting, said as such (it used to be an assertion failing the whole
            # leadership change). No id of this broker's count maps there.
            log.error(
                "leading %s-%d, but transaction.state.log.num.partitions is %d here: every broker of a "
                "cluster needs the count the topic was made with; this partition is not coordinated here",
                TRANSACTION_STATE_TOPIC,
                partition,
                count,
            )
            return
        self.resign_coordinator(partition)
        self.coordinator.begin_loading(partition, coordinator_epoch)
        task = asyncio.get_running_loop().create_task(self._load(partition))
        self._loads[partition] = task
        task.add_done_callback(lambda done: self._loaded(partition, done))

    def resign_coordinator(self, partition: int) -> None:
        task = self._loads.pop(partition, None)
        if task is not None:
            task.cancel()
        self.coordinator.unload(partition)

    def loading_partitions(self) -> list[int]:
        return sorted(self._loads)

    async def _load(self, partition: int) -> int:
        """Replay the partition in log order (the latest record of an id wins); the records read."""
        partition_log = self._logs.log(TRANSACTION_STATE_TOPIC, partition)
        records = 0
        skipped = 0
        offset = partition_log.log_start_offset if partition_log is not None else 0
        while partition_log is not None and offset < partition_log.log_end_offset:
            data = partition_log.read(offset, LOAD_CHUNK_BYTES).records
            if not data:
                break
            for batch in iter_batches(data):
                header = batch.header
                offset = header.last_offset + 1
                if header.is_control:
                    continue
                for record in batch.records:
                    if (
                        record.key is None
                        or header.base_offset + record.offset_delta < partition_log.log_start_offset
                    ):
                        continue
                    records += 1
                    try:
                        self.coordinator.replay(partition, record.key, record.value)
                    except CorruptTransactionRecord as error:
                        skipped += 1
                        log.error("%s-%d: skipped a record: %s", TRANSACTION_STATE_TOPIC, partition, error)
            await asyncio.sleep(0)
        if skipped:
            log.error(
                "%s-%d: %d record(s) skipped while loading", TRANSACTION_STATE_TOPIC, partition, skipped
            )
        self.coordinator.finish_loading(partition)
        return records

    def _loaded(self, partition: int, task: asyncio.Task[int]) -> None:
        if self._loads.get(partition) is task:
            del self._loads[partition]
        if task.cancelled():
            return
        if task.exception() is not None:
            log.error("loading %s-%d failed: %s", TRANSACTION_STATE_TOPIC, partition, task.exception())
            return
        log.info("coordinating %s-%d: %d records replayed", TRANSACTION_STATE_TOPIC, partition, task.result())

    def shutdown(self) -> None:
        for task in self._loads.values():
            task.cancel()
        self.coordinator.shutdown()
        self.writer.cancel_all()
        self.timer.cancel_all()
        cancel = getattr(self._markers, "cancel_all", None)
        if cancel is not None:
            cancel()


class _Deferred:
    """The coordinator's ``MarkerWriter``: whatever delivery the service has when markers go out."""

    def __init__(self, service: TransactionService) -> None:
        self._service = service

    def write_markers(self, markers: TransactionMarkers, on_partition_written: PartitionWritten) -> None:
        self._service.write_markers(markers, on_partition_written)


class _NoMarkers:
    def write_markers(self, markers: TransactionMarkers, on_partition_written: PartitionWritten) -> None:
        for partition in markers.partitions:
            on_partition_written(partition, ErrorCode.COORDINATOR_NOT_AVAILABLE)
