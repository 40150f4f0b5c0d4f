"""Legacy message sets, magic 0 and 1 (Kafka before 0.11), decoded, encoded and up-converted to v2.

A message set is messages back to back, each::

    offset      int64
    size        int32    bytes after this field
    crc         uint32   CRC-32 (IEEE, zlib's) of magic .. end
    magic       int8     0 or 1 (byte 16, like a v2 batch's magic)
    attributes  int8     bits 0-2 compression, bit 3 timestamp type (magic 1)
    timestamp   int64    magic 1 only
    key         int32 length (-1 = null) + bytes
    value       int32 length (-1 = null) + bytes

A compressed message is a *wrapper*: its value is a whole inner message set, compressed. With
magic 1 the inner offsets are relative (0, 1, ...) and the wrapper carries the absolute offset of
the last inner message; with magic 0 the inner offsets are absolute. With magic 1 and LogAppendTime
the wrapper's timestamp is every inner message's timestamp.

Decoding produces the same ``DecodedBatch`` as v2 decoding, with a header synthesised from the
message (magic 0 or 1, no producer id), so readers handle every format alike.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from strom.base import limits
from strom.protocol.records.batch import (
    CREATE_TIME,
    LOG_APPEND_TIME,
    NO_TIMESTAMP,
    DecodedBatch,
    Record,
    build_batch,
)
from strom.protocol.records.compression import CompressionType, compress, decompress
from strom.protocol.records.header import (
    COMPRESSION_MASK,
    LOG_OVERHEAD_BYTES,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    TIMESTAMP_TYPE_BIT,
    BatchHeader,
    CorruptBatchError,
)

# offset, size, crc, magic, attributes
_MESSAGE_PREFIX = struct.Struct(">qiIbb")
_MESSAGE_PREFIX_BYTES = _MESSAGE_PREFIX.size  # 18
_OFFSET_AND_SIZE = struct.Struct(">qi")
_TIMESTAMP = struct.Struct(">q")
_LENGTH = struct.Struct(">i")
_CRC_START = LOG_OVERHEAD_BYTES + 4  # the CRC covers magic .. end
# Smallest message size field: crc + magic + attributes + key length + value length (+ timestamp).
MESSAGE_BYTES_MIN = {0: 14, 1: 22}


@dataclass(slots=True)
class LegacyMessage:
    """One message of a legacy set: absolute offset, timestamp (-1 where magic 0 has none)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None


class _RawMessage(NamedTuple):
    offset: int
    size_bytes: int  # the whole message, offset and size fields included
    crc: int
    magic: int
    attributes: int
    timestamp: int
    key: bytes | None
    value: bytes | None


class DecodedMessage(NamedTuple):
    """A top-level message decoded as a batch, and where the next message starts."""

    batch: DecodedBatch
    next_pos: int


def _read_bytes_field(buf: bytes, pos: int, end: int) -> tuple[bytes | None, int]:
    if end - pos < 4:
        raise CorruptBatchError("legacy message ends inside a length field")
    (length,) = _LENGTH.unpack_from(buf, pos)
    pos += 4
    if length == -1:
        return None, pos
    if length < 0 or length > end - pos:
        raise CorruptBatchError(f"legacy message field length {length} is out of bounds")
    return buf[pos : pos + length], pos + length


def _parse_message(buf: bytes, pos: int, *, allow_partial: bool) -> _RawMessage | None:
    """Parse the message at ``pos``; None if it is cut short and ``allow_partial``."""
    end = len(buf)
    if end - pos < LOG_OVERHEAD_BYTES:
        if allow_partial:
            return None
        raise CorruptBatchError("legacy message is truncated")
    offset, size = _OFFSET_AND_SIZE.unpack_from(buf, pos)
    if size < MESSAGE_BYTES_MIN[0]:
        raise CorruptBatchError(f"legacy message size {size} is too small")
    message_end = pos + LOG_OVERHEAD_BYTES + size
    if message_end > end:
        if allow_partial:
            return None
        raise CorruptBatchError(f"legacy message declares {size} bytes, fewer are present")
    _, _, crc, magic, attributes = _MESSAGE_PREFIX.unpack_from(buf, pos)
    if magic not in MESSAGE_BYTES_MIN:
        raise CorruptBatchError(f"legacy message magic {magic} is not 0 or 1")
    if size < MESSAGE_BYTES_MIN[magic]:
        raise CorruptBatchError(f"legacy message size {size} is too small for magic {magic}")
    if zlib.crc32(memoryview(buf)[pos + _CRC_START : message_end]) != crc:
        raise CorruptBatchError(f"CRC mismatch in the legacy message at byte {pos}")
    field_pos = pos + _MESSAGE_PREFIX_BYTES
    timestamp = NO_TIMESTAMP
    if magic == 1:
        (timestamp,) = _TIMESTAMP.unpack_from(buf, field_pos)
        field_pos += 8
    key, field_pos = _read_bytes_field(buf, field_pos, message_end)
    value, field_pos = _read_bytes_field(buf, field_pos, message_end)
    if field_pos != message_end:
        raise CorruptBatchError("legacy message size does not match its fields")
    return _RawMessage(offset, message_end - pos, crc, magic, attributes & 0xFF, timestamp, key, value)


