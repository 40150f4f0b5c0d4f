"""The asyncio shell: accept connections, cut frames, dispatch to handlers, write responses in order.

Requests on one connection are handled one at a time and answered in the order they came (as Kafka
does: a connection is muted while its request is in progress, so a long-polling fetch delays only
its own connection). While a request is handled the connection is not read, so a pipelining client
is held back by TCP, not by our memory. Everything a peer can get wrong ends at ``dispatch``: a
malformed frame closes that connection with a log line; an unsupported API or version is answered
with UNSUPPORTED_VERSION where the protocol allows it; everyone else keeps being served.

What a connection may hold is bounded (the rules are in ``connection_budget.py``, the bounds in
``base/limits.py``): at most ``pending_requests_per_connection_max`` requests are cut from what was
read before they are answered; a connection whose unsent answers exceed its bound, or exceed a
reserve while the broker as a whole is over its budget, is not read until they drain; a Fetch
answer is cut to what the connection may still buffer. A periodic check closes connections idle
for ``connections.max.idle.ms`` and connections whose request trickles in slower than
``request_receive_ms_max`` (slowloris), with rate-limited warnings.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import signal
import ssl
import struct
import time
import types
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import TYPE_CHECKING, Any, cast

from strom.base import limits
from strom.base.clock import Clock, SystemClock
from strom.base.log_limits import RateLimitFilter
from strom.broker import handlers
from strom.broker.config import BrokerConfig
from strom.broker.connection_budget import (
    BudgetLimits,
    ConnectionAccount,
    ConnectionBudget,
    OverdueReason,
)
from strom.broker.context import RequestContext
from strom.broker.handlers.consumer_groups import CONSUMER_PROTOCOL_API_KEYS
from strom.broker.listener_security import ListenerSecurity, check_cluster_listener, listener_security
from strom.broker.listeners import format_listener
from strom.broker.loop_lag import LoopLagMonitor
from strom.broker.metrics import (
    FETCH_API_KEY,
    FETCH_CONSUMER,
    FETCH_FOLLOWER,
    FETCH_REPLICA_STATE_MIN_VERSION,
    ConnectionTimes,
    MetricsServer,
    bind_connection_times,
)
from strom.broker.quotas import set_throttle_time
from strom.broker.registry import handler_table
from strom.broker.request_stream import SCRATCH_BYTES, RequestStream
from strom.broker.scram_store import FileScramStore, ZooKeeperScramStore
from strom.broker.state import BrokerState
from strom.broker.tls_server import TlsServer
from strom.protocol.errors import ErrorCode
from strom.protocol.framing import FrameDecoder, FrameTooLargeError
from strom.protocol.headers import (
    decode_request_body,
    encode_response,
    encode_response_buffers,
    read_request_header,
)
from strom.protocol.messages.api_versions import ApiVersionsRequest
from strom.protocol.primitives import Blob, DecodeError
from strom.security.principal import ANONYMOUS, KafkaPrincipal
from strom.security.sasl import SaslAuthenticator, SaslState
from strom.security.x500 import certificate_principal

if TYPE_CHECKING:
    from asyncio import Transport

    from strom.broker.cluster.runtime import ClusterReplication

log = logging.getLogger("strom.broker")
# Lines about what a peer did wrong (malformed frames, oversize requests): the peer must not decide
# how much the broker writes to its log, so this logger is rate-limited.
peer_log = logging.getLogger("strom.broker.peer")
peer_log.addFilter(RateLimitFilter(limits.peer_fault_log_lines_per_s, limits.peer_fault_log_lines_burst))

# Connections are looked over for idleness and slow requests this often, relative to the shortest
# of those bounds (and at most every limits.connection_check_interval_ms_max).
CONNECTION_CHECKS_PER_BOUND = 10
CONNECTION_CHECK_INTERVAL_MS_MIN = 10
API_VERSIONS_KEY = ApiVersionsRequest.API_KEY
_FRAME_SIZE = struct.Struct(">i")  # the size prefix of every answer frame (which does not count itself)
_FRAME_SIZE_BYTES = _FRAME_SIZE.size
# Answers of a read up to this size are joined into one buffer before they are written (copying
# them costs less than handing the transport many small buffers); larger ones go by reference.
_JOIN_ANSWERS_BYTES_MAX = 256 * 1024
# APIs whose handler may wait before answering: Produce (fsync), Fetch (long poll), OffsetCommit
# (write + fsync), JoinGroup and SyncGroup (parked), DeleteRecords, DeleteGroups, OffsetDelete,
# ConsumerGroupHeartbeat (the group's records written).
MAY_WAIT_API_KEYS = frozenset({0, 1, 8, 11, 14, 21, 42, 47, 68})
# Produce and Fetch carry records: too bulky to log whole even at debug level.
QUIET_API_KEYS = frozenset({0, 1})


class CloseConnection(Exception):
    """The peer sent something we cannot answer; the connection is closed (after a log line)."""


class CloseAfterAnswer(Exception):
    """The request is answered, then the connection is closed (a failed SASL authentication)."""

    def __init__(self, answer: list[Blob], reason: str) -> None:
        super().__init__(reason)
        self.answer = answer


# The first bytes of a TLS record carrying a handshake (content type 22, version 3.x), read as a
# frame's size prefix: what a TLS client sends first to a plaintext listener.
_TLS_HANDSHAKE_PREFIX = 0x1603


class _ConnectionSecurity:
    """A connection of an SSL, SASL_PLAINTEXT or SASL_SSL listener: who it is, its SASL state."""

    __slots__ = ("principal", "sasl", "security")

    def __init__(
        self, security: ListenerSecurity, principal: KafkaPrincipal, sasl: SaslAuthenticator | None
    ) -> None:
        self.security = security
        self.principal = principal
        self.sasl = sasl


class _PendingAnswers:
    """Answer frames (as buffers) made but not yet written, and their size in bytes."""

    __slots__ = ("answers", "bytes")

    def __init__(self) -> None:
        self.answers: list[Blob] = []
        self.bytes = 0

    def clear(self) -> None:
        self.answers.clear()
        self.bytes = 0


class _OpenConnection:
    """What the periodic connection check needs to know about a connection, and to close it."""

    __slots__ = ("account", "client_host", "decoder", "transport")

    def __init__(
        self, account: ConnectionAccount, transport: Transport, decoder: FrameDecoder, client_host: str
    ) -> None:
        self.account = account
        self.transport = transport
        self.decoder = decoder
        self.client_host = client_host


@types.coroutine
def _resume(handling: Coroutine[Any, Any, Any], suspended_on: Any) -> Generator[Any, Any, Any]:
    """Go on awaiting a coroutine that was started by hand and suspended on ``suspended_on``:
    what the task sends or throws in is passed on, as ``await`` would."""
    while True:
        try:
            value = yield suspended_on
        except GeneratorExit:
            handling.close()
            raise
        except BaseException as error:
            try:
                suspended_on = handling.throw(error)
            except StopIteration as finished:
                return finished.value
        else:
            try:
                suspended_on = handling.send(value)
            except StopIteration as finished:
                return finished.value


def join_cluster(state: BrokerState) -> ClusterReplication:
    """Make ``state`` a broker of a cluster: its replication, its append hook, its waits."""
    from strom.broker.cluster.runtime import ClusterReplication, ClusterSettings

    cluster = ClusterReplication(state, ClusterSettings.from_config(state.config))
    state.cluster = cluster
    state.replication = cluster
    state.notify_append = cluster.on_append
    state.separate_replica_waits()
    return cluster


def budget_limits(config: BrokerConfig) -> BudgetLimits:
    """The connection bounds: ``base/limits.py`` and ``connections.max.idle.ms`` (-1: no idle limit)."""
    idle_ms: int | None = config.get_int("connections.max.idle.ms")
    if idle_ms is not None and idle_ms <= 0:
        idle_ms = None
    receive_ms = (
        limits.request_receive_ms_max if idle_ms is None else min(limits.request_receive_ms_max, idle_ms)
    )
    return BudgetLimits(
        connection_unsent_bytes_max=limits.connection_unsent_bytes_max,
        connection_unsent_bytes_resume=limits.connection_unsent_bytes_resume,
        broker_held_bytes_max=limits.broker_held_bytes_max,
        connection_held_bytes_reserved=limits.connection_held_bytes_reserved,
        idle_ms=idle_ms,
        request_receive_ms_max=receive_ms,
    )


class BrokerServer:
    def __init__(
        self, config: BrokerConfig, clock: Clock | None = None, metrics_port: int | None = None
    ) -> None:
        handlers.register_all()
        self.config = config
        self.state = BrokerState(config, clock or SystemClock())
        # A broker of a cluster (--zookeeper): replication for real, and the cluster's own APIs.
        self.cluster = join_cluster(self.state) if config.is_set("zookeeper.connect") else None
        self.handlers = handler_table(self.cluster is not None)
        if "consumer" not in self.state.groups.config.rebalance_protocols:
            # group.coordinator.rebalance.protocols without consumer: KIP-848's APIs are neither
            # served nor advertised (clients fall back to, or report, the classic protocol).
            self.handlers = {
                key: handler
                for key, handler in self.handlers.items()
                if key not in CONSUMER_PROTOCOL_API_KEYS
            }
        # SCRAM credentials (loaded at start) and what each non-PLAINTEXT listener asks of its
        # connections; a missing or unreadable keystore stops the broker here.
        self.scram_store: FileScramStore | ZooKeeperScramStore = (
            FileScramStore(config.data_dir) if self.cluster is None else ZooKeeperScramStore(self.cluster)
        )
        self.state.scram_credentials = self.scram_store
        self._security: dict[str, ListenerSecurity] = {}
        check_cluster_listener(config)
        for endpoint in config.listeners():
            security = listener_security(config, endpoint, self.scram_store.credential)
            if security is not None:
                self._security[endpoint.listener] = security
        self.add_scram: list[tuple[str, str, str, int]] = []  # strom broker --add-scram, applied at start
        self.state.handlers = self.handlers
        self.metrics = self.state.metrics
        # The metrics page listens on the host of the first listener (every interface if it has none).
        self._metrics_server = (
            MetricsServer(self.metrics, self.state, config.listeners()[0].host, metrics_port)
            if metrics_port is not None
            else None
        )
        self._servers: list[Any] = []  # asyncio.Server, or TlsServer for SSL and SASL_SSL listeners
        self._connection_ids = itertools.count(1)
        self._connections: set[asyncio.Task[None]] = set()
        self._background: list[asyncio.Task[None]] = []
        self._budget = ConnectionBudget(budget_limits(config))
        self.metrics.connection_budget = self._budget
        self._open: dict[int, _OpenConnection] = {}
        # Where every connection's reads land before they are cut into frames (one for all of them).
        self._read_scratch = memoryview(bytearray(SCRATCH_BYTES))
        self._connection_checks: asyncio.Task[None] | None = None
        self.loop_lag = LoopLagMonitor()

    async def start(self) -> None:
        self.state.load()
        if isinstance(self.scram_store, FileScramStore):
            self.scram_store.load()
            await self._add_scram()
        bound_ports: dict[str, int] = {}
        try:
            for listener in self.config.listeners():
                security = self._security.get(listener.listener)
                server: Any
                streams = functools.partial(
                    RequestStream,
                    functools.partial(self._serve_connection, listener=listener.listener),
                    self.config.frame_bytes_max,
                    scratch=self._read_scratch,
                )
                if security is not None and security.ssl_context is not None:
                    server = TlsServer(
                        streams,
                        security.ssl_context,
                        functools.partial(self._handshake_failed, listener.listener),
                    )
                    self._servers.append(server)
                    await server.start(listener.host or None, listener.port)
                else:
                    server = await asyncio.get_running_loop().create_server(
                        streams,
                        listener.host or None,  # an empty host: every interface
                        listener.port,
                        reuse_address=True,
                    )
                    self._servers.append(server)
                sockets: list[Any] = list(server.sockets or [])
                bound_ports[listener.listener] = int(sockets[0].getsockname()[1])
        except OSError:
            for server in self._servers:
                server.close()
            self._servers.clear()
            raise
        advertised = self.config.advertised_listeners(bound_ports)
        self.state.advertised = {endpoint.listener: endpoint for endpoint in advertised}
        for server, endpoint in zip(self._servers, advertised, strict=True):
            bound = ", ".join(str(sock.getsockname()[:2]) for sock in server.sockets or [])
            log.info(
                "strom broker %d listening on %s, advertised as %s, data in %s",
                self.state.node_id,
                bound,
                format_listener(endpoint),
                self.config.data_dir,
            )
        if self.cluster is not None:
            try:
                await self.cluster.start()  # registers the advertised listeners bound above
            except BaseException:
                for server in self._servers:
                    server.close()
                    await server.wait_closed()
                self._servers.clear()
                self.state.close()
                raise
        if isinstance(self.scram_store, ZooKeeperScramStore):
            await self.scram_store.load()
            await self._add_scram()
        self.state.groups.start(load=self.cluster is None)
        self.state.transactions.start(load=self.cluster is None)
        if self._metrics_server is not None:
            await self._metrics_server.start()
        for interval_key, work, what in (
            ("log.retention.check.interval.ms", self.state.run_housekeeping, "housekeeping"),
            ("log.cleaner.backoff.ms", self.state.run_cleaner, "log cleaning"),
            ("log.flush.scheduler.interval.ms", self.state.flush_due, "scheduled flush"),
        ):
            self._background.append(asyncio.create_task(self._every(interval_key, work, what)))
        self._background.append(asyncio.create_task(self.loop_lag.run()))

    async def _add_scram(self) -> None:
        for mechanism, user, password, iterations in self.add_scram:
            await self.scram_store.add_password(mechanism, user, password, iterations)
            log.info("stored %s credentials of user %s (--add-scram)", mechanism, user)

    @property
    def port(self) -> int:
        """The port of the first listener."""
        assert self._servers and self._servers[0].sockets
        return int(self._servers[0].sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if not self._servers:
            return
        log.info("strom broker shutting down")
        if self.cluster is not None:
            await self.cluster.stop()
        for server in self._servers:
            server.close()
        if self._metrics_server is not None:
            await self._metrics_server.stop()
        for task in [*self._background, *self._connections]:
            task.cancel()
        await asyncio.gather(*self._background, *self._connections, return_exceptions=True)
        for server in self._servers:
            await server.wait_closed()
        self._servers.clear()
        self.state.close()  # makes every log durable with one sync of the file system
        log.info("strom broker stopped")

    async def serve_until_signalled(self) -> None:
        await self.start()
        loop = asyncio.get_running_loop()
        stop_requested = asyncio.Event()
        for signal_number in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signal_number, stop_requested.set)
        await stop_requested.wait()
        if self.cluster is not None:
            await self.cluster.controlled_shutdown()
        await self.stop()

    # -- background work --------------------------------------------------------------------------

    async def _every(self, interval_key: str, work: Callable[[], Awaitable[None]], what: str) -> None:
        """``work`` every ``interval_key`` ms, for as long as the broker runs; a failure is logged
        and the work tried again at the next interval."""
        interval_s = self.config.get_int(interval_key) / 1000
        while True:
            await asyncio.sleep(interval_s)
            try:
                await work()
            except Exception:
                log.exception("%s failed; will retry at the next interval", what)

    # -- connections ------------------------------------------------------------------------------

    def _serve_connection(self, stream: RequestStream, listener: str = "PLAINTEXT") -> None:
        """A connection was made (accepted, and over TLS its handshake done): its loop starts, in
        a task stop() cancels."""
        task = asyncio.create_task(self._connection_loop(stream, listener))
        self._connections.add(task)
        task.add_done_callback(functools.partial(self._connection_ended, stream))

    def _connection_ended(self, stream: RequestStream, task: asyncio.Task[None]) -> None:
        self._connections.discard(task)
        if stream.writer is not None and not stream.writer.is_closing():
            stream.writer.close()  # a loop cancelled before it began (the broker stopping) closed nothing

    async def _connection_loop(self, stream: RequestStream, listener: str = "PLAINTEXT") -> None:
        writer = stream.writer
        assert writer is not None
        connection_id = next(self._connection_ids)
        peer = writer.get_extra_info("peername")
        client_host = str(peer[0]) if peer else "?"
        dispatch: Callable[..., Coroutine[Any, Any, list[Blob] | None]] = self._dispatch
        security = self._security.get(listener)
        if security is not None:
            secured = self._secure(writer, security)
            dispatch = functools.partial(self._dispatch_secured, secured)
        decoder = stream.decoder
        metrics = self.metrics
        budget = self._budget
        bounds = budget.limits
        transport: Any = writer.transport
        unsent_bytes = transport.get_write_buffer_size
        # drain() now waits while more than the bound is unsent, until it is back at the resume level.
        transport.set_write_buffer_limits(
            high=bounds.connection_unsent_bytes_max, low=bounds.connection_unsent_bytes_resume
        )
        account = budget.open(connection_id)
        self._open[connection_id] = _OpenConnection(account, transport, decoder, client_host)
        self._start_connection_checks()
        frames_max = limits.pending_requests_per_connection_max
        reserved_bytes = bounds.connection_held_bytes_reserved
        metrics.connections_open += 1
        metrics.connections_total += 1
        # Where each request's time goes (queue / local / remote / response queue / send): the
        # clock is read once per read, around each request, and once per write of answers.
        times = ConnectionTimes()
        bind_connection_times(times)
        clock = time.perf_counter
        pending = _PendingAnswers()
        quota_mutes = self.state.quotas.muted_until_ms  # connections muted by a quota (KIP-219)

        def flush() -> None:
            """A request's handler is about to wait: the answers made before it go out now."""
            if pending.answers:
                self._send_answers(writer, pending, times)

        try:
            while True:
                # Within the reserve a connection is never muted; the budget is asked only above it
                # (and once on the way down, so the broker-wide total learns it shrank).
                unsent = unsent_bytes()
                if (unsent > reserved_bytes or account.unsent_bytes > reserved_bytes) and budget.must_drain(
                    account, unsent
                ):
                    await self._drain(writer, account)
                if quota_mutes and connection_id in quota_mutes:
                    await self._quota_mute(connection_id, account)
                frames, received_bytes = await self._next_frames(stream, frames_max)
                metrics.bytes_in_total += received_bytes
                if not frames:
                    break
                received = clock()
                while frames:
                    account.handling = True
                    # The answers to the requests in one read go out in one write: pipelining
                    # clients (heartbeats, metadata, one-record produces) then cost one syscall per
                    # read, not per request. Answers already made are written before a request
                    # actually waits (a long poll, a parked join, an fsync: its handler suspends),
                    # so no answer waits behind a later request. Before a request that may wait,
                    # or once a reserve's worth of answers piled up, the connection's budget is
                    # checked (counting the answers not yet written as unsent): it may have to
                    # drain first, and a Fetch is cut to what it may still buffer.
                    pending.clear()
                    allowance = bounds.connection_unsent_bytes_max  # only a Fetch uses it, after a check
                    try:
                        for frame in frames:
                            if quota_mutes and connection_id in quota_mutes:
                                if pending.answers:
                                    self._send_answers(writer, pending, times)
                                await self._quota_mute(connection_id, account)
                            may_wait = (frame[0] << 8 | frame[1]) in MAY_WAIT_API_KEYS
                            if may_wait or pending.bytes > reserved_bytes:
                                if pending.bytes > reserved_bytes:
                                    self._send_answers(writer, pending, times)
                                if budget.must_drain(account, unsent_bytes() + pending.bytes):
                                    if pending.answers:
                                        self._send_answers(writer, pending, times)
                                    await self._drain(writer, account)
                                allowance = budget.response_allowance(account)
                            response = await dispatch(
                                frame,
                                client_host,
                                connection_id,
                                allowance,
                                listener,
                                received,
                                times,
                                flush if may_wait else None,
                            )
                            if response is not None:
                                pending.answers.extend(response)
                                pending.bytes += _FRAME_SIZE.unpack_from(response[0])[0] + _FRAME_SIZE_BYTES
                    except CloseAfterAnswer as closing:
                        pending.answers.extend(closing.answer)
                        pending.bytes += sum(len(blob) for blob in closing.answer)
                        raise CloseConnection(str(closing)) from None
                    finally:
                        # Requests answered before one that closes the connection still get their answers.
                        if pending.answers:
                            self._send_answers(writer, pending, times)
                    account.handling = False
                    if len(frames) < frames_max:
                        break
                    # The read held more requests than a connection may have unanswered: the rest
                    # were left in the stream, and are answered before the connection is read again.
                    frames = stream.take_frames(frames_max)
        except CloseConnection as error:
            peer_log.warning("closing connection %d from %s: %s", connection_id, client_host, error)
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
            self.state.quotas.forget(connection_id)
            budget.close(account)
            del self._open[connection_id]
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    @staticmethod
    async def _next_frames(
        stream: RequestStream, frames_max: int
    ) -> tuple[list[bytearray | memoryview], int]:
        """The next complete frames (at most ``frames_max``; none at the end of the stream) and the
        bytes received with them; a malformed stream closes the connection."""
        try:
            return await stream.next_frames(frames_max)
        except FrameTooLargeError as error:
            if error.size_bytes >> 16 == _TLS_HANDSHAKE_PREFIX:
                raise CloseConnection(
                    "a TLS handshake on a listener without TLS (the client uses SSL or SASL_SSL, the"
                    " listener does not)"
                ) from None
            raise CloseConnection(str(error)) from None
        except DecodeError as error:
            raise CloseConnection(f"malformed frame: {error}") from None

    async def _drain(self, writer: asyncio.StreamWriter, account: ConnectionAccount) -> None:
        """The connection is muted (not read, no request of it handled) until its unsent answers are
        down to what its budget asks; a peer that never reads keeps it muted until it is idle."""
        budget = self._budget
        bounds = budget.limits
        transport: Any = writer.transport
        while (target := budget.drain_target(account)) is not None:
            if transport.is_closing():
                raise ConnectionResetError("connection closed while its answers were draining")
            budget.mute(account)
            transport.set_write_buffer_limits(high=target, low=target)
            try:
                await writer.drain()  # returns once no more than ``target`` bytes are left unsent
            finally:
                budget.unmute(account)
                if not transport.is_closing():  # a closed uvloop transport refuses any call
                    transport.set_write_buffer_limits(
                        high=bounds.connection_unsent_bytes_max, low=bounds.connection_unsent_bytes_resume
                    )
            if transport.is_closing():
                raise ConnectionResetError("connection closed while its answers were draining")
            budget.must_drain(account, transport.get_write_buffer_size())  # records what is left

    def _send_answers(
        self, writer: asyncio.StreamWriter, pending: _PendingAnswers, times: ConnectionTimes
    ) -> None:
        """Write the answers collected so far in one call and empty ``pending``."""
        outgoing = pending.answers
        if writer.is_closing():
            # The peer reset the connection while its request was handled (a parked join, a long
            # poll): nobody is left to answer, and writing would raise.
            pending.clear()
            times.unsent.clear()
            raise ConnectionResetError("the peer closed the connection")
        sending = time.perf_counter()
        if pending.bytes <= _JOIN_ANSWERS_BYTES_MAX:
            # One buffer is much cheaper for the transport than many small ones.
            writer.write(b"".join(outgoing))
        else:
            writer.writelines(outgoing)  # the large blobs (fetched batches) are not copied
        sent = time.perf_counter()
        self.metrics.bytes_out_total += pending.bytes
        pending.clear()
        for request_metrics, received, started, ended, remote in times.unsent:
            request_metrics.observe(received, started, ended, remote, sending, sent)
        times.unsent.clear()

    # -- idle and slow connections ------------------------------------------------------------------

    def _start_connection_checks(self) -> None:
        """The periodic check starts with the first connection and is stopped with the background tasks."""
        if self._connection_checks is None:
            self._connection_checks = asyncio.create_task(self._connection_check_loop())
            self._background.append(self._connection_checks)

    def connection_check_interval_ms(self) -> int:
        bounds = self._budget.limits
        shortest_ms = min(bounds.request_receive_ms_max, bounds.idle_ms or bounds.request_receive_ms_max)
        return max(
            min(shortest_ms // CONNECTION_CHECKS_PER_BOUND, limits.connection_check_interval_ms_max),
            CONNECTION_CHECK_INTERVAL_MS_MIN,
        )

    async def _connection_check_loop(self) -> None:
        interval_s = self.connection_check_interval_ms() / 1000
        while True:
            await asyncio.sleep(interval_s)
            try:
                self._check_connections()
            except Exception:
                log.exception("connection check failed; will retry")

    def _check_connections(self) -> None:
        """Refresh what every connection holds; close the idle ones and those too slow to send a request."""
        now_ms = self.state.clock.monotonic_ms()
        budget = self._budget
        for connection in list(self._open.values()):
            if connection.transport.is_closing():
                continue
            decoder = connection.decoder
            reason = budget.observe(
                connection.account,
                now_ms,
                unsent_bytes=connection.transport.get_write_buffer_size(),
                partial_bytes=decoder.buffered_bytes,
                bytes_received=decoder.bytes_total,
                requests_received=decoder.frames_total,
            )
            if reason is None:
                continue
            account = connection.account
            self.metrics.connections_closed_total[reason.value] += 1
            if reason is OverdueReason.IDLE:
                log.debug(
                    "closing connection %d from %s: idle for %d ms (connections.max.idle.ms)",
                    account.connection_id,
                    connection.client_host,
                    budget.limits.idle_ms,
                )
            else:
                peer_log.warning(
                    "closing connection %d from %s: a request has been arriving for more than the"
                    " %d ms allowed",
                    account.connection_id,
                    connection.client_host,
                    budget.limits.request_receive_ms_max,
                )
            connection.transport.abort()

    async def _dispatch(
        self,
        frame: bytes | bytearray | memoryview,
        client_host: str,
        connection_id: int,
        response_bytes_max: int = limits.connection_unsent_bytes_max,
        listener: str = "PLAINTEXT",
        received: float | None = None,
        times: ConnectionTimes | None = None,
        before_wait: Callable[[], None] | None = None,
        principal: KafkaPrincipal = ANONYMOUS,
        sasl: SaslAuthenticator | None = None,
    ) -> list[Blob] | None:
        """Handle one request frame; the response frame as buffers, or None when there is none.
        ``received`` is when the read that completed the frame returned; the request's times are
        kept in ``times`` until its answer is written (``_send_answers``). ``before_wait`` (given for
        the APIs that may wait) is called if the handler does not finish at once, before it is
        awaited."""
        try:
            api_key, version, correlation_id, client_id, body_offset = read_request_header(frame)
        except DecodeError as error:
            raise CloseConnection(f"malformed request header: {error}") from None
        handler = self.handlers.get(api_key)
        if handler is None or not handler.min_version <= version <= handler.max_version:
            return self._unsupported(api_key, version, correlation_id)
        try:
            request, trailing_bytes = decode_request_body(handler.request_type, frame, body_offset, version)
        except DecodeError as error:
            raise CloseConnection(f"malformed {handler.name} v{version} request: {error}") from None
        if trailing_bytes:
            # Kafka ignores bytes after a complete body, and librdkafka 2.15/2.16 sends some.
            log.debug(
                "connection %d %s v%d: ignoring %d bytes after the request body",
                connection_id,
                handler.name,
                version,
                trailing_bytes,
            )
        context = RequestContext(
            self.state,
            api_key,
            version,
            correlation_id,
            client_id,
            client_host,
            connection_id,
            response_bytes_max,
            listener,
            principal,
            sasl,
        )
        state = self.state
        name = handler.name
        if api_key == FETCH_API_KEY:
            replica_id = (
                request.replica_state.replica_id
                if version >= FETCH_REPLICA_STATE_MIN_VERSION
                else request.replica_id
            )
            name = FETCH_FOLLOWER if replica_id >= 0 else FETCH_CONSUMER
        metrics = self.metrics
        request_metrics = metrics.requests.get(name) or metrics.request_metrics(name, handler.max_version)
        request_metrics.requests_by_version[version] += 1
        if times is None:
            times = ConnectionTimes()
        times.remote_s = 0.0
        started = time.perf_counter()
        if received is None:
            received = started
        busy_until: float | None = None  # when a handler that waited first suspended
        if before_wait is None:
            response = await handler.handle(context, request)
        else:
            # The handler of a request that may wait is driven by hand: most finish without ever
            # suspending, and only one that does is awaited, after the answers made before it
            # are written.
            handling = cast("Coroutine[Any, Any, Any]", handler.handle(context, request))
            try:
                suspended_on = handling.send(None)
            except StopIteration as finished:
                response = finished.value
            else:
                busy_until = time.perf_counter()
                try:
                    before_wait()
                except BaseException:
                    handling.close()
                    raise
                response = await _resume(handling, suspended_on)
        ended = time.perf_counter()
        metrics.count_response(state, request_metrics, api_key, version, request, response)
        if log.isEnabledFor(logging.DEBUG) and handler.api_key not in QUIET_API_KEYS:
            log.debug(
                "connection %d %s v%d: %r -> %r", connection_id, handler.name, version, request, response
            )
        if response is None:
            request_metrics.observe(received, started, ended, times.remote_s, ended, ended)
            if state.quotas.active:  # acks=0 produce: no answer, but the mute still applies
                self._charge_quotas(context, len(frame), None, 0, ended - started, False)
            return None
        times.unsent.append((request_metrics, received, started, ended, times.remote_s))
        answer = encode_response_buffers(correlation_id, api_key, version, response)
        if state.quotas.active and self._charge_quotas(
            context,
            len(frame),
            response,
            _FRAME_SIZE.unpack_from(answer[0])[0],
            (busy_until or ended) - started,
            name == FETCH_FOLLOWER,
        ):
            answer = encode_response_buffers(correlation_id, api_key, version, response)  # throttled
        return answer

    def _charge_quotas(
        self,
        context: RequestContext,
        request_bytes: int,
        response: Any,
        answer_bytes: int,
        busy_s: float,
        follower: bool,
    ) -> bool:
        """Charge a request to its client's quotas (``broker/quotas.py``). Over quota, the connection
        is muted for the throttle time (KIP-219) and the answer carries it: True when ``response``
        was changed so."""
        quotas = self.state.quotas
        throttle_ms = quotas.charge(
            context.principal.name,
            context.client_id,
            context.api_key,
            request_bytes,
            answer_bytes,
            busy_s,
            follower,
        )
        if not throttle_ms:
            return False
        quotas.mute(context.connection_id, throttle_ms)
        return set_throttle_time(response, throttle_ms)

    async def _quota_mute(self, connection_id: int, account: ConnectionAccount) -> None:
        """Wait out the connection's quota mute: it is not read and none of its requests is handled."""
        quotas = self.state.quotas
        handling = account.handling
        account.handling = True  # neither idle nor a slow request while muted
        try:
            while (left_ms := quotas.mute_left_ms(connection_id)) > 0:
                await asyncio.sleep(left_ms / 1000)
        finally:
            account.handling = handling

    # -- TLS and SASL ----------------------------------------------------------------------------------

    def _handshake_failed(self, listener: str, client_host: str, error: BaseException) -> None:
        """A rate-limited line: a warning when the peer spoke something else than TLS or showed no
        acceptable certificate, information when it just went away during the handshake."""
        self.metrics.connections_closed_total["tls_handshake_failed"] += 1
        level = (
            logging.INFO if isinstance(error, (ConnectionResetError, ssl.SSLEOFError)) else logging.WARNING
        )
        peer_log.log(
            level,
            "closing a connection from %s: TLS handshake on listener %s failed: %s",
            client_host,
            listener,
            str(error) or type(error).__name__,
        )

    @staticmethod
    def _secure(writer: asyncio.StreamWriter, security: ListenerSecurity) -> _ConnectionSecurity:
        """The identity a connection of a secured listener starts with: on an SSL listener the
        subject of the client certificate it showed (User:ANONYMOUS without one); on a SASL
        listener none until it authenticates."""
        principal = ANONYMOUS
        if security.ssl_context is not None and security.sasl is None:
            ssl_object: Any = writer.get_extra_info("ssl_object")
            certificate = ssl_object.getpeercert() if ssl_object is not None else None
            subject = certificate.get("subject") if certificate else None
            principal = certificate_principal(subject) or ANONYMOUS
        sasl = SaslAuthenticator(security.sasl) if security.sasl is not None else None
        return _ConnectionSecurity(security, principal, sasl)

    async def _dispatch_secured(
        self,
        secured: _ConnectionSecurity,
        frame: bytes | bytearray | memoryview,
        client_host: str,
        connection_id: int,
        response_bytes_max: int = limits.connection_unsent_bytes_max,
        listener: str = "PLAINTEXT",
        received: float | None = None,
        times: ConnectionTimes | None = None,
        before_wait: Callable[[], None] | None = None,
    ) -> list[Blob] | None:
        """``_dispatch`` for a connection of a secured listener: SASL's gate before the request
        (only ApiVersions, SaslHandshake and SaslAuthenticate before authentication; nothing once
        the session expired), the connection's principal in the request's context."""
        sasl = secured.sasl
        if sasl is None:
            return await self._dispatch(
                frame, client_host, connection_id, response_bytes_max, listener, received, times,
                before_wait, secured.principal,
            )  # fmt: skip
        if sasl.expects_raw_tokens:
            return await self._raw_sasl_token(secured, sasl, frame)
        refusal = sasl.refusal(frame[0] << 8 | frame[1], self.state.clock.monotonic_ms())
        if refusal is not None:
            raise CloseConnection(refusal)
        response = await self._dispatch(
            frame, client_host, connection_id, response_bytes_max, listener, received, times,
            before_wait, sasl.principal or ANONYMOUS, sasl,
        )  # fmt: skip
        if sasl.state is SaslState.FAILED:
            raise CloseAfterAnswer(response or [], f"SASL authentication failed ({sasl.failure})")
        return response

    async def _raw_sasl_token(
        self, secured: _ConnectionSecurity, sasl: SaslAuthenticator, frame: bytes | bytearray | memoryview
    ) -> list[Blob]:
        """After SaslHandshake v0 the frames are bare SASL tokens, answered with bare tokens; a
        failure closes the connection after connection.failed.authentication.delay.ms."""
        await self.state.scram_credentials.wait_loaded()
        answer = sasl.authenticate(bytes(frame), self.state.clock.monotonic_ms())
        if answer.failed:
            await asyncio.sleep(secured.security.failed_authentication_delay_ms / 1000)
            raise CloseConnection(f"SASL authentication failed ({answer.failure})")
        return [_FRAME_SIZE.pack(len(answer.token)) + answer.token]

    def _unsupported(self, api_key: int, version: int, correlation_id: int) -> list[Blob]:
        """Answer an API or version we do not implement the way Kafka does.

        ApiVersions: a v0 response with UNSUPPORTED_VERSION and our version table, so the client
        retries with a version we have. Other APIs: if the response schema exists at that version,
        a response whose top-level error code says UNSUPPORTED_VERSION; otherwise the connection
        is closed (there is no way to frame an answer the client could parse).
        """
        if api_key == API_VERSIONS_KEY:
            body = handlers.api_versions.build_response(
                ErrorCode.UNSUPPORTED_VERSION, 0, self.handlers
            ).encode(0)
            return [encode_response(correlation_id, api_key, 0, body)]
        handler = self.handlers.get(api_key)
        response_type: Any = handler.response_type if handler else None
        if response_type is not None and response_type.MIN_VERSION <= version <= response_type.MAX_VERSION:
            response = response_type()
            if hasattr(response, "error_code"):
                response.error_code = ErrorCode.UNSUPPORTED_VERSION
                return encode_response_buffers(correlation_id, api_key, version, response)
        raise CloseConnection(f"unsupported API key {api_key} version {version}")
