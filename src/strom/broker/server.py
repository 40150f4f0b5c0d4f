"""The asyncio shell: accept connections, cut frames, dispatch to handlers, write responses in order.

Requests on one connection are handled one at a time and answered in the order they came (as Kafka
does: a connection is muted while its request is in progress, so a long-polling fetch delays only
its own connection). While a request is handled the connection is not read, so a pipelining client
is held back by TCP, not by our memory. Everything a peer can get wrong ends at ``dispatch``: a
malformed frame closes that connection with a log line; an unsupported API or version is answered
with UNSUPPORTED_VERSION where the protocol allows it; everyone else keeps being served.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import signal
import time
from typing import Any

from strom.base.clock import Clock, SystemClock
from strom.broker import handlers
from strom.broker.config import BrokerConfig
from strom.broker.context import RequestContext
from strom.broker.loop_lag import LoopLagMonitor
from strom.broker.metrics import BrokerMetrics, MetricsServer
from strom.broker.registry import HANDLERS
from strom.broker.state import BrokerState
from strom.protocol.errors import ErrorCode
from strom.protocol.framing import FrameDecoder, FrameTooLargeError
from strom.protocol.headers import decode_request_header, encode_response, encode_response_buffers
from strom.protocol.messages.api_versions import ApiVersionsRequest
from strom.protocol.primitives import Blob, DecodeError

log = logging.getLogger("strom.broker")

READ_CHUNK_BYTES = 256 * 1024
# Above this many buffered response bytes we wait for the socket to drain before reading more.
WRITE_BUFFER_BYTES_HIGH = 8 * 1024 * 1024
API_VERSIONS_KEY = ApiVersionsRequest.API_KEY
# APIs whose handler may wait before answering: Produce (fsync), Fetch (long poll), OffsetCommit
# (write + fsync), JoinGroup and SyncGroup (parked), DeleteRecords, DeleteGroups, OffsetDelete.
MAY_WAIT_API_KEYS = frozenset({0, 1, 8, 11, 14, 21, 42, 47})
# Produce and Fetch carry records: too bulky to log whole even at debug level.
QUIET_API_KEYS = frozenset({0, 1})


class CloseConnection(Exception):
    """The peer sent something we cannot answer; the connection is closed (after a log line)."""


class BrokerServer:
    def __init__(
        self, config: BrokerConfig, clock: Clock | None = None, metrics_port: int | None = None
    ) -> None:
        self.config = config
        self.state = BrokerState(config, clock or SystemClock())
        self.metrics = BrokerMetrics()
        self._metrics_server = (
            MetricsServer(self.metrics, self.state, config.host, metrics_port)
            if metrics_port is not None
            else None
        )
        self._server: asyncio.Server | None = None
        self._connection_ids = itertools.count(1)
        self._connections: set[asyncio.Task[None]] = set()
        self._background: list[asyncio.Task[None]] = []
        self.loop_lag = LoopLagMonitor()
        handlers.register_all()

    async def start(self) -> None:
        self.state.load()
        self._server = await asyncio.start_server(
            self._serve_connection, self.config.host, self.config.port, reuse_address=True
        )
        sockets: list[Any] = list(self._server.sockets or [])
        bound = ", ".join(str(sock.getsockname()[:2]) for sock in sockets)
        log.info(
            "strom broker %d listening on %s, data in %s", self.state.node_id, bound, self.config.data_dir
        )
        self.state.groups.start()
        if self._metrics_server is not None:
            await self._metrics_server.start()
        self._background.append(asyncio.create_task(self._housekeeping_loop()))
        self._background.append(asyncio.create_task(self._flush_loop()))
        self._background.append(asyncio.create_task(self.loop_lag.run()))

    @property
    def port(self) -> int:
        assert self._server is not None and self._server.sockets
        return int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self._server is None:
            return
        log.info("strom broker shutting down")
        self._server.close()
        if self._metrics_server is not None:
            await self._metrics_server.stop()
        for task in [*self._background, *self._connections]:
            task.cancel()
        await asyncio.gather(*self._background, *self._connections, return_exceptions=True)
        await self._server.wait_closed()
        self._server = None
        self.state.close()  # makes every log durable with one sync of the file system
        log.info("strom broker stopped")

    async def serve_until_signalled(self) -> None:
        await self.start()
        loop = asyncio.get_running_loop()
        stop_requested = asyncio.Event()
        for signal_number in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signal_number, stop_requested.set)
        await stop_requested.wait()
        await self.stop()

    # -- background work --------------------------------------------------------------------------

    async def _housekeeping_loop(self) -> None:
        interval_s = self.config.get_int("log.retention.check.interval.ms") / 1000
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.state.run_housekeeping()
            except Exception:
                log.exception("housekeeping failed; will retry at the next interval")

    async def _flush_loop(self) -> None:
        interval_s = self.config.get_int("log.flush.scheduler.interval.ms") / 1000
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.state.flush_due()
            except Exception:
                log.exception("scheduled flush failed; will retry")

    # -- connections ------------------------------------------------------------------------------

    async def _serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # The connection runs in a task of our own so that stop() can cancel it without the
        # streams machinery logging the cancellation of its callback task as an error.
        task = asyncio.create_task(self._connection_loop(reader, writer))
        self._connections.add(task)
        try:
            await task
        except asyncio.CancelledError:
            pass
        finally:
            self._connections.discard(task)

    async def _connection_loop(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection_id = next(self._connection_ids)
        peer = writer.get_extra_info("peername")
        client_host = str(peer[0]) if peer else "?"
        decoder = FrameDecoder(self.config.frame_bytes_max)
        metrics = self.metrics
        metrics.connections_open += 1
        metrics.connections_total += 1
        try:
            while True:
                data = await reader.read(READ_CHUNK_BYTES)
                if not data:
                    break
                metrics.bytes_in_total += len(data)
                try:
                    frames = decoder.feed(data)
                except FrameTooLargeError as error:
                    log.warning("closing connection %d from %s: %s", connection_id, client_host, error)
                    break
                except DecodeError as error:
                    log.warning(
                        "closing connection %d from %s: malformed frame: %s",
                        connection_id,
                        client_host,
                        error,
                    )
                    break
                # The answers to the requests in one read go out in one write: pipelining clients
                # (heartbeats, metadata) then cost one syscall per read, not per request. Answers
                # already made are written before a request that may wait (a long poll, a parked
                # join, an fsync), so no answer waits behind a later request.
                outgoing: list[Blob] = []
                try:
                    for frame in frames:
                        if (
                            outgoing
                            and len(frame) >= 2
                            and int.from_bytes(frame[:2], "big") in MAY_WAIT_API_KEYS
                        ):
                            self._send_answers(writer, outgoing)
                        response = await self._dispatch(frame, client_host, connection_id)
                        if response is not None:
                            outgoing.extend(response)
                finally:
                    # Requests answered before one that closes the connection still get their answers.
                    if outgoing:
                        self._send_answers(writer, outgoing)
                if writer.transport.get_write_buffer_size() > WRITE_BUFFER_BYTES_HIGH:
                    await writer.drain()
        except CloseConnection as error:
            log.warning("closing connection %d from %s: %s", connection_id, client_host, error)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception(
                "closing connection %d from %s after an unexpected error", connection_id, client_host
            )
        finally:
            metrics.connections_open -= 1
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def _send_answers(self, writer: asyncio.StreamWriter, outgoing: list[Blob]) -> None:
        """Write the answers collected so far in one call and empty the list."""
        writer.writelines(outgoing)
        self.metrics.bytes_out_total += sum(map(len, outgoing))
        outgoing.clear()

    async def _dispatch(
        self, frame: bytes | bytearray | memoryview, client_host: str, connection_id: int
    ) -> list[Blob] | None:
        """Handle one request frame; the response frame as buffers, or None when there is none."""
        try:
            header, body_offset = decode_request_header(frame)
        except DecodeError as error:
            raise CloseConnection(f"malformed request header: {error}") from None
        api_key, version, correlation_id = (
            header.request_api_key,
            header.request_api_version,
            header.correlation_id,
        )
        handler = HANDLERS.get(api_key)
        if handler is None or not handler.min_version <= version <= handler.max_version:
            return self._unsupported(api_key, version, correlation_id)
        try:
            request = handler.request_type.decode(  # type: ignore[attr-defined]
                memoryview(frame)[body_offset:], version
            )
        except DecodeError as error:
            raise CloseConnection(f"malformed {handler.name} v{version} request: {error}") from None
        context = RequestContext(
            broker=self.state,
            api_key=api_key,
            api_version=version,
            correlation_id=correlation_id,
            client_id=header.client_id,
            client_host=client_host,
            connection_id=connection_id,
        )
        started = time.perf_counter()
        response = await handler.handle(context, request)
        self.metrics.observe_request(handler.name, version, time.perf_counter() - started)
        if log.isEnabledFor(logging.DEBUG) and handler.api_key not in QUIET_API_KEYS:
            log.debug(
                "connection %d %s v%d: %r -> %r", connection_id, handler.name, version, request, response
            )
        if response is None:
            return None
        return encode_response_buffers(correlation_id, api_key, version, response)

    def _unsupported(self, api_key: int, version: int, correlation_id: int) -> list[Blob]:
        """Answer an API or version we do not implement the way Kafka does.

        ApiVersions: a v0 response with UNSUPPORTED_VERSION and our version table, so the client
        retries with a version we have. Other APIs: if the response schema exists at that version,
        a response whose top-level error code says UNSUPPORTED_VERSION; otherwise the connection
        is closed (there is no way to frame an answer the client could parse).
        """
        if api_key == API_VERSIONS_KEY:
            body = handlers.api_versions.build_response(ErrorCode.UNSUPPORTED_VERSION, 0).encode(0)
            return [encode_response(correlation_id, api_key, 0, body)]
        handler = HANDLERS.get(api_key)
        response_type: Any = handler.response_type if handler else None
        if response_type is not None and response_type.MIN_VERSION <= version <= response_type.MAX_VERSION:
            response = response_type()
            if hasattr(response, "error_code"):
                response.error_code = ErrorCode.UNSUPPORTED_VERSION
                return encode_response_buffers(correlation_id, api_key, version, response)
        raise CloseConnection(f"unsupported API key {api_key} version {version}")
