"""Legacy v0/v1 message sets: known bytes, round trips with compressed wrappers, mixed fetch
responses, corruption, and up-conversion to v2."""

from __future__ import annotations

import struct
import zlib

import pytest

from strom.protocol.records import (
    LOG_APPEND_TIME,
    CompressionType,
    CorruptBatchError,
    LegacyMessage,
    Record,
    build_batch,
    build_message_set,
    decode_batch,
    decode_message_set,
    iter_batches,
    iter_records,
    upconvert_message_set,
    validate_batches,
)
from strom.protocol.records.legacy import decode_top_level_message, encode_message

MESSAGES_V1 = [
    LegacyMessage(offset=10, timestamp=1_000, key=b"a", value=b"first"),
    LegacyMessage(offset=11, timestamp=1_002, key=None, value=b""),
    LegacyMessage(offset=13, timestamp=999, key=b"", value=None),
]
MESSAGES_V0 = [LegacyMessage(message.offset, -1, message.key, message.value) for message in MESSAGES_V1]


def _decoded_messages(buf: bytes) -> list[LegacyMessage]:
    return [
        LegacyMessage(record.offset, record.timestamp, record.key, record.value)
        for record in iter_records(buf)
    ]


def test_v0_message_hand_assembled() -> None:
    body = b"\x00\x00" + struct.pack(">i", 1) + b"k" + struct.pack(">i", 2) + b"vv"
    expected = struct.pack(">qiI", 7, len(body) + 4, zlib.crc32(body)) + body
    assert encode_message(offset=7, magic=0, attributes=0, timestamp=-1, key=b"k", value=b"vv") == expected
    assert _decoded_messages(expected) == [LegacyMessage(7, -1, b"k", b"vv")]


def test_v1_message_hand_assembled() -> None:
    body = b"\x01\x00" + struct.pack(">q", 123) + struct.pack(">i", -1) + struct.pack(">i", 1) + b"v"
    expected = struct.pack(">qiI", 8, len(body) + 4, zlib.crc32(body)) + body
    assert encode_message(offset=8, magic=1, attributes=0, timestamp=123, key=None, value=b"v") == expected
    assert _decoded_messages(expected) == [LegacyMessage(8, 123, None, b"v")]
    (batch,) = iter_batches(expected)
    assert batch.header.magic == 1
    assert batch.header.size_bytes == len(expected)


@pytest.mark.parametrize("compression", list(CompressionType))
@pytest.mark.parametrize("magic", [0, 1])
def test_round_trip(magic: int, compression: CompressionType) -> None:
    messages = MESSAGES_V1 if magic == 1 else MESSAGES_V0
    encoded = build_message_set(messages, magic=magic, compression=compression)
    assert _decoded_messages(encoded) == messages
    batches = decode_message_set(encoded)
    assert len(batches) == (3 if compression == CompressionType.NONE else 1)
    assert all(batch.header.magic == magic for batch in batches)
    assert all(batch.header.compression == compression for batch in batches)


def test_v1_wrapper_carries_the_last_offset_and_inner_offsets_are_relative() -> None:
    encoded = build_message_set(MESSAGES_V1, magic=1, compression=CompressionType.GZIP)
    wrapper_offset, wrapper_size = struct.unpack_from(">qi", encoded)
    assert wrapper_offset == 13
    assert len(encoded) == 12 + wrapper_size
    (value_bytes,) = struct.unpack_from(">i", encoded, 12 + 4 + 2 + 8 + 4)
    inner = zlib.decompress(encoded[-value_bytes:], 31)
    assert [struct.unpack_from(">q", inner, pos)[0] for pos in _message_positions(inner)] == [0, 1, 3]


def test_v0_wrapper_inner_offsets_are_absolute() -> None:
    encoded = build_message_set(MESSAGES_V0, magic=0, compression=CompressionType.GZIP)
    (value_bytes,) = struct.unpack_from(">i", encoded, 12 + 4 + 2 + 4)
    inner = zlib.decompress(encoded[-value_bytes:], 31)
    assert [struct.unpack_from(">q", inner, pos)[0] for pos in _message_positions(inner)] == [10, 11, 13]


def _message_positions(message_set: bytes) -> list[int]:
    positions = []
    pos = 0
    while pos < len(message_set):
        positions.append(pos)
        pos += 12 + struct.unpack_from(">i", message_set, pos + 8)[0]
    return positions


def test_v1_log_append_time_wrapper_stamps_every_inner_message() -> None:
    encoded = build_message_set(
        MESSAGES_V1, magic=1, compression=CompressionType.SNAPPY, timestamp_type=LOG_APPEND_TIME
    )
    records = list(iter_records(encoded))
    assert [record.timestamp for record in records] == [1_002, 1_002, 1_002]
    assert all(record.timestamp_type == 1 for record in records)


