"""What the transaction coordinator's operations share: which partitions of ``__transaction_state``
it owns, the transactional ids of each, the requests waiting on them, and the one write path.

A snapshot becomes the id's state only through ``apply`` — when its record is durable (live) or
when it is read back (loading) — so a coordinator that loads the log is where the live one was.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from enum import Enum

from strom.base.clock import Clock
from strom.coordinator.partitioning import partition_for_group
from strom.coordinator.timers import Timer
from strom.coordinator.transactions.config import TransactionCoordinatorConfig
from strom.coordinator.transactions.metadata import TransactionMetadata, TransactionSnapshot
from strom.coordinator.transactions.records import (
    CorruptTransactionRecord,
    TransactionLogWriter,
    decode_key,
    decode_value,
    record,
)
from strom.coordinator.transactions.state import TransactionState
from strom.coordinator.transactions.timers import markers_key
from strom.protocol.errors import ErrorCode

log = logging.getLogger("strom.coordinator.transactions")

Answer = Callable[[ErrorCode], None]


class PartitionStatus(Enum):
    LOADING = "loading"
    ACTIVE = "active"


class Waiter:
    """A request waiting on a partition (a write, an allocation): answered exactly once, by its
    completion or by the partition's unload (NOT_COORDINATOR), whichever comes first."""

    __slots__ = ("_registry", "done", "on_unload")

    def __init__(self, registry: set[Waiter], on_unload: Answer) -> None:
        self._registry = registry
        self.on_unload = on_unload
        self.done = False
        registry.add(self)

    def claim(self) -> bool:
        """True for the completion that comes first; False once answered (unloaded meanwhile)."""
        if self.done:
            return False
        self.done = True
        self._registry.discard(self)
        return True


