"""The v2 batch codec: a batch assembled by hand, round trips, and every way a batch can be wrong."""

from __future__ import annotations

import struct

import crc32c
import pytest

from strom.protocol.records import (
    HEADER_BYTES,
    BatchBuilder,
    CompressionType,
    CorruptBatchError,
    DecodedBatch,
    Record,
    build_batch,
    decode_batch,
    iter_records,
    parse_batch_header,
    rewrite_crc,
    set_base_offset,
    set_log_append_time,
    validate_batches,
)
from strom.protocol.records.batch import encode_record


def _hand_assembled_batch() -> bytes:
    """Two records and a header written field by field from the format description."""
    record_zero_body = (
        b"\x00"  # attributes
        + b"\x00"  # timestampDelta 0
        + b"\x00"  # offsetDelta 0
        + b"\x02k"  # key length 1 (zigzag 2), "k"
        + b"\x02v"  # value length 1, "v"
        + b"\x02"  # one header
        + b"\x02h"  # header key length 1, "h"
        + b"\x02x"  # header value length 1, "x"
    )
    record_one_body = (
        b"\x00"  # attributes
        + b"\x0a"  # timestampDelta 5
        + b"\x02"  # offsetDelta 1
        + b"\x01"  # null key
        + b"\x00"  # empty value
        + b"\x00"  # no headers
    )
    records = (
        bytes([len(record_zero_body) * 2])
        + record_zero_body
        + bytes([len(record_one_body) * 2])
        + record_one_body
    )
    covered = (
        struct.pack(">h", 0)  # attributes
        + struct.pack(">i", 1)  # lastOffsetDelta
        + struct.pack(">q", 1_000)  # baseTimestamp
        + struct.pack(">q", 1_005)  # maxTimestamp
        + struct.pack(">q", 42)  # producerId
        + struct.pack(">h", 3)  # producerEpoch
        + struct.pack(">i", 10)  # baseSequence
        + struct.pack(">i", 2)  # recordCount
        + records
    )
    crc = crc32c.crc32c(covered)
    return (
        struct.pack(">q", 100)  # baseOffset
        + struct.pack(">i", 4 + 1 + 4 + len(covered))  # batchLength
        + struct.pack(">i", 7)  # partitionLeaderEpoch
        + b"\x02"  # magic
        + struct.pack(">I", crc)
        + covered
    )


HAND_RECORDS = [
    Record(offset_delta=0, timestamp_delta=0, key=b"k", value=b"v", headers=[("h", b"x")]),
    Record(offset_delta=1, timestamp_delta=5, key=None, value=b"", headers=[]),
]


def test_crc32c_is_the_castagnoli_polynomial() -> None:
    assert crc32c.crc32c(b"123456789") == 0xE3069283  # the standard check value of CRC-32C


def test_hand_assembled_batch_decodes() -> None:
    batch_bytes = _hand_assembled_batch()
    decoded = decode_batch(batch_bytes)
    header = decoded.header
    assert header.size_bytes == len(batch_bytes)
    assert header.crc == crc32c.crc32c(batch_bytes[21:])
    assert (header.base_offset, header.partition_leader_epoch, header.last_offset) == (100, 7, 101)
    assert (header.base_timestamp, header.max_timestamp) == (1_000, 1_005)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, 10)
    assert header.record_count == 2
    assert decoded.records == HAND_RECORDS
    absolute = decoded.absolute_records()
    assert [(record.offset, record.timestamp) for record in absolute] == [(100, 1_000), (101, 1_005)]
    assert absolute[0].headers == [("h", b"x")]
    assert validate_batches(batch_bytes) == [header]


def test_build_batch_writes_the_hand_assembled_bytes() -> None:
    built = build_batch(
        HAND_RECORDS,
        base_offset=100,
        base_timestamp=1_000,
        producer_id=42,
        producer_epoch=3,
        base_sequence=10,
        partition_leader_epoch=7,
    )
    assert built == _hand_assembled_batch()


def test_builder_writes_the_hand_assembled_bytes() -> None:
    builder = BatchBuilder(
        base_offset=100, producer_id=42, producer_epoch=3, base_sequence=10, partition_leader_epoch=7
    )
    assert builder.append(1_000, b"k", b"v", [("h", b"x")]) == 0
    assert builder.append(1_005, None, b"") == 1
    assert len(builder) == 2
    built = builder.build()
    assert built == _hand_assembled_batch()
    assert builder.size_bytes == len(built)


def test_encode_record_matches_the_hand_layout() -> None:
    assert encode_record(1, 5, None, b"") == b"\x0c\x00\x0a\x02\x01\x00\x00"


SAMPLE_RECORDS = [
    Record(0, 0, b"key-0", b"value" * 30, [("trace", b"abc"), ("empty", b""), ("null", None)]),
    Record(1, -3, None, None, []),  # timestamps may go backwards within a batch
    Record(2, 70_000, b"", b"x" * 20_000, []),  # multi-byte varints everywhere
    Record(5, 1 << 40, "ключ".encode(), "значение".encode(), [("ключ", "é".encode())]),
]


