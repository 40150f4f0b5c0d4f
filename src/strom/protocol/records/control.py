"""Control batches: the transaction markers (COMMIT / ABORT) a partition leader writes.

A control batch is a v2 batch with the control bit (5) and the transactional bit (4) set in its
attributes, the producer id and epoch of the transaction it ends, base sequence -1 (it takes no
part in the producer's sequence numbers), and one record whose key and value are::

    key    version int16 (0)   type int16 (0 = ABORT, 1 = COMMIT; other types exist, see below)
    value  version int16 (0)   coordinator epoch int32      (the end-transaction marker)

(all big-endian, KIP-98). Readers skip control batches: they carry no application data, only the
outcome of a transaction (and, for read_committed consumers, the end of an aborted one).

Parsing is lenient about versions as Kafka's readers are: a key or value of a newer version is
read by its leading fields and the rest ignored. Other control types (Kafka's KRaft writes
LEADER_CHANGE = 2 and snapshot markers) parse as a ``ControlRecord`` of that type and are no
transaction marker. Anything malformed raises ``CorruptBatchError``.

Pure: bytes in, bytes and values out.
"""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import NamedTuple

from strom.protocol.records.batch import (
    CREATE_TIME,
    NO_PARTITION_LEADER_EPOCH,
    Record,
    build_batch,
    decode_batch,
)
from strom.protocol.records.header import NO_SEQUENCE, CorruptBatchError

__all__ = [
    "CONTROL_KEY_VERSION",
    "END_TXN_MARKER_VERSION",
    "ControlRecord",
    "ControlType",
    "EndTxnMarker",
    "build_end_txn_marker",
    "marker_commits",
    "parse_control_record",
    "parse_end_txn_marker",
]

CONTROL_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0

_KEY = struct.Struct(">hh")  # version, type
_MARKER_VALUE = struct.Struct(">hi")  # version, coordinator epoch


class ControlType(IntEnum):
    ABORT = 0
    COMMIT = 1


class ControlRecord(NamedTuple):
    """The record of a control batch: its key's type (an int: unknown types are kept as numbers)
    and its raw value."""

    type: int
    value: bytes | None


class EndTxnMarker(NamedTuple):
    """What a COMMIT or ABORT marker says."""

    commit: bool
    coordinator_epoch: int


def build_end_txn_marker(
    *,
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    coordinator_epoch: int,
    timestamp_ms: int,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    timestamp_type: int = CREATE_TIME,
) -> bytes:
    """The control batch ending ``producer_id``'s transaction: one uncompressed record, offset
    delta 0, timestamp ``timestamp_ms``."""
    if producer_id < 0:
        raise ValueError(f"a transaction marker needs a producer id, got {producer_id}")
    control_type = ControlType.COMMIT if commit else ControlType.ABORT
    record = Record(
        offset_delta=0,
        timestamp_delta=0,
        key=_KEY.pack(CONTROL_KEY_VERSION, control_type),
        value=_MARKER_VALUE.pack(END_TXN_MARKER_VERSION, coordinator_epoch),
    )
    return build_batch(
        [record],
        base_offset=base_offset,
        base_timestamp=timestamp_ms,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=NO_SEQUENCE,
        partition_leader_epoch=partition_leader_epoch,
        timestamp_type=timestamp_type,
        is_transactional=True,
        is_control=True,
    )


def marker_commits(key: bytes | None) -> bool | None:
    """What the key of a decoded control record says: True for COMMIT, False for ABORT, None for
    anything else (another control type, a key too short or of a negative version)."""
    if key is None or len(key) < _KEY.size:
        return None
    version, control_type = _KEY.unpack_from(key)
    if version < 0 or control_type not in (ControlType.ABORT, ControlType.COMMIT):
        return None
    return bool(control_type == ControlType.COMMIT)


def parse_control_record(buf: bytes | bytearray | memoryview, pos: int = 0) -> ControlRecord:
    """The control record of the control batch at ``pos`` (CRC checked)."""
    batch = decode_batch(buf, pos)
    if not batch.header.is_control:
        raise CorruptBatchError(f"the batch at offset {batch.header.base_offset} is not a control batch")
    if not batch.records:
        raise CorruptBatchError(f"the control batch at offset {batch.header.base_offset} has no record")
    record = batch.records[0]
    key = record.key
    if key is None or len(key) < _KEY.size:
        raise CorruptBatchError(
            f"the control record at offset {batch.header.base_offset} has a key of "
            f"{'no' if key is None else len(key)} bytes, expected at least {_KEY.size}"
        )
    version, control_type = _KEY.unpack_from(key)
    if version < 0:
        raise CorruptBatchError(f"control record key version {version}")
    return ControlRecord(control_type, record.value)


def parse_end_txn_marker(buf: bytes | bytearray | memoryview, pos: int = 0) -> EndTxnMarker | None:
    """The COMMIT / ABORT marker of the control batch at ``pos``; None for another control type."""
    control = parse_control_record(buf, pos)
    if control.type not in (ControlType.ABORT, ControlType.COMMIT):
        return None
    value = control.value
    if value is None or len(value) < _MARKER_VALUE.size:
        raise CorruptBatchError(
            f"an end-transaction marker value of {'no' if value is None else len(value)} bytes, "
            f"expected at least {_MARKER_VALUE.size}"
        )
    version, coordinator_epoch = _MARKER_VALUE.unpack_from(value)
    if version < 0:
        raise CorruptBatchError(f"end-transaction marker version {version}")
    return EndTxnMarker(control.type == ControlType.COMMIT, coordinator_epoch)
