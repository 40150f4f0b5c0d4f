"""Compression codecs: round trips, the framings other clients write, caps and corrupt input."""

from __future__ import annotations

import gzip
import struct
import zlib
from collections.abc import Callable

import cramjam
import lz4.frame
import pytest
import zstandard

from strom.base import limits
from strom.protocol.records.compression import (
    XERIAL_BLOCK_BYTES,
    XERIAL_MAGIC,
    CompressionType,
    DecompressedTooLargeError,
    compress,
    decompress,
    decompress_mapped,
)
from strom.protocol.records.header import CorruptBatchError

# Compressible but not trivial, and longer than one xerial block and one lz4 block.
SAMPLE = b"".join(b"record %06d of the sample, " % number for number in range(5_000))
COMPRESSED_TYPES = [kind for kind in CompressionType if kind is not CompressionType.NONE]


def _mapped(kind: int, data: bytes, max_bytes: int = limits.decompressed_batch_bytes_max) -> bytes:
    output = decompress_mapped(kind, data, max_bytes)
    copy = bytes(output.view())
    assert output.close(), "unmapped at once: no view of it is left"
    return copy


Decompress = Callable[..., bytes]
# Both ways of decompressing must agree on everything: what they return and what they refuse.
BOTH_WAYS = pytest.mark.parametrize("decompress_", [decompress, _mapped], ids=["bytes", "mapped"])


@BOTH_WAYS
@pytest.mark.parametrize("kind", list(CompressionType))
@pytest.mark.parametrize("data", [b"", b"x", SAMPLE], ids=["empty", "one-byte", "sample"])
def test_round_trip(kind: CompressionType, data: bytes, decompress_: Decompress) -> None:
    compressed = compress(kind, data)
    assert decompress_(kind, compressed) == data
    assert decompress_(int(kind), compressed, max_bytes=len(data)) == data


@pytest.mark.parametrize("kind", COMPRESSED_TYPES)
def test_compressed_is_smaller(kind: CompressionType) -> None:
    assert len(compress(kind, SAMPLE)) < len(SAMPLE) // 3


def test_gzip_is_a_plain_gzip_stream() -> None:
    compressed = compress(CompressionType.GZIP, SAMPLE)
    assert compressed[:2] == b"\x1f\x8b"
    assert gzip.decompress(compressed) == SAMPLE


@BOTH_WAYS
def test_gzip_with_several_members_is_read_whole(decompress_: Decompress) -> None:
    compressed = gzip.compress(b"first ") + gzip.compress(b"second")
    assert decompress_(CompressionType.GZIP, compressed) == b"first second"


def test_snappy_is_written_in_xerial_framing() -> None:
    compressed = compress(CompressionType.SNAPPY, SAMPLE)
    assert compressed.startswith(XERIAL_MAGIC)
    assert struct.unpack_from(">ii", compressed, 8) == (1, 1)
    # Walk the blocks by hand: [int32 length][raw snappy], each at most one xerial block of input.
    pos = 16
    pieces = []
    while pos < len(compressed):
        (block_bytes,) = struct.unpack_from(">i", compressed, pos)
        block = compressed[pos + 4 : pos + 4 + block_bytes]
        pieces.append(bytes(cramjam.snappy.decompress_raw(block)))
        pos += 4 + block_bytes
    assert pos == len(compressed)
    assert all(len(piece) <= XERIAL_BLOCK_BYTES for piece in pieces)
    assert len(pieces) > 1
    assert b"".join(pieces) == SAMPLE


@BOTH_WAYS
def test_raw_snappy_as_librdkafka_writes_it_is_read(decompress_: Decompress) -> None:
    raw = bytes(cramjam.snappy.compress_raw(SAMPLE))
    assert decompress_(CompressionType.SNAPPY, raw) == SAMPLE


