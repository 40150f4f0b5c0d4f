"""Transaction markers: what the coordinator asks the broker to write, and what it waits for.

Once PrepareCommit or PrepareAbort is durable, a COMMIT or ABORT marker (a control batch of the
producer id and epoch, stamped with the coordinator epoch) must reach every partition of the
transaction before CompleteCommit / CompleteAbort may be written. The broker delivers them through
``MarkerWriter``: on one node straight into the partition logs, in a cluster as WriteTxnMarkers to
each partition's leader. ``MarkerDelivery`` keeps what is still owed for one transaction.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from strom.coordinator.transactions.metadata import TopicPartition
from strom.protocol.errors import ErrorCode


@dataclass(frozen=True)
class TransactionMarkers:
    """Markers of one transaction for some of its partitions (all of them, or those to retry)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    # The leader epoch of the coordinator's __transaction_state partition when it loaded: a
    # partition leader refuses markers of a coordinator epoch older than one it has seen for the
    # producer (TRANSACTION_COORDINATOR_FENCED), so a deposed coordinator cannot write any.
    coordinator_epoch: int
    commit: bool
    # The __transaction_state partition of the transactional id (the broker may group by it).
    transaction_log_partition: int
    partitions: tuple[TopicPartition, ...]


PartitionWritten = Callable[[TopicPartition, ErrorCode], None]


class MarkerWriter(Protocol):
    def write_markers(self, markers: TransactionMarkers, on_partition_written: PartitionWritten) -> None:
        """Write a marker to each of ``markers.partitions``; call ``on_partition_written(partition,
        error)`` once for each of them, now or later, in any order.

        The errors the coordinator understands:
        - NONE: the marker is in the partition's log (on a cluster: replicated as an acks=all
          write). Writing one twice is harmless (a partition without the transaction open ignores it).
        - UNKNOWN_TOPIC_OR_PARTITION: the topic no longer exists; the partition is dropped from the
          transaction. Say it only when the topic is gone for good: a partition whose leader is not
          known yet is NOT_LEADER_OR_FOLLOWER or LEADER_NOT_AVAILABLE.
        - PRODUCER_FENCED, INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED: the partition has
          seen a newer producer epoch or coordinator epoch; this coordinator is stale and stops
          writing this transaction's markers (its successor owns it).
        - anything else (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT, a lost
          connection as NETWORK_EXCEPTION, ...): written again after the retry backoff.
        """
        ...


class MarkerOutcome(Enum):
    WRITTEN = "written"
    DROPPED = "dropped"  # the topic is gone
    FENCED = "fenced"  # a newer coordinator or producer epoch is there: stop
    RETRY = "retry"


_FENCED = frozenset(
    {ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED}
)


def marker_outcome(error: ErrorCode) -> MarkerOutcome:
    if error == ErrorCode.NONE:
        return MarkerOutcome.WRITTEN
    if error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        return MarkerOutcome.DROPPED
    if error in _FENCED:
        return MarkerOutcome.FENCED
    return MarkerOutcome.RETRY


@dataclass
class MarkerDelivery:
    """The markers of one PrepareCommit / PrepareAbort still owed.

    ``remaining`` are the partitions without their marker; ``in_flight`` those asked of the
    broker and not answered yet. A round ends when every partition asked has answered; the
    partitions left are asked again after the backoff, or, when none is left, the transaction
    completes. ``fenced`` stops it for good.
    """

    commit: bool
    remaining: set[TopicPartition]
    in_flight: set[TopicPartition] = field(default_factory=set)
    fenced: bool = False
    # Times a round ended with partitions left (for logs and tests).
    retries: int = 0

    def start_round(self) -> tuple[TopicPartition, ...]:
        assert not self.in_flight, "a marker round started while one is still answering"
        self.in_flight = set(self.remaining)
        return tuple(sorted(self.in_flight))

    def answered(self, partition: TopicPartition, error: ErrorCode) -> MarkerOutcome | None:
        """Record one answer; None if the partition was not being asked (a duplicate answer)."""
        if partition not in self.in_flight:
            return None
        self.in_flight.discard(partition)
        outcome = marker_outcome(error)
        if outcome in (MarkerOutcome.WRITTEN, MarkerOutcome.DROPPED):
            self.remaining.discard(partition)
        elif outcome is MarkerOutcome.FENCED:
            self.fenced = True
        return outcome

    @property
    def round_over(self) -> bool:
        return not self.in_flight

    @property
    def done(self) -> bool:
        return not self.remaining and not self.in_flight
