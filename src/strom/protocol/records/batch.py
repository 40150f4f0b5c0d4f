"""The v2 record batch codec: build batches and decode them down to their records.

The broker's hot path never comes here (it works on ``header.py`` alone); clients, compaction and
the legacy-format conversions do. Each record inside a batch is laid out as::

    length          varint   bytes after this field
    attributes      int8     unused, 0
    timestampDelta  varlong  relative to the batch's baseTimestamp
    offsetDelta     varint   relative to the batch's baseOffset
    keyLength       varint   -1 = null
    key             bytes
    valueLength     varint   -1 = null
    value           bytes
    headerCount     varint
      headerKeyLength   varint   (never null)
      headerKey         UTF-8
      headerValueLength varint   -1 = null
      headerValue       bytes

The decoder is written for speed (one- and two-byte varints inlined, locals bound, one slice per
key or value) and for distrust: every length is checked against the record's own declared length
and every record against the batch, and anything wrong is ``CorruptBatchError``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import crc32c as _crc32c

from strom.base import limits
from strom.protocol.records.compression import CompressionType, compress, decompress
from strom.protocol.records.header import (
    COMPRESSION_MASK,
    CONTROL_BIT,
    CURRENT_MAGIC,
    HEADER,
    HEADER_BYTES,
    LOG_OVERHEAD_BYTES,
    MAGIC_OFFSET,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
    CorruptBatchError,
    compute_crc,
    parse_batch_header,
)
from strom.protocol.records.varint import (
    SMALL_VALUE_ENCODINGS,
    SMALL_VALUE_MAX,
    SMALL_VALUE_MIN,
    encode_varint,
    encode_varlong,
    read_unsigned_varint,
    read_unsigned_varlong,
    read_varint,
)

NO_TIMESTAMP = -1
NO_PARTITION_LEADER_EPOCH = -1
CREATE_TIME = 0
LOG_APPEND_TIME = 1

# The smallest possible record: length, attributes, timestampDelta, offsetDelta, keyLength,
# valueLength and headerCount, one byte each. Bounds the record count a payload can hold.
RECORD_BYTES_MIN = 7

Header = tuple[str, bytes | None]

_BYTE_VALUES = tuple(bytes((value,)) for value in range(256))

# Attributes .. end of the fixed header, the part covered by the CRC (bytes 21 .. 61).
_CRC_COVERED_HEADER = struct.Struct(">hiqqqhii")


@dataclass(slots=True)
class Record:
    """One record as stored inside a batch: offset and timestamp relative to the batch."""

    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    value: bytes | None
    headers: list[Header] = field(default_factory=list)
    attributes: int = 0


@dataclass(slots=True)
class AbsoluteRecord:
    """A record with its absolute offset and timestamp, and the header of the batch it came in
    (shared by all records of that batch: producer id, control and transactional flags live there).

    For a legacy v0/v1 message ``batch`` is a header synthesised from the message (magic 0 or 1).
    """

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[Header]
    batch: BatchHeader

    @property
    def timestamp_type(self) -> int:
        return self.batch.timestamp_type

    @property
    def is_control(self) -> bool:
        return self.batch.is_control


@dataclass(slots=True)
class DecodedBatch:
    """A batch's header and its records (offsets and timestamps relative to the header)."""

    header: BatchHeader
    records: list[Record]

    def absolute_records(self) -> list[AbsoluteRecord]:
        """The records with absolute offsets and timestamps.

        With LogAppendTime every record's timestamp is the batch's max timestamp, which the broker
        set on append; the per-record deltas are the producer's and no longer count.
        """
        header = self.header
        base_offset = header.base_offset
        if header.attributes & TIMESTAMP_TYPE_BIT:
            log_append_ms = header.max_timestamp
            return [
                AbsoluteRecord(
                    base_offset + record.offset_delta,
                    log_append_ms,
                    record.key,
                    record.value,
                    record.headers,
                    header,
                )
                for record in self.records
            ]
        base_timestamp = header.base_timestamp
        return [
            AbsoluteRecord(
                base_offset + record.offset_delta,
                base_timestamp + record.timestamp_delta,
                record.key,
                record.value,
                record.headers,
                header,
            )
            for record in self.records
        ]


# ---------------------------------------------------------------------------------------------
# Building


def _encode_bytes_field(data: bytes | None) -> bytes:
    if data is None:
        return b"\x01"  # zigzag -1
    return encode_varint(len(data)) + data


