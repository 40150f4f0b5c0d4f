"""Record batches (v2) decoded into columns with numpy: the per-record Python work is one hop along
the record-length varints; every other field is decoded for all records of a batch at once.

Any batch this path does not handle (legacy magic, headers wanted and present, or anything
malformed) returns None and is decoded by the protocol's own decoder instead, which also gives
the precise ``CorruptBatchError``. The CRC is checked here as the protocol decoder does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from strom.protocol.records.compression import CompressionType, decompress
from strom.protocol.records.header import COMPRESSION_MASK, HEADER_BYTES, BatchHeader, compute_crc
from strom.protocol.records.varint import read_unsigned_varint

__all__ = ["BatchColumns", "decode_batch_columns"]

Int64Array = npt.NDArray[np.int64]

# A varlong takes at most 10 bytes.
_VARINT_BYTES_MAX = 10


@dataclass(frozen=True)
class BatchColumns:
    offsets: Int64Array
    timestamps_ms: Int64Array
    keys: list[bytes | None]
    values: list[bytes | None]


def _record_starts(data: bytes, pos: int, end: int, count: int) -> tuple[list[int], list[int]] | None:
    """Start (after the length) and end of each record; None when the lengths do not add up."""
    starts = [0] * count
    ends = [0] * count
    for index in range(count):
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
        length = (byte >> 1) ^ -(byte & 1)
        if length < 6:
            return None
        starts[index] = pos
        pos += length
        ends[index] = pos
    if pos != end:
        return None
    return starts, ends


def _zigzag_varints(buffer: npt.NDArray[np.uint8], positions: Int64Array) -> tuple[Int64Array, Int64Array]:
    """The zigzag varints starting at ``positions``: (values, positions after them)."""
    first = buffer[positions]
    if not (first & 0x80).any():  # the common case: every one is a single byte
        unsigned = first.astype(np.int64)
        return (unsigned >> 1) ^ -(unsigned & 1), positions + 1
    accumulated = np.zeros(len(positions), np.uint64)
    current = positions.copy()
    done = np.zeros(len(positions), bool)
    for step in range(_VARINT_BYTES_MAX):
        byte = buffer[current].astype(np.uint64)
        accumulated |= np.where(done, np.uint64(0), (byte & np.uint64(0x7F)) << np.uint64(7 * step))
        current = np.where(done, current, current + 1)
        done |= (byte & np.uint64(0x80)) == 0
        if done.all():
            break
    else:
        raise IndexError("varint longer than 10 bytes")
    unsigned_values = accumulated
    values = (unsigned_values >> np.uint64(1)).astype(np.int64) ^ -(unsigned_values & np.uint64(1)).astype(
        np.int64
    )
    return values, current


def _slices(data: bytes, starts: Int64Array, lengths: Int64Array) -> list[bytes | None]:
    if (lengths < 0).all():
        return [None] * len(lengths)
    return [
        None if length < 0 else data[start : start + length]
        for start, length in zip(starts.tolist(), lengths.tolist(), strict=True)
    ]


def decode_batch_columns(
    buffer: bytes, pos: int, header: BatchHeader, *, want_headers: bool, decompressed_bytes_max: int
) -> BatchColumns | None:
    """The batch at ``pos`` as columns, or None to fall back to the protocol decoder."""
    if header.magic != 2 or header.record_count <= 0:
        return None
    if compute_crc(buffer, pos, header.size_bytes) != header.crc:
        return None  # the fallback raises CorruptBatchError with the details
    start = pos + HEADER_BYTES
    end = pos + header.size_bytes
    data = buffer
    compression = header.attributes & COMPRESSION_MASK
    if compression != CompressionType.NONE:
        data = decompress(compression, memoryview(buffer)[start:end], decompressed_bytes_max)
        start, end = 0, len(data)
    try:
        bounds = _record_starts(data, start, end, header.record_count)
        if bounds is None:
            return None
        starts = np.array(bounds[0], np.int64)
        record_ends = np.array(bounds[1], np.int64)
        as_array = np.frombuffer(data, np.uint8)
        timestamp_deltas, positions = _zigzag_varints(as_array, starts + 1)  # after the attributes byte
        offset_deltas, positions = _zigzag_varints(as_array, positions)
        key_lengths, positions = _zigzag_varints(as_array, positions)
        key_starts = positions
        positions = positions + np.maximum(key_lengths, 0)
        value_lengths, positions = _zigzag_varints(as_array, positions)
        value_starts = positions
        positions = positions + np.maximum(value_lengths, 0)
        header_counts, positions = _zigzag_varints(as_array, positions)
    except IndexError:
        return None
    if (positions > record_ends).any() or (key_lengths < -1).any() or (value_lengths < -1).any():
        return None
    if want_headers and header_counts.any():
        return None
    if not want_headers and (positions != record_ends).any() and not header_counts.any():
        return None
    if header.timestamp_type:  # LogAppendTime: the broker's time for every record
        timestamps = np.full(header.record_count, header.max_timestamp, np.int64)
    else:
        timestamps = header.base_timestamp + timestamp_deltas
    return BatchColumns(
        offsets=header.base_offset + offset_deltas,
        timestamps_ms=timestamps,
        keys=_slices(data, key_starts, key_lengths),
        values=_slices(data, value_starts, value_lengths),
    )
