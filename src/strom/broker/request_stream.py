"""The broker's end of one client connection: bytes read straight into a scratch buffer (one the
broker's connections share) and cut into request frames as they arrive, and an
``asyncio.StreamWriter`` for the answers.

Through a ``StreamReader`` every byte a client sent was copied three times before the frame
decoder saw it (the transport's chunk, the reader's buffer, the slice ``read()`` returns), and
over TLS the event loop's TLS layer made a 256 KiB object per TLS record it decrypted. Here the
transport writes into one scratch buffer (``asyncio.BufferedProtocol``; over TLS the record is
decrypted into it) and the decoder copies from there: each byte is copied once on its way to a
frame (large frames are then handed over whole, small ones sliced out).

Reading stops (the transport is paused) while complete frames wait for the connection's loop to
take them, or while more than ``buffered_bytes_max`` are buffered without the loop waiting: a
connection whose loop is busy (a request being handled, answers draining, a quota mute) is not
read, as a ``StreamReader`` stopped reading once its buffer was full. Reading resumes when the
loop asks for the next frames.

The writing half is an ``asyncio.StreamWriter`` over the transport, with what it asks of its
protocol (what asyncio's ``FlowControlMixin`` gives its ``StreamReaderProtocol``, which a buffered
protocol cannot inherit: uvloop reads into a protocol's buffers only if it is not an
``asyncio.Protocol``): ``_drain_helper()``, which ``drain()`` awaits while the transport's write
buffer is above its high mark, and ``_get_close_waiter()``, which ``wait_closed()`` awaits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, cast

from strom.protocol.framing import FrameDecoder
from strom.protocol.primitives import DecodeError

__all__ = ["RequestStream"]

# What one read may write: the transport's reads (and TLS records, 16 KiB each) go here. One such
# buffer serves every connection of a broker, not one each: 10,000 idle connections would hold
# 2.5 GiB of them.
SCRATCH_BYTES = 256 * 1024
# What asyncio.start_server's StreamReader buffered before it stopped reading (twice its limit).
BUFFERED_BYTES_MAX = 128 * 1024


class RequestStream(asyncio.BufferedProtocol):
    """One connection's requests as frames (``next_frames``) and its ``writer``.

    ``connected(stream)`` is called once the connection is made (on the event loop); it starts
    whatever serves the connection.
    """

    def __init__(
        self,
        connected: Callable[[RequestStream], None],
        frame_bytes_max: int,
        buffered_bytes_max: int = BUFFERED_BYTES_MAX,
        scratch: memoryview | None = None,
    ) -> None:
        """``scratch``: where reads go, shared by every connection of one event loop (each read is
        copied out of it before the loop reads anything else: the transport calls ``get_buffer``,
        reads, then ``buffer_updated`` in one callback); a buffer of its own when not given."""
        loop = asyncio.get_running_loop()  # protocols are made on the event loop
        self._event_loop = loop
        self.decoder = FrameDecoder(frame_bytes_max)
        self.writer: asyncio.StreamWriter | None = None
        self.transport: Any = None
        self._connected = connected
        self._buffered_bytes_max = buffered_bytes_max
        self._scratch = scratch if scratch is not None else memoryview(bytearray(SCRATCH_BYTES))
        self._frames: list[bytearray | memoryview] = []
        self._received_bytes = 0  # since the loop last took frames
        self._error: DecodeError | None = None
        self._eof = False
        self._lost: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._reading_paused = False
        self._over_tls = False
        self._closed: asyncio.Future[None] = loop.create_future()  # done once the connection is lost
        self._writing_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []

    # -- the transport's side --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self._over_tls = transport.get_extra_info("sslcontext") is not None
        # uvloop's transports are not registered as asyncio.Transport, though they are one.
        self.writer = asyncio.StreamWriter(cast("asyncio.Transport", transport), self, None, self._event_loop)
        self._connected(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._scratch

    def buffer_updated(self, nbytes: int) -> None:
        self._received_bytes += nbytes
        if self._error is None:
            try:
                self._frames += self.decoder.feed(self._scratch[:nbytes])
            except DecodeError as error:
                self._error = error
        self._wake()
        if (
            self._waiter is None
            and not self._reading_paused
            and (
                self._frames
                or self._error is not None
                or self.decoder.buffered_bytes >= self._buffered_bytes_max
            )
        ):
            self._pause_reading()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        # Plain TCP: keep the transport open to write the answers to what was received, as
        # asyncio's StreamReaderProtocol does; over TLS that cannot be (the event loop warns).
        return not self._over_tls

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = exc
        if not self._closed.done():
            self._closed.set_result(None)
        self._wake()
        self._release_drains(exc or ConnectionResetError("connection lost"))

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._release_drains(None)

    # -- what asyncio.StreamWriter asks of its protocol ------------------------------------------

    async def _drain_helper(self) -> None:
        """``StreamWriter.drain()``: returns once the transport takes writes again."""
        if self._closed.done():
            raise ConnectionResetError("connection lost")
        if not self._writing_paused:
            return
        waiter = self._event_loop.create_future()
        self._drain_waiters.append(waiter)
        await waiter

    def _get_close_waiter(self, stream: asyncio.StreamWriter) -> asyncio.Future[None]:
        """What ``StreamWriter.wait_closed()`` waits for."""
        return self._closed

    def _release_drains(self, error: BaseException | None) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                if error is None:
                    waiter.set_result(None)
                else:
                    waiter.set_exception(error)

    # -- the connection loop's side ----------------------------------------------------------------

    async def next_frames(self, frames_max: int) -> tuple[list[bytearray | memoryview], int]:
        """Up to ``frames_max`` complete request frames and the bytes received since the last
        call, waiting until there is at least one; ``([], n)`` at the end of the stream. Raises
        ``DecodeError`` for a stream that is not Kafka frames (after the frames before the fault
        are taken), ``ConnectionResetError`` when the connection broke."""
        while True:
            taken = self.take_frames(frames_max)
            if taken:
                received, self._received_bytes = self._received_bytes, 0
                return taken, received
            if self._error is not None:
                raise self._error
            if self._lost is not None:
                raise ConnectionResetError(str(self._lost) or type(self._lost).__name__)
            if self._eof or self._closed.done():
                received, self._received_bytes = self._received_bytes, 0
                return [], received
            if self._reading_paused:
                self._reading_paused = False
                if not self.transport.is_closing():  # a closing uvloop transport refuses any call
                    self.transport.resume_reading()
            waiter = self._waiter = self._event_loop.create_future()
            try:
                await waiter
            finally:
                self._waiter = None

    def take_frames(self, frames_max: int) -> list[bytearray | memoryview]:
        """Up to ``frames_max`` of the complete frames already received (none: an empty list)."""
        frames = self._frames
        if len(frames) <= frames_max:
            self._frames = []
            return frames
        self._frames = frames[frames_max:]
        return frames[:frames_max]

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _pause_reading(self) -> None:
        if self._closed.done() or self.transport is None or self.transport.is_closing():
            return
        self._reading_paused = True
        self.transport.pause_reading()
