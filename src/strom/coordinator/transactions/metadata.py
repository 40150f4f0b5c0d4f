"""What the coordinator knows of one transactional id.

``TransactionSnapshot`` is one immutable value of a transactional id: what one record of
``__transaction_state`` says (plus the last producer epoch, which no record holds). A
``TransactionMetadata`` holds the snapshot that is durable (``committed``), the one being written
(``pending``, at most one at a time) and the markers of a completing transaction (``delivery``).
The state changes only by ``committed`` being replaced by a snapshot once its record is durable,
or by one read from the log while loading: live handling and loading go through the same values.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from strom.coordinator.transactions.state import TransactionState, check_transition

if TYPE_CHECKING:
    from strom.coordinator.transactions.markers import MarkerDelivery

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
# Epochs are int16 on the wire.
PRODUCER_EPOCH_MAX = 2**15 - 1
# An epoch from which InitProducerId gives a new producer id instead of a bump: one bump must stay
# for the coordinator, which fences a producer whose transaction it aborts (timeout, or a new
# instance) by bumping its epoch (Kafka's threshold: Short.MaxValue - 1).
PRODUCER_EPOCH_EXHAUSTED = PRODUCER_EPOCH_MAX - 1


def epoch_exhausted(epoch: int) -> bool:
    return epoch >= PRODUCER_EPOCH_EXHAUSTED


class TopicPartition(NamedTuple):
    topic: str
    partition: int


@dataclass(frozen=True)
class TransactionSnapshot:
    producer_id: int
    producer_epoch: int
    # The producer id before the last rotation (epoch exhaustion gives a new one), else -1:
    # TransactionLogValue's PreviousProducerId.
    last_producer_id: int
    # The epoch a KIP-360 InitProducerId bumped from, so that a retry of that request (its answer
    # lost) gets the same answer instead of being fenced; -1 otherwise. Not in the record (Kafka's
    # TransactionLogValue has no field for it): a loaded snapshot has -1, as in Kafka.
    last_producer_epoch: int
    timeout_ms: int
    state: TransactionState
    partitions: frozenset[TopicPartition]
    # Wall-clock ms the open (or last) transaction began, -1 if none since the last InitProducerId.
    start_timestamp_ms: int
    last_update_timestamp_ms: int

    def moved_to(
        self, transactional_id: str, state: TransactionState, **changes: object
    ) -> TransactionSnapshot:
        """This snapshot in ``state`` with ``changes``; the move must be one the table allows."""
        check_transition(transactional_id, self.state, state)
        return dataclasses.replace(self, state=state, **changes)  # type: ignore[arg-type]

    def durable(self) -> TransactionSnapshot:
        """What a load of this snapshot's record gives back (the last producer epoch is not in it)."""
        return dataclasses.replace(self, last_producer_epoch=NO_PRODUCER_EPOCH)


class TransactionMetadata:
    """One transactional id on this coordinator.

    ``committed`` is None only while the first record of a new id is being written (``pending``);
    if that write fails the id is forgotten again.
    """

    __slots__ = ("committed", "delivery", "partition", "pending", "transactional_id")

    def __init__(
        self,
        transactional_id: str,
        partition: int,
        committed: TransactionSnapshot | None,
    ) -> None:
        self.transactional_id = transactional_id
        # The partition of __transaction_state holding its records.
        self.partition = partition
        self.committed = committed
        self.pending: TransactionSnapshot | None = None
        # PrepareCommit / PrepareAbort: the markers still to write.
        self.delivery: MarkerDelivery | None = None

    def __repr__(self) -> str:
        return (
            f"TransactionMetadata({self.transactional_id!r}, partition={self.partition}, "
            f"committed={self.committed!r}, pending={self.pending!r})"
        )

    @property
    def known(self) -> TransactionSnapshot:
        """The durable snapshot (callers have checked there is one)."""
        assert self.committed is not None, f"transactional id {self.transactional_id!r} is not written yet"
        return self.committed