@pytest.mark.parametrize("compression", list(CompressionType))
def test_round_trip_for_every_compression(compression: CompressionType) -> None:
    built = build_batch(
        SAMPLE_RECORDS,
        base_offset=1 << 40,
        base_timestamp=1_700_000_000_000,
        compression=compression,
        producer_id=9,
        producer_epoch=1,
        base_sequence=77,
        is_transactional=True,
    )
    decoded = decode_batch(built)
    assert decoded.records == SAMPLE_RECORDS
    header = decoded.header
    assert header.compression == compression
    assert header.is_transactional and not header.is_control
    assert header.last_offset_delta == 5
    assert header.max_timestamp == 1_700_000_000_000 + (1 << 40)
    assert header.last_sequence == 82
    assert [record.offset for record in iter_records(built)] == [
        1 << 40,
        (1 << 40) + 1,
        (1 << 40) + 2,
        (1 << 40) + 5,
    ]


def test_absolute_timestamps_are_rebased_on_the_first_record_when_no_base_is_given() -> None:
    records = [Record(0, 1_700_000_000_500, b"a", b"1", []), Record(1, 1_700_000_000_400, b"b", b"2", [])]
    decoded = decode_batch(build_batch(records))
    assert decoded.header.base_timestamp == 1_700_000_000_500
    assert decoded.header.max_timestamp == 1_700_000_000_500
    assert [record.timestamp_delta for record in decoded.records] == [0, -100]
    assert [record.timestamp for record in decoded.absolute_records()] == [
        1_700_000_000_500,
        1_700_000_000_400,
    ]


def test_control_flag_and_explicit_last_offset_delta_for_an_emptied_batch() -> None:
    built = build_batch([], base_offset=10, last_offset_delta=4, is_control=True)
    decoded = decode_batch(built)
    assert decoded.records == []
    assert decoded.header.is_control
    assert decoded.header.last_offset == 14
    assert decoded.header.max_timestamp == -1


def test_log_append_time_gives_every_record_the_max_timestamp() -> None:
    batch_bytes = bytearray(build_batch(HAND_RECORDS, base_timestamp=1_000))
    set_log_append_time(batch_bytes, 0, 9_999)
    decoded = decode_batch(bytes(batch_bytes))
    assert decoded.header.timestamp_type == 1
    assert [record.timestamp for record in decoded.absolute_records()] == [9_999, 9_999]
    assert all(record.timestamp_type == 1 for record in iter_records(batch_bytes))


def test_decode_at_a_position_in_a_bytearray_and_a_memoryview() -> None:
    first = build_batch(HAND_RECORDS, base_offset=0)
    second = build_batch(SAMPLE_RECORDS, base_offset=2, compression=CompressionType.LZ4)
    joined = bytearray(first + second)
    assert decode_batch(joined, len(first)).records == SAMPLE_RECORDS
    assert decode_batch(memoryview(joined), len(first)).records == SAMPLE_RECORDS
    assert decode_batch(bytes(joined), len(first)).records == SAMPLE_RECORDS


def test_iter_records_ignores_a_partial_trailing_batch() -> None:
    first = build_batch(HAND_RECORDS, base_offset=0)
    second = build_batch(SAMPLE_RECORDS, base_offset=2)
    for cut_bytes in (1, 16, 17, HEADER_BYTES - 1, HEADER_BYTES + 3, len(second) - 1):
        offsets = [record.offset for record in iter_records(first + second[:cut_bytes])]
        assert offsets == [0, 1]
    assert len(list(iter_records(first + second))) == 6
    assert list(iter_records(b"")) == []


def test_iter_records_refuses_a_corrupt_whole_batch() -> None:
    batch_bytes = bytearray(build_batch(HAND_RECORDS))
    batch_bytes[-1] ^= 0xFF
    with pytest.raises(CorruptBatchError, match="CRC"):
        list(iter_records(bytes(batch_bytes)))


def test_iter_records_refuses_an_unknown_magic() -> None:
    batch_bytes = bytearray(build_batch(HAND_RECORDS))
    batch_bytes[16] = 3
    with pytest.raises(CorruptBatchError, match="magic 3"):
        list(iter_records(bytes(batch_bytes)))


@pytest.mark.parametrize("compression", list(CompressionType))
def test_every_flipped_byte_is_caught_or_outside_the_crc(compression: CompressionType) -> None:
    built = build_batch(SAMPLE_RECORDS[:2], base_offset=5, compression=compression)
    for position in range(len(built)):
        corrupted = bytearray(built)
        corrupted[position] ^= 0x5A
        if position < 8 or 12 <= position < 16:
            # baseOffset and partitionLeaderEpoch are outside the CRC, rewritten by the broker.
            assert decode_batch(bytes(corrupted)).records == SAMPLE_RECORDS[:2]
            continue
        with pytest.raises(CorruptBatchError):
            decode_batch(bytes(corrupted))


