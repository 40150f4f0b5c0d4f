"""The broker's end of a connection: bytes written into its buffer come out as request frames,
reading stops while frames wait for the connection's loop (or too much is buffered) and resumes
when it asks again, and the writer's drain and close wait on the transport."""

from __future__ import annotations

import asyncio
import functools
import struct
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from strom.broker.request_stream import RequestStream
from strom.protocol.framing import FrameTooLargeError
from strom.protocol.primitives import DecodeError


class FakeTransport:
    def __init__(self) -> None:
        self.reading = True
        self.closing = False
        self.written: list[bytes] = []

    def pause_reading(self) -> None:
        assert self.reading
        self.reading = False

    def resume_reading(self) -> None:
        assert not self.reading
        self.reading = True

    def is_closing(self) -> bool:
        return self.closing

    def write(self, data: bytes) -> None:
        self.written.append(bytes(data))

    def close(self) -> None:
        self.closing = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


def frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def deliver(stream: RequestStream, data: bytes) -> None:
    """What the transport does with received bytes: into the stream's buffer, then its size."""
    while data:
        buffer = stream.get_buffer(len(data))
        count = min(len(buffer), len(data))
        buffer[:count] = data[:count]
        stream.buffer_updated(count)
        data = data[count:]


def run_async(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    """The test runs in an event loop of its own (protocols are made on one)."""

    @functools.wraps(test)
    def run() -> None:
        async def closing() -> None:
            try:
                await test()
            finally:
                for writer in _writers:
                    writer.close()  # as the broker's connection loop does: no writer left open
                _writers.clear()

        asyncio.run(closing())

    return run


_writers: list[asyncio.StreamWriter] = []


def connected() -> tuple[RequestStream, FakeTransport, list[RequestStream]]:
    made: list[RequestStream] = []
    stream = RequestStream(made.append, frame_bytes_max=1 << 20, buffered_bytes_max=1024)
    transport = FakeTransport()
    stream.connection_made(transport)  # type: ignore[arg-type]
    assert stream.writer is not None
    _writers.append(stream.writer)
    return stream, transport, made


@run_async
async def test_frames_come_out_whole_and_in_order_with_the_bytes_received() -> None:
    stream, _, made = connected()
    assert made == [stream] and stream.writer is not None
    data = frame(b"a" * 10) + frame(b"b" * 3000) + frame(b"c" * 8)
    deliver(stream, data[:7])  # a partial frame: nothing yet
    waiting = asyncio.ensure_future(stream.next_frames(10))
    await asyncio.sleep(0)
    assert not waiting.done()
    deliver(stream, data[7:])
    frames, received = await waiting
    assert [bytes(f) for f in frames] == [b"a" * 10, b"b" * 3000, b"c" * 8]
    assert received == len(data)
    assert stream.decoder.frames_total == 3


@run_async
async def test_reading_stops_while_frames_wait_and_resumes_when_asked() -> None:
    stream, transport, _ = connected()
    deliver(stream, frame(b"x" * 8) * 5)
    assert not transport.reading, "complete frames nobody took: reading stops"
    frames, _ = await stream.next_frames(2)
    assert len(frames) == 2 and not transport.reading, "frames are still waiting"
    assert len(stream.take_frames(10)) == 3
    waiting = asyncio.ensure_future(stream.next_frames(2))
    await asyncio.sleep(0)
    assert transport.reading, "asked again with nothing left: reading resumes"
    deliver(stream, frame(b"y" * 8))
    assert transport.reading, "the loop waits for it: no pause"
    assert [bytes(f) for f in (await waiting)[0]] == [b"y" * 8]


@run_async
async def test_a_busy_loop_stops_reading_once_its_bound_is_buffered() -> None:
    stream, transport, _ = connected()
    data = frame(b"z" * 5000)
    deliver(stream, data[:1000])
    assert transport.reading, "under the bound (1 KiB here)"
    deliver(stream, data[1000:1100])
    assert not transport.reading
    waiting = asyncio.ensure_future(stream.next_frames(1))
    await asyncio.sleep(0)
    assert transport.reading
    deliver(stream, data[1100:])
    assert [len(f) for f in (await waiting)[0]] == [5000]


@run_async
async def test_end_of_stream_after_the_last_frames() -> None:
    stream, _, _ = connected()
    deliver(stream, frame(b"last" * 2))
    assert stream.eof_received() is True  # keep writing the answers (plain TCP)
    assert [bytes(f) for f in (await stream.next_frames(5))[0]] == [b"last" * 2]
    assert await stream.next_frames(5) == ([], 0)


@run_async
async def test_a_malformed_stream_raises_after_the_frames_before_it() -> None:
    stream, transport, _ = connected()
    deliver(stream, frame(b"ok" * 4))
    deliver(stream, struct.pack(">i", 2 << 20))  # refused from its size prefix alone
    assert not transport.reading
    assert [bytes(f) for f in (await stream.next_frames(5))[0]] == [b"ok" * 4]
    with pytest.raises(FrameTooLargeError):
        await stream.next_frames(5)
    stream2, _, _ = connected()
    deliver(stream2, struct.pack(">i", 1) + b"\x00")
    with pytest.raises(DecodeError):
        await stream2.next_frames(5)


@run_async
async def test_a_lost_connection_wakes_the_loop_with_an_error() -> None:
    stream, _, _ = connected()
    waiting = asyncio.ensure_future(stream.next_frames(1))
    await asyncio.sleep(0)
    stream.connection_lost(ConnectionResetError("reset by peer"))
    with pytest.raises(ConnectionResetError):
        await waiting
    assert stream.writer is not None
    await stream.writer.wait_closed()  # the close waiter is done


@run_async
async def test_drain_waits_while_the_transport_is_paused_for_writing() -> None:
    stream, _, _ = connected()
    writer = stream.writer
    assert writer is not None
    await writer.drain()  # not paused: at once
    stream.pause_writing()
    draining = asyncio.ensure_future(writer.drain())
    await asyncio.sleep(0)
    assert not draining.done()
    stream.resume_writing()
    await draining
    stream.pause_writing()
    draining = asyncio.ensure_future(writer.drain())
    await asyncio.sleep(0)
    stream.connection_lost(None)
    with pytest.raises(ConnectionResetError):
        await draining


@run_async
async def test_connections_sharing_one_scratch_each_get_their_own_frames() -> None:
    """Each read is copied out of the scratch before the next: two connections reading into one
    buffer, in turns and with partial frames, each cut their own frames."""
    shared = memoryview(bytearray(4096))
    streams = []
    for _ in range(2):
        stream = RequestStream(lambda made: None, frame_bytes_max=1 << 20, scratch=shared)
        stream.connection_made(FakeTransport())  # type: ignore[arg-type]
        assert stream.writer is not None
        _writers.append(stream.writer)
        streams.append(stream)
    first, second = frame(b"1" * 3000), frame(b"2" * 3000)
    for index in range(0, 3004, 1000):
        deliver(streams[0], first[index : index + 1000])
        deliver(streams[1], second[index : index + 1000])
    assert [bytes(f) for f in (await streams[0].next_frames(5))[0]] == [b"1" * 3000]
    assert [bytes(f) for f in (await streams[1].next_frames(5))[0]] == [b"2" * 3000]
