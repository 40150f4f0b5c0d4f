"""A fetched partition's bytes straight into ``ConsumerRecord`` tuples: the consumer's hot path.

The general decoder (``strom.protocol.records.iter_batches``) builds a ``Record``, then an
``AbsoluteRecord``, and the fetcher then a ``ConsumerRecord``: three objects per record. Here each
v2 batch is checked as strictly (length, magic, CRC, every record's lengths against the record and
the batch, the record count) and each record becomes its ``ConsumerRecord`` in one step, built
with ``tuple.__new__`` (the NamedTuple's own constructor is a Python function call per record).
Batches wholly before the fetch offset are skipped without decoding their records. Legacy v0/v1
message sets go through the general decoder.

read_committed: the broker stops a fetch at the last stable offset and lists the aborted
transactions its batches overlap (producer id, first offset). A listed producer's transactional
batches are skipped from that first offset until its ABORT marker, without decoding them
(``_AbortedTransactions``); a fetch whose list is empty (always so for read_uncommitted) pays one
test per batch for it.
"""

from __future__ import annotations

import functools
import gc
import struct
from collections.abc import Iterable, Sequence
from itertools import repeat
from typing import Protocol

from crc32c import crc32c

from strom.base import limits
from strom.client.cluster import TopicPartition
from strom.client.consumer.positions import ConsumerRecord, FetchedRecords
from strom.protocol.records import CorruptBatchError, iter_batches
from strom.protocol.records.batch import RECORD_BYTES_MIN, decode_record_headers
from strom.protocol.records.compression import CompressionType, decompress
from strom.protocol.records.control import ControlType, parse_control_record
from strom.protocol.records.header import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_BIT,
    CURRENT_MAGIC,
    HEADER,
    HEADER_BYTES,
    LOG_OVERHEAD_BYTES,
    MAGIC_OFFSET,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
)
from strom.protocol.records.varint import read_unsigned_varint, read_unsigned_varlong, read_varint

__all__ = ["decode_partition_records"]

_BATCH_LENGTH = struct.Struct(">i")
Header = tuple[str, bytes | None]


class AbortedTransaction(Protocol):
    """What a Fetch answer says of one aborted transaction (``FetchResponse.AbortedTransaction``)."""

    producer_id: int
    first_offset: int


class _AbortedTransactions:
    """The read_committed filter over one fetched partition's batches, in offset order.

    A listed transaction becomes active once a batch reaches its first offset; while its
    producer is active, that producer's transactional data batches are aborted records and are
    skipped; its ABORT marker ends it. Control batches are skipped in any case."""

    __slots__ = ("_active", "_pending")

    def __init__(self, aborted: Sequence[AbortedTransaction]) -> None:
        # Latest first offset first, so the next to activate is popped from the end.
        self._pending = sorted(
            ((transaction.first_offset, transaction.producer_id) for transaction in aborted), reverse=True
        )
        self._active: set[int] = set()

    def skips(self, buf: bytes, pos: int, header: BatchHeader) -> bool:
        """Whether the transactional batch at ``pos`` is skipped (aborted data, or a marker)."""
        pending = self._pending
        last_offset = header.base_offset + header.last_offset_delta
        while pending and pending[-1][0] <= last_offset:
            self._active.add(pending.pop()[1])
        if header.attributes & CONTROL_BIT:
            if (
                header.producer_id in self._active
                and parse_control_record(buf, pos).type == ControlType.ABORT
            ):
                self._active.discard(header.producer_id)
            return True
        return header.producer_id in self._active


