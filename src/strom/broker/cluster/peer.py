"""A connection from this broker to another one, speaking the Kafka protocol as a client.

The cluster's own traffic goes over these: the controller's commands (LeaderAndIsr,
UpdateMetadata, StopReplica), a broker's requests to the controller (AlterPartition,
ControlledShutdown) and the followers' Fetch / OffsetForLeaderEpoch. Requests are pipelined and
matched to their answers by correlation id; only strom brokers are at the other end, so the
versions are fixed by the caller (no ApiVersions exchange). A failure of the connection fails every
request in flight with ``PeerError``; the owner opens a new connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from typing import Any

from strom.base import limits
from strom.protocol.framing import FrameDecoder
from strom.protocol.headers import decode_response_header, encode_request
from strom.protocol.primitives import DecodeError

log = logging.getLogger("strom.broker.cluster")

READ_CHUNK_BYTES = 256 * 1024


class PeerError(Exception):
    """The peer could not be reached, or the connection broke (the request's outcome is unknown)."""


class PeerConnection:
    def __init__(self, host: str, port: int, client_id: str) -> None:
        self.host = host
        self.port = port
        self._client_id = client_id
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._correlation_ids = itertools.count(1)
        self._pending: dict[int, tuple[asyncio.Future[Any], Any, int, int]] = {}
        self._closed_error: PeerError | None = None
        self._connecting: asyncio.Lock = asyncio.Lock()

    @property
    def closed(self) -> bool:
        return self._closed_error is not None

    async def _connect(self, timeout_ms: int) -> asyncio.StreamWriter:
        async with self._connecting:
            if self._closed_error is not None:
                raise self._closed_error
            if self._writer is not None:
                return self._writer
            try:
                async with asyncio.timeout(timeout_ms / 1000):
                    reader, writer = await asyncio.open_connection(self.host, self.port)
            except (OSError, TimeoutError) as error:
                failure = PeerError(f"cannot connect to {self.host}:{self.port}: {error or 'timed out'}")
                self._closed_error = failure
                raise failure from None
            if self._closed_error is not None:  # closed while connecting (a fetcher gave it up)
                writer.close()
                raise self._closed_error
            self._writer = writer
            self._reader_task = asyncio.get_running_loop().create_task(self._read(reader))
            return writer

    async def request(self, request: Any, version: int, response_type: Any, timeout_ms: int) -> Any:
        """Send ``request`` at ``version``; its decoded answer, or PeerError (connection failed,
        or no answer within ``timeout_ms``: the connection is then closed, as its stream can no
        longer be trusted to match answers to requests)."""
        writer = await self._connect(timeout_ms)
        correlation_id = next(self._correlation_ids) & 0x7FFFFFFF
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[correlation_id] = (future, response_type, request.API_KEY, version)
        writer.write(
            encode_request(request.API_KEY, version, correlation_id, self._client_id, request.encode(version))
        )
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                return await future
        except TimeoutError:
            self.close(PeerError(f"no answer from {self.host}:{self.port} within {timeout_ms} ms"))
            raise PeerError(f"no answer from {self.host}:{self.port} within {timeout_ms} ms") from None
        finally:
            self._pending.pop(correlation_id, None)

    async def _read(self, reader: asyncio.StreamReader) -> None:
        decoder = FrameDecoder(limits.frame_bytes_max)
        error: PeerError
        try:
            while True:
                data = await reader.read(READ_CHUNK_BYTES)
                if not data:
                    error = PeerError(f"{self.host}:{self.port} closed the connection")
                    break
                for frame in decoder.feed(data):
                    self._complete(frame)
        except (OSError, DecodeError, ValueError) as failure:
            error = PeerError(f"connection to {self.host}:{self.port} failed: {failure}")
        except asyncio.CancelledError:
            error = PeerError(f"connection to {self.host}:{self.port} closed")
        self.close(error)

    def _complete(self, frame: bytes | bytearray | memoryview) -> None:
        correlation_id = int.from_bytes(frame[:4], "big", signed=True)
        pending = self._pending.pop(correlation_id, None)
        if pending is None:
            return  # answered after its request timed out
        future, response_type, api_key, version = pending
        _, body_offset = decode_response_header(frame, api_key, version)
        response = response_type.decode(memoryview(frame)[body_offset:], version)
        if not future.done():
            future.set_result(response)

    def close(self, error: PeerError | None = None) -> None:
        if self._closed_error is None:
            self._closed_error = error or PeerError(f"connection to {self.host}:{self.port} closed")
        for future, *_rest in self._pending.values():
            if not future.done():
                future.set_exception(self._closed_error)
        self._pending.clear()
        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._writer.close()
            self._writer = None
        task, self._reader_task = self._reader_task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
