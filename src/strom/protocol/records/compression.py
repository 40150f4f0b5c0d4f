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
(zip bombs) with ``DecompressedTooLargeError``, and any other failure of a codec becomes
``CorruptBatchError``. ``decompress`` returns ``bytes``; ``decompress_mapped`` writes into an
anonymous memory mapping, a bounded step at a time, for large output decompressed in a worker
thread: neither making nor freeing it holds the GIL (and so the broker's event loop) for long.
"""

from __future__ import annotations

import contextlib
import mmap
import struct
import threading
import zlib
from enum import IntEnum

import cramjam
import lz4.frame
import zstandard

from strom.base import limits
from strom.protocol.records.header import CorruptBatchError


class DecompressedTooLargeError(CorruptBatchError):
    """The data decompresses to more than the ``max_bytes`` asked for."""


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

# Output asked of zlib per call.
_GZIP_STEP_BYTES = 4 * 1024 * 1024

# gzip header + deflate stream, as zlib's wbits convention spells it (16 + window bits).
_GZIP_WBITS = 16 + zlib.MAX_WBITS

# zstd's worst-case expansion is about 2**15 (see _decompress_zstd); input is fed in pieces no
# smaller than this so a tiny remaining budget does not mean thousands of calls.
_ZSTD_EXPANSION_SHIFT = 15
_ZSTD_PIECE_BYTES_MIN = 256
# Input per call when decompressing in small steps: at most 4 MiB of output each.
_ZSTD_SMALL_STEP_PIECE_BYTES = 128


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

    Raises ``DecompressedTooLargeError`` for output that would exceed ``max_bytes`` and
    ``CorruptBatchError`` for an unknown codec or data the codec cannot read.
    """
    kind = _codec(kind)
    if kind is CompressionType.NONE:
        if len(data) > max_bytes:
            raise _too_big(max_bytes)
        return bytes(data)
    parts = _Parts(max_bytes)
    _decompress_into(kind, data, parts)
    return parts.joined()


def decompress_mapped(
    kind: int,
    data: bytes | bytearray | memoryview,
    max_bytes: int = limits.decompressed_batch_bytes_max,
) -> MappedOutput:
    """``decompress`` into an anonymous memory mapping, for large output in a worker thread: the
    output is written in bounded steps straight into the mapping (no pieces joined), and
    ``MappedOutput.close`` unmaps it without holding the GIL. (Freeing 256 MiB of ``bytes`` holds
    the GIL, and so every other thread, for 60-130 ms on the loaded test machine.) The caller
    closes it; raises as ``decompress`` does (having closed it)."""
    kind = _codec(kind)
    output = MappedOutput(max_bytes)
    try:
        if kind is CompressionType.NONE:
            output.add(data)
        else:
            _decompress_into(kind, data, output)
    except BaseException:
        output.close()
        raise
    return output


def _codec(kind: int) -> CompressionType:
    try:
        return CompressionType(kind)
    except ValueError:
        raise CorruptBatchError(f"unknown compression type {kind}") from None


def _decompress_into(kind: CompressionType, data: bytes | bytearray | memoryview, sink: _Sink) -> None:
    try:
        if kind is CompressionType.GZIP:
            _decompress_gzip(data, sink)
        elif kind is CompressionType.SNAPPY:
            _decompress_snappy(data, sink)
        elif kind is CompressionType.LZ4:
            _decompress_lz4(data, sink)
        else:
            assert kind is CompressionType.ZSTD
            _decompress_zstd(data, sink)
    except CorruptBatchError:
        raise
    # The codec libraries raise a zoo of types (zlib.error, RuntimeError, ZstdError, cramjam's
    # DecompressionError, ValueError...): all mean the same thing here.
    except Exception as error:
        raise CorruptBatchError(f"{kind.name} data cannot be decompressed: {error}") from error


def _too_big(max_bytes: int) -> DecompressedTooLargeError:
    return DecompressedTooLargeError(f"decompressed batch exceeds {max_bytes} bytes")


# ---------------------------------------------------------------------------------------------
# Where decompressed bytes go


class _Sink:
    """Decompressed output, refused past ``max_bytes``."""

    # Whether output is better made in small steps (worker threads: no large temporary objects).
    small_steps = False

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.size = 0

    @property
    def room(self) -> int:
        """Bytes that may still be added, plus one (asking a codec for one byte more than allowed
        is how output past the cap is seen)."""
        return self.max_bytes + 1 - self.size

    def add(self, chunk: bytes | bytearray | memoryview) -> None:
        raise NotImplementedError

    def writable(self, nbytes: int) -> memoryview | None:
        """Room for ``nbytes`` to be written in place (then ``wrote``), or None: use ``add``."""
        return None

    def wrote(self, nbytes: int) -> None:
        self.size += nbytes


class _Parts(_Sink):
    def __init__(self, max_bytes: int) -> None:
        super().__init__(max_bytes)
        self._parts: list[bytes] = []

    def add(self, chunk: bytes | bytearray | memoryview) -> None:
        self.size += len(chunk)
        if self.size > self.max_bytes:
            raise _too_big(self.max_bytes)
        self._parts.append(bytes(chunk))

    def joined(self) -> bytes:
        parts = self._parts
        return parts[0] if len(parts) == 1 else b"".join(parts)


class MappedOutput(_Sink):
    """Decompressed bytes in an anonymous mapping of ``max_bytes`` + 1 (address space: only the
    pages written to take memory); ``view`` is what was written. ``close`` unmaps it."""

    small_steps = True

    def __init__(self, max_bytes: int) -> None:
        super().__init__(max_bytes)
        self._map: mmap.mmap | None = mmap.mmap(-1, max_bytes + 1)
        self._whole = memoryview(self._map)
        self._view: memoryview | None = None

    def add(self, chunk: bytes | bytearray | memoryview) -> None:
        end = self.size + len(chunk)
        if end > self.max_bytes:
            raise _too_big(self.max_bytes)
        self._whole[self.size : end] = chunk
        self.size = end

    def writable(self, nbytes: int) -> memoryview | None:
        if self.size + nbytes > self.max_bytes:
            raise _too_big(self.max_bytes)
        return self._whole[self.size : self.size + nbytes]

    def view(self) -> memoryview:
        if self._view is None:
            self._view = self._whole[: self.size]
        return self._view

    def __enter__(self) -> MappedOutput:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> bool:
        """Unmap (the GIL is released meanwhile); True if it was unmapped now. Views of it must be
        gone; if some still are (a traceback may hold one), the mapping goes when they do."""
        mapping, self._map = self._map, None
        if mapping is None:
            return False
        for view in (self._view, self._whole):
            if view is not None:
                with contextlib.suppress(BufferError):
                    view.release()
        self._view = None
        try:
            mapping.close()
        except BufferError:
            return False
        return True


# ---------------------------------------------------------------------------------------------
# The codecs


def _decompress_gzip(data: bytes | bytearray | memoryview, sink: _Sink) -> None:
    remaining: bytes | bytearray | memoryview = data
    while True:  # a member at a time
        decompressor = zlib.decompressobj(_GZIP_WBITS)
        while not decompressor.eof:
            # Bounded steps: one call asked for hundreds of MiB builds its result from blocks
            # with the GIL held at the end (~200 ms for 256 MiB).
            chunk = decompressor.decompress(remaining, min(_GZIP_STEP_BYTES, sink.room))
            sink.add(chunk)
            progressed = chunk or len(decompressor.unconsumed_tail) < len(remaining)
            remaining = decompressor.unconsumed_tail
            if not progressed:
                raise CorruptBatchError("gzip stream is truncated")
        remaining = decompressor.unused_data
        if not remaining:
            return


def _compress_xerial(data: bytes | bytearray | memoryview) -> bytes:
    view = memoryview(data)
    parts = [XERIAL_HEADER]
    for start in range(0, len(view), XERIAL_BLOCK_BYTES):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + XERIAL_BLOCK_BYTES]))
        parts.append(_BLOCK_LENGTH.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _decompress_snappy(data: bytes | bytearray | memoryview, sink: _Sink) -> None:
    data = bytes(data)
    if not data.startswith(XERIAL_MAGIC):
        _decompress_raw_snappy_block(data, sink)
        return
    if len(data) < XERIAL_HEADER_BYTES:
        raise CorruptBatchError("xerial snappy header is truncated")
    pos = XERIAL_HEADER_BYTES
    end = len(data)
    while pos < end:
        if end - pos < 4:
            raise CorruptBatchError("xerial snappy block length is truncated")
        (block_bytes,) = _BLOCK_LENGTH.unpack_from(data, pos)
        pos += 4
        if block_bytes < 0 or block_bytes > end - pos:
            raise CorruptBatchError(f"xerial snappy block length {block_bytes} is out of bounds")
        _decompress_raw_snappy_block(data[pos : pos + block_bytes], sink)
        pos += block_bytes


def _decompress_raw_snappy_block(block: bytes, sink: _Sink) -> None:
    # A raw snappy block starts with its uncompressed length: check it before allocating.
    declared_bytes = int(cramjam.snappy.decompress_raw_len(block))
    if declared_bytes >= sink.room:
        raise _too_big(sink.max_bytes)
    into = sink.writable(declared_bytes)
    if into is not None:
        written = int(cramjam.snappy.decompress_raw_into(block, into))
        into.release()
        if written != declared_bytes:
            raise CorruptBatchError("snappy block length does not match its content")
        sink.wrote(written)
        return
    out = bytes(cramjam.snappy.decompress_raw(block))
    if len(out) != declared_bytes:
        raise CorruptBatchError("snappy block length does not match its content")
    sink.add(out)


def _decompress_lz4(data: bytes | bytearray | memoryview, sink: _Sink) -> None:
    remaining = bytes(data)
    while remaining:
        decompressor = lz4.frame.LZ4FrameDecompressor()
        # Output is asked for a bounded step at a time: the library allocates what it is allowed to
        # return up front, so asking for all of max_bytes at once would cost that much per batch.
        chunk = decompressor.decompress(remaining, max_length=min(_LZ4_STEP_BYTES, sink.room))
        while True:
            sink.add(chunk)
            if decompressor.eof:
                break
            if decompressor.needs_input:
                raise CorruptBatchError("lz4 frame is truncated")
            chunk = decompressor.decompress(b"", max_length=min(_LZ4_STEP_BYTES, sink.room))
        remaining = decompressor.unused_data or b""


_zstd_per_thread = threading.local()


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    """One decompression context per thread, reused: a new one allocates its window again per
    batch. (Contexts are not thread-safe; each use resets it.)"""
    decompressor: zstandard.ZstdDecompressor | None = getattr(_zstd_per_thread, "decompressor", None)
    if decompressor is None:
        decompressor = _zstd_per_thread.decompressor = zstandard.ZstdDecompressor()
    return decompressor


def _decompress_zstd(data: bytes | bytearray | memoryview, sink: _Sink) -> None:
    remaining = bytes(data)
    if not remaining:
        raise CorruptBatchError("zstd data is empty")
    while remaining:
        declared_bytes = zstandard.get_frame_parameters(remaining).content_size
        if declared_bytes != zstandard.CONTENTSIZE_UNKNOWN:
            if declared_bytes >= sink.room:
                raise _too_big(sink.max_bytes)
            if not sink.size and not sink.small_steps:
                # One frame that declares its size (Java clients, kafka-python, strom): decompressed
                # in one call into exactly that many bytes, which also bounds what it may produce.
                # Several frames, or a corrupt one, go the streaming way below.
                with contextlib.suppress(zstandard.ZstdError):
                    sink.add(_zstd_decompressor().decompress(remaining, allow_extra_data=False))
                    return
        # The streaming object takes no output bound, so feed it the input in pieces small enough
        # that one piece cannot expand past the bytes still allowed by much (zstd expands at most
        # about 2**15 times: a 3-byte block header and one byte repeated over a 128 KiB block).
        # In small steps, a piece expands to at most ``_ZSTD_STEP_BYTES``.
        decompressor = _zstd_decompressor().decompressobj()
        pos = 0
        while not decompressor.eof:
            if pos >= len(remaining):
                raise CorruptBatchError("zstd frame is truncated")
            piece_bytes = (
                _ZSTD_SMALL_STEP_PIECE_BYTES
                if sink.small_steps
                else max(_ZSTD_PIECE_BYTES_MIN, sink.room >> _ZSTD_EXPANSION_SHIFT)
            )
            sink.add(decompressor.decompress(remaining[pos : pos + piece_bytes]))
            pos += piece_bytes
        remaining = decompressor.unused_data + remaining[pos:]