class TransactionRuntime:
    def __init__(
        self,
        config: TransactionCoordinatorConfig,
        clock: Clock,
        timer: Timer,
        writer: TransactionLogWriter,
    ) -> None:
        self.config = config
        self.clock = clock
        self.timer = timer
        self.writer = writer
        # Partitions of __transaction_state the ids are spread over: the configured count until
        # the broker says the topic exists with its own (``use_partition_count``).
        self.partition_count = config.transaction_state_log_num_partitions
        self.partitions: dict[int, PartitionStatus] = {}
        # The leader epoch of each owned partition when it was loaded: stamped on every marker.
        self.coordinator_epochs: dict[int, int] = {}
        # Per owned partition, its transactional ids.
        self.transactions: dict[int, dict[str, TransactionMetadata]] = {}
        self._waiters: dict[int, set[Waiter]] = {}

    # ---------------------------------------------------------------- ownership
    def partition_of(self, transactional_id: str) -> int:
        # Kafka's rule for both coordinators: abs(String.hashCode) % partitions.
        return partition_for_group(transactional_id, self.partition_count)

    def ownership_error(self, transactional_id: str) -> ErrorCode | None:
        """NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS if this coordinator cannot serve the id."""
        status = self.partitions.get(self.partition_of(transactional_id))
        if status is None:
            return ErrorCode.NOT_COORDINATOR
        if status is PartitionStatus.LOADING:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return None

    def lookup(self, transactional_id: str) -> TransactionMetadata | None:
        table = self.transactions.get(self.partition_of(transactional_id))
        return None if table is None else table.get(transactional_id)

    def is_live(self, metadata: TransactionMetadata) -> bool:
        """Whether ``metadata`` is still the id's on this coordinator (not unloaded, not expired)."""
        table = self.transactions.get(metadata.partition)
        return table is not None and table.get(metadata.transactional_id) is metadata

    def active_transactions(self) -> list[TransactionMetadata]:
        return [
            metadata
            for partition, status in sorted(self.partitions.items())
            if status is PartitionStatus.ACTIVE
            for metadata in list(self.transactions[partition].values())
        ]

    def now_ms(self) -> int:
        # Wall clock: timestamps are written to the log and compared after a reload elsewhere.
        return self.clock.wall_ms()

    # ---------------------------------------------------------------- waiting and writing
    def waiter(self, partition: int, on_unload: Answer) -> Waiter:
        assert partition in self._waiters, f"waiting on partition {partition}, which is not owned"
        return Waiter(self._waiters[partition], on_unload)

    def create(self, transactional_id: str) -> TransactionMetadata:
        """A new transactional id, to be written (its first record decides whether it stays)."""
        partition = self.partition_of(transactional_id)
        table = self.transactions[partition]
        assert transactional_id not in table, f"transactional id {transactional_id!r} created twice"
        metadata = TransactionMetadata(transactional_id, partition, committed=None)
        table[transactional_id] = metadata
        return metadata

    def write(self, metadata: TransactionMetadata, target: TransactionSnapshot, on_durable: Answer) -> None:
        """Write ``target`` as the id's record; once durable it becomes the id's state. ``on_durable``
        gets the writer's error (NONE when durable), or NOT_COORDINATOR if the partition is unloaded
        first. At most one write per id is in flight: callers refuse requests while one is."""
        assert self.is_live(metadata), f"writing {metadata.transactional_id!r}, which is not loaded here"
        assert metadata.pending is None, f"{metadata.transactional_id!r} has a write in flight already"
        metadata.pending = target
        waiter = self.waiter(metadata.partition, on_durable)

        def completed(error: ErrorCode) -> None:
            if not waiter.claim():
                return  # the partition was unloaded: answered NOT_COORDINATOR then
            if metadata.pending is target:
                metadata.pending = None
            if error == ErrorCode.NONE:
                self.apply(metadata, target)
            elif metadata.committed is None:
                self.forget(metadata)  # a new id whose first record failed: it never existed
            on_durable(error)

        self.writer.append(metadata.partition, [record(metadata.transactional_id, target)], completed)

    def apply(self, metadata: TransactionMetadata, snapshot: TransactionSnapshot) -> None:
        if snapshot.state is TransactionState.DEAD:
            self.forget(metadata)
            return
        metadata.committed = snapshot

    def forget(self, metadata: TransactionMetadata) -> None:
        if self.is_live(metadata):
            del self.transactions[metadata.partition][metadata.transactional_id]
            self.timer.cancel(markers_key(metadata.transactional_id))

    # ---------------------------------------------------------------- loading
    def begin_loading(self, partition: int, coordinator_epoch: int) -> None:
        assert partition not in self.partitions, f"partition {partition} loaded twice"
        assert 0 <= partition < self.partition_count, (
            f"__transaction_state has no partition {partition} (it has {self.partition_count})"
        )
        self.partitions[partition] = PartitionStatus.LOADING
        self.coordinator_epochs[partition] = coordinator_epoch
        self.transactions[partition] = {}
        self._waiters[partition] = set()

    def replay(self, partition: int, key: bytes, value: bytes | None) -> None:
        """One record, in log order: the latest record of an id is its state; a tombstone (or a
        Dead value) removes it. A record that does not decode raises CorruptTransactionRecord
        and changes nothing."""
        assert self.partitions.get(partition) is PartitionStatus.LOADING, (
            f"replay into partition {partition} that is not loading"
        )
        transactional_id = decode_key(key)
        owner = self.partition_of(transactional_id)
        if owner != partition:
            raise CorruptTransactionRecord(
                f"transactional id {transactional_id!r} belongs to partition {owner}, found in {partition}"
            )
        snapshot = None if value is None else decode_value(value)
        if snapshot is not None and snapshot.state is TransactionState.PREPARE_EPOCH_FENCE:
            raise CorruptTransactionRecord(f"{transactional_id!r}: PrepareEpochFence is never written")
        table = self.transactions[partition]
        if snapshot is None or snapshot.state is TransactionState.DEAD:
            table.pop(transactional_id, None)
            return
        table[transactional_id] = TransactionMetadata(transactional_id, partition, committed=snapshot)

    def finish_loading(self, partition: int) -> list[TransactionMetadata]:
        """The partition serves requests now; the transactions found completing (their markers
        must be written again) are returned."""
        assert self.partitions.get(partition) is PartitionStatus.LOADING, (
            f"partition {partition} finished loading without beginning"
        )
        self.partitions[partition] = PartitionStatus.ACTIVE
        return [
            metadata
            for metadata in self.transactions[partition].values()
            if metadata.known.state in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT)
        ]

    def unload(self, partition: int) -> None:
        """Forget the partition's ids; whatever waits on it is answered NOT_COORDINATOR."""
        if partition not in self.partitions:
            return
        for transactional_id in self.transactions.pop(partition):
            self.timer.cancel(markers_key(transactional_id))
        del self.partitions[partition]
        del self.coordinator_epochs[partition]
        waiters = self._waiters.pop(partition)
        for waiter in list(waiters):
            if waiter.claim():
                waiter.on_unload(ErrorCode.NOT_COORDINATOR)
