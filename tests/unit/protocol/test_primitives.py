"""Reader/Writer: round trips, exact encodings, and refusal of malformed input."""

from __future__ import annotations

import uuid

import pytest

from strom.protocol.primitives import DecodeError, Reader, Writer


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, b"\x00"),
        (1, b"\x01"),
        (127, b"\x7f"),
        (128, b"\x80\x01"),
        (300, b"\xac\x02"),
        (2**32 - 1, b"\xff\xff\xff\xff\x0f"),
    ],
)
def test_unsigned_varint_encoding(value: int, encoded: bytes) -> None:
    writer = Writer()
    writer.unsigned_varint(value)
    assert writer.getvalue() == encoded
    assert Reader(encoded).unsigned_varint() == value


@pytest.mark.parametrize(
    ("value", "encoded"), [(0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (-64, b"\x7f"), (64, b"\x80\x01")]
)
def test_zigzag_varint_encoding(value: int, encoded: bytes) -> None:
    writer = Writer()
    writer.varint(value)
    assert writer.getvalue() == encoded
    assert Reader(encoded).varint() == value


@pytest.mark.parametrize("value", [0, 1, -1, 2**63 - 1, -(2**63)])
def test_varlong_round_trip(value: int) -> None:
    writer = Writer()
    writer.varlong(value)
    assert Reader(writer.getvalue()).varlong() == value


def test_fixed_width_numbers_round_trip() -> None:
    writer = Writer()
    writer.int8(-5)
    writer.int16(-300)
    writer.int32(-70000)
    writer.int64(-(2**40))
    writer.uint16(65535)
    writer.uint32(2**32 - 1)
    writer.float64(1.5)
    writer.boolean(True)
    identifier = uuid.uuid4()
    writer.uuid(identifier)
    reader = Reader(writer.getvalue())
    assert [reader.int8(), reader.int16(), reader.int32(), reader.int64()] == [-5, -300, -70000, -(2**40)]
    assert [reader.uint16(), reader.uint32(), reader.float64(), reader.boolean()] == [
        65535,
        2**32 - 1,
        1.5,
        True,
    ]
    assert reader.uuid() == identifier
    assert reader.remaining == 0


def test_strings_and_nulls() -> None:
    writer = Writer()
    writer.string("héllo")
    writer.nullable_string(None)
    writer.compact_string("ab")
    writer.compact_nullable_string(None)
    assert writer.getvalue() == b"\x00\x06h\xc3\xa9llo" + b"\xff\xff" + b"\x03ab" + b"\x00"
    reader = Reader(writer.getvalue())
    assert reader.string() == "héllo"
    assert reader.nullable_string() is None
    assert reader.compact_string() == "ab"
    assert reader.compact_nullable_string() is None


def test_records_are_a_view_not_a_copy() -> None:
    data = b"\x00\x00\x00\x03abc"
    view = Reader(data).records()
    assert isinstance(view, memoryview)
    assert view.obj is data
    assert view.tobytes() == b"abc"


def test_large_blobs_are_kept_by_reference() -> None:
    blob = memoryview(bytes(1_000_000))
    writer = Writer()
    writer.int32(7)
    writer.records(blob)
    writer.int8(1)
    buffers = writer.getbuffers()
    assert any(buffer is blob for buffer in buffers)
    assert len(writer) == 4 + 4 + 1_000_000 + 1
    assert writer.getvalue() == b"\x00\x00\x00\x07" + b"\x00\x0f\x42\x40" + bytes(1_000_000) + b"\x01"


@pytest.mark.parametrize(
    ("data", "read"),
    [
        (b"\x00", Reader.int16),
        (b"\x00\x00\x00", Reader.int32),
        (b"\x00\x05abc", Reader.string),
        (b"\xff\xff", Reader.string),  # null where not nullable
        (b"\xff\xfe", Reader.nullable_string),  # negative length other than -1
        (b"\xff\xff\xff\xfe", Reader.nullable_bytes),
        (b"\x00\x00\x00\x10abc", Reader.bytes_),
        (b"\x00", Reader.compact_string),  # null compact string where not nullable
        (b"\x80\x80\x80\x80\x80\x01", Reader.unsigned_varint),  # too long
        (b"\x80", Reader.unsigned_varint),  # truncated
        (b"\x7f\xff\xff\xff", Reader.array_length),  # more elements than bytes left
        (b"\xff\xff\xff\xff", Reader.array_length),  # null where not nullable
        (b"\xff\xff\xff\xfe", Reader.nullable_array_length),
        (b"\xff\xff\xff\x0f", Reader.compact_array_length),
        (b"\x00\x00\x00\x05ab", Reader.records),
    ],
)
def test_malformed_input_raises_decode_error(data: bytes, read: object) -> None:
    with pytest.raises(DecodeError):
        read(Reader(data))  # type: ignore[operator]


@pytest.mark.parametrize(
    ("data", "read"),
    [
        (b"\x00\x02\xc3\x28", Reader.string),
        (b"\x00\x02\xc3\x28", Reader.nullable_string),
        (b"\x03\xff\x28", Reader.compact_string),
        (b"\x03\xff\x28", Reader.compact_nullable_string),
    ],
)
def test_strings_that_are_not_utf8_are_read_as_kafka_reads_them(data: bytes, read: object) -> None:
    """Kafka decodes request strings with Java's lenient UTF-8 (bad bytes become U+FFFD) and
    answers the request; refusing them would close a connection Kafka keeps."""
    reader = Reader(data)
    assert read(reader) == "\ufffd("  # type: ignore[operator]
    assert reader.remaining == 0


def test_nullable_array_length_minus_one_is_null() -> None:
    assert Reader(b"\xff\xff\xff\xff").nullable_array_length() == -1
    assert Reader(b"\x00").compact_nullable_array_length() == -1


def test_array_count_checked_against_element_size() -> None:
    # Two int64 elements need 16 bytes; only 8 follow.
    with pytest.raises(DecodeError):
        Reader(b"\x00\x00\x00\x02" + bytes(8)).array_length(8)


def test_tagged_fields_round_trip_sorted() -> None:
    writer = Writer()
    writer.tagged_fields([(1, b"\x05")], {7: b"ab", 0: b""})
    assert writer.getvalue() == b"\x03" + b"\x00\x00" + b"\x01\x01\x05" + b"\x07\x02ab"
    assert Reader(writer.getvalue()).tagged_fields() == {0: b"", 1: b"\x05", 7: b"ab"}


def test_start_position_outside_buffer_is_refused() -> None:
    with pytest.raises(DecodeError):
        Reader(b"abc", pos=4)


def test_writer_refuses_out_of_range_varint() -> None:
    with pytest.raises(ValueError):
        Writer().unsigned_varint(-1)
