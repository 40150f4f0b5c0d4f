"""A transaction coordinator over a manual clock and timers, an in-memory __transaction_state,
a fake marker writer and a fake producer id allocator."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from strom.base.clock import ManualClock
from strom.coordinator import ManualTimer, partition_for_group
from strom.coordinator.transactions import (
    InitProducerIdResult,
    TopicPartition,
    TransactionCoordinator,
    TransactionCoordinatorConfig,
    TransactionMarkers,
    TransactionMetadata,
    TransactionSnapshot,
)
from strom.protocol.errors import ErrorCode

Record = tuple[bytes, bytes | None]


class FakeTransactionLog:
    """The partitions of __transaction_state: appends complete at once unless told otherwise.

    ``fail_with``: the next appends fail with it (nothing is appended). ``defer``: completions wait
    for ``complete_deferred`` (the records reach the log then, as a write waiting for its replicas).
    """

    def __init__(self) -> None:
        self.partitions: dict[int, list[Record]] = {}
        self.fail_with: ErrorCode = ErrorCode.NONE
        self.defer = False
        self.deferred: list[Callable[[], None]] = []
        self.appends = 0

    def append(self, partition: int, records: list[Record], on_complete: Callable[[ErrorCode], None]) -> None:
        self.appends += 1
        error = self.fail_with

        def complete() -> None:
            if error == ErrorCode.NONE:
                self.partitions.setdefault(partition, []).extend(records)
            on_complete(error)

        if self.defer:
            self.deferred.append(complete)
        else:
            complete()

    def complete_deferred(self, count: int | None = None) -> None:
        """Complete the oldest ``count`` deferred appends (all if None), in order."""
        if count is None:
            count = len(self.deferred)
        pending, self.deferred = self.deferred[:count], self.deferred[count:]
        for complete in pending:
            complete()

    def records(self, partition: int) -> list[Record]:
        return list(self.partitions.get(partition, []))


@dataclass
class MarkerCall:
    markers: TransactionMarkers
    on_written: Callable[[TopicPartition, ErrorCode], None]
    answered: set[TopicPartition] = field(default_factory=set)


class FakeMarkerWriter:
    """Answers every marker NONE at once, unless ``script`` gives a partition its next errors, or
    ``defer`` holds the answers until ``answer_deferred``. ``written`` lists the markers that
    reached a partition: (transactional id, producer id, epoch, coordinator epoch, commit, partition)."""

    def __init__(self) -> None:
        self.calls: list[MarkerCall] = []
        self.script: dict[TopicPartition, list[ErrorCode]] = {}
        self.defer = False
        self.held: list[tuple[MarkerCall, TopicPartition]] = []
        self.written: list[tuple[str, int, int, int, bool, TopicPartition]] = []

    def write_markers(
        self, markers: TransactionMarkers, on_partition_written: Callable[[TopicPartition, ErrorCode], None]
    ) -> None:
        call = MarkerCall(markers, on_partition_written)
        self.calls.append(call)
        for partition in markers.partitions:
            if self.defer:
                self.held.append((call, partition))
            else:
                self._answer(call, partition)

    def _answer(self, call: MarkerCall, partition: TopicPartition) -> None:
        errors = self.script.get(partition)
        error = errors.pop(0) if errors else ErrorCode.NONE
        if error == ErrorCode.NONE:
            markers = call.markers
            self.written.append(
                (
                    markers.transactional_id,
                    markers.producer_id,
                    markers.producer_epoch,
                    markers.coordinator_epoch,
                    markers.commit,
                    partition,
                )
            )
        call.answered.add(partition)
        call.on_written(partition, error)

    def answer_deferred(self, count: int | None = None) -> None:
        if count is None:
            count = len(self.held)
        held, self.held = self.held[:count], self.held[count:]
        for call, partition in held:
            self._answer(call, partition)


class FakeAllocator:
    """Producer ids 1000, 1001, ... at once, or held (``defer``), or refused (``fail_with``)."""

    def __init__(self, first_producer_id: int = 1000) -> None:
        self.next_producer_id = first_producer_id
        self.defer = False
        self.fail_with = ErrorCode.NONE
        self.held: list[Callable[[ErrorCode, int], None]] = []
        self.allocated = 0

    def allocate(self, on_allocated: Callable[[ErrorCode, int], None]) -> None:
        if self.defer:
            self.held.append(on_allocated)
        else:
            self._answer(on_allocated)

    def _answer(self, on_allocated: Callable[[ErrorCode, int], None]) -> None:
        if self.fail_with != ErrorCode.NONE:
            on_allocated(self.fail_with, -1)
            return
        producer_id = self.next_producer_id
        self.next_producer_id += 1
        self.allocated += 1
        on_allocated(ErrorCode.NONE, producer_id)

    def answer_held(self) -> None:
        held, self.held = self.held, []
        for on_allocated in held:
            self._answer(on_allocated)


OFFSETS_PARTITIONS = 50


def offsets_partition_for(group_id: str) -> int:
    return partition_for_group(group_id, OFFSETS_PARTITIONS)


class Box:
    """Collects the answers a callback is given; ``.value`` is the one answer."""

    def __init__(self) -> None:
        self.answers: list[Any] = []

    def __call__(self, answer: Any) -> None:
        self.answers.append(answer)

    @property
    def answered(self) -> bool:
        return bool(self.answers)

    @property
    def value(self) -> Any:
        assert len(self.answers) == 1, f"expected exactly one answer, got {self.answers}"
        return self.answers[0]


DEFAULT_CONFIG = TransactionCoordinatorConfig(transaction_state_log_num_partitions=4)


class Harness:
    def __init__(
        self,
        config: TransactionCoordinatorConfig | None = None,
        partitions: tuple[int, ...] | None = None,
        coordinator_epoch: int = 7,
        clock: ManualClock | None = None,
        log: FakeTransactionLog | None = None,
    ) -> None:
        self.config = config or DEFAULT_CONFIG
        self.clock = clock or ManualClock()
        self.timer = ManualTimer(self.clock)
        self.log = log or FakeTransactionLog()
        self.markers = FakeMarkerWriter()
        self.allocator = FakeAllocator()
        self.coordinator = TransactionCoordinator(
            self.config,
            self.clock,
            self.timer,
            self.log,
            self.markers,
            self.allocator,
            offsets_partition_for,
        )
        self.coordinator_epoch = coordinator_epoch
        for partition in (
            partitions if partitions is not None else range(self.config.transaction_state_log_num_partitions)
        ):
            self.coordinator.load(partition, coordinator_epoch, self.log.records(partition))

    # ---------------------------------------------------------------- requests
    def init(
        self,
        transactional_id: str | None = "t",
        timeout_ms: int = 60_000,
        producer_id: int = -1,
        producer_epoch: int = -1,
    ) -> Box:
        box = Box()
        self.coordinator.init_producer_id(transactional_id, timeout_ms, producer_id, producer_epoch, box)
        return box

    def init_ok(self, transactional_id: str = "t", **kwargs: Any) -> tuple[int, int]:
        result: InitProducerIdResult = self.init(transactional_id, **kwargs).value
        assert result.error == ErrorCode.NONE, result
        return result.producer_id, result.producer_epoch

    def add(self, transactional_id: str, producer_id: int, producer_epoch: int, *partitions: Any) -> Box:
        box = Box()
        wanted = [TopicPartition(*partition) for partition in partitions] or [TopicPartition("topic", 0)]
        self.coordinator.add_partitions(transactional_id, producer_id, producer_epoch, wanted, box)
        return box

    def add_error(
        self, transactional_id: str, producer_id: int, producer_epoch: int, *partitions: Any
    ) -> ErrorCode:
        """The one error of an AddPartitionsToTxn answered at once (every partition gets the same)."""
        errors: dict[TopicPartition, ErrorCode] = self.add(
            transactional_id, producer_id, producer_epoch, *partitions
        ).value
        assert len(set(errors.values())) == 1, errors
        return next(iter(errors.values()))

    def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str) -> Box:
        box = Box()
        self.coordinator.add_offsets(transactional_id, producer_id, producer_epoch, group_id, box)
        return box

    def end(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool = True) -> Box:
        box = Box()
        self.coordinator.end_transaction(transactional_id, producer_id, producer_epoch, commit, box)
        return box

    def end_error(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool = True
    ) -> ErrorCode:
        return ErrorCode(self.end(transactional_id, producer_id, producer_epoch, commit).value)

    def begin(self, transactional_id: str = "t", *partitions: Any, **kwargs: Any) -> tuple[int, int]:
        """InitProducerId then AddPartitionsToTxn: an Ongoing transaction."""
        producer_id, epoch = self.init_ok(transactional_id, **kwargs)
        assert self.add_error(transactional_id, producer_id, epoch, *partitions) == ErrorCode.NONE
        return producer_id, epoch

    # ---------------------------------------------------------------- views
    def metadata(self, transactional_id: str = "t") -> TransactionMetadata:
        metadata = self.coordinator.transaction(transactional_id)
        assert metadata is not None, f"{transactional_id!r} is not known"
        return metadata

    def snapshot(self, transactional_id: str = "t") -> TransactionSnapshot:
        return self.metadata(transactional_id).known

    def partition_of(self, transactional_id: str = "t") -> int:
        return self.coordinator.partition_for(transactional_id)

    def advance(self, ms: int) -> None:
        self.timer.advance(ms)

    def reloaded(self) -> Harness:
        """A new coordinator loading everything this one wrote (same clock, same log)."""
        return Harness(
            self.config, clock=self.clock, log=self.log, coordinator_epoch=self.coordinator_epoch + 1
        )
