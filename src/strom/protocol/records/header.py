"""The fixed 61-byte header of a v2 record batch, parsed without touching the records.

This is what the broker's hot path and the log use: produce validates a batch by its header and
CRC and rewrites its base offset; the log indexes batches by their header; fetch serves them as
they are. Layout (big-endian)::

    0  baseOffset           int64
    8  batchLength          int32   bytes after this field (so the batch is batchLength + 12)
    12 partitionLeaderEpoch int32
    16 magic                int8    2 (byte 16 is the magic in v0/v1 message sets too)
    17 crc                  uint32  CRC-32C of bytes 21 .. end
    21 attributes           int16   bits 0-2 compression, 3 timestamp type, 4 transactional, 5 control
    23 lastOffsetDelta      int32
    27 baseTimestamp        int64
    35 maxTimestamp         int64
    43 producerId           int64
    51 producerEpoch        int16
    53 baseSequence         int32
    57 recordCount          int32
    61 records ...
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import crc32c as _crc32c

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_BYTES = HEADER.size  # 61
LOG_OVERHEAD_BYTES = 12  # baseOffset + batchLength: the part of a batch not counted in batchLength
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
BASE_OFFSET = struct.Struct(">q")
PARTITION_LEADER_EPOCH = struct.Struct(">i")
CURRENT_MAGIC = 2

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1


class CorruptBatchError(ValueError):
    """A batch failed validation: too short, wrong magic, length out of bounds or bad CRC."""


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size_bytes(self) -> int:
        """Bytes the whole batch occupies, header included."""
        return self.batch_length + LOG_OVERHEAD_BYTES

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        """0 = CreateTime, 1 = LogAppendTime."""
        return 1 if self.attributes & TIMESTAMP_TYPE_BIT else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF


def parse_batch_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the header of the batch starting at ``pos``; checks magic and length bounds, not CRC."""
    if len(buf) - pos < HEADER_BYTES:
        raise CorruptBatchError(f"batch header needs {HEADER_BYTES} bytes, {len(buf) - pos} left")
    header = BatchHeader._make(HEADER.unpack_from(buf, pos))
    if header.magic != CURRENT_MAGIC:
        raise CorruptBatchError(f"batch magic is {header.magic}, expected {CURRENT_MAGIC}")
    if header.batch_length < HEADER_BYTES - LOG_OVERHEAD_BYTES:
        raise CorruptBatchError(f"batch length {header.batch_length} is shorter than its header")
    if header.batch_length + LOG_OVERHEAD_BYTES > len(buf) - pos:
        raise CorruptBatchError(f"batch declares {header.size_bytes} bytes, only {len(buf) - pos} present")
    if header.last_offset_delta < 0 or header.record_count < 0:
        raise CorruptBatchError("negative record count or offset delta")
    return header


def compute_crc(buf: bytes | bytearray | memoryview, pos: int, size_bytes: int) -> int:
    """CRC-32C over attributes .. end of the batch at ``pos`` of ``size_bytes`` bytes."""
    view = memoryview(buf)[pos + ATTRIBUTES_OFFSET : pos + size_bytes]
    return int(_crc32c.crc32c(view))


def validate_batches(buf: bytes | bytearray | memoryview) -> list[BatchHeader]:
    """Split ``buf`` into v2 batches, checking each one's length, magic and CRC.

    Raises ``CorruptBatchError`` on the first failure; an empty buffer or trailing bytes that do
    not make a whole batch are errors too. This is the produce hot path: per batch, no record is
    decoded.
    """
    headers: list[BatchHeader] = []
    pos = 0
    end = len(buf)
    if end == 0:
        raise CorruptBatchError("no record batch in the request")
    while pos < end:
        header = parse_batch_header(buf, pos)
        size_bytes = header.batch_length + LOG_OVERHEAD_BYTES
        if compute_crc(buf, pos, size_bytes) != header.crc:
            raise CorruptBatchError(f"CRC mismatch in the batch at byte {pos}")
        headers.append(header)
        pos += size_bytes
    return headers


def set_base_offset(buf: bytearray | memoryview, pos: int, base_offset: int) -> None:
    """Rewrite the base offset of the batch at ``pos`` in place (outside the CRC's range)."""
    BASE_OFFSET.pack_into(buf, pos, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    """Rewrite the partition leader epoch (also outside the CRC's range)."""
    PARTITION_LEADER_EPOCH.pack_into(buf, pos + 12, epoch)


def iter_batch_headers(buf: bytes | bytearray | memoryview, pos: int = 0) -> list[BatchHeader]:
    """Headers of the whole batches in ``buf`` from ``pos``, stopping at a partial tail (no CRC)."""
    headers: list[BatchHeader] = []
    end = len(buf)
    while end - pos >= HEADER_BYTES:
        header = parse_batch_header_lenient(buf, pos)
        if header is None:
            break
        headers.append(header)
        pos += header.size_bytes
    return headers


def parse_batch_header_lenient(buf: bytes | bytearray | memoryview, pos: int) -> BatchHeader | None:
    """Like ``parse_batch_header`` but returns None instead of raising (for scanning a tail)."""
    try:
        return parse_batch_header(buf, pos)
    except CorruptBatchError:
        return None


_MAX_TIMESTAMP_OFFSET = 35
_ATTRIBUTES = struct.Struct(">h")
_TIMESTAMP = struct.Struct(">q")
_CRC = struct.Struct(">I")


def rewrite_crc(buf: bytearray | memoryview, pos: int = 0) -> int:
    """Recompute and store the CRC of the batch at ``pos`` after an in-place change; returns it."""
    header = parse_batch_header(buf, pos)
    crc = compute_crc(buf, pos, header.size_bytes)
    _CRC.pack_into(buf, pos + CRC_OFFSET, crc)
    return crc


def set_log_append_time(buf: bytearray | memoryview, pos: int, timestamp_ms: int) -> None:
    """Mark the batch at ``pos`` as LogAppendTime stamped ``timestamp_ms`` (the max timestamp,
    which readers then give every record) and refresh its CRC, as a broker does on append for a
    topic with ``message.timestamp.type=LogAppendTime``."""
    (attributes,) = _ATTRIBUTES.unpack_from(buf, pos + ATTRIBUTES_OFFSET)
    _ATTRIBUTES.pack_into(buf, pos + ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_BIT)
    _TIMESTAMP.pack_into(buf, pos + _MAX_TIMESTAMP_OFFSET, timestamp_ms)
    rewrite_crc(buf, pos)