@pytest.mark.parametrize("compression", [CompressionType.NONE, CompressionType.GZIP, CompressionType.ZSTD])
def test_corruption_behind_a_valid_crc_never_raises_anything_else(compression: CompressionType) -> None:
    """A buggy producer computes the CRC over wrong records: the decoder must still only ever
    decode or raise CorruptBatchError."""
    small_records = [*SAMPLE_RECORDS[:2], Record(2, 70_000, b"", b"x" * 200, []), SAMPLE_RECORDS[3]]
    built = build_batch(small_records, compression=compression)
    for position in range(21, len(built)):
        for flip in (0x01, 0x80, 0xFF):
            corrupted = bytearray(built)
            corrupted[position] ^= flip
            try:
                rewrite_crc(corrupted)
                decode_batch(bytes(corrupted))
            except CorruptBatchError:
                pass


@pytest.mark.parametrize("compression", list(CompressionType))
def test_every_truncation_is_corrupt(compression: CompressionType) -> None:
    built = build_batch(SAMPLE_RECORDS[:2], compression=compression)
    for cut_bytes in range(len(built)):
        with pytest.raises(CorruptBatchError):
            decode_batch(built[:cut_bytes])


def _with_fields(batch_bytes: bytes, payload: bytes, record_count: int) -> bytes:
    """The batch with its records replaced and its length, count and CRC made consistent."""
    rebuilt = bytearray(batch_bytes[:HEADER_BYTES] + payload)
    struct.pack_into(">i", rebuilt, 8, len(rebuilt) - 12)
    struct.pack_into(">i", rebuilt, 57, record_count)
    rewrite_crc(rebuilt)
    return bytes(rebuilt)


def test_record_count_larger_than_the_records_is_corrupt() -> None:
    built = build_batch(HAND_RECORDS)
    with pytest.raises(CorruptBatchError):
        decode_batch(_with_fields(built, built[HEADER_BYTES:], 3))


def test_record_count_smaller_than_the_records_is_corrupt() -> None:
    built = build_batch(HAND_RECORDS)
    with pytest.raises(CorruptBatchError, match="left over"):
        decode_batch(_with_fields(built, built[HEADER_BYTES:], 1))


def test_trailing_bytes_after_the_records_are_corrupt() -> None:
    built = build_batch(HAND_RECORDS)
    with pytest.raises(CorruptBatchError, match="left over"):
        decode_batch(_with_fields(built, built[HEADER_BYTES:] + b"\x00" * 7, 2))


def test_record_count_impossible_for_the_payload_is_refused_before_decoding() -> None:
    built = build_batch(HAND_RECORDS)
    with pytest.raises(CorruptBatchError, match="cannot fit"):
        decode_batch(_with_fields(built, built[HEADER_BYTES:], 1_000_000))


@pytest.mark.parametrize(
    ("record", "message"),
    [
        (b"\x0e\x00\x00\x00\x03\x00\x00\x00", "negative record key length"),
        (b"\x0c\x00\x00\x00\x01\x05\x00", "negative record value length"),
        (b"\x0c\x00\x00\x00\x01\x01\x03", "header count"),
        (b"\x10\x00\x00\x00\x01\x01\x02\x03\x00", "header key length"),
        (b"\x04\x00\x00\x00\x00\x00\x00", "record length 2 is out of bounds"),
        (b"\x0e\x00\x00\x00\x01\x01\x00\x00", "record length does not match"),
    ],
)
def test_malformed_record_fields_are_named(record: bytes, message: str) -> None:
    built = build_batch([Record(0, 0, None, None, [])])
    with pytest.raises(CorruptBatchError, match=message):
        decode_batch(_with_fields(built, record, 1))


def test_a_header_key_that_is_not_utf8_is_read_as_kafkas_clients_read_it() -> None:
    """Nothing checks header keys on the way in (Kafka neither): bytes that are not UTF-8 are read
    as U+FFFD, as Java's String does, rather than making the batch unreadable."""
    built = build_batch([Record(0, 0, None, None, [])])
    decoded = decode_batch(_with_fields(built, b"\x14\x00\x00\x00\x01\x01\x02\x04a\xff\x01", 1))
    assert decoded.records[0].headers == [("a\ufffd", None)]


def test_set_base_offset_does_not_break_the_crc() -> None:
    batch_bytes = bytearray(build_batch(HAND_RECORDS))
    set_base_offset(batch_bytes, 0, 500)
    assert parse_batch_header(batch_bytes).base_offset == 500
    assert isinstance(decode_batch(batch_bytes), DecodedBatch)


def test_builder_size_tracks_the_encoded_records() -> None:
    builder = BatchBuilder(compression=CompressionType.ZSTD)
    assert builder.size_bytes == HEADER_BYTES
    for number in range(100):
        builder.append(1_700_000_000_000 + number, b"key", b"value %d" % number)
    uncompressed = build_batch(
        [Record(number, number, b"key", b"value %d" % number, []) for number in range(100)],
        base_timestamp=1_700_000_000_000,
    )
    assert builder.size_bytes == len(uncompressed)
    decoded = decode_batch(builder.build())
    assert decoded.header.compression == CompressionType.ZSTD
    assert decoded.header.max_timestamp == 1_700_000_000_099
    assert [record.value for record in decoded.records] == [b"value %d" % number for number in range(100)]