def _encode_headers(headers: Iterable[Header]) -> bytes:
    parts: list[bytes] = []
    count = 0
    for header_key, header_value in headers:
        key_bytes = header_key.encode()
        parts.append(encode_varint(len(key_bytes)))
        parts.append(key_bytes)
        parts.append(_encode_bytes_field(header_value))
        count += 1
    return encode_varint(count) + b"".join(parts)


def encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Iterable[Header] = (),
    attributes: int = 0,
) -> bytes:
    """One record's bytes, length prefix included."""
    # The small-value table inlined: this runs once per record a producer sends.
    small = SMALL_VALUE_ENCODINGS
    body = b"".join(
        (
            _BYTE_VALUES[attributes & 0xFF],
            small[timestamp_delta - SMALL_VALUE_MIN]
            if SMALL_VALUE_MIN <= timestamp_delta < SMALL_VALUE_MAX
            else encode_varlong(timestamp_delta),
            small[offset_delta - SMALL_VALUE_MIN]
            if SMALL_VALUE_MIN <= offset_delta < SMALL_VALUE_MAX
            else encode_varint(offset_delta),
            b"\x01" if key is None else encode_varint(len(key)) + key,
            b"\x01" if value is None else encode_varint(len(value)) + value,
            _encode_headers(headers) if headers else b"\x00",
        )
    )
    body_bytes = len(body)
    if body_bytes < SMALL_VALUE_MAX:
        return small[body_bytes - SMALL_VALUE_MIN] + body
    return encode_varint(body_bytes) + body


def _assemble_batch(
    records_payload: bytes,
    *,
    record_count: int,
    base_offset: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    compression: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    partition_leader_epoch: int,
    timestamp_type: int,
    is_transactional: bool,
    is_control: bool,
) -> bytes:
    attributes = compression & COMPRESSION_MASK
    if timestamp_type == LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_BIT
    if is_transactional:
        attributes |= TRANSACTIONAL_BIT
    if is_control:
        attributes |= CONTROL_BIT
    if compression != CompressionType.NONE:
        records_payload = compress(compression, records_payload)
    covered_header = _CRC_COVERED_HEADER.pack(
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        record_count,
    )
    crc = _crc32c.crc32c(records_payload, _crc32c.crc32c(covered_header))
    batch_length = HEADER_BYTES - LOG_OVERHEAD_BYTES + len(records_payload)
    return (
        HEADER.pack(
            base_offset,
            batch_length,
            partition_leader_epoch,
            CURRENT_MAGIC,
            crc,
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            record_count,
        )
        + records_payload
    )


def build_batch(
    records: Sequence[Record],
    *,
    base_offset: int = 0,
    base_timestamp: int | None = None,
    compression: int = CompressionType.NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = NO_SEQUENCE,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    timestamp_type: int = CREATE_TIME,
    is_transactional: bool = False,
    is_control: bool = False,
    last_offset_delta: int | None = None,
    max_timestamp: int | None = None,
) -> bytes:
    """Encode ``records`` as one v2 batch and return its bytes.

    ``base_timestamp`` is what the records' ``timestamp_delta`` are relative to. When it is None
    the deltas are taken as absolute timestamps and the batch is based on the first record's
    timestamp, as Java producers write it. ``last_offset_delta`` defaults to the last record's
    offset delta (compaction passes the original one to keep an emptied batch's offset range);
    ``max_timestamp`` defaults to the largest record timestamp (-1 for no records).
    """
    if base_timestamp is None:
        base_timestamp = records[0].timestamp_delta if records else NO_TIMESTAMP
        shift_ms = base_timestamp
    else:
        shift_ms = 0
    parts: list[bytes] = []
    append = parts.append
    largest_delta = None
    for record in records:
        timestamp_delta = record.timestamp_delta - shift_ms
        if largest_delta is None or timestamp_delta > largest_delta:
            largest_delta = timestamp_delta
        append(
            encode_record(
                record.offset_delta,
                timestamp_delta,
                record.key,
                record.value,
                record.headers,
                record.attributes,
            )
        )
    if max_timestamp is None:
        max_timestamp = NO_TIMESTAMP if largest_delta is None else base_timestamp + largest_delta
    if last_offset_delta is None:
        last_offset_delta = records[-1].offset_delta if records else 0
    return _assemble_batch(
        b"".join(parts),
        record_count=len(records),
        base_offset=base_offset,
        last_offset_delta=last_offset_delta,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        compression=compression,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        partition_leader_epoch=partition_leader_epoch,
        timestamp_type=timestamp_type,
        is_transactional=is_transactional,
        is_control=is_control,
    )


