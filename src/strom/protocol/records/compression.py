"""The compression codecs of Kafka record batches, in the framings real clients write and read.

- GZIP: a normal gzip stream (several concatenated members are accepted, as Java's
  GZIPInputStream does).
- SNAPPY: written with the *xerial* framing Java clients and Kafka brokers use (a 16-byte header
  starting ``\\x82SNAPPY\\x00``, then blocks of [int32 compressed length][raw snappy block]);
  librdkafka, kafka-python and aiokafka read it. Reading accepts that framing and also a single raw
  snappy block, which librdkafka writes.
- LZ4: the LZ4 frame format with independent blocks and no content checksum (what Kafka's own
  writer produces for magic 1 and 2).
- ZSTD: a normal zstd frame; frames that do not declare their content size are read as a stream.

Every decompression is capped: output beyond ``max_bytes`` is refused before it is materialised
(zip bombs), and any failure of a codec becomes ``CorruptBatchError``.
"""

from __future__ import annotations

import contextlib
import struct
import threading
import zlib
from enum import IntEnum

import cramjam
import lz4.frame
import zstandard

from strom.base import limits
from strom.protocol.records.header import CorruptBatchError


class CompressionType(IntEnum):
    """Bits 0-2 of the batch attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


XERIAL_MAGIC = b"\x82SNAPPY\x00"
# Magic, then the writer's version and the oldest compatible version, both int32 1.
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_HEADER_BYTES = len(XERIAL_HEADER)  # 16
# Uncompressed bytes per xerial block: the block size of xerial's SnappyOutputStream that Java
# clients use, so our blocks look like theirs.
XERIAL_BLOCK_BYTES = 32 * 1024
_BLOCK_LENGTH = struct.Struct(">i")

# LZ4 block size for the frames we write: 64 KiB, Kafka's choice (the frame descriptor's BD byte).
_LZ4_BLOCK_SIZE = lz4.frame.BLOCKSIZE_MAX64KB

# Output asked of the LZ4 decompressor per call (it allocates that much up front).
_LZ4_STEP_BYTES = 4 * 1024 * 1024

# gzip header + deflate stream, as zlib's wbits convention spells it (16 + window bits).
_GZIP_WBITS = 16 + zlib.MAX_WBITS

# zstd's worst-case expansion is about 2**15 (see _decompress_zstd); input is fed in pieces no
# smaller than this so a tiny remaining budget does not mean thousands of calls.
_ZSTD_EXPANSION_SHIFT = 15
_ZSTD_PIECE_BYTES_MIN = 256


def compress(kind: int, data: bytes | bytearray | memoryview) -> bytes:
    """Compress ``data`` with codec ``kind`` (a ``CompressionType`` or its number)."""
    kind = CompressionType(kind)
    if kind is CompressionType.NONE:
        return bytes(data)
    if kind is CompressionType.GZIP:
        compressor = zlib.compressobj(6, zlib.DEFLATED, _GZIP_WBITS)
        return compressor.compress(data) + compressor.flush()
    if kind is CompressionType.SNAPPY:
        return _compress_xerial(data)
    if kind is CompressionType.LZ4:
        return bytes(
            lz4.frame.compress(
                data,
                block_size=_LZ4_BLOCK_SIZE,
                block_linked=False,
                content_checksum=False,
                store_size=False,
            )
        )
    assert kind is CompressionType.ZSTD
    return bytes(zstandard.ZstdCompressor(level=3).compress(data))


def decompress(
    kind: int,
    data: bytes | bytearray | memoryview,
    max_bytes: int = limits.decompressed_batch_bytes_max,
) -> bytes:
    """Decompress ``data`` written with codec ``kind``, refusing more than ``max_bytes`` of output.

    Raises ``CorruptBatchError`` for an unknown codec, data the codec cannot read, or output that
    would exceed ``max_bytes``.
    """
    try:
        kind = CompressionType(kind)
    except ValueError:
        raise CorruptBatchError(f"unknown compression type {kind}") from None
    if kind is CompressionType.NONE:
        if len(data) > max_bytes:
            raise _too_big(max_bytes)
        return bytes(data)
    try:
        if kind is CompressionType.GZIP:
            return _decompress_gzip(data, max_bytes)
        if kind is CompressionType.SNAPPY:
            return _decompress_snappy(data, max_bytes)
        if kind is CompressionType.LZ4:
            return _decompress_lz4(data, max_bytes)
        assert kind is CompressionType.ZSTD
        return _decompress_zstd(data, max_bytes)
    except CorruptBatchError:
        raise
    # The codec libraries raise a zoo of types (zlib.error, RuntimeError, ZstdError, cramjam's
    # DecompressionError, ValueError...): all mean the same thing here.
    except Exception as error:
        raise CorruptBatchError(f"{kind.name} data cannot be decompressed: {error}") from error


def _too_big(max_bytes: int) -> CorruptBatchError:
    return CorruptBatchError(f"decompressed batch exceeds {max_bytes} bytes")


def _joined(parts: list[bytes]) -> bytes:
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _decompress_gzip(data: bytes | bytearray | memoryview, max_bytes: int) -> bytes:
    parts: list[bytes] = []
    total_bytes = 0
    remaining: bytes | bytearray | memoryview = data
    while True:
        decompressor = zlib.decompressobj(_GZIP_WBITS)
        chunk = decompressor.decompress(remaining, max_bytes + 1 - total_bytes)
        parts.append(chunk)
        total_bytes += len(chunk)
        if total_bytes > max_bytes:
            raise _too_big(max_bytes)
        if decompressor.unconsumed_tail:
            # The cap stopped it with input left: there is more output than max_bytes allows,
            # unless the rest is only the end of the stream; drain at most one byte to find out.
            tail = decompressor.decompress(decompressor.unconsumed_tail, 1)
            if tail or decompressor.unconsumed_tail:
                raise _too_big(max_bytes)
        if not decompressor.eof:
            raise CorruptBatchError("gzip stream is truncated")
        remaining = decompressor.unused_data
        if not remaining:
            return _joined(parts)


def _compress_xerial(data: bytes | bytearray | memoryview) -> bytes:
    view = memoryview(data)
    parts = [XERIAL_HEADER]
    for start in range(0, len(view), XERIAL_BLOCK_BYTES):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + XERIAL_BLOCK_BYTES]))
        parts.append(_BLOCK_LENGTH.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _decompress_snappy(data: bytes | bytearray | memoryview, max_bytes: int) -> bytes:
    data = bytes(data)
    if not data.startswith(XERIAL_MAGIC):
        return _decompress_raw_snappy_block(data, max_bytes)
    if len(data) < XERIAL_HEADER_BYTES:
        raise CorruptBatchError("xerial snappy header is truncated")
    parts: list[bytes] = []
    total_bytes = 0
    pos = XERIAL_HEADER_BYTES
    end = len(data)
    while pos < end:
        if end - pos < 4:
            raise CorruptBatchError("xerial snappy block length is truncated")
        (block_bytes,) = _BLOCK_LENGTH.unpack_from(data, pos)
        pos += 4
        if block_bytes < 0 or block_bytes > end - pos:
            raise CorruptBatchError(f"xerial snappy block length {block_bytes} is out of bounds")
        block = _decompress_raw_snappy_block(data[pos : pos + block_bytes], max_bytes - total_bytes)
        total_bytes += len(block)
        parts.append(block)
        pos += block_bytes
    return b"".join(parts)


def _decompress_raw_snappy_block(block: bytes, max_bytes: int) -> bytes:
    # A raw snappy block starts with its uncompressed length: check it before allocating.
    declared_bytes = int(cramjam.snappy.decompress_raw_len(block))
    if declared_bytes > max_bytes:
        raise _too_big(max_bytes)
    out = bytes(cramjam.snappy.decompress_raw(block))
    if len(out) != declared_bytes:
        raise CorruptBatchError("snappy block length does not match its content")
    return out


def _decompress_lz4(data: bytes | bytearray | memoryview, max_bytes: int) -> bytes:
    parts: list[bytes] = []
    total_bytes = 0
    remaining = bytes(data)
    while remaining:
        decompressor = lz4.frame.LZ4FrameDecompressor()
        # Output is asked for a bounded step at a time: the library allocates what it is allowed to
        # return up front, so asking for all of max_bytes at once would cost that much per batch.
        chunk = decompressor.decompress(
            remaining, max_length=min(_LZ4_STEP_BYTES, max_bytes + 1 - total_bytes)
        )
        while True:
            parts.append(chunk)
            total_bytes += len(chunk)
            if total_bytes > max_bytes:
                raise _too_big(max_bytes)
            if decompressor.eof:
                break
            if decompressor.needs_input:
                raise CorruptBatchError("lz4 frame is truncated")
            chunk = decompressor.decompress(b"", max_length=min(_LZ4_STEP_BYTES, max_bytes + 1 - total_bytes))
        remaining = decompressor.unused_data or b""
    return _joined(parts)


_zstd_per_thread = threading.local()


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    """One decompression context per thread, reused: a new one allocates its window again per
    batch. (Contexts are not thread-safe; each use resets it.)"""
    decompressor: zstandard.ZstdDecompressor | None = getattr(_zstd_per_thread, "decompressor", None)
    if decompressor is None:
        decompressor = _zstd_per_thread.decompressor = zstandard.ZstdDecompressor()
    return decompressor


def _decompress_zstd(data: bytes | bytearray | memoryview, max_bytes: int) -> bytes:
    remaining = bytes(data)
    if not remaining:
        raise CorruptBatchError("zstd data is empty")
    parts: list[bytes] = []
    total_bytes = 0
    while remaining:
        declared_bytes = zstandard.get_frame_parameters(remaining).content_size
        if declared_bytes != zstandard.CONTENTSIZE_UNKNOWN:
            if declared_bytes > max_bytes - total_bytes:
                raise _too_big(max_bytes)
            if not parts:
                # One frame that declares its size (Java clients, kafka-python, strom): decompressed
                # in one call into exactly that many bytes, which also bounds what it may produce.
                # Several frames, or a corrupt one, go the streaming way below.
                with contextlib.suppress(zstandard.ZstdError):
                    return bytes(_zstd_decompressor().decompress(remaining, allow_extra_data=False))
        # The streaming object takes no output bound, so feed it the input in pieces small enough
        # that one piece cannot expand past the bytes still allowed by much (zstd expands at most
        # about 2**15 times: a 3-byte block header and one byte repeated over a 128 KiB block).
        decompressor = _zstd_decompressor().decompressobj()
        pos = 0
        while not decompressor.eof:
            if pos >= len(remaining):
                raise CorruptBatchError("zstd frame is truncated")
            piece_bytes = max(_ZSTD_PIECE_BYTES_MIN, (max_bytes - total_bytes) >> _ZSTD_EXPANSION_SHIFT)
            chunk = decompressor.decompress(remaining[pos : pos + piece_bytes])
            parts.append(chunk)
            total_bytes += len(chunk)
            pos += piece_bytes
            if total_bytes > max_bytes:
                raise _too_big(max_bytes)
        remaining = decompressor.unused_data + remaining[pos:]
    return _joined(parts)
