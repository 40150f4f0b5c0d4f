"""Property tests of the record codecs.

INVARIANT (the decoders trust nothing): for ANY input bytes, ``decode_batch``, ``iter_records``
and ``decode_message_set`` either return decoded records or raise ``CorruptBatchError`` — never
any other exception, never a hang. And for any records, build -> decode gives them back unchanged,
whatever the compression.
"""

from __future__ import annotations

import contextlib

from hypothesis import given, settings
from hypothesis import strategies as st

from strom.protocol.records import (
    BatchBuilder,
    CompressionType,
    CorruptBatchError,
    LegacyMessage,
    Record,
    build_batch,
    build_message_set,
    decode_batch,
    decode_message_set,
    iter_records,
    rewrite_crc,
    upconvert_message_set,
)

PROPERTY_SETTINGS = settings(max_examples=150, deadline=None)

optional_bytes = st.none() | st.binary(max_size=200)
headers = st.lists(st.tuples(st.text(max_size=20), optional_bytes), max_size=4)
timestamps_ms = st.integers(min_value=-1, max_value=1 << 45)
compressions = st.sampled_from(list(CompressionType))


@st.composite
def record_lists(draw: st.DrawFn) -> list[Record]:
    count = draw(st.integers(min_value=0, max_value=20))
    gaps = draw(st.lists(st.integers(min_value=1, max_value=70_000), min_size=count, max_size=count))
    records = []
    offset_delta = -1
    for gap in gaps:
        offset_delta += gap if offset_delta >= 0 else 1
        records.append(
            Record(
                offset_delta,
                draw(st.integers(min_value=-(1 << 40), max_value=1 << 40)),
                draw(optional_bytes),
                draw(optional_bytes),
                draw(headers),
            )
        )
    return records


@PROPERTY_SETTINGS
@given(
    records=record_lists(),
    base_offset=st.integers(min_value=0, max_value=(1 << 62)),
    base_timestamp=timestamps_ms,
    compression=compressions,
    is_transactional=st.booleans(),
)
def test_build_then_decode_gives_the_records_back(
    records: list[Record],
    base_offset: int,
    base_timestamp: int,
    compression: CompressionType,
    is_transactional: bool,
) -> None:
    built = build_batch(
        records,
        base_offset=base_offset,
        base_timestamp=base_timestamp,
        compression=compression,
        is_transactional=is_transactional,
    )
    decoded = decode_batch(built)
    assert decoded.records == records
    assert decoded.header.record_count == len(records)
    assert decoded.header.compression == compression
    assert decoded.header.is_transactional == is_transactional
    absolute = list(iter_records(built))
    assert [record.offset for record in absolute] == [base_offset + r.offset_delta for r in records]
    assert [record.timestamp for record in absolute] == [base_timestamp + r.timestamp_delta for r in records]
    if records:
        assert decoded.header.max_timestamp == max(record.timestamp for record in absolute)


@PROPERTY_SETTINGS
@given(
    entries=st.lists(st.tuples(timestamps_ms, optional_bytes, optional_bytes, headers), max_size=20),
    compression=compressions,
)
def test_builder_and_build_batch_agree(
    entries: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    compression: CompressionType,
) -> None:
    builder = BatchBuilder(compression=compression)
    for timestamp_ms, key, value, record_headers in entries:
        builder.append(timestamp_ms, key, value, record_headers)
    records = [
        Record(number, timestamp_ms, key, value, record_headers)
        for number, (timestamp_ms, key, value, record_headers) in enumerate(entries)
    ]
    assert builder.build() == build_batch(records, compression=compression)


@PROPERTY_SETTINGS
@given(data=st.binary(max_size=400))
def test_random_bytes_decode_or_raise_corrupt_batch_error(data: bytes) -> None:
    for decode in (decode_batch, lambda buf: list(iter_records(buf)), decode_message_set):
        with contextlib.suppress(CorruptBatchError):
            decode(data)


@PROPERTY_SETTINGS
@given(
    records=record_lists(),
    compression=compressions,
    edits=st.lists(
        st.tuples(st.integers(min_value=0), st.integers(min_value=0, max_value=255)), min_size=1, max_size=4
    ),
    fix_crc=st.booleans(),
    cut_bytes=st.integers(min_value=0, max_value=8),
)
def test_edited_batches_decode_or_raise_corrupt_batch_error(
    records: list[Record],
    compression: CompressionType,
    edits: list[tuple[int, int]],
    fix_crc: bool,
    cut_bytes: int,
) -> None:
    """Random bytes rarely get past the header; edits of a valid batch reach the record decoder,
    and with the CRC refreshed they reach it with lies the CRC does not catch."""
    edited = bytearray(build_batch(records, compression=compression))
    for position, byte in edits:
        edited[position % len(edited)] = byte
    if fix_crc:
        with contextlib.suppress(CorruptBatchError):
            rewrite_crc(edited)
    if cut_bytes:
        del edited[-cut_bytes:]
    for decode in (decode_batch, lambda buf: list(iter_records(buf))):
        with contextlib.suppress(CorruptBatchError):
            decode(bytes(edited))


legacy_messages = st.lists(
    st.tuples(st.integers(min_value=1, max_value=5), timestamps_ms, optional_bytes, optional_bytes),
    min_size=1,
    max_size=10,
)


@PROPERTY_SETTINGS
@given(entries=legacy_messages, magic=st.sampled_from([0, 1]), compression=compressions)
def test_legacy_round_trip_and_upconversion_keep_every_message(
    entries: list[tuple[int, int, bytes | None, bytes | None]], magic: int, compression: CompressionType
) -> None:
    messages = []
    offset = 100
    for gap, timestamp_ms, key, value in entries:
        offset += gap
        messages.append(LegacyMessage(offset, timestamp_ms if magic == 1 else -1, key, value))
    encoded = build_message_set(messages, magic=magic, compression=compression)
    for buf in (encoded, upconvert_message_set(encoded)):
        decoded = [
            LegacyMessage(record.offset, record.timestamp, record.key, record.value)
            for record in iter_records(buf)
        ]
        assert decoded == messages