RecordRow = tuple[int, bytes | None, bytes | None, Sequence[Header]]
"""One record as a producer queues it: (timestamp in ms, key, value, headers)."""

# Per-record overhead besides key, value and headers, as ``estimate_row_bytes`` counts it: length,
# attributes, timestampDelta, offsetDelta, keyLength, valueLength, headerCount at their usual sizes.
ROW_OVERHEAD_BYTES_ESTIMATE = 12


def estimate_row_bytes(key: bytes | None, value: bytes | None, headers: Sequence[Header] = ()) -> int:
    """About how many bytes a record takes in a batch (exact within a few bytes per record)."""
    size = ROW_OVERHEAD_BYTES_ESTIMATE
    if key is not None:
        size += len(key)
    if value is not None:
        size += len(value)
    for header_key, header_value in headers:
        size += len(header_key) + 2 + (0 if header_value is None else len(header_value) + 2)
    return size


def encode_record_rows(rows: Sequence[RecordRow], base_timestamp: int) -> bytes:
    """The records payload (uncompressed) of ``rows`` with offset deltas 0, 1, ... and timestamps
    relative to ``base_timestamp``; byte for byte what ``encode_record`` gives record by record.

    One loop with every common case inlined: this is the producer's per-record cost.
    """
    small = SMALL_VALUE_ENCODINGS
    small_offset = -SMALL_VALUE_MIN
    small_min = SMALL_VALUE_MIN
    small_max = SMALL_VALUE_MAX
    # Eight pieces per record into one list, joined once: measured faster than growing a
    # bytearray or concatenating the small fields first.
    parts: list[bytes] = []
    extend = parts.extend
    offset_delta = -1
    for timestamp_ms, key, value, headers in rows:
        offset_delta += 1
        timestamp_delta = timestamp_ms - base_timestamp
        timestamp_field = (
            small[timestamp_delta + small_offset]
            if small_min <= timestamp_delta < small_max
            else encode_varlong(timestamp_delta)
        )
        offset_field = (
            small[offset_delta + small_offset] if offset_delta < small_max else encode_varint(offset_delta)
        )
        if key is None and value is not None and not headers:  # the common record, inlined further
            value_bytes = len(value)
            value_length_field = (
                small[value_bytes + small_offset] if value_bytes < small_max else encode_varint(value_bytes)
            )
            body_bytes = 3 + len(timestamp_field) + len(offset_field) + len(value_length_field) + value_bytes
            extend(
                (
                    small[body_bytes + small_offset] if body_bytes < small_max else encode_varint(body_bytes),
                    b"\x00",
                    timestamp_field,
                    offset_field,
                    b"\x01",
                    value_length_field,
                    value,
                    b"\x00",
                )
            )
            continue
        if key is None:
            key_field = b"\x01"
        else:
            key_bytes = len(key)
            key_field = (
                small[key_bytes + small_offset] if key_bytes < small_max else encode_varint(key_bytes)
            ) + key
        if value is None:
            value_length_field = b"\x01"
            value = b""
            value_bytes = 0
        else:
            value_bytes = len(value)
            value_length_field = (
                small[value_bytes + small_offset] if value_bytes < small_max else encode_varint(value_bytes)
            )
        headers_field = _encode_headers(headers) if headers else b"\x00"
        body_bytes = (
            1
            + len(timestamp_field)
            + len(offset_field)
            + len(key_field)
            + len(value_length_field)
            + value_bytes
            + len(headers_field)
        )
        extend(
            (
                small[body_bytes + small_offset] if body_bytes < small_max else encode_varint(body_bytes),
                b"\x00",
                timestamp_field,
                offset_field,
                key_field,
                value_length_field,
                value,
                headers_field,
            )
        )
    return b"".join(parts)


def build_batch_from_rows(
    rows: Sequence[RecordRow],
    *,
    compression: int = CompressionType.NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
) -> bytes:
    """A producer's v2 batch of ``rows`` (offsets from 0, CreateTime, based on the first record's
    timestamp): the same bytes as ``BatchBuilder`` appending the rows one by one."""
    if rows:
        base_timestamp = rows[0][0]
        max_timestamp = max(row[0] for row in rows)
    else:
        base_timestamp = max_timestamp = NO_TIMESTAMP
    return _assemble_batch(
        encode_record_rows(rows, base_timestamp),
        record_count=len(rows),
        base_offset=0,
        last_offset_delta=max(len(rows) - 1, 0),
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        compression=compression,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        partition_leader_epoch=NO_PARTITION_LEADER_EPOCH,
        timestamp_type=CREATE_TIME,
        is_transactional=is_transactional,
        is_control=False,
    )


