"""The transaction coordinator's facade: the API the broker's handlers call.

Pure: no sockets, no asyncio, no sleeping. Time comes from the injected ``Clock`` and keyed
``Timer``; durability from the ``TransactionLogWriter`` (the broker appends our records to
``__transaction_state`` and says when they are durable); markers go out through the
``MarkerWriter``; new producer ids come from the ``ProducerIdAllocator``. Every operation answers
through its callback, once, when the record it writes is durable (or at once if it writes none).

Errors are Kafka's as of InitProducerId v4 / AddPartitionsToTxn, AddOffsetsToTxn, EndTxn v2
(KIP-588): a fenced producer is told PRODUCER_FENCED; a handler answering an older version sends
INVALID_PRODUCER_EPOCH in its place, as Kafka does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import NamedTuple

from strom.base.clock import Clock
from strom.coordinator.partitioning import OFFSETS_TOPIC
from strom.coordinator.timers import Timer
from strom.coordinator.transactions.admin import (
    TransactionDescription,
    TransactionListing,
    describe_transaction,
    list_transactions,
)
from strom.coordinator.transactions.config import TransactionCoordinatorConfig
from strom.coordinator.transactions.markers import (
    MarkerDelivery,
    MarkerOutcome,
    MarkerWriter,
    TransactionMarkers,
)
from strom.coordinator.transactions.metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    PRODUCER_EPOCH_MAX,
    TopicPartition,
    TransactionMetadata,
    TransactionSnapshot,
)
from strom.coordinator.transactions.producer_ids import (
    FenceOngoing,
    NeedProducerId,
    ProducerIdAllocator,
    ProducerIdAndEpoch,
    Refuse,
    Transit,
    decide_init,
    fresh_snapshot,
)
from strom.coordinator.transactions.records import TransactionLogWriter, transaction_write_error
from strom.coordinator.transactions.runtime import Answer, TransactionRuntime
from strom.coordinator.transactions.state import (
    COMPLETED_STATES,
    PREPARE_STATES,
    TransactionState,
)
from strom.coordinator.transactions.timers import (
    abort_timed_out_key,
    expire_transactional_ids_key,
    markers_key,
)
from strom.protocol.errors import ErrorCode

log = logging.getLogger("strom.coordinator.transactions")


class InitProducerIdResult(NamedTuple):
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


InitProducerIdCallback = Callable[[InitProducerIdResult], None]
AddPartitionsCallback = Callable[[dict[TopicPartition, ErrorCode]], None]


class TransactionCoordinator:
    def __init__(
        self,
        config: TransactionCoordinatorConfig,
        clock: Clock,
        timer: Timer,
        writer: TransactionLogWriter,
        marker_writer: MarkerWriter,
        producer_ids: ProducerIdAllocator,
        offsets_partition_for: Callable[[str], int],
    ) -> None:
        """``offsets_partition_for(group_id)``: the group's partition of __consumer_offsets."""
        self._runtime = TransactionRuntime(config, clock, timer, writer)
        self._marker_writer = marker_writer
        self._producer_ids = producer_ids
        self._offsets_partition_for = offsets_partition_for
        self._schedule_abort_check()
        self._schedule_expiry()

    @property
    def config(self) -> TransactionCoordinatorConfig:
        return self._runtime.config

    # ================================================================ partitions of __transaction_state
    def partition_for(self, transactional_id: str) -> int:
        """The partition of __transaction_state (so the broker leading it) owning the id."""
        return self._runtime.partition_of(transactional_id)

    @property
    def partition_count(self) -> int:
        """The partitions of __transaction_state the ids are spread over (``abs(hashCode) % this``)."""
        return self._runtime.partition_count

    def use_partition_count(self, partition_count: int) -> None:
        """__transaction_state exists with ``partition_count`` partitions: spread the ids over those.

        transaction.state.log.num.partitions is only the count the topic is made with. Once it
        exists, its own count decides where each id lives (Kafka reads it from the topic too): a
        coordinator started with another setting would otherwise look for every id in the wrong
        partition — their records skipped as misplaced when loading, their open transactions never
        ended, read_committed consumers held at them for good. Call it before any partition is loaded.
        """
        assert partition_count > 0, f"__transaction_state cannot have {partition_count} partitions"
        if partition_count == self._runtime.partition_count:
            return
        assert not self._runtime.partitions, (
            f"the partition count of __transaction_state changed from {self._runtime.partition_count} "
            f"to {partition_count} with partitions {sorted(self._runtime.partitions)} loaded"
        )
        self._runtime.partition_count = partition_count

    def owns(self, transactional_id: str) -> bool:
        return self._runtime.partition_of(transactional_id) in self._runtime.partitions

    def coordinator_epoch(self, partition: int) -> int | None:
        return self._runtime.coordinator_epochs.get(partition)

    def begin_loading(self, partition: int, coordinator_epoch: int) -> None:
        """This coordinator now owns ``partition`` (leads it at ``coordinator_epoch``, its leader
        epoch); its ids answer COORDINATOR_LOAD_IN_PROGRESS until ``finish_loading``."""
        if partition in self._runtime.partitions:
            self.unload(partition)
        self._runtime.begin_loading(partition, coordinator_epoch)

    def replay(self, partition: int, key: bytes, value: bytes | None) -> None:
        """One record of the partition, in log order (``value`` None for a tombstone). Raises
        ``CorruptTransactionRecord`` for a record that does not decode (the loader skips it)."""
        self._runtime.replay(partition, key, value)

    def finish_loading(self, partition: int) -> None:
        """Serve the partition's ids; transactions found in PrepareCommit / PrepareAbort write
        their markers again (and then complete)."""
        for metadata in self._runtime.finish_loading(partition):
            log.info(
                "transactional id %s: resuming the markers of its %s",
                metadata.transactional_id,
                metadata.known.state.value,
            )
            self._begin_markers(metadata)

    def load(
        self, partition: int, coordinator_epoch: int, records: Iterable[tuple[bytes, bytes | None]]
    ) -> None:
        """``begin_loading``, ``replay`` of every record, ``finish_loading`` in one call."""
        self.begin_loading(partition, coordinator_epoch)
        for key, value in records:
            self.replay(partition, key, value)
        self.finish_loading(partition)

    def unload(self, partition: int) -> None:
        """The partition moved away: forget its ids; requests waiting on them are answered
        NOT_COORDINATOR, and markers still owed are left to the new coordinator (it resumes them)."""
        self._runtime.unload(partition)

    def shutdown(self) -> None:
        for partition in list(self._runtime.partitions):
            self.unload(partition)
        self._runtime.timer.cancel(abort_timed_out_key())
        self._runtime.timer.cancel(expire_transactional_ids_key())

    # ================================================================ InitProducerId
    def init_producer_id(
        self,
        transactional_id: str | None,
        transaction_timeout_ms: int,
        producer_id: int,
        producer_epoch: int,
        respond: InitProducerIdCallback,
    ) -> None:
        """A producer id and epoch for the transactional id (InitProducerId).

        ``producer_id`` / ``producer_epoch``: what a KIP-360 producer (v3+) holds, -1 / -1 otherwise.
        Without a transactional id (an idempotent producer) a new producer id with epoch 0.
        """
        if transactional_id is None:
            self._producer_ids.allocate(
                lambda error, allocated: respond(
                    InitProducerIdResult(error)
                    if error != ErrorCode.NONE
                    else InitProducerIdResult(ErrorCode.NONE, allocated, 0)
                )
            )
            return
        if transactional_id == "" or (producer_id == NO_PRODUCER_ID) != (producer_epoch == NO_PRODUCER_EPOCH):
            respond(InitProducerIdResult(ErrorCode.INVALID_REQUEST))
            return
        if not 0 < transaction_timeout_ms <= self.config.transaction_max_timeout_ms:
            respond(InitProducerIdResult(ErrorCode.INVALID_TRANSACTION_TIMEOUT))
            return
        expected = None if producer_id == NO_PRODUCER_ID else ProducerIdAndEpoch(producer_id, producer_epoch)
        self._init(transactional_id, transaction_timeout_ms, expected, respond, new_producer_id=None)

    def _init(
        self,
        transactional_id: str,
        timeout_ms: int,
        expected: ProducerIdAndEpoch | None,
        respond: InitProducerIdCallback,
        new_producer_id: int | None,
    ) -> None:
        runtime = self._runtime
        error = runtime.ownership_error(transactional_id)
        if error is not None:
            respond(InitProducerIdResult(error))
            return
        metadata = runtime.lookup(transactional_id)
        if metadata is not None and metadata.pending is not None:
            respond(InitProducerIdResult(ErrorCode.CONCURRENT_TRANSACTIONS))
            return

        def again_with(allocated: int) -> None:
            self._init(transactional_id, timeout_ms, expected, respond, allocated)

        now_ms = runtime.now_ms()
        if metadata is None:
            if new_producer_id is None:
                self._allocate(transactional_id, again_with, respond)
                return
            current = fresh_snapshot(new_producer_id, timeout_ms, now_ms)
            new_producer_id = None  # it is the new id's own
        else:
            current = metadata.known
        decision = decide_init(transactional_id, current, expected, timeout_ms, now_ms, new_producer_id)
        if isinstance(decision, Refuse):
            respond(InitProducerIdResult(decision.error))
        elif isinstance(decision, NeedProducerId):
            self._allocate(transactional_id, again_with, respond)
        elif isinstance(decision, FenceOngoing):
            assert metadata is not None
            log.info(
                "transactional id %s: a new producer fences epoch %d of producer id %d and aborts its transaction",
                transactional_id,
                current.producer_epoch,
                current.producer_id,
            )

            def fenced(error: ErrorCode) -> None:
                # The abort is under way (or failed): the caller retries, and gets its epoch once
                # the old transaction is complete.
                if error == ErrorCode.NONE:
                    respond(InitProducerIdResult(ErrorCode.CONCURRENT_TRANSACTIONS))
                else:
                    respond(InitProducerIdResult(transaction_write_error(error)))

            self._fence_and_abort(metadata, fenced)
        else:
            assert isinstance(decision, Transit)
            target = decision.target
            if metadata is None:
                metadata = runtime.create(transactional_id)

            def written(error: ErrorCode) -> None:
                if error != ErrorCode.NONE:
                    respond(InitProducerIdResult(transaction_write_error(error)))
                else:
                    respond(InitProducerIdResult(ErrorCode.NONE, target.producer_id, target.producer_epoch))

            runtime.write(metadata, target, written)

    def _allocate(
        self,
        transactional_id: str,
        then: Callable[[int], None],
        respond: InitProducerIdCallback,
    ) -> None:
        waiter = self._runtime.waiter(
            self._runtime.partition_of(transactional_id),
            lambda error: respond(InitProducerIdResult(error)),
        )

        def allocated(error: ErrorCode, producer_id: int) -> None:
            if not waiter.claim():
                return  # unloaded meanwhile: answered NOT_COORDINATOR
            if error != ErrorCode.NONE:
                respond(InitProducerIdResult(error))
                return
            assert producer_id >= 0, f"the allocator gave producer id {producer_id}"
            then(producer_id)

        self._producer_ids.allocate(allocated)

    # ================================================================ AddPartitionsToTxn / AddOffsetsToTxn
    def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        respond: AddPartitionsCallback,
    ) -> None:
        """Add partitions to the transaction (beginning it if none is open); one error for all."""
        wanted = frozenset(TopicPartition(topic, partition) for topic, partition in partitions)

        def answer(error: ErrorCode) -> None:
            respond(dict.fromkeys(wanted, error))

        metadata, error = self._producer_request(transactional_id, producer_id, producer_epoch)
        if error is not None:
            answer(error)
            return
        assert metadata is not None
        current = metadata.known
        if current.state in PREPARE_STATES:
            # The previous transaction is still writing its markers: retry once it completes.
            answer(ErrorCode.CONCURRENT_TRANSACTIONS)
            return
        if not wanted or (current.state is TransactionState.ONGOING and wanted <= current.partitions):
            answer(ErrorCode.NONE)
            return
        now_ms = self._runtime.now_ms()
        if current.state is TransactionState.ONGOING:
            target = current.moved_to(
                transactional_id,
                TransactionState.ONGOING,
                partitions=current.partitions | wanted,
                last_update_timestamp_ms=now_ms,
            )
        else:
            assert current.state in COMPLETED_STATES, f"{transactional_id!r} rests in {current.state.value}"
            target = current.moved_to(
                transactional_id,
                TransactionState.ONGOING,
                partitions=wanted,
                start_timestamp_ms=now_ms,
                last_update_timestamp_ms=now_ms,
            )
        self._runtime.write(metadata, target, lambda written: answer(transaction_write_error(written)))

    def add_offsets(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        group_id: str,
        respond: Answer,
    ) -> None:
        """Add the group's __consumer_offsets partition to the transaction (AddOffsetsToTxn), so
        the offsets the producer commits in it (TxnOffsetCommit) get the transaction's marker."""
        offsets_partition = TopicPartition(OFFSETS_TOPIC, self._offsets_partition_for(group_id))
        self.add_partitions(
            transactional_id,
            producer_id,
            producer_epoch,
            [offsets_partition],
            lambda errors: respond(errors[offsets_partition]),
        )

    def _producer_request(
        self, transactional_id: str, producer_id: int, producer_epoch: int
    ) -> tuple[TransactionMetadata | None, ErrorCode | None]:
        """The checks every request of a producer goes through, in Kafka's order."""
        if transactional_id == "":
            return None, ErrorCode.INVALID_REQUEST
        error = self._runtime.ownership_error(transactional_id)
        if error is not None:
            return None, error
        metadata = self._runtime.lookup(transactional_id)
        if metadata is None or metadata.committed is None or metadata.committed.producer_id != producer_id:
            return None, ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if metadata.committed.producer_epoch != producer_epoch:
            return None, ErrorCode.PRODUCER_FENCED
        if metadata.pending is not None:
            return None, ErrorCode.CONCURRENT_TRANSACTIONS
        return metadata, None

    # ================================================================ EndTxn
    def end_transaction(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        respond: Answer,
    ) -> None:
        """Commit or abort the open transaction (EndTxn): answered NONE once PrepareCommit /
        PrepareAbort is durable; the markers and the Complete record follow on their own."""
        metadata, error = self._producer_request(transactional_id, producer_id, producer_epoch)
        if error is not None:
            respond(error)
            return
        assert metadata is not None
        state = metadata.known.state
        if state is TransactionState.ONGOING:
            target_state = TransactionState.PREPARE_COMMIT if commit else TransactionState.PREPARE_ABORT
            target = metadata.known.moved_to(
                transactional_id, target_state, last_update_timestamp_ms=self._runtime.now_ms()
            )
            self._prepare(metadata, target, lambda written: respond(transaction_write_error(written)))
            return
        same_outcome = {
            TransactionState.COMPLETE_COMMIT: commit,
            TransactionState.COMPLETE_ABORT: not commit,
            TransactionState.PREPARE_COMMIT: commit,
            TransactionState.PREPARE_ABORT: not commit,
        }
        if not same_outcome.get(state, False):
            # Empty (nothing to end), or the other outcome than the one decided.
            respond(ErrorCode.INVALID_TXN_STATE)
        elif state in PREPARE_STATES:
            respond(ErrorCode.CONCURRENT_TRANSACTIONS)  # a retry while the markers are written
        else:
            respond(ErrorCode.NONE)  # a retry of an EndTxn that completed

    def _prepare(
        self, metadata: TransactionMetadata, target: TransactionSnapshot, on_durable: Answer
    ) -> None:
        """Write PrepareCommit / PrepareAbort; once durable, answer and write the markers."""
        assert target.state in PREPARE_STATES

        def written(error: ErrorCode) -> None:
            on_durable(error)
            if error == ErrorCode.NONE and self._runtime.is_live(metadata):
                self._begin_markers(metadata)

        self._runtime.write(metadata, target, written)

    def _fence_and_abort(self, metadata: TransactionMetadata, on_durable: Answer) -> None:
        """Abort an Ongoing transaction with its epoch bumped, so its producer is fenced: through
        PrepareEpochFence (never written) to PrepareAbort at the bumped epoch."""
        current = metadata.known
        transactional_id = metadata.transactional_id
        epoch = current.producer_epoch
        if epoch < PRODUCER_EPOCH_MAX:
            epoch += 1
        else:
            # No client is given an epoch this high (InitProducerId rotates before): a log written
            # elsewhere. Abort without fencing rather than leave the transaction open forever.
            log.error(
                "transactional id %s: epoch %d of producer id %d cannot be bumped; aborting without fencing",
                transactional_id,
                epoch,
                current.producer_id,
            )
        fencing = current.moved_to(
            transactional_id,
            TransactionState.PREPARE_EPOCH_FENCE,
            producer_epoch=epoch,
            last_producer_epoch=NO_PRODUCER_EPOCH,
        )
        target = fencing.moved_to(
            transactional_id, TransactionState.PREPARE_ABORT, last_update_timestamp_ms=self._runtime.now_ms()
        )
        self._prepare(metadata, target, on_durable)

    # ================================================================ markers and completion
    def _begin_markers(self, metadata: TransactionMetadata) -> None:
        current = metadata.known
        assert current.state in PREPARE_STATES, f"markers for a transaction in {current.state.value}"
        delivery = MarkerDelivery(
            commit=current.state is TransactionState.PREPARE_COMMIT, remaining=set(current.partitions)
        )
        metadata.delivery = delivery
        self._marker_round(metadata, delivery)

    def _still_delivering(self, metadata: TransactionMetadata, delivery: MarkerDelivery) -> bool:
        return self._runtime.is_live(metadata) and metadata.delivery is delivery

    def _marker_round(self, metadata: TransactionMetadata, delivery: MarkerDelivery) -> None:
        if not self._still_delivering(metadata, delivery):
            return
        if delivery.done:
            self._complete(metadata, delivery)
            return
        current = metadata.known
        markers = TransactionMarkers(
            transactional_id=metadata.transactional_id,
            producer_id=current.producer_id,
            producer_epoch=current.producer_epoch,
            coordinator_epoch=self._runtime.coordinator_epochs[metadata.partition],
            commit=delivery.commit,
            transaction_log_partition=metadata.partition,
            partitions=delivery.start_round(),
        )

        def written(partition: TopicPartition, error: ErrorCode) -> None:
            if not self._still_delivering(metadata, delivery):
                return
            outcome = delivery.answered(partition, error)
            if outcome is MarkerOutcome.DROPPED:
                log.info(
                    "transactional id %s: %s-%d is gone; its marker is dropped",
                    metadata.transactional_id,
                    partition.topic,
                    partition.partition,
                )
            elif outcome is MarkerOutcome.FENCED:
                log.warning(
                    "transactional id %s: the marker for %s-%d was refused (%s): a newer coordinator "
                    "owns the transaction; no more markers from here",
                    metadata.transactional_id,
                    partition.topic,
                    partition.partition,
                    error.name,
                )
            if outcome is None or not delivery.round_over or delivery.fenced:
                return
            if delivery.remaining:
                delivery.retries += 1
                self._retry_later(metadata, lambda: self._marker_round(metadata, delivery))
            else:
                self._complete(metadata, delivery)

        self._marker_writer.write_markers(markers, written)

    def _retry_later(self, metadata: TransactionMetadata, operation: Callable[[], None]) -> None:
        self._runtime.timer.schedule(
            markers_key(metadata.transactional_id), self.config.transaction_marker_retry_backoff_ms, operation
        )

    def _complete(self, metadata: TransactionMetadata, delivery: MarkerDelivery) -> None:
        """Every marker is written: CompleteCommit / CompleteAbort (written again until durable)."""
        if not self._still_delivering(metadata, delivery):
            return
        current = metadata.known
        final = TransactionState.COMPLETE_COMMIT if delivery.commit else TransactionState.COMPLETE_ABORT
        target = current.moved_to(
            metadata.transactional_id,
            final,
            partitions=frozenset(),
            last_update_timestamp_ms=self._runtime.now_ms(),
        )

        def written(error: ErrorCode) -> None:
            if not self._still_delivering(metadata, delivery):
                return
            if error == ErrorCode.NONE:
                metadata.delivery = None
                return
            log.warning(
                "transactional id %s: writing %s failed (%s); writing it again",
                metadata.transactional_id,
                final.value,
                error.name,
            )
            self._retry_later(metadata, lambda: self._complete(metadata, delivery))

        self._runtime.write(metadata, target, written)

    # ================================================================ time
    def abort_timed_out_transactions(self) -> None:
        """Abort every open transaction past its timeout, bumping its epoch so that its producer
        (a zombie, or one that stalled) is fenced. Runs every
        transaction.abort.timed.out.transaction.cleanup.interval.ms."""
        now_ms = self._runtime.now_ms()
        for metadata in self._runtime.active_transactions():
            current = metadata.committed
            if (
                current is None
                or metadata.pending is not None
                or current.state is not TransactionState.ONGOING
            ):
                continue
            if current.start_timestamp_ms + current.timeout_ms >= now_ms:
                continue
            log.info(
                "transactional id %s: the transaction of producer id %d epoch %d timed out after %d ms; aborting it",
                metadata.transactional_id,
                current.producer_id,
                current.producer_epoch,
                current.timeout_ms,
            )
            self._fence_and_abort(metadata, self._log_failure(metadata, "aborting its timed-out transaction"))

    def expire_transactional_ids(self) -> None:
        """Forget (tombstone) the ids with no open transaction and no update for
        transactional.id.expiration.ms. Runs every
        transaction.remove.expired.transaction.cleanup.interval.ms."""
        now_ms = self._runtime.now_ms()
        expiration_ms = self.config.transactional_id_expiration_ms
        for metadata in self._runtime.active_transactions():
            current = metadata.committed
            if current is None or metadata.pending is not None or metadata.delivery is not None:
                continue
            if (
                current.state not in COMPLETED_STATES
                or current.last_update_timestamp_ms + expiration_ms > now_ms
            ):
                continue
            log.info("transactional id %s expired", metadata.transactional_id)
            target = current.moved_to(
                metadata.transactional_id, TransactionState.DEAD, last_update_timestamp_ms=now_ms
            )
            self._runtime.write(metadata, target, self._log_failure(metadata, "expiring it"))

    def tick(self) -> None:
        """Both periodic jobs now (the timers also run them on their own)."""
        self.abort_timed_out_transactions()
        self.expire_transactional_ids()

    def _log_failure(self, metadata: TransactionMetadata, doing: str) -> Answer:
        def logged(error: ErrorCode) -> None:
            if error != ErrorCode.NONE:
                # Left as it was: the next run of the job tries again.
                log.warning(
                    "transactional id %s: %s failed: %s", metadata.transactional_id, doing, error.name
                )

        return logged

    def _schedule_abort_check(self) -> None:
        def run() -> None:
            self._schedule_abort_check()
            self.abort_timed_out_transactions()

        self._runtime.timer.schedule(
            abort_timed_out_key(),
            self.config.transaction_abort_timed_out_transaction_cleanup_interval_ms,
            run,
        )

    def _schedule_expiry(self) -> None:
        def run() -> None:
            self._schedule_expiry()
            self.expire_transactional_ids()

        self._runtime.timer.schedule(
            expire_transactional_ids_key(),
            self.config.transaction_remove_expired_transaction_cleanup_interval_ms,
            run,
        )

    # ================================================================ DescribeTransactions / ListTransactions
    def describe_transactions(self, transactional_ids: Iterable[str]) -> list[TransactionDescription]:
        """One description per id asked, in order (DescribeTransactions)."""
        runtime = self._runtime
        descriptions = []
        for transactional_id in transactional_ids:
            error = runtime.ownership_error(transactional_id)
            metadata = None if error is not None else runtime.lookup(transactional_id)
            descriptions.append(describe_transaction(transactional_id, error, metadata))
        return descriptions

    def list_transactions(
        self,
        state_filters: Iterable[str] = (),
        producer_id_filters: Iterable[int] = (),
        duration_filter_ms: int = -1,
    ) -> TransactionListing:
        """The transactions of every partition this coordinator owns (ListTransactions)."""
        return list_transactions(self._runtime, state_filters, producer_id_filters, duration_filter_ms)

    # ================================================================ read-only views
    def transaction(self, transactional_id: str) -> TransactionMetadata | None:
        """The id's metadata on this coordinator (read-only use: tests, metrics, the CLI)."""
        return self._runtime.lookup(transactional_id)

    def transactions(self) -> dict[str, TransactionMetadata]:
        """Every id this coordinator holds, loading partitions included (read-only use)."""
        return {
            transactional_id: metadata
            for table in self._runtime.transactions.values()
            for transactional_id, metadata in table.items()
        }
