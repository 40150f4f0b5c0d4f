"""Exceptions the storage layer raises; the broker maps each one to a Kafka error code."""

from __future__ import annotations


class StorageError(Exception):
    """Base of every error the storage layer raises on purpose."""


class ConfigError(StorageError):
    """A topic config key is unknown or its value is invalid; the message names the key."""


class OffsetOutOfOrderError(StorageError):
    """A follower was given batches that do not continue its log (they start below its end)."""


class OffsetOutOfRangeError(StorageError):
    """The requested offset is below the log start offset or beyond the log end offset."""


class TopicExistsError(StorageError):
    """CreateTopics for a name that already exists."""


class UnknownTopicError(StorageError):
    """An operation named a topic (or partition) that does not exist."""


class InvalidTopicError(StorageError):
    """The topic name breaks Kafka's naming rules, or the partition count is out of bounds."""


class DuplicateSequenceError(StorageError):
    """A retried idempotent batch that is already in the log.

    The broker answers the producer with success and the offsets of the batch already written,
    which is why they travel with the error.
    """

    def __init__(self, base_offset: int, last_offset: int) -> None:
        super().__init__(f"duplicate batch, already written at offsets {base_offset}..{last_offset}")
        self.base_offset = base_offset
        self.last_offset = last_offset


class OutOfOrderSequenceError(StorageError):
    """An idempotent batch whose sequence does not follow the last one of its producer."""


class InvalidProducerEpochError(StorageError):
    """A batch or a transaction marker from an older producer epoch than the one already seen (a
    fenced producer: INVALID_PRODUCER_EPOCH to a producer, PRODUCER_FENCED for a marker)."""


class InvalidTxnStateError(StorageError):
    """A non-transactional batch from a producer whose transaction is in progress on this
    partition (Kafka answers INVALID_TXN_STATE)."""


class TransactionCoordinatorFencedError(StorageError):
    """A transaction marker from a coordinator epoch older than the one of the producer's last
    marker: a zombie coordinator (Kafka answers TRANSACTION_COORDINATOR_FENCED)."""


class UnknownProducerIdError(StorageError):
    """Reserved: the producer's state is unknown (not raised while state never expires)."""


class RecordTooLargeError(StorageError):
    """A batch larger than max.message.bytes or than segment.bytes."""


class InvalidPartitionsError(StorageError):
    """A partition count that is not positive, too large, or not an increase."""


class LogFileError(StorageError):
    """A log file could not be opened, written or read (out of file descriptors, disk full, an I/O
    error). The operation that raised it left the log as it was; the broker answers
    KAFKA_STORAGE_ERROR for that request and keeps serving."""


class PartitionBudgetError(StorageError):
    """A create would take the broker past the partitions it can serve (``budget``); the broker
    answers POLICY_VIOLATION with this message."""