class BatchBuilder:
    """Accumulates records with absolute timestamps and builds one v2 batch (the producer's view).

    Offsets are consecutive from 0 (the broker assigns the real base offset on append). Records are
    encoded as they are appended, so ``size_bytes`` is exact for an uncompressed batch and lets a
    producer stop at its ``batch.size``.
    """

    def __init__(
        self,
        *,
        compression: int = CompressionType.NONE,
        base_offset: int = 0,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = -1,
        base_sequence: int = NO_SEQUENCE,
        partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
        timestamp_type: int = CREATE_TIME,
        is_transactional: bool = False,
        is_control: bool = False,
    ) -> None:
        self.compression = CompressionType(compression)
        self.base_offset = base_offset
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.partition_leader_epoch = partition_leader_epoch
        self.timestamp_type = timestamp_type
        self.is_transactional = is_transactional
        self.is_control = is_control
        self._encoded: list[bytes] = []
        self._payload_bytes = 0
        self._base_timestamp = NO_TIMESTAMP
        self._max_timestamp = NO_TIMESTAMP

    def __len__(self) -> int:
        return len(self._encoded)

    @property
    def size_bytes(self) -> int:
        """Bytes of the batch if built now without compression."""
        return HEADER_BYTES + self._payload_bytes

    def append(
        self,
        timestamp_ms: int,
        key: bytes | None,
        value: bytes | None,
        headers: Iterable[Header] = (),
    ) -> int:
        """Add a record; returns its offset delta within the batch."""
        offset_delta = len(self._encoded)
        if offset_delta == 0:
            self._base_timestamp = timestamp_ms
            self._max_timestamp = timestamp_ms
        elif timestamp_ms > self._max_timestamp:
            self._max_timestamp = timestamp_ms
        encoded = encode_record(offset_delta, timestamp_ms - self._base_timestamp, key, value, headers)
        self._encoded.append(encoded)
        self._payload_bytes += len(encoded)
        return offset_delta

    def build(self) -> bytes:
        count = len(self._encoded)
        return _assemble_batch(
            b"".join(self._encoded),
            record_count=count,
            base_offset=self.base_offset,
            last_offset_delta=max(count - 1, 0),
            base_timestamp=self._base_timestamp,
            max_timestamp=self._max_timestamp,
            compression=self.compression,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            base_sequence=self.base_sequence,
            partition_leader_epoch=self.partition_leader_epoch,
            timestamp_type=self.timestamp_type,
            is_transactional=self.is_transactional,
            is_control=self.is_control,
        )


# ---------------------------------------------------------------------------------------------
# Decoding


def decode_record_headers(data: bytes, pos: int, end: int, count: int) -> tuple[list[Header], int]:
    """Decode a record's ``count`` headers from ``pos`` not reading past ``end``; returns (headers, next pos)."""
    if count < 0 or count > (end - pos) // 2:  # a header takes at least two bytes
        raise CorruptBatchError(f"record header count {count} is out of bounds")
    headers: list[Header] = []
    for _ in range(count):
        key_bytes, pos = read_varint(data, pos, end)
        if key_bytes < 0 or key_bytes > end - pos:
            raise CorruptBatchError(f"record header key length {key_bytes} is out of bounds")
        # Keys are meant to be UTF-8 but nothing checks it on the way in (Kafka neither): bytes that
        # are not read as U+FFFD, as Kafka's clients read them.
        header_key = data[pos : pos + key_bytes].decode(errors="replace")
        pos += key_bytes
        value_bytes, pos = read_varint(data, pos, end)
        if value_bytes == -1:
            headers.append((header_key, None))
            continue
        if value_bytes < 0 or value_bytes > end - pos:
            raise CorruptBatchError(f"record header value length {value_bytes} is out of bounds")
        headers.append((header_key, data[pos : pos + value_bytes]))
        pos += value_bytes
    return headers, pos


