"""The ``__transaction_state`` record encoding and the writer the broker gives the coordinator.

Key: int16 version 0 + ``TransactionLogKey`` (the transactional id). Value: int16 version +
``TransactionLogValue``; strom writes version 1 (flexible, so the previous producer id is kept in
its tagged field) and reads 0 and 1. An expired transactional id is a tombstone (no value).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from typing import Protocol

from strom.coordinator.transactions.metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TopicPartition,
    TransactionSnapshot,
)
from strom.coordinator.transactions.state import STATE_OF_STATUS, STATUS_OF, TransactionState
from strom.protocol.errors import ErrorCode
from strom.protocol.transaction_records.transaction_log import TransactionLogKey, TransactionLogValue

TRANSACTION_STATE_TOPIC = "__transaction_state"

KEY_VERSION = 0
VALUE_VERSION = 1
_VALUE_VERSIONS = (0, 1)

_VERSION = struct.Struct(">h")

Record = tuple[bytes, bytes | None]


class TransactionLogWriter(Protocol):
    """Appends records to a partition of ``__transaction_state``; ``on_complete`` is called once,
    with NONE when the records are durable (on a cluster: replicated to the in-sync replicas) or
    with the error that stopped them. The same shape as the group coordinator's writer."""

    def append(
        self,
        partition: int,
        records: list[tuple[bytes, bytes | None]],
        on_complete: Callable[[ErrorCode], None],
    ) -> None: ...


class CorruptTransactionRecord(ValueError):
    """A record of __transaction_state that is not a known key/value layout (the loader skips it)."""


def key_bytes(transactional_id: str) -> bytes:
    return _VERSION.pack(KEY_VERSION) + TransactionLogKey(transactional_id=transactional_id).encode(
        KEY_VERSION
    )


def _partitions_schema(partitions: Iterable[TopicPartition]) -> list[TransactionLogValue.PartitionsSchema]:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    return [
        TransactionLogValue.PartitionsSchema(topic=topic, partition_ids=ids)
        for topic, ids in by_topic.items()
    ]


def value_bytes(snapshot: TransactionSnapshot) -> bytes:
    """The record of a snapshot. Dead is a tombstone and PrepareEpochFence is never written."""
    assert snapshot.state not in (TransactionState.DEAD, TransactionState.PREPARE_EPOCH_FENCE), (
        f"{snapshot.state.value} is never written as a value"
    )
    value = TransactionLogValue(
        producer_id=snapshot.producer_id,
        previous_producer_id=snapshot.last_producer_id,
        producer_epoch=snapshot.producer_epoch,
        transaction_timeout_ms=snapshot.timeout_ms,
        transaction_status=STATUS_OF[snapshot.state],
        # Empty has no partitions: written as null, as Kafka writes it.
        transaction_partitions=None
        if snapshot.state is TransactionState.EMPTY
        else _partitions_schema(snapshot.partitions),
        transaction_last_update_timestamp_ms=snapshot.last_update_timestamp_ms,
        transaction_start_timestamp_ms=snapshot.start_timestamp_ms,
    )
    return _VERSION.pack(VALUE_VERSION) + value.encode(VALUE_VERSION)


def record(transactional_id: str, snapshot: TransactionSnapshot) -> Record:
    """The record that makes ``snapshot`` durable (a tombstone for Dead)."""
    if snapshot.state is TransactionState.DEAD:
        return key_bytes(transactional_id), None
    return key_bytes(transactional_id), value_bytes(snapshot)


def _split_version(data: bytes, what: str) -> tuple[int, bytes]:
    if len(data) < _VERSION.size:
        raise CorruptTransactionRecord(f"{what} of {len(data)} bytes has no version")
    (version,) = _VERSION.unpack_from(data)
    return version, data[_VERSION.size :]


def decode_key(data: bytes) -> str:
    """The transactional id of a record key."""
    version, body = _split_version(data, "key")
    if version != KEY_VERSION:
        raise CorruptTransactionRecord(f"unknown key version {version}")
    try:
        return TransactionLogKey.decode(body, version).transactional_id
    except ValueError as error:
        raise CorruptTransactionRecord(f"key version {version}: {error}") from error


def decode_value(data: bytes) -> TransactionSnapshot:
    """The snapshot a record value holds (its last producer epoch unknown: -1)."""
    version, body = _split_version(data, "value")
    if version not in _VALUE_VERSIONS:
        raise CorruptTransactionRecord(f"unknown value version {version}")
    try:
        value = TransactionLogValue.decode(body, version)
    except ValueError as error:
        raise CorruptTransactionRecord(f"value version {version}: {error}") from error
    state = STATE_OF_STATUS.get(value.transaction_status)
    if state is None:
        raise CorruptTransactionRecord(f"unknown transaction status {value.transaction_status}")
    partitions = frozenset(
        TopicPartition(schema.topic, partition)
        for schema in value.transaction_partitions or ()
        for partition in schema.partition_ids
    )
    return TransactionSnapshot(
        producer_id=value.producer_id,
        producer_epoch=value.producer_epoch,
        last_producer_id=value.previous_producer_id if version >= 1 else NO_PRODUCER_ID,
        last_producer_epoch=NO_PRODUCER_EPOCH,
        timeout_ms=value.transaction_timeout_ms,
        state=state,
        partitions=partitions,
        start_timestamp_ms=value.transaction_start_timestamp_ms,
        last_update_timestamp_ms=value.transaction_last_update_timestamp_ms,
    )


# What a client is told when writing its transaction's record failed: Kafka's mapping (its
# transaction state manager's), so clients retry the same way. A write that timed out waiting for
# the replicas says COORDINATOR_NOT_AVAILABLE (the client looks the coordinator up and retries).
_WRITE_ERRORS: dict[ErrorCode, ErrorCode] = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
}


def transaction_write_error(error: ErrorCode) -> ErrorCode:
    return _WRITE_ERRORS.get(error, error)
