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
import pyarrow as pa

from strom.protocol.records.compression import CompressionType, decompress
from strom.protocol.records.header import COMPRESSION_MASK, HEADER_BYTES, BatchHeader, compute_crc
from strom.protocol.records.varint import read_unsigned_varint

__all__ = ["BatchColumns", "decode_batch_columns"]

Int64Array = npt.NDArray[np.int64]

# Records guessed per step of the run finder (bounds its numpy work per step), and the run length
# below which guessing is abandoned for the per-record hop (records of varied sizes).
RUN_WINDOW_RECORDS = 4096
RUN_RECORDS_MIN = 16
# Binary-view layout: values up to 12 bytes are stored inside the 16-byte view itself.
_VIEW_INLINE_BYTES_MAX = 12
_PREFIX_STEPS = np.arange(4)
_INLINE_STEPS = np.arange(_VIEW_INLINE_BYTES_MAX)
# A varlong takes at most 10 bytes.
_VARINT_BYTES_MAX = 10


@dataclass(frozen=True)
class BatchColumns:
    """Columns of the records of one or more consecutive batches, in offset order."""

    offsets: Int64Array
    timestamps_ms: Int64Array
    timestamp_types: npt.NDArray[np.int32]
    keys: pa.Array
    values: pa.Array
    headers: list[list[dict[str, bytes | str | None]]] | None = None


def _record_heads(data: bytes, pos: int, end: int, count: int) -> list[int] | None:
    """Where each record's length varint starts; None when the lengths do not add up to ``end``.

    The one Python step per record in this module, kept minimal: record ``i`` ends where record
    ``i + 1``'s head is, so only the heads are stored."""
    heads: list[int] = []
    append = heads.append
    try:
        for _ in range(count):
            append(pos)
            byte = data[pos]
            if byte < 0x80:
                pos += 1 + ((byte >> 1) ^ -(byte & 1))
                continue
            second = data[pos + 1]
            if second < 0x80:
                byte = (byte & 0x7F) | (second << 7)
                pos += 2 + ((byte >> 1) ^ -(byte & 1))
                continue
            byte, pos = read_unsigned_varint(data, pos, end)
            pos += (byte >> 1) ^ -(byte & 1)
    except IndexError:
        return None
    if pos != end:
        return None
    return heads


def _heads_by_runs(
    data: bytes, buffer: npt.NDArray[np.uint8], pos: int, end: int, count: int
) -> Int64Array | None:
    """The heads found run by run: records of equal size come in long runs (a record's size changes
    only when a field's varint grows a byte, as offset deltas do at 64 and 8192), so guess that the
    next records have the current one's size and check every guess at once. The check is exact:
    a head whose length byte(s) match says where the next head is, so the run of matches from a
    known head is right. Short runs (records of varied size) hand over to the per-record hop."""
    parts: list[Int64Array] = []
    remaining = count
    size = len(buffer)
    while remaining > 0:
        first = int(buffer[pos])
        if first < 0x80:
            unsigned, prefix_bytes = first, 1
        else:
            second = int(buffer[pos + 1]) if pos + 1 < size else 0x80
            if second >= 0x80:
                break
            unsigned, prefix_bytes = (first & 0x7F) | (second << 7), 2
        stride = prefix_bytes + ((unsigned >> 1) ^ -(unsigned & 1))
        if stride <= prefix_bytes:
            return None
        window = min(remaining, RUN_WINDOW_RECORDS)
        candidates = pos + stride * np.arange(window, dtype=np.int64)
        inside = candidates + prefix_bytes <= end
        clipped = np.minimum(candidates, size - prefix_bytes)
        matches = inside & (buffer[clipped] == buffer[pos])
        if prefix_bytes == 2:
            matches &= buffer[clipped + 1] == buffer[pos + 1]
        run = window if matches.all() else int(np.argmin(matches))
        parts.append(candidates[:run])
        pos += stride * run
        remaining -= run
        if run < RUN_RECORDS_MIN:
            break
    if remaining:
        tail = _record_heads(data, pos, end, remaining)
        if tail is None:
            return None
        parts.append(np.array(tail, np.int64))
    elif pos != end:
        return None
    return np.concatenate(parts) if len(parts) > 1 else parts[0]


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