def _synthesised_batch(
    wrapper: _RawMessage, inner: Sequence[LegacyMessage], log_append_time: bool
) -> DecodedBatch:
    base_offset = inner[0].offset
    if log_append_time:
        base_timestamp = max_timestamp = wrapper.timestamp
        records = [
            Record(message.offset - base_offset, 0, message.key, message.value, []) for message in inner
        ]
    else:
        base_timestamp = inner[0].timestamp
        max_timestamp = max(message.timestamp for message in inner)
        records = [
            Record(
                message.offset - base_offset,
                message.timestamp - base_timestamp,
                message.key,
                message.value,
                [],
            )
            for message in inner
        ]
    header = BatchHeader(
        base_offset=base_offset,
        batch_length=wrapper.size_bytes - LOG_OVERHEAD_BYTES,
        partition_leader_epoch=-1,
        magic=wrapper.magic,
        crc=wrapper.crc,
        attributes=wrapper.attributes & (COMPRESSION_MASK | TIMESTAMP_TYPE_BIT),
        last_offset_delta=inner[-1].offset - base_offset,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        producer_id=NO_PRODUCER_ID,
        producer_epoch=-1,
        base_sequence=NO_SEQUENCE,
        record_count=len(inner),
    )
    return DecodedBatch(header, records)


def _decode_inner_set(wrapper: _RawMessage, decompressed_bytes_max: int) -> list[LegacyMessage]:
    if wrapper.value is None:
        raise CorruptBatchError("compressed legacy message has a null value")
    inner_bytes = decompress(wrapper.attributes & COMPRESSION_MASK, wrapper.value, decompressed_bytes_max)
    raw_messages: list[_RawMessage] = []
    pos = 0
    while pos < len(inner_bytes):
        raw = _parse_message(inner_bytes, pos, allow_partial=False)
        assert raw is not None
        if raw.attributes & COMPRESSION_MASK:
            raise CorruptBatchError("legacy compressed message nested in another")
        if raw.magic != wrapper.magic:
            raise CorruptBatchError(
                f"inner legacy message has magic {raw.magic}, its wrapper {wrapper.magic}"
            )
        raw_messages.append(raw)
        pos += raw.size_bytes
    if not raw_messages:
        raise CorruptBatchError("compressed legacy message holds no messages")
    if wrapper.magic == 0:
        offset_shift = 0
    else:
        offset_shift = wrapper.offset - raw_messages[-1].offset
    return [
        LegacyMessage(raw.offset + offset_shift, raw.timestamp, raw.key, raw.value) for raw in raw_messages
    ]


def decode_top_level_message(
    buf: bytes | bytearray | memoryview,
    pos: int = 0,
    decompressed_bytes_max: int = limits.decompressed_batch_bytes_max,
    *,
    allow_partial: bool = True,
) -> DecodedMessage | None:
    """Decode the top-level message at ``pos`` (plain or a compressed wrapper) as one batch.

    Returns None when the message is cut short by the end of ``buf`` and ``allow_partial`` (a
    fetch response's tail); raises ``CorruptBatchError`` for anything else wrong.
    """
    data = buf if isinstance(buf, bytes) else bytes(buf)
    raw = _parse_message(data, pos, allow_partial=allow_partial)
    if raw is None:
        return None
    log_append_time = raw.magic == 1 and bool(raw.attributes & TIMESTAMP_TYPE_BIT)
    if raw.attributes & COMPRESSION_MASK:
        inner = _decode_inner_set(raw, decompressed_bytes_max)
    else:
        inner = [LegacyMessage(raw.offset, raw.timestamp, raw.key, raw.value)]
    return DecodedMessage(_synthesised_batch(raw, inner, log_append_time), pos + raw.size_bytes)


def decode_message_set(
    buf: bytes | bytearray | memoryview,
    *,
    allow_partial: bool = False,
    decompressed_bytes_max: int = limits.decompressed_batch_bytes_max,
) -> list[DecodedBatch]:
    """Decode every top-level message of a legacy set, one ``DecodedBatch`` each."""
    data = buf if isinstance(buf, bytes) else bytes(buf)
    batches: list[DecodedBatch] = []
    pos = 0
    while pos < len(data):
        decoded = decode_top_level_message(data, pos, decompressed_bytes_max, allow_partial=allow_partial)
        if decoded is None:
            break
        batches.append(decoded.batch)
        pos = decoded.next_pos
    return batches