def decode_partition_records(
    topic_partition: TopicPartition,
    fetch_offset: int,
    records: bytes | bytearray | memoryview | None,
    *,
    aborted_transactions: Sequence[AbortedTransaction] | None = None,
    decompressed_bytes_max: int = limits.decompressed_batch_bytes_max,
) -> FetchedRecords:
    """The records at or after ``fetch_offset`` (a fetch returns whole batches, which may start
    earlier), without control records, nor (read_committed) the records of the
    ``aborted_transactions`` the broker listed. A trailing partial batch is ignored; anything
    corrupt raises ``CorruptBatchError``."""
    decoded: list[ConsumerRecord] = []
    next_offset = fetch_offset
    if not records:
        return FetchedRecords(fetch_offset, decoded, next_offset)
    # Each record is a new container object (its tuple), never in a reference cycle; the cyclic
    # collector would otherwise run every few hundred records and walk the growing list of
    # survivors again and again (without the pause the benchmark consumed ~15% fewer records per
    # second). Paused for this one payload only, and only if the application has not paused it.
    collector_was_enabled = gc.isenabled()
    if collector_was_enabled:
        gc.disable()
    aborted = _AbortedTransactions(aborted_transactions) if aborted_transactions else None
    try:
        next_offset = _decode_payload(
            records, topic_partition, fetch_offset, decompressed_bytes_max, decoded, aborted
        )
    finally:
        if collector_was_enabled:
            gc.enable()
    return FetchedRecords(fetch_offset, decoded, next_offset, size_bytes=len(records))