def _binary_column(buffer: npt.NDArray[np.uint8], starts: Int64Array, lengths: Int64Array) -> pa.Array:
    """An Arrow binary array of the byte ranges (length -1: null). Built as a binary-view array
    over ``buffer`` (16 bytes per value: its length and a 4-byte prefix plus buffer offset, or the
    whole value when it is at most 12 bytes), then cast to plain binary, which copies the bytes
    in C: no Python object per value."""
    count = len(lengths)
    present = lengths >= 0
    if not present.any():
        return pa.nulls(count, pa.binary())
    sizes = np.where(present, lengths, 0)
    views = np.zeros((count, 4), np.int32)
    views[:, 0] = sizes
    view_bytes = views.view(np.uint8).reshape(count, 16)
    long_values = sizes > _VIEW_INLINE_BYTES_MAX
    if long_values.any():
        long_starts = starts[long_values]
        view_bytes[long_values, 4:8] = buffer[long_starts[:, None] + _PREFIX_STEPS]
        views[long_values, 3] = long_starts
    short_values = ~long_values & (sizes > 0)
    if short_values.any():
        short_starts = starts[short_values]
        positions = np.minimum(short_starts[:, None] + _INLINE_STEPS, len(buffer) - 1)
        inside = sizes[short_values][:, None] > _INLINE_STEPS
        view_bytes[short_values, 4:16] = np.where(inside, buffer[positions], 0)
    validity = None if present.all() else pa.py_buffer(np.packbits(present, bitorder="little"))
    as_views = pa.Array.from_buffers(
        pa.binary_view(), count, [validity, pa.py_buffer(views), pa.py_buffer(buffer)]
    )
    return as_views.cast(pa.binary())


def decode_batch_columns(
    buffer: bytes, pos: int, header: BatchHeader, *, want_headers: bool, decompressed_bytes_max: int
) -> BatchColumns | None:
    """The batch at ``pos`` as columns, or None to fall back to the protocol decoder."""
    return decode_batches_columns(
        buffer, [(pos, header)], want_headers=want_headers, decompressed_bytes_max=decompressed_bytes_max
    )


def decode_batches_columns(
    buffer: bytes,
    batches: list[tuple[int, BatchHeader]],
    *,
    want_headers: bool,
    decompressed_bytes_max: int,
) -> BatchColumns | None:
    """Consecutive batches of ``buffer`` (uncompressed ones together, or one compressed batch) as
    columns in one set of vectorised passes; None to fall back to the protocol decoder."""
    regions: list[tuple[int, int, BatchHeader]] = []
    data = buffer
    for pos, header in batches:
        if header.magic != 2 or header.record_count <= 0:
            return None
        if compute_crc(buffer, pos, header.size_bytes) != header.crc:
            return None  # the fallback raises CorruptBatchError with the details
        compression = header.attributes & COMPRESSION_MASK
        if compression != CompressionType.NONE:
            if len(batches) != 1:
                return None
            start, end = pos + HEADER_BYTES, pos + header.size_bytes
            data = decompress(compression, memoryview(buffer)[start:end], decompressed_bytes_max)
            regions.append((0, len(data), header))
        else:
            regions.append((pos + HEADER_BYTES, pos + header.size_bytes, header))
    as_array = np.frombuffer(data, np.uint8)
    head_parts: list[Int64Array] = []
    end_parts: list[Int64Array] = []
    try:
        for start, end, header in regions:
            heads = _heads_by_runs(data, as_array, start, end, header.record_count)
            if heads is None:
                return None
            ends = np.empty_like(heads)
            ends[:-1] = heads[1:]
            ends[-1] = end
            head_parts.append(heads)
            end_parts.append(ends)
        heads = np.concatenate(head_parts) if len(head_parts) > 1 else head_parts[0]
        record_ends = np.concatenate(end_parts) if len(end_parts) > 1 else end_parts[0]
        record_lengths, starts = _zigzag_varints(as_array, heads)
        if (starts + record_lengths != record_ends).any() or (record_lengths < 6).any():
            return None
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
    if (positions != record_ends).any() and not header_counts.any():
        return None
    counts = [header.record_count for _, _, header in regions]
    headers_of = [header for _, _, header in regions]
    base_offsets = np.repeat(np.array([h.base_offset for h in headers_of], np.int64), counts)
    base_timestamps = np.repeat(np.array([h.base_timestamp for h in headers_of], np.int64), counts)
    types = np.repeat(np.array([h.timestamp_type for h in headers_of], np.int32), counts)
    timestamps = base_timestamps + timestamp_deltas
    if types.any():  # LogAppendTime: the broker's time for every record of such a batch
        max_timestamps = np.repeat(np.array([h.max_timestamp for h in headers_of], np.int64), counts)
        timestamps = np.where(types == 1, max_timestamps, timestamps)
    return BatchColumns(
        offsets=base_offsets + offset_deltas,
        timestamps_ms=timestamps,
        timestamp_types=types,
        keys=_binary_column(as_array, key_starts, key_lengths),
        values=_binary_column(as_array, value_starts, value_lengths),
        headers=[[] for _ in range(len(heads))] if want_headers else None,
    )