def test_lz4_is_a_frame_with_independent_blocks_and_no_content_checksum() -> None:
    compressed = compress(CompressionType.LZ4, SAMPLE)
    assert compressed[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic, little endian
    flags = compressed[4]
    assert flags >> 6 == 0b01  # frame version
    assert flags & 0x20  # block independence
    assert not flags & 0x04  # no content checksum
    assert lz4.frame.decompress(compressed) == SAMPLE


@BOTH_WAYS
def test_lz4_frame_from_the_library_defaults_is_read(decompress_: Decompress) -> None:
    assert decompress_(CompressionType.LZ4, lz4.frame.compress(SAMPLE)) == SAMPLE


@BOTH_WAYS
def test_zstd_frame_without_content_size_is_read(decompress_: Decompress) -> None:
    compressor = zstandard.ZstdCompressor(write_content_size=False)
    streamed = compressor.compressobj()
    compressed = streamed.compress(SAMPLE) + streamed.flush()
    assert zstandard.get_frame_parameters(compressed).content_size == zstandard.CONTENTSIZE_UNKNOWN
    assert decompress_(CompressionType.ZSTD, compressed) == SAMPLE


@BOTH_WAYS
@pytest.mark.parametrize("kind", list(CompressionType))
def test_output_over_the_cap_is_refused(kind: CompressionType, decompress_: Decompress) -> None:
    compressed = compress(kind, SAMPLE)
    with pytest.raises(DecompressedTooLargeError, match="exceeds"):
        decompress_(kind, compressed, max_bytes=len(SAMPLE) - 1)
    assert decompress_(kind, compressed, max_bytes=len(SAMPLE)) == SAMPLE


BOMB_BYTES = 16 * 1024 * 1024
BOMB_CAP_BYTES = 1024 * 1024


def _bomb(kind: CompressionType) -> bytes:
    if kind is CompressionType.GZIP:
        compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
        chunk = bytes(1024 * 1024)
        parts = [compressor.compress(chunk) for _ in range(BOMB_BYTES // len(chunk))]
        return b"".join(parts) + compressor.flush()
    if kind is CompressionType.ZSTD:
        # Streamed so the frame does not declare its size: the cap must hold while decoding.
        streamed = zstandard.ZstdCompressor(write_content_size=False).compressobj()
        return streamed.compress(bytes(BOMB_BYTES)) + streamed.flush()
    return compress(kind, bytes(BOMB_BYTES))


@BOTH_WAYS
@pytest.mark.parametrize("kind", COMPRESSED_TYPES)
def test_decompression_bomb_is_refused(kind: CompressionType, decompress_: Decompress) -> None:
    bomb = _bomb(kind)
    assert len(bomb) < BOMB_BYTES // 20  # snappy expands about 21 times at most
    with pytest.raises(CorruptBatchError, match="exceeds"):
        decompress_(kind, bomb, max_bytes=BOMB_CAP_BYTES)


@BOTH_WAYS
def test_raw_snappy_declaring_a_huge_length_is_refused_before_decoding(decompress_: Decompress) -> None:
    lying = b"\xff\xff\xff\xff\x0f" + b"\x00" * 10  # declares 4 GiB
    with pytest.raises(CorruptBatchError, match="exceeds"):
        decompress_(CompressionType.SNAPPY, lying, max_bytes=BOMB_CAP_BYTES)


@BOTH_WAYS
@pytest.mark.parametrize("kind", COMPRESSED_TYPES)
def test_truncated_data_is_corrupt(kind: CompressionType, decompress_: Decompress) -> None:
    compressed = compress(kind, SAMPLE)
    for cut_bytes in (1, len(compressed) // 2, len(compressed) - 1):
        with pytest.raises(CorruptBatchError):
            decompress_(kind, compressed[:cut_bytes])


@BOTH_WAYS
@pytest.mark.parametrize("kind", COMPRESSED_TYPES)
def test_garbage_is_corrupt(kind: CompressionType, decompress_: Decompress) -> None:
    with pytest.raises(CorruptBatchError):
        decompress_(kind, b"\x00\x01\x02 this is not compressed data at all \xff\xfe" * 3)


@BOTH_WAYS
def test_xerial_block_length_out_of_bounds_is_corrupt(decompress_: Decompress) -> None:
    framed = compress(CompressionType.SNAPPY, b"hello")
    broken = framed[:16] + struct.pack(">i", 1_000) + framed[20:]
    with pytest.raises(CorruptBatchError, match="out of bounds"):
        decompress_(CompressionType.SNAPPY, broken)


@BOTH_WAYS
def test_unknown_compression_type_is_corrupt(decompress_: Decompress) -> None:
    with pytest.raises(CorruptBatchError, match="unknown compression type 5"):
        decompress_(5, b"")


def test_mapped_output_is_written_in_place_and_unmapped_on_close() -> None:
    payload = bytes(range(256)) * 40_000  # ~10 MiB: several steps of every codec
    for kind in CompressionType:
        output = decompress_mapped(kind, compress(kind, payload), len(payload))
        view = output.view()
        assert view == payload
        held = memoryview(view)  # a view still in use: the mapping stays until it goes
        assert not output.close()
        assert held[:3] == payload[:3]
        held.release()
        output = decompress_mapped(kind, compress(kind, payload), len(payload))
        assert output.close()
