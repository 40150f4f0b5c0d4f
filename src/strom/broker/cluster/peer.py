"""A connection from this broker to another one, speaking the Kafka protocol as a client.

The cluster's own traffic goes over these: the controller's commands (LeaderAndIsr,
UpdateMetadata, StopReplica), a broker's requests to the controller (AlterPartition,
ControlledShutdown) and the followers' Fetch / OffsetForLeaderEpoch. Requests are pipelined and
matched to their answers by correlation id; only strom brokers are at the other end, so the
versions are fixed by the caller (no ApiVersions exchange). A failure of the connection fails every
request in flight with ``PeerError``; the owner opens a new connection.

Answers are read by a ``BufferedProtocol`` into a ``FrameReceiver``: a follower's fetch answers
carry every replicated byte, and reading them through a ``StreamReader`` copied each byte three
times more (into the reader's buffer, out of it, into the frame decoder) and woke a task per read.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from typing import Any

from strom.base import limits
from strom.protocol.framing import FrameReceiver
from strom.protocol.headers import decode_response_header, encode_request
from strom.protocol.primitives import DecodeError

log = logging.getLogger("strom.broker.cluster")


class PeerError(Exception):
    """The peer could not be reached, or the connection broke (the request's outcome is unknown)."""


class _AnswerReader(asyncio.BufferedProtocol):
    """The socket's side of a ``PeerConnection``: answers read straight into frame buffers."""

    def __init__(self, owner: PeerConnection) -> None:
        self._owner = owner
        self._frames = FrameReceiver(limits.frame_bytes_max)
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._frames.buffer()

    def buffer_updated(self, nbytes: int) -> None:
        try:
            frames = self._frames.received(nbytes)
            for frame in frames:
                self._owner._complete(frame)
        except (DecodeError, ValueError) as failure:
            owner = self._owner
            owner.close(PeerError(f"connection to {owner.host}:{owner.port} failed: {failure}"))

    def eof_received(self) -> bool:
        owner = self._owner
        owner.close(PeerError(f"{owner.host}:{owner.port} closed the connection"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        owner = self._owner
        reason = f"failed: {exc}" if exc is not None else "closed"
        owner.close(PeerError(f"connection to {owner.host}:{owner.port} {reason}"))


class PeerConnection:
    def __init__(self, host: str, port: int, client_id: str) -> None:
        self.host = host
        self.port = port
        self._client_id = client_id
        self._transport: asyncio.Transport | None = None
        self._correlation_ids = itertools.count(1)
        self._pending: dict[int, tuple[asyncio.Future[Any], Any, int, int]] = {}
        self._closed_error: PeerError | None = None
        self._connecting: asyncio.Lock = asyncio.Lock()

    @property
    def closed(self) -> bool:
        return self._closed_error is not None

    async def _connect(self, timeout_ms: int) -> asyncio.Transport:
        async with self._connecting:
            if self._closed_error is not None:
                raise self._closed_error
            if self._transport is not None:
                return self._transport
            loop = asyncio.get_running_loop()
            try:
                async with asyncio.timeout(timeout_ms / 1000):
                    transport, _reader = await loop.create_connection(
                        lambda: _AnswerReader(self), self.host, self.port
                    )
            except (OSError, TimeoutError) as error:
                failure = PeerError(f"cannot connect to {self.host}:{self.port}: {error or 'timed out'}")
                self._closed_error = failure
                raise failure from None
            if self._closed_error is not None:  # closed while connecting (a fetcher gave it up)
                transport.close()
                raise self._closed_error
            self._transport = transport
            return transport

    async def request(self, request: Any, version: int, response_type: Any, timeout_ms: int) -> Any:
        """Send ``request`` at ``version``; its decoded answer, or PeerError (connection failed,
        or no answer within ``timeout_ms``: the connection is then closed, as its stream can no
        longer be trusted to match answers to requests)."""
        transport = await self._connect(timeout_ms)
        correlation_id = next(self._correlation_ids) & 0x7FFFFFFF
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[correlation_id] = (future, response_type, request.API_KEY, version)
        transport.write(
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

    def _complete(self, frame: bytearray) -> None:
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
        transport, self._transport = self._transport, None
        if transport is not None:
            with contextlib.suppress(Exception):
                transport.close()