# ---------------------------------------------------------------------------------------------
# Encoding


def _encode_bytes_field(data: bytes | None) -> bytes:
    if data is None:
        return _LENGTH.pack(-1)
    return _LENGTH.pack(len(data)) + data


def encode_message(
    *,
    offset: int,
    magic: int,
    attributes: int,
    timestamp: int,
    key: bytes | None,
    value: bytes | None,
) -> bytes:
    """One legacy message with its offset, size and CRC."""
    if magic not in MESSAGE_BYTES_MIN:
        raise ValueError(f"legacy magic must be 0 or 1, not {magic}")
    parts = [struct.pack(">bb", magic, attributes)]
    if magic == 1:
        parts.append(_TIMESTAMP.pack(timestamp))
    parts.append(_encode_bytes_field(key))
    parts.append(_encode_bytes_field(value))
    body = b"".join(parts)
    crc = zlib.crc32(body)
    return _OFFSET_AND_SIZE.pack(offset, len(body) + 4) + struct.pack(">I", crc) + body


def build_message_set(
    messages: Sequence[LegacyMessage],
    *,
    magic: int,
    compression: int = CompressionType.NONE,
    timestamp_type: int = CREATE_TIME,
) -> bytes:
    """Encode ``messages`` as a legacy set: plain messages, or one compressed wrapper holding them.

    With magic 1 and ``LOG_APPEND_TIME`` the type bit is set on each plain message, or on the
    wrapper, whose timestamp is then the largest message timestamp.
    """
    type_bit = TIMESTAMP_TYPE_BIT if magic == 1 and timestamp_type == LOG_APPEND_TIME else 0
    if compression == CompressionType.NONE:
        return b"".join(
            encode_message(
                offset=message.offset,
                magic=magic,
                attributes=type_bit,
                timestamp=message.timestamp,
                key=message.key,
                value=message.value,
            )
            for message in messages
        )
    if not messages:
        raise ValueError("a compressed legacy wrapper needs at least one message")
    first_offset = messages[0].offset
    inner = b"".join(
        encode_message(
            # magic 1 writes offsets relative to the first; magic 0 writes them absolute
            offset=message.offset - first_offset if magic == 1 else message.offset,
            magic=magic,
            attributes=0,
            timestamp=message.timestamp,
            key=message.key,
            value=message.value,
        )
        for message in messages
    )
    return encode_message(
        offset=messages[-1].offset,
        magic=magic,
        attributes=(compression & COMPRESSION_MASK) | type_bit,
        timestamp=max(message.timestamp for message in messages),
        key=None,
        value=compress(compression, inner),
    )


# ---------------------------------------------------------------------------------------------
# Up-conversion


def upconvert_message_set(
    buf: bytes | bytearray | memoryview,
    *,
    decompressed_bytes_max: int = limits.decompressed_batch_bytes_max,
) -> bytes:
    """The v2 batches equivalent to a whole legacy message set: same offsets, keys, values,
    timestamps and compression.

    Consecutive plain CreateTime messages share one v2 batch; each compressed wrapper, and each
    plain LogAppendTime message (whose own timestamp is the append time), becomes its own batch.
    A message cut short is an error here: this is for sets that must be whole (produce, the log).
    """
    batches = decode_message_set(buf, decompressed_bytes_max=decompressed_bytes_max)
    out: list[bytes] = []
    pending_plain: list[DecodedBatch] = []

    def flush_plain() -> None:
        if not pending_plain:
            return
        base_offset = pending_plain[0].header.base_offset
        records = [
            Record(
                batch.header.base_offset - base_offset,
                batch.header.base_timestamp,  # absolute: build_batch rebases on the first
                batch.records[0].key,
                batch.records[0].value,
                [],
            )
            for batch in pending_plain
        ]
        out.append(build_batch(records, base_offset=base_offset))
        pending_plain.clear()

    for batch in batches:
        header = batch.header
        compression = header.attributes & COMPRESSION_MASK
        if compression == CompressionType.NONE and not header.timestamp_type:
            pending_plain.append(batch)
            continue
        flush_plain()
        out.append(
            build_batch(
                batch.records,
                base_offset=header.base_offset,
                base_timestamp=header.base_timestamp,
                max_timestamp=header.max_timestamp,
                compression=compression,
                timestamp_type=header.timestamp_type,
            )
        )
    flush_plain()
    return b"".join(out)
