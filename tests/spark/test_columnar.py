"""The columnar decoder and chunk_to_arrow agree with the protocol's decoder on every batch shape."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.protocol.records import iter_batches
from strom.protocol.records.batch import LOG_APPEND_TIME, BatchBuilder
from strom.protocol.records.compression import CompressionType
from strom.protocol.records.header import parse_batch_header
from strom.spark.columnar import decode_batch_columns
from strom.spark.fetching import FetchedChunk, chunk_to_arrow

Row = tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]

rows_strategy = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=2**41),
        st.none() | st.binary(max_size=300),
        st.none() | st.binary(max_size=300),
        st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)), max_size=2),
    ),
    min_size=1,
    max_size=40,
)


def _batch(
    rows: list[Row], base_offset: int, compression: int = CompressionType.NONE, timestamp_type: int = 0
) -> bytes:
    builder = BatchBuilder(compression=compression, base_offset=base_offset, timestamp_type=timestamp_type)
    for timestamp, key, value, headers in rows:
        builder.append(timestamp, key, value, headers)
    return builder.build()


def _expected(buffer: bytes, from_offset: int, until_offset: int) -> list[tuple[object, ...]]:
    return [
        (record.offset, record.timestamp, record.key, record.value, [tuple(h) for h in record.headers])
        for batch in iter_batches(buffer)
        for record in batch.absolute_records()
        if from_offset <= record.offset < until_offset
    ]


def _read(
    buffer: bytes, from_offset: int, until_offset: int, include_headers: bool
) -> list[tuple[object, ...]]:
    batch, _ = chunk_to_arrow(
        FetchedChunk(from_offset, 0, buffer, -1, -1), "t", 3, from_offset, until_offset, include_headers
    )
    if batch is None:
        return []
    table = batch.to_pydict()
    assert set(table["topic"]) == {"t"} and set(table["partition"]) == {3}
    return [
        (
            offset,
            round(timestamp.timestamp() * 1000),
            key,
            value,
            [(h["key"], h["value"]) for h in headers] if include_headers else None,
        )
        for offset, timestamp, key, value, headers in zip(
            table["offset"], table["timestamp"], table["key"], table["value"],
            table.get("headers", [None] * len(table["offset"])), strict=True,
        )
    ]  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(
    first=rows_strategy,
    second=rows_strategy,
    compression=st.sampled_from(
        [CompressionType.NONE, CompressionType.GZIP, CompressionType.LZ4, CompressionType.ZSTD]
    ),
    include_headers=st.booleans(),
    cut=st.integers(min_value=0, max_value=90),
)
def test_chunks_decode_as_the_protocol_decoder_does(
    first: list[Row], second: list[Row], compression: int, include_headers: bool, cut: int
) -> None:
    buffer = _batch(first, 100, compression) + _batch(second, 100 + len(first) + 5)
    from_offset, until_offset = 100 + cut // 3, 100 + cut
    expected = _expected(buffer, from_offset, until_offset)
    got = _read(buffer, from_offset, until_offset, include_headers)
    assert [row[0] for row in got] == [row[0] for row in expected]
    assert [row[2:4] for row in got] == [row[2:4] for row in expected]
    assert [row[1] for row in got] == [row[1] for row in expected]
    if include_headers:
        assert [row[4] for row in got] == [row[4] for row in expected]


def test_log_append_time_and_a_partial_tail() -> None:
    rows: list[Row] = [(1000 + index, None, b"v%d" % index, []) for index in range(10)]
    whole = _batch(rows, 0, timestamp_type=LOG_APPEND_TIME)
    header = parse_batch_header(whole)
    columns = decode_batch_columns(whole, 0, header, want_headers=False, decompressed_bytes_max=1 << 20)
    assert columns is not None
    assert set(columns.timestamps_ms.tolist()) == {header.max_timestamp}
    # A fetch may end inside a batch: only whole batches count.
    buffer = whole + _batch(rows, 10)[:-7]
    batch, after = chunk_to_arrow(FetchedChunk(0, 0, buffer, -1, -1), "t", 0, 0, 100, False)
    assert batch is not None and batch.num_rows == 10 and after == 10


def test_corrupt_batch_is_refused_by_the_fallback() -> None:
    from strom.protocol.records.header import CorruptBatchError

    buffer = bytearray(_batch([(1, b"k", b"v", [])], 0))
    buffer[-1] ^= 0xFF
    with pytest.raises(CorruptBatchError):
        chunk_to_arrow(FetchedChunk(0, 0, bytes(buffer), -1, -1), "t", 0, 0, 10, False)


@pytest.mark.parametrize("varied", [False, True])
def test_large_batches_with_runs_of_equal_size_records(varied: bool) -> None:
    """Offset deltas grow a byte at 64 and 8192 and values change size in runs (or every record):
    the run finder must land on exactly the records the protocol decoder finds."""
    import random

    generator = random.Random(5)
    rows: list[Row] = []
    for index in range(10_000):
        size = generator.randrange(0, 300) if varied else 100 + (index // 700) % 3
        key = None if index % 3000 < 1500 else b"key-%d" % (index % 10)
        rows.append((5_000 + index * (index % 7), key, bytes([index % 256]) * size, []))
    buffer = _batch(rows, 0) + _batch(rows[:100], 10_000)
    assert _read(buffer, 0, 20_000, False) == [
        (offset, timestamp, key, value, None)
        for offset, timestamp, key, value, _ in _expected(buffer, 0, 20_000)
    ]
    header = parse_batch_header(buffer)
    columns = decode_batch_columns(buffer, 0, header, want_headers=False, decompressed_bytes_max=1 << 26)
    assert columns is not None, "the columnar path declined a plain batch"
    assert columns.offsets.tolist() == list(range(10_000))