def decode_records(data: bytes, pos: int, end: int, count: int) -> list[Record]:
    """Decode exactly ``count`` records that must fill ``data[pos:end]`` exactly."""
    if count > (end - pos) // RECORD_BYTES_MIN:
        raise CorruptBatchError(f"{count} records cannot fit in {end - pos} bytes")
    records: list[Record] = []
    append = records.append
    new_record = Record
    try:
        for _ in range(count):
            # Each varint below: the one- and two-byte forms inline, longer ones by call; ``byte``
            # holds the zigzag form u and the value is (u >> 1) ^ -(u & 1).
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
            record_bytes = (byte >> 1) ^ -(byte & 1)
            record_end = pos + record_bytes
            if record_bytes < 6 or record_end > end:
                raise CorruptBatchError(f"record length {record_bytes} is out of bounds")
            attributes = data[pos]
            # timestampDelta (varlong)
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
            offset_delta = (byte >> 1) ^ -(byte & 1)
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
                value = data[pos : pos + (byte >> 1)]
                pos += byte >> 1
            # headers
            if pos >= record_end:
                raise CorruptBatchError("record ends before its header count")
            byte = data[pos]
            if byte == 0:
                pos += 1
                headers: list[Header] = []
            else:
                header_count, pos = read_varint(data, pos, record_end)
                headers, pos = decode_record_headers(data, pos, record_end, header_count)
            if pos != record_end:
                raise CorruptBatchError("record length does not match its fields")
            append(new_record(offset_delta, timestamp_delta, key, value, headers, attributes))
    except IndexError:
        raise CorruptBatchError("record runs off the end of the batch") from None
    if pos != end:
        raise CorruptBatchError(f"{end - pos} bytes left over after the batch's last record")
    return records


def decode_batch(
    buf: bytes | bytearray | memoryview,
    pos: int = 0,
    *,
    decompressed_bytes_max: int = limits.decompressed_batch_bytes_max,
) -> DecodedBatch:
    """Decode the whole v2 batch at ``pos``: header, CRC, decompression, every record.

    Raises ``CorruptBatchError`` for anything wrong, including a record count that does not match
    the records or records that do not fill the payload exactly.
    """
    header = parse_batch_header(buf, pos)
    if compute_crc(buf, pos, header.size_bytes) != header.crc:
        raise CorruptBatchError(f"CRC mismatch in the batch at byte {pos}")
    return _decode_checked_batch(buf, pos, header, decompressed_bytes_max)


def _decode_checked_batch(
    buf: bytes | bytearray | memoryview,
    pos: int,
    header: BatchHeader,
    decompressed_bytes_max: int,
) -> DecodedBatch:
    start = pos + HEADER_BYTES
    end = pos + header.size_bytes
    compression = header.attributes & COMPRESSION_MASK
    if compression != CompressionType.NONE:
        data = decompress(compression, memoryview(buf)[start:end], decompressed_bytes_max)
        start, end = 0, len(data)
    elif isinstance(buf, bytes):
        data = buf
    else:
        data = bytes(buf[start:end])
        start, end = 0, len(data)
    return DecodedBatch(header, decode_records(data, start, end, header.record_count))


def iter_batches(
    buf: bytes | bytearray | memoryview,
    *,
    decompressed_bytes_max: int = limits.decompressed_batch_bytes_max,
) -> Iterator[DecodedBatch]:
    """Decode every batch in ``buf`` (a fetch response's records), v2 and legacy v0/v1 alike.

    A trailing partial batch is ignored: fetch responses may cut the last batch short. Anything
    else wrong raises ``CorruptBatchError``. A legacy message (or compressed wrapper) comes out as
    one ``DecodedBatch`` whose header is synthesised from it and has magic 0 or 1.
    """
    from strom.protocol.records import legacy  # legacy builds on this module

    if not isinstance(buf, bytes):
        buf = bytes(buf)  # once, so no batch below copies its part again
    pos = 0
    end = len(buf)
    while end - pos > MAGIC_OFFSET:
        magic = buf[pos + MAGIC_OFFSET]
        if magic == CURRENT_MAGIC:
            if end - pos < HEADER_BYTES:
                return
            (batch_length,) = struct.unpack_from(">i", buf, pos + 8)
            if batch_length + LOG_OVERHEAD_BYTES > end - pos:
                return
            batch = decode_batch(buf, pos, decompressed_bytes_max=decompressed_bytes_max)
            yield batch
            pos += batch.header.size_bytes
        elif magic in (0, 1):
            decoded = legacy.decode_top_level_message(buf, pos, decompressed_bytes_max)
            if decoded is None:
                return
            yield decoded.batch
            pos = decoded.next_pos
        else:
            raise CorruptBatchError(f"unknown magic {magic} at byte {pos}")


def iter_records(
    buf: bytes | bytearray | memoryview,
    *,
    decompressed_bytes_max: int = limits.decompressed_batch_bytes_max,
) -> Iterator[AbsoluteRecord]:
    """Every record in ``buf`` with absolute offsets and timestamps (see ``iter_batches``)."""
    for batch in iter_batches(buf, decompressed_bytes_max=decompressed_bytes_max):
        yield from batch.absolute_records()
