"""Sans-I/O framing: every Kafka request and response is a big-endian int32 size, then that many bytes.

`FrameDecoder.feed()` takes whatever the socket delivered and returns the complete frame bodies.
A declared size above the limit is refused as soon as the four size bytes are in, before any of
the body is buffered, so a peer cannot make the broker allocate its claimed 2 GiB.

`FrameReceiver` is the same for a reader that lets the socket write straight into its buffers
(asyncio's ``BufferedProtocol``): small frames are read into one scratch buffer and copied out, a
large one gets a buffer of its own, sized from its prefix, that the socket fills directly — a
large answer is copied once, by the kernel. It allocates a frame's whole declared size when the
prefix arrives, so it is for peers that are trusted to send what they declare (a broker's own
connections to the other brokers, strom's client reading its brokers' answers), not for what a
broker reads from any client.
"""

from __future__ import annotations

import struct

from strom.base import limits
from strom.protocol.primitives import DecodeError

__all__ = ["FrameDecoder", "FrameReceiver", "FrameTooLargeError", "encode_frame"]

_SIZE = struct.Struct(">i")
_SIZE_BYTES = _SIZE.size

# Consumed bytes at the front of the buffer are dropped only once they are this many and at least
# half the buffer, so a burst of small frames costs O(n) copying in total, not O(n^2).
_COMPACT_BYTES_MIN = 64 * 1024
# Frames at least this large are handed over as views of their buffer, without a copy (smaller
# ones are cheaper to copy than to give their own buffer).
_HAND_OVER_BYTES_MIN = 64 * 1024


class FrameTooLargeError(DecodeError):
    """A frame declared a size above the configured maximum."""

    def __init__(self, size_bytes: int, frame_bytes_max: int) -> None:
        super().__init__(f"frame of {size_bytes} bytes exceeds the maximum of {frame_bytes_max}")
        self.size_bytes = size_bytes
        self.frame_bytes_max = frame_bytes_max


class FrameDecoder:
    """Splits a byte stream into frame bodies. Once it has raised, the stream is unusable."""

    __slots__ = ("_buffer", "_start", "bytes_total", "frame_bytes_max", "frames_total")

    def __init__(self, frame_bytes_max: int = limits.frame_bytes_max) -> None:
        self.frame_bytes_max = frame_bytes_max
        self._buffer = bytearray()
        self._start = 0
        # Running totals, for whoever watches the stream's progress (the broker's idle and
        # slow-request checks): bytes fed in, and frames handed out.
        self.bytes_total = 0
        self.frames_total = 0

    @property
    def buffered_bytes(self) -> int:
        """Bytes received but not yet returned as part of a frame."""
        return len(self._buffer) - self._start

    def feed(
        self, data: bytes | bytearray | memoryview, frames_max: int | None = None
    ) -> list[bytearray | memoryview]:
        """Adds received bytes; returns every frame body now complete (without its size prefix), at
        most ``frames_max`` of them: the rest stay buffered for the next call (``feed(b"")`` cuts
        them without new bytes), so a caller can bound the requests it holds unanswered.

        Bodies are writable and belong to the caller (the broker rewrites base offsets in produced
        batches in place). A large frame — a produce request of many records, arriving over
        several reads — is handed over without a copy, as a view of the buffer it arrived in; the
        bytes left after the frames cut (the start of the next request) move to a new buffer.
        """
        assert frames_max is None or frames_max > 0, frames_max
        buffer = self._buffer
        buffer += data
        self.bytes_total += len(data)
        frames: list[bytearray | memoryview] = []
        start = self._start
        end = len(buffer)
        if frames_max is None:
            frames_max = end  # more than the buffer can hold: every frame has at least 8 bytes
        handed_over = False  # a frame is a view of this buffer: it is the frames' now, not ours
        while end - start >= _SIZE_BYTES and len(frames) < frames_max:
            (size,) = _SIZE.unpack_from(buffer, start)
            if size < limits.frame_bytes_min:
                raise DecodeError(f"frame size {size} is below the minimum of {limits.frame_bytes_min}")
            if size > self.frame_bytes_max:
                raise FrameTooLargeError(size, self.frame_bytes_max)
            if end - start - _SIZE_BYTES < size:
                break
            body_start = start + _SIZE_BYTES
            body_end = body_start + size
            if size >= _HAND_OVER_BYTES_MIN:
                # A large frame is handed over as a view of the buffer, not copied out of it.
                frames.append(memoryview(buffer)[body_start:body_end])
                handed_over = True
            else:
                frames.append(buffer[body_start:body_end])
            start = body_end
        if handed_over:
            # The buffer belongs to the frames handed over as views of it (and may not be resized
            # while they are): what is left after them (the start of the next frames, at most a
            # read's worth) goes on in a buffer of its own.
            self._buffer = bytearray(buffer[start:end])
            start = 0
        elif start == end:
            if end:
                buffer.clear()
            start = 0
        elif start >= _COMPACT_BYTES_MIN and start * 2 >= end:
            del buffer[:start]
            start = 0
        self._start = start
        self.frames_total += len(frames)
        return frames


