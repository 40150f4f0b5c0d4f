"""A fetched partition's bytes straight into ``ConsumerRecord`` tuples: the consumer's hot path.

The general decoder (``strom.protocol.records.iter_batches``) builds a ``Record``, then an
``AbsoluteRecord``, and the fetcher then a ``ConsumerRecord``: three objects per record. Here each
v2 batch is checked as strictly (length, magic, CRC, every record's lengths against the record and
the batch, the record count) and each record becomes its ``ConsumerRecord`` in one step, built
with ``tuple.__new__`` (the NamedTuple's own constructor is a Python function call per record).
Batches wholly before the fetch offset are skipped without decoding their records. Legacy v0/v1
message sets go through the general decoder.
"""

from __future__ import annotations

import gc
import struct

from strom.base import limits
from strom.client.cluster import TopicPartition
from strom.client.consumer.positions import ConsumerRecord, FetchedRecords
from strom.protocol.records import CorruptBatchError, iter_batches
from strom.protocol.records.batch import RECORD_BYTES_MIN, decode_record_headers
from strom.protocol.records.compression import CompressionType, decompress
from strom.protocol.records.header import (
    COMPRESSION_MASK,
    CONTROL_BIT,
    CURRENT_MAGIC,
    HEADER_BYTES,
    LOG_OVERHEAD_BYTES,
    MAGIC_OFFSET,
    TIMESTAMP_TYPE_BIT,
    compute_crc,
    parse_batch_header,
)
from strom.protocol.records.varint import read_unsigned_varint, read_unsigned_varlong, read_varint

__all__ = ["decode_partition_records"]

_BATCH_LENGTH = struct.Struct(">i")
Header = tuple[str, bytes | None]


def decode_partition_records(
    topic_partition: TopicPartition,
    fetch_offset: int,
    records: bytes | bytearray | memoryview | None,
    *,
    decompressed_bytes_max: int = limits.decompressed_batch_bytes_max,
) -> FetchedRecords:
    """The records at or after ``fetch_offset`` (a fetch returns whole batches, which may start
    earlier), without control records. A trailing partial batch is ignored; anything corrupt
    raises ``CorruptBatchError``."""
    decoded: list[ConsumerRecord] = []
    next_offset = fetch_offset
    if not records:
        return FetchedRecords(fetch_offset, decoded, next_offset)
    # Each record is two new container objects (its tuple and its headers list), none of them in
    # a reference cycle; the cyclic collector would otherwise run every few hundred records and
    # walk the growing list of survivors again and again (a third of the decoding time measured).
    # Paused for this one payload only, and only if the application has not paused it itself.
    collector_was_enabled = gc.isenabled()
    if collector_was_enabled:
        gc.disable()
    try:
        next_offset = _decode_payload(records, topic_partition, fetch_offset, decompressed_bytes_max, decoded)
    finally:
        if collector_was_enabled:
            gc.enable()
    return FetchedRecords(fetch_offset, decoded, next_offset)


def _decode_payload(
    records: bytes | bytearray | memoryview,
    topic_partition: TopicPartition,
    fetch_offset: int,
    decompressed_bytes_max: int,
    decoded: list[ConsumerRecord],
) -> int:
    next_offset = fetch_offset
    buf = records if isinstance(records, bytes) else bytes(records)
    topic, partition = topic_partition
    pos = 0
    end = len(buf)
    while end - pos > MAGIC_OFFSET:
        magic = buf[pos + MAGIC_OFFSET]
        if magic != CURRENT_MAGIC:
            if magic in (0, 1):
                # Legacy message sets (old producers): rare, so the general decoder does them.
                next_offset = _decode_legacy(buf[pos:], topic, partition, fetch_offset, decoded, next_offset)
                break
            raise CorruptBatchError(f"unknown magic {magic} at byte {pos}")
        if end - pos < HEADER_BYTES:
            break
        (batch_length,) = _BATCH_LENGTH.unpack_from(buf, pos + 8)
        if batch_length + LOG_OVERHEAD_BYTES > end - pos:
            break  # the fetch cut the last batch short
        header = parse_batch_header(buf, pos)
        batch_end = pos + header.size_bytes
        last_offset = header.base_offset + header.last_offset_delta
        if last_offset >= next_offset:
            next_offset = last_offset + 1
        if last_offset < fetch_offset:
            pos = batch_end  # wholly before the position: not even its CRC matters
            continue
        if compute_crc(buf, pos, header.size_bytes) != header.crc:
            raise CorruptBatchError(f"CRC mismatch in the batch at byte {pos}")
        attributes = header.attributes
        if not attributes & CONTROL_BIT:
            compression = attributes & COMPRESSION_MASK
            if compression == CompressionType.NONE:
                data, start, stop = buf, pos + HEADER_BYTES, batch_end
            else:
                data = decompress(
                    compression, memoryview(buf)[pos + HEADER_BYTES : batch_end], decompressed_bytes_max
                )
                start, stop = 0, len(data)
            if attributes & TIMESTAMP_TYPE_BIT:
                timestamp_type, base_timestamp, fixed_timestamp = 1, 0, header.max_timestamp
            else:
                timestamp_type, base_timestamp, fixed_timestamp = 0, header.base_timestamp, None
            _decode_records(
                data,
                start,
                stop,
                header.record_count,
                topic,
                partition,
                header.base_offset,
                fetch_offset,
                base_timestamp,
                fixed_timestamp,
                timestamp_type,
                decoded,
            )
        pos = batch_end
    return next_offset


