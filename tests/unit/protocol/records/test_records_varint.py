"""Zigzag varints: known encodings, round trips at the edges, and every refusal."""

from __future__ import annotations

import pytest

from strom.protocol.records.header import CorruptBatchError
from strom.protocol.records.varint import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    encode_varint,
    encode_varlong,
    read_unsigned_varint,
    read_varint,
    read_varlong,
)

KNOWN_ENCODINGS = [
    (0, b"\x00"),
    (-1, b"\x01"),
    (1, b"\x02"),
    (-2, b"\x03"),
    (63, b"\x7e"),
    (-64, b"\x7f"),
    (64, b"\x80\x01"),
    (300, b"\xd8\x04"),
    (INT32_MAX, b"\xfe\xff\xff\xff\x0f"),
    (INT32_MIN, b"\xff\xff\xff\xff\x0f"),
]


@pytest.mark.parametrize(("value", "encoded"), KNOWN_ENCODINGS)
def test_known_varint_encodings(value: int, encoded: bytes) -> None:
    assert encode_varint(value) == encoded
    assert read_varint(encoded, 0) == (value, len(encoded))
    assert read_varlong(encoded, 0) == (value, len(encoded))


@pytest.mark.parametrize(
    "value", [0, 1, -1, 8191, 8192, -8192, -8193, 1 << 40, -(1 << 40), INT64_MAX, INT64_MIN]
)
def test_varlong_round_trip(value: int) -> None:
    encoded = encode_varlong(value)
    assert len(encoded) <= 10
    assert read_varlong(b"\xff" + encoded + b"\x00", 1) == (value, 1 + len(encoded))


def test_int64_extremes_take_ten_bytes() -> None:
    assert encode_varlong(INT64_MAX) == b"\xfe" + b"\xff" * 8 + b"\x01"
    assert encode_varlong(INT64_MIN) == b"\xff" * 9 + b"\x01"


def test_out_of_range_values_are_refused_by_the_encoder() -> None:
    with pytest.raises(ValueError):
        encode_varint(INT32_MAX + 1)
    with pytest.raises(ValueError):
        encode_varlong(INT64_MIN - 1)


def test_varint_longer_than_five_bytes_is_corrupt() -> None:
    with pytest.raises(CorruptBatchError, match="longer than 5"):
        read_varint(b"\x80\x80\x80\x80\x80\x00", 0)


def test_varlong_longer_than_ten_bytes_is_corrupt() -> None:
    with pytest.raises(CorruptBatchError, match="longer than 10"):
        read_varlong(b"\x80" * 10 + b"\x00", 0)


def test_five_byte_varint_above_32_bits_is_corrupt() -> None:
    with pytest.raises(CorruptBatchError, match="32 bits"):
        read_varint(b"\xff\xff\xff\xff\x7f", 0)


def test_ten_byte_varlong_above_64_bits_is_corrupt() -> None:
    with pytest.raises(CorruptBatchError, match="64 bits"):
        read_varlong(b"\xff" * 9 + b"\x7f", 0)


@pytest.mark.parametrize("data", [b"", b"\x80", b"\xff\xff"])
def test_varint_running_off_the_end_is_corrupt(data: bytes) -> None:
    with pytest.raises(CorruptBatchError, match="off the end"):
        read_varint(data, 0)


def test_end_bound_is_respected_even_if_the_buffer_goes_on() -> None:
    with pytest.raises(CorruptBatchError, match="off the end"):
        read_varint(b"\x80\x01", 0, 1)
    assert read_unsigned_varint(b"\x80\x01", 0, 2) == (128, 2)