def test_fetch_response_mixing_v0_v1_and_v2_with_a_partial_tail() -> None:
    v2_records = [Record(0, 0, b"k2", b"v2", [("h", None)]), Record(1, 1, None, b"w", [])]
    v2_batch = build_batch(v2_records, base_offset=20, base_timestamp=2_000)
    response = (
        build_message_set(MESSAGES_V0, magic=0)
        + build_message_set(MESSAGES_V1, magic=1, compression=CompressionType.LZ4)
        + v2_batch
        + build_message_set([LegacyMessage(22, 5, b"x", b"y")], magic=1)[:-3]
    )
    records = list(iter_records(response))
    assert [record.offset for record in records] == [10, 11, 13, 10, 11, 13, 20, 21]
    assert [record.batch.magic for record in records] == [0, 0, 0, 1, 1, 1, 2, 2]
    assert records[6].headers == [("h", None)]
    assert records[7].timestamp == 2_001


def test_every_flipped_byte_of_a_legacy_message_is_caught() -> None:
    encoded = build_message_set(MESSAGES_V1[:1], magic=1)
    for position in range(8, len(encoded)):  # the offset is not covered by anything
        corrupted = bytearray(encoded)
        corrupted[position] ^= 0x5A
        with pytest.raises(CorruptBatchError):
            decode_message_set(bytes(corrupted))


def test_truncated_message_is_corrupt_when_whole_sets_are_required() -> None:
    encoded = build_message_set(MESSAGES_V1, magic=1)
    with pytest.raises(CorruptBatchError):
        decode_message_set(encoded[:-1])
    assert len(decode_message_set(encoded[:-1], allow_partial=True)) == 2
    assert decode_top_level_message(encoded[:5], 0) is None


def test_nested_compression_is_corrupt() -> None:
    inner_wrapper = build_message_set(MESSAGES_V1, magic=1, compression=CompressionType.GZIP)
    outer = encode_message(
        offset=13,
        magic=1,
        attributes=int(CompressionType.GZIP),
        timestamp=0,
        key=None,
        value=_gzip(inner_wrapper),
    )
    with pytest.raises(CorruptBatchError, match="nested"):
        decode_message_set(outer)


def _gzip(data: bytes) -> bytes:
    compressor = zlib.compressobj(6, zlib.DEFLATED, 31)
    return compressor.compress(data) + compressor.flush()


def test_wrapper_with_inner_magic_different_from_its_own_is_corrupt() -> None:
    inner = build_message_set(MESSAGES_V0, magic=0)
    wrapper = encode_message(offset=13, magic=1, attributes=1, timestamp=0, key=None, value=_gzip(inner))
    with pytest.raises(CorruptBatchError, match="magic"):
        decode_message_set(wrapper)


def test_empty_or_null_wrapper_is_corrupt() -> None:
    for value in (_gzip(b""), None):
        wrapper = encode_message(offset=0, magic=1, attributes=1, timestamp=0, key=None, value=value)
        with pytest.raises(CorruptBatchError):
            decode_message_set(wrapper)


def test_wrapper_bomb_is_refused_by_the_cap() -> None:
    encoded = build_message_set(
        [LegacyMessage(0, 0, None, bytes(1_000_000))], magic=1, compression=CompressionType.ZSTD
    )
    with pytest.raises(CorruptBatchError, match="exceeds"):
        decode_message_set(encoded, decompressed_bytes_max=100_000)


@pytest.mark.parametrize("magic", [0, 1])
def test_upconvert_plain_messages_into_one_v2_batch(magic: int) -> None:
    messages = MESSAGES_V1 if magic == 1 else MESSAGES_V0
    converted = upconvert_message_set(build_message_set(messages, magic=magic))
    (header,) = validate_batches(converted)
    assert header.base_offset == 10 and header.last_offset == 13
    assert header.compression == CompressionType.NONE
    assert _decoded_messages(converted) == messages


@pytest.mark.parametrize("compression", list(CompressionType))
def test_upconvert_keeps_wrappers_as_batches_with_their_compression(
    compression: CompressionType,
) -> None:
    legacy = (
        build_message_set(MESSAGES_V1, magic=1, compression=compression)
        + build_message_set([LegacyMessage(20, 5_000, b"z", b"zz")], magic=1)
        + build_message_set(
            [LegacyMessage(21, 6_000, b"q", b"qq"), LegacyMessage(22, 6_001, None, b"r")],
            magic=1,
            compression=CompressionType.GZIP,
            timestamp_type=LOG_APPEND_TIME,
        )
    )
    converted = upconvert_message_set(legacy)
    headers = validate_batches(converted)
    assert all(header.magic == 2 for header in headers)
    assert headers[0].compression == compression
    assert headers[-1].timestamp_type == 1 and headers[-1].max_timestamp == 6_001
    assert _decoded_messages(converted) == _decoded_messages(legacy)
    assert decode_batch(converted).records[0].key == b"a"


def test_upconvert_refuses_a_truncated_set() -> None:
    with pytest.raises(CorruptBatchError):
        upconvert_message_set(build_message_set(MESSAGES_V1, magic=1)[:-2])


def test_encoder_refuses_a_v2_magic_and_an_empty_wrapper() -> None:
    with pytest.raises(ValueError):
        encode_message(offset=0, magic=2, attributes=0, timestamp=0, key=None, value=None)
    with pytest.raises(ValueError):
        build_message_set([], magic=1, compression=CompressionType.GZIP)