class FrameReceiver:
    """Splits a byte stream into frame bodies, with the reads going straight into its buffers:
    ``buffer()`` is where the next read goes, ``received(n)`` says how much it wrote and returns
    the frame bodies now complete. Once it has raised, the stream is unusable."""

    __slots__ = ("_body", "_body_filled", "_body_view", "_filled", "_scratch", "_start", "frame_bytes_max")

    def __init__(
        self, frame_bytes_max: int = limits.frame_bytes_max, scratch_bytes: int = 256 * 1024
    ) -> None:
        self.frame_bytes_max = frame_bytes_max
        self._scratch = memoryview(bytearray(scratch_bytes))
        self._start = 0  # the first byte of the scratch not yet part of a returned frame
        self._filled = 0  # the end of what the scratch holds
        self._body: bytearray | None = None  # the large frame being read into its own buffer
        self._body_view = memoryview(b"")
        self._body_filled = 0

    def buffer(self) -> memoryview:
        """Where the next read should write (never empty)."""
        if self._body is not None:
            return self._body_view[self._body_filled :]
        return self._scratch[self._filled :]

    def received(self, nbytes: int) -> list[bytearray]:
        """``nbytes`` were written at the start of the last ``buffer()``: the frames now complete."""
        body = self._body
        if body is not None:
            self._body_filled += nbytes
            if self._body_filled < len(body):
                return []
            self._body = None
            self._body_view = memoryview(b"")
            return [body]
        self._filled += nbytes
        frames: list[bytearray] = []
        scratch = self._scratch
        start, filled = self._start, self._filled
        while filled - start >= _SIZE_BYTES:
            (size,) = _SIZE.unpack_from(scratch, start)
            if size < limits.frame_bytes_min:
                raise DecodeError(f"frame size {size} is below the minimum of {limits.frame_bytes_min}")
            if size > self.frame_bytes_max:
                raise FrameTooLargeError(size, self.frame_bytes_max)
            body_start = start + _SIZE_BYTES
            available = filled - body_start
            if available >= size:
                frames.append(bytearray(scratch[body_start : body_start + size]))
                start = body_start + size
                continue
            if body_start + size > len(scratch):
                # It will not fit where it is: a buffer of its own, the rest read straight into it.
                own = bytearray(size)
                own[:available] = scratch[body_start:filled]
                self._body, self._body_view, self._body_filled = own, memoryview(own), available
                start = filled
            break
        if start == filled:
            start = filled = 0
        elif start:
            # A partial frame (or size prefix) is left: moved to the front, so the scratch has room.
            left = filled - start
            scratch[:left] = scratch[start:filled]
            start, filled = 0, left
        self._start, self._filled = start, filled
        return frames


def encode_frame(body: bytes | bytearray | memoryview) -> bytes:
    """Prefixes a body with its int32 size."""
    return _SIZE.pack(len(body)) + bytes(body)