def _decode_legacy(
    buf: bytes,
    topic: str,
    partition: int,
    fetch_offset: int,
    decoded: list[ConsumerRecord],
    next_offset: int,
) -> int:
    for batch in iter_batches(buf):
        header = batch.header
        next_offset = max(next_offset, header.base_offset + header.last_offset_delta + 1)
        if header.is_control:
            continue
        timestamp_type = header.timestamp_type
        for record in batch.absolute_records():
            if record.offset >= fetch_offset:
                decoded.append(
                    ConsumerRecord(
                        topic,
                        partition,
                        record.offset,
                        record.timestamp,
                        timestamp_type,
                        record.key,
                        record.value,
                        record.headers,
                    )
                )
    return next_offset


def _decode_records(
    data: bytes,
    pos: int,
    end: int,
    count: int,
    topic: str,
    partition: int,
    base_offset: int,
    fetch_offset: int,
    base_timestamp: int,
    fixed_timestamp: int | None,
    timestamp_type: int,
    out: list[ConsumerRecord],
) -> None:
    """Append the ``count`` records filling ``data[pos:end]`` exactly, those at or after
    ``fetch_offset``; ``fixed_timestamp`` (LogAppendTime) replaces every record's own."""
    if count > (end - pos) // RECORD_BYTES_MIN:
        raise CorruptBatchError(f"{count} records cannot fit in {end - pos} bytes")
    append = out.append
    new = tuple.__new__
    record_class = ConsumerRecord
    try:
        for _ in range(count):
            # Varints: the one- and two-byte forms inline, longer ones by call; ``byte`` holds
            # the zigzag form u and the value is (u >> 1) ^ -(u & 1).
            byte = data[pos]
            if byte < 0x80:
                pos += 1
            else:
                second = data[pos + 1]
                if second < 0x80:
                    byte = (byte & 0x7F) | (second << 7)
                    pos += 2
                else:
                    byte, pos = read_unsigned_varint(data, pos, end)
            # A length is never negative (odd zigzag): then the value is simply byte >> 1.
            record_end = pos + (byte >> 1)
            if byte & 1 or byte < 12 or record_end > end:  # at least 6 bytes
                raise CorruptBatchError(f"record length {(byte >> 1) ^ -(byte & 1)} is out of bounds")
            # attributes (unused) at pos, then timestampDelta (varlong)
            byte = data[pos + 1]
            if byte < 0x80:
                pos += 2
            else:
                second = data[pos + 2]
                if second < 0x80:
                    byte = (byte & 0x7F) | (second << 7)
                    pos += 3
                else:
                    byte, pos = read_unsigned_varlong(data, pos + 1, record_end)
            timestamp_delta = (byte >> 1) ^ -(byte & 1)
            # offsetDelta
            byte = data[pos]
            if byte < 0x80:
                pos += 1
            else:
                second = data[pos + 1]
                if second < 0x80:
                    byte = (byte & 0x7F) | (second << 7)
                    pos += 2
                else:
                    byte, pos = read_unsigned_varint(data, pos, record_end)
            offset = base_offset + ((byte >> 1) ^ -(byte & 1))
            # key
            byte = data[pos]
            if byte < 0x80:
                pos += 1
            else:
                second = data[pos + 1]
                if second < 0x80:
                    byte = (byte & 0x7F) | (second << 7)
                    pos += 2
                else:
                    byte, pos = read_unsigned_varint(data, pos, record_end)
            if byte == 1:  # zigzag -1: null
                key = None
            elif byte & 1:
                raise CorruptBatchError("negative record key length")
            else:
                key = data[pos : pos + (byte >> 1)]
                pos += byte >> 1
            # value
            byte = data[pos]
            if byte < 0x80:
                pos += 1
            else:
                second = data[pos + 1]
                if second < 0x80:
                    byte = (byte & 0x7F) | (second << 7)
                    pos += 2
                else:
                    byte, pos = read_unsigned_varint(data, pos, record_end)
            if byte == 1:
                value = None
            elif byte & 1:
                raise CorruptBatchError("negative record value length")
            else:
                value_end = pos + (byte >> 1)
                value = data[pos:value_end]
                pos = value_end
            # headers
            if pos >= record_end:
                raise CorruptBatchError("record ends before its header count")
            if data[pos] == 0:
                pos += 1
                headers: list[Header] = []
            else:
                header_count, pos = read_varint(data, pos, record_end)
                headers, pos = decode_record_headers(data, pos, record_end, header_count)
            if pos != record_end:
                raise CorruptBatchError("record length does not match its fields")
            if offset >= fetch_offset:
                append(
                    new(
                        record_class,
                        (
                            topic,
                            partition,
                            offset,
                            base_timestamp + timestamp_delta if fixed_timestamp is None else fixed_timestamp,
                            timestamp_type,
                            key,
                            value,
                            headers,
                        ),
                    )
                )
    except IndexError:
        raise CorruptBatchError("record runs off the end of the batch") from None
    if pos != end:
        raise CorruptBatchError(f"{end - pos} bytes left over after the batch's last record")