def _decode_payload(
    records: bytes | bytearray | memoryview,
    topic_partition: TopicPartition,
    fetch_offset: int,
    decompressed_bytes_max: int,
    decoded: list[ConsumerRecord],
    aborted: _AbortedTransactions | None,
) -> int:
    next_offset = fetch_offset
    buf = records if isinstance(records, bytes) else bytes(records)
    topic, partition = topic_partition
    pos = 0
    end = len(buf)
    unpack_header = HEADER.unpack_from
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
        # The header's fields as locals, not a BatchHeader each (a fetch of one-record batches,
        # what a producer at linger.ms=0 makes, has a header per record); magic and length were
        # checked above, the rest as parse_batch_header checks it.
        fields = unpack_header(buf, pos)
        base_offset, _, _, _, crc, attributes, last_offset_delta, base_timestamp, max_timestamp = fields[:9]
        record_count = fields[12]
        if batch_length < HEADER_BYTES - LOG_OVERHEAD_BYTES:
            raise CorruptBatchError(f"batch length {batch_length} is shorter than its header")
        if last_offset_delta < 0 or record_count < 0:
            raise CorruptBatchError("negative record count or offset delta")
        batch_end = pos + batch_length + LOG_OVERHEAD_BYTES
        last_offset = base_offset + last_offset_delta
        if last_offset >= next_offset:
            next_offset = last_offset + 1
        if (
            aborted is not None
            and attributes & TRANSACTIONAL_BIT
            and aborted.skips(buf, pos, BatchHeader._make(fields))
        ):
            pos = batch_end  # aborted records or a marker (which may end an aborted transaction)
            continue
        if last_offset < fetch_offset:
            pos = batch_end  # wholly before the position: not even its CRC matters
            continue
        if crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : batch_end]) != crc:
            raise CorruptBatchError(f"CRC mismatch in the batch at byte {pos}")
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
                timestamp_type, base_timestamp, fixed_timestamp = 1, 0, max_timestamp
            else:
                timestamp_type, fixed_timestamp = 0, None
            _decode_records(
                data,
                start,
                stop,
                record_count,
                topic,
                partition,
                base_offset,
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
                        tuple(record.headers),
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
    index = 0
    try:
        while index < count:
            record_start = pos
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
            body_start = pos
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
            offset_delta_start = pos
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
            offset_delta = (byte >> 1) ^ -(byte & 1)
            offset = base_offset + offset_delta
            key_start = pos
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
            value_field_start = pos
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
                headers: tuple[Header, ...] = ()
            else:
                header_count, pos = read_varint(data, pos, record_end)
                header_list, pos = decode_record_headers(data, pos, record_end, header_count)
                headers = tuple(header_list)
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
            index += 1
            # A record with no headers is the template for a run of records laid out like it.
            if (
                not headers
                and count - index >= _RUN_RECORDS_MIN
                and data[pos : pos + body_start - record_start] == data[record_start:body_start]
            ):
                taken = _decode_runs(
                    data,
                    pos,
                    end,
                    count - index,
                    record_start,
                    body_start,
                    offset_delta_start,
                    key_start,
                    value_field_start,
                    offset_delta,
                    topic,
                    partition,
                    base_offset,
                    fetch_offset,
                    base_timestamp,
                    fixed_timestamp,
                    timestamp_type,
                    out,
                )
                index += taken
                pos += taken * (pos - record_start)
    except IndexError:
        raise CorruptBatchError("record runs off the end of the batch") from None
    if pos != end:
        raise CorruptBatchError(f"{end - pos} bytes left over after the batch's last record")


# -- runs of records laid out alike ---------------------------------------------------------------
#
# A producer's batch is mostly records of one shape: same key and value lengths, no headers,
# consecutive offset deltas, timestamp deltas of one width. Such a run is checked a column at a time
# (the bytes at one place in every record are one strided slice, compared at C speed) and then
# unpacked by one ``struct`` format repeated once per record, so that the only per-record Python
# work left is building the record. A run is accepted only if every record in it decodes exactly
# as the record-by-record path would decode it; anything else falls back there.

# Shortest run worth the column checks, and the longest checked at once (a run that fails its
# checks costs at most its own length in wasted work, and runs double from the shortest). Runs
# are powers of two so that few unpacking formats are compiled per record layout.
_RUN_RECORDS_MIN = 16
_RUN_RECORDS_MAX = 4096

# Offset deltas a run may reach per varint width (the expected-byte tables stop at 65,536).
_OFFSET_DELTA_TABLE_SIZE = 1 << 16
_OFFSET_DELTA_LIMITS = (0, 64, 8192, _OFFSET_DELTA_TABLE_SIZE)


def _repeat_each(values: range, times: int, continued: bool) -> bytes:
    flag = 0x80 if continued else 0
    return b"".join(bytes((value | flag,)) * times for value in values)


# _OFFSET_DELTA_BYTES[width][j][delta] is byte j of the varint of zigzag(delta) in ``width`` bytes
# (zigzag of a delta d >= 0 is 2d: byte 0 cycles every 64 deltas, byte 1 steps every 64, byte 2
# every 8,192).
_OFFSET_DELTA_BYTES: tuple[tuple[bytes, ...], ...] = (
    (),
    (bytes(range(0, 0x80, 2)),),
    (bytes(range(0x80, 0x100, 2)) * 128, _repeat_each(range(128), 64, continued=False)),
    (
        bytes(range(0x80, 0x100, 2)) * 1024,
        _repeat_each(range(128), 64, continued=True) * 8,
        _repeat_each(range(8), 8192, continued=False),
    ),
)

_BYTE_STRINGS: tuple[bytes, ...] = tuple(bytes((byte,)) for byte in range(256))
# A one-byte timestamp delta (below 0x80) by its byte.
_ONE_BYTE_ZIGZAG: tuple[int, ...] = tuple((unsigned >> 1) ^ -(unsigned & 1) for unsigned in range(0x80))


@functools.cache
def _two_byte_zigzag() -> tuple[int, ...]:
    """A two-byte timestamp delta by its bytes read as a little-endian uint16 (the first byte has
    its continuation bit set, the second does not); built on first use."""
    table = [0] * 0x8000
    for low in range(0x80, 0x100):
        for high in range(0x80):
            unsigned = (low & 0x7F) | (high << 7)
            table[low | (high << 8)] = (unsigned >> 1) ^ -(unsigned & 1)
    return tuple(table)


@functools.lru_cache(maxsize=64)
def _run_format(record_format: str, run: int) -> struct.Struct:
    return struct.Struct("<" + record_format * run)


def _read_length(data: bytes, pos: int) -> tuple[int, int]:
    """A key or value length of the template record (already validated by the record path)."""
    unsigned, pos = read_unsigned_varint(data, pos, len(data))
    return (unsigned >> 1) ^ -(unsigned & 1), pos


def _decode_runs(
    data: bytes,
    start: int,
    end: int,
    remaining: int,
    record_start: int,
    body_start: int,
    offset_delta_start: int,
    key_start: int,
    value_field_start: int,
    template_offset_delta: int,
    topic: str,
    partition: int,
    base_offset: int,
    fetch_offset: int,
    base_timestamp: int,
    fixed_timestamp: int | None,
    timestamp_type: int,
    out: list[ConsumerRecord],
) -> int:
    """Decode the records from ``start`` that are laid out like the template record at
    ``data[record_start:start]`` (no headers) in runs; returns how many were decoded (0 if the
    next ones differ)."""
    record_bytes = start - record_start
    timestamp_width = offset_delta_start - body_start - 1
    offset_delta_width = key_start - offset_delta_start
    if timestamp_width > 2 or offset_delta_width > 3:
        return 0
    key_length, key_data_start = _read_length(data, key_start)
    value_length, value_data_start = _read_length(data, value_field_start)
    # Bytes equal in every record of a run: the length prefix, the key and value lengths, the
    # header count (zero). Relative to the record's start.
    same_bytes = [
        *range(0, body_start - record_start),
        *range(key_start - record_start, key_data_start - record_start),
        *range(value_field_start - record_start, value_data_start - record_start),
        record_bytes - 1,
    ]
    same_columns = [(relative, _BYTE_STRINGS[data[record_start + relative]]) for relative in same_bytes]
    timestamp_relative = body_start + 1 - record_start
    offset_delta_relative = offset_delta_start - record_start
    offset_delta_bytes = _OFFSET_DELTA_BYTES[offset_delta_width]
    delta_limit = _OFFSET_DELTA_LIMITS[offset_delta_width]
    # One record's unpacking format: the timestamp delta's bytes (as a uint8 or a little-endian
    # uint16), the key and the value; everything else skipped. Fields per record and their order.
    pieces = [f"{timestamp_relative}x", "B" if timestamp_width == 1 else "H"]
    cursor = timestamp_relative + timestamp_width
    fields = 1
    key_field = value_field = -1
    if key_length >= 0:
        pieces += [f"{key_data_start - record_start - cursor}x", f"{key_length}s"]
        cursor = key_data_start - record_start + key_length
        key_field, fields = fields, fields + 1
    if value_length >= 0:
        pieces += [f"{value_data_start - record_start - cursor}x", f"{value_length}s"]
        cursor = value_data_start - record_start + value_length
        value_field, fields = fields, fields + 1
    pieces.append(f"{record_bytes - cursor}x")
    record_format = "".join(pieces)
    if fixed_timestamp is None:
        timestamp_table = _ONE_BYTE_ZIGZAG if timestamp_width == 1 else _two_byte_zigzag()
        add_base_timestamp = base_timestamp.__add__
    new = tuple.__new__
    record_class = ConsumerRecord
    taken = 0
    delta = template_offset_delta + 1
    probe = _RUN_RECORDS_MIN
    while True:
        run = min(probe, remaining - taken, (end - start) // record_bytes, delta_limit - delta)
        if run < _RUN_RECORDS_MIN or delta < 0:
            break
        run = 1 << (run.bit_length() - 1)
        stop = start + run * record_bytes
        if not all(
            data[start + relative : stop : record_bytes] == expected * run
            for relative, expected in same_columns
        ):
            break
        if not all(
            data[start + offset_delta_relative + byte_index : stop : record_bytes]
            == offset_delta_bytes[byte_index][delta : delta + run]
            for byte_index in range(offset_delta_width)
        ):
            break
        first_timestamp_bytes = data[start + timestamp_relative : stop : record_bytes]
        if timestamp_width == 1:
            if max(first_timestamp_bytes) >= 0x80:
                break
        elif (
            min(first_timestamp_bytes) < 0x80
            or max(data[start + timestamp_relative + 1 : stop : record_bytes]) >= 0x80
        ):
            break
        # Every record of the run is valid: build those at or after the fetch offset.
        first_offset = base_offset + delta
        skipped = min(max(fetch_offset - first_offset, 0), run)
        if skipped < run:
            unpacked = _run_format(record_format, run).unpack_from(data, start)
            first_field = skipped * fields
            timestamps: Iterable[int]
            if fixed_timestamp is not None:
                timestamps = repeat(fixed_timestamp)
            else:
                timestamps = map(
                    add_base_timestamp, map(timestamp_table.__getitem__, unpacked[first_field::fields])
                )
            out.extend(
                map(
                    new,
                    repeat(record_class),
                    zip(
                        repeat(topic),
                        repeat(partition),
                        range(first_offset + skipped, first_offset + run),
                        timestamps,
                        repeat(timestamp_type),
                        repeat(None) if key_field < 0 else unpacked[first_field + key_field :: fields],
                        repeat(None) if value_field < 0 else unpacked[first_field + value_field :: fields],
                        repeat(()),
                    ),
                )
            )
        taken += run
        start = stop
        delta += run
        probe = min(probe * 2, _RUN_RECORDS_MAX)
    return taken
