"""The I/O shell: one background thread per client object running an asyncio event loop that
owns every socket, the broker channels on top of the sans-I/O ``Connection``, and the metadata
refresh. Public client methods stay synchronous and hand work to the loop with ``LoopThread``.

Security (docs/security.md): with security.protocol SSL or SASL_SSL the connection is TLS (one
``ssl.SSLContext`` per client, from ``strom.client.security``); with SASL_PLAINTEXT or SASL_SSL the
channel authenticates after ApiVersions and before it is handed out, and again before the session
lifetime the broker gave runs out. A refused login or a failed TLS handshake is an
``AuthenticationError``: not retried within the call, so the caller hears it at once. A plaintext
client pays nothing for any of this per request.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import random
import ssl
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar, cast

import uvloop

from strom.base.clock import Clock, SystemClock
from strom.client.cluster import ClusterMetadata
from strom.client.config import ClientConfig, parse_bootstrap
from strom.client.connection import Completion, Connection
from strom.client.errors import (
    AuthenticationError,
    ClientClosedError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    UnsupportedVersionError,
    error_for_code,
)
from strom.client.security import SaslAuthenticator, describe_tls_failure, ssl_context
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.metadata import MetadataRequest

__all__ = ["BrokerChannel", "LoopThread", "ResponseCallback", "Transport"]

log = logging.getLogger(__name__)

T = TypeVar("T")

# What ``BrokerChannel.send_nowait`` calls with a request's answer: (response, None) or (None, error).
ResponseCallback = Callable[[Any, KafkaError | None], None]


def _describe_os_error(error: OSError | TimeoutError) -> str:
    """An OS-level connect failure in words ("connection refused"), without asyncio's wrapping."""
    if isinstance(error, ConnectionRefusedError):
        return "connection refused"
    if isinstance(error, TimeoutError):
        return "no answer to the connection attempt"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror[:1].lower() + error.strerror[1:]
    return str(error)


def _retrieve_exception(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()


class LoopThread:
    """A daemon thread running one asyncio event loop until ``stop()``: uvloop's, as the broker's
    (its loop, transports and TLS layer are compiled; asyncio's run in Python for every callback)."""

    def __init__(self, name: str) -> None:
        self.loop = uvloop.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            with contextlib.suppress(Exception):
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

    @property
    def in_loop_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def run(self, coroutine: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        """Run ``coroutine`` on the loop and wait for its result from another thread."""
        assert not self.in_loop_thread, "LoopThread.run() from the loop thread would deadlock"
        future = self.submit(coroutine)
        started = time.monotonic()
        try:
            return future.result(timeout_s)
        except TimeoutError:
            # concurrent.futures.TimeoutError is the builtin TimeoutError: it is this wait's own
            # timeout only if the coroutine is still running; otherwise the coroutine raised it.
            if future.done():
                raise
            future.cancel()
            raise KafkaTimeoutError(
                f"operation did not complete within {time.monotonic() - started:.1f} s"
            ) from None

    def run_or_stop(self, coroutine: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        """``run``, stopping the thread if the coroutine fails: a client whose constructor fails
        (a certificate that does not load) leaves no loop thread behind."""
        try:
            return self.run(coroutine, timeout_s)
        except BaseException:
            self.stop()
            raise

    def call_soon(self, callback: Callable[..., object], *args: object) -> None:
        self.loop.call_soon_threadsafe(callback, *args)

    def stop(self, join_timeout_s: float = 5.0) -> None:
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            if not self.in_loop_thread:
                self._thread.join(join_timeout_s)


# How long closing a client waits for its TLS connections' close_notify exchange before dropping them.
_TLS_CLOSE_WAIT_S = 1.0

# When to re-authenticate, as a fraction of the session lifetime the broker gave (KIP-368): a
# random point in this range, so the connections of many clients do not all re-authenticate at once.
_REAUTHENTICATE_AT_LIFETIME_FRACTION = (0.85, 0.95)


class BrokerChannel(asyncio.BufferedProtocol):
    """One TCP connection to a broker: a ``Connection`` fed by asyncio's protocol callbacks."""

    def __init__(
        self,
        node_id: int,
        host: str,
        port: int,
        config: ClientConfig,
        authenticator: Callable[[], SaslAuthenticator] | None = None,
    ) -> None:
        self.node_id = node_id
        self.host = host
        self.port = port
        self.config = config
        self.connection = Connection(config.client_id, config.receive_message_max_bytes)
        # SASL: makes one exchange; None on a connection that does not authenticate.
        self._authenticator = authenticator
        # While set, the channel re-authenticates and requests wait for it (KIP-368).
        self._reauthenticating: asyncio.Future[None] | None = None
        self._reauthentication_timer: asyncio.TimerHandle | None = None
        self._reauthentication_task: asyncio.Task[None] | None = None
        self._transport: asyncio.Transport | None = None
        self._ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # Resolved when asyncio reports the socket gone (a TLS close ends after its close_notify).
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.closed = False
        self._writable = asyncio.Event()
        self._writable.set()
        # request() calls waiting for the socket's buffer to drain (send_nowait() defers to them).
        self._write_waiters = 0

    # -- asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not registered as asyncio.Transport, though they are one.
        self._transport = cast("asyncio.Transport", transport)
        self._transport.write(self.connection.handshake())

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.connection.read_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self._received(*self.connection.bytes_read(nbytes))

    def data_received(self, data: bytes | memoryview) -> None:
        """Bytes read elsewhere (the event loop reads into ``get_buffer``)."""
        self._received(*self.connection.receive_data(data))

    def _received(self, completions: list[Completion], outgoing: bytes) -> None:
        if outgoing and self._transport is not None:
            self._transport.write(outgoing)
        self._deliver(completions)
        if self.connection.closed_error is not None:
            self._fail(self.connection.closed_error)
        elif self.connection.ready and not self._ready.done():
            self._ready.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(None)
        if self.config.uses_tls and not self._ready.done() and (exc is None or isinstance(exc, ssl.SSLError)):
            # In TLS 1.3 the client's side of the handshake ends before the broker has checked
            # the client's certificate: a broker refusing it (or its absence) closes the
            # connection, with an alert or without a word, before answering anything.
            reason = (
                describe_tls_failure(exc, self.config)
                if exc is not None
                else "it closed the connection before answering ApiVersions; a broker that requires a "
                "client certificate (ssl.client.auth=required) does this when none is given "
                "(ssl.certificate.location, ssl.key.location) or it does not trust the one given"
            )
            self._fail(
                AuthenticationError(
                    f"TLS connection to broker {self.node_id} ({self.host}:{self.port}) refused: {reason}"
                )
            )
            return
        hint = ""
        if not self._ready.done() and not self.config.uses_tls:
            # A TLS listener closes on the plaintext ApiVersions request without a word.
            hint = (
                f" before it answered ApiVersions (if the listener uses TLS, security.protocol must be "
                f"SSL or SASL_SSL, not {self.config.security_protocol})"
            )
        self._fail(
            KafkaConnectionError(
                f"connection to broker {self.node_id} ({self.host}:{self.port}) lost{hint}: {exc}"
            )
        )

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    # -- use -----------------------------------------------------------------------------------

    async def wait_ready(self) -> None:
        """Until the ApiVersions handshake is done and, on a SASL connection, authenticated."""
        await self._ready
        if self._authenticator is not None:
            await self._authenticate()

    async def _authenticate(self) -> None:
        """One SASL exchange on this connection (sans-I/O ``SaslAuthenticator`` driven here)."""
        assert self._authenticator is not None
        authenticator = self._authenticator()
        try:
            request: Any = authenticator.start()
            while request is not None:
                response = await self._exchange(request)
                if authenticator.hashes_next:
                    # PBKDF2 releases the interpreter lock: in a worker thread it leaves the loop
                    # free to serve the client's other connections meanwhile.
                    request = await asyncio.get_running_loop().run_in_executor(
                        None, authenticator.receive, response
                    )
                else:
                    request = authenticator.receive(response)
        except UnsupportedVersionError as error:
            raise AuthenticationError(
                f"broker {self.node_id} ({self.host}:{self.port}) cannot authenticate this client: {error} "
                "(is the listener SASL_PLAINTEXT or SASL_SSL?)"
            ) from None
        log.debug(
            "authenticated to broker %d as %r with %s (session lifetime %d ms)",
            self.node_id,
            authenticator.username,
            authenticator.mechanism,
            authenticator.session_lifetime_ms,
        )
        if authenticator.session_lifetime_ms > 0 and not self.closed:
            fraction = random.uniform(*_REAUTHENTICATE_AT_LIFETIME_FRACTION)
            self._reauthentication_timer = asyncio.get_running_loop().call_later(
                authenticator.session_lifetime_ms * fraction / 1000, self._start_reauthentication
            )

    def _start_reauthentication(self) -> None:
        self._reauthentication_timer = None
        if self.closed:
            return
        self._reauthenticating = asyncio.get_running_loop().create_future()
        self._reauthentication_task = asyncio.ensure_future(self._reauthenticate())

    async def _reauthenticate(self) -> None:
        """KIP-368: the same exchange again on the open connection. Requests sent before it are
        answered first (a broker answers a connection's requests in order); later ones wait."""
        try:
            async with asyncio.timeout(self.config.request_timeout_ms / 1000):
                await self._authenticate()
        except TimeoutError:
            self._fail(KafkaConnectionError(f"re-authentication to broker {self.node_id} timed out"))
        except KafkaError as error:
            log.warning("re-authentication to broker %d failed: %s", self.node_id, error)
            self._fail(error)
        finally:
            gate, self._reauthenticating = self._reauthenticating, None
            if gate is not None and not gate.done():
                gate.set_result(None)

    @property
    def in_flight(self) -> int:
        return self.connection.in_flight

    async def request(self, request: Any, *, expect_response: bool = True) -> Any:
        """Send ``request`` and wait for its response (None when ``expect_response`` is False)."""
        if self._reauthenticating is not None:
            await asyncio.shield(self._reauthenticating)
        if self.closed or self._transport is None:
            raise KafkaConnectionError(f"connection to broker {self.node_id} is closed")
        if not self._writable.is_set():
            self._write_waiters += 1
            try:
                await self._writable.wait()
            finally:
                self._write_waiters -= 1
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        frame = self.connection.send(request, future, expect_response=expect_response)
        self._transport.write(frame)
        if not expect_response:
            return None
        return await future

    def send_nowait(self, request: Any, callback: ResponseCallback | None) -> bool:
        """Write ``request`` now, without a task, a future or a timer: its answer (or the error that
        ends the exchange, a lost connection included) goes to ``callback(response, error)`` on
        the loop thread; with no callback none is expected (Produce with acks=0). False, and
        nothing written, when the channel cannot take it at once (closed, re-authenticating,
        the socket's buffer full): the caller then uses ``request()``. Timing out is the caller's:
        ``close()`` fails every exchange in flight. The producer's per-request path."""
        transport = self._transport
        if (
            self._reauthenticating is not None
            or self.closed
            or transport is None
            or self._write_waiters  # requests waiting to be written go first: order is kept
            or not self._writable.is_set()
        ):
            return False
        transport.write(self.connection.send(request, callback, expect_response=callback is not None))
        return True

    async def _exchange(self, request: Any) -> Any:
        """One request of a SASL exchange: past the gate that holds other requests back while the
        channel re-authenticates (``request`` stays one coroutine, with no extra layer)."""
        if self.closed or self._transport is None:
            raise KafkaConnectionError(f"connection to broker {self.node_id} is closed")
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._transport.write(self.connection.send(request, future))
        return await future

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
        self._fail(KafkaConnectionError(f"connection to broker {self.node_id} closed"))
        if self._reauthentication_task is not None:
            self._reauthentication_task.cancel()

    def abort(self) -> None:
        """Drop the socket now (a TLS close that is still waiting for the broker's close_notify)."""
        if self._transport is not None and not self.lost.done():
            self._transport.abort()

    def _deliver(self, completions: list[Completion]) -> None:
        for completion in completions:
            token = completion.token
            if token is None:
                continue
            if not isinstance(token, asyncio.Future):  # send_nowait()'s callback
                try:
                    token(completion.response, completion.error)
                except Exception:
                    log.exception("response callback of broker %d raised", self.node_id)
                continue
            if token.done():
                continue
            if completion.error is not None:
                token.set_exception(completion.error)
            else:
                token.set_result(completion.response)

    def _fail(self, error: KafkaError) -> None:
        if self.closed:
            return
        self.closed = True
        if self._reauthentication_timer is not None:
            self._reauthentication_timer.cancel()
            self._reauthentication_timer = None
        self._deliver(self.connection.connection_lost(error))
        if not self._ready.done():
            self._ready.set_exception(error)
            self._ready.exception()  # retrieved here so an unawaited failure logs nothing
        if self._transport is not None:
            self._transport.close()


class Transport:
    """Connections by node id, cluster metadata, reconnect backoff. Lives on the loop thread."""

    def __init__(
        self, config: ClientConfig, *, clock: Clock | None = None, allow_auto_topic_creation: bool = False
    ) -> None:
        self.config = config
        self.clock = clock or SystemClock()
        self.metadata = ClusterMetadata(config.metadata_max_age_ms)
        self.allow_auto_topic_creation = allow_auto_topic_creation
        # Bootstrap servers get negative node ids until Metadata tells their real ones.
        self._bootstrap = {
            -1 - index: address for index, address in enumerate(parse_bootstrap(config.bootstrap_servers))
        }
        # Addresses under ids of the caller's choosing (a group coordinator gets its own connection
        # so group requests never queue behind fetches).
        self._extra_addresses: dict[int, tuple[str, int]] = {}
        self._channels: dict[int, BrokerChannel] = {}
        self._connecting: dict[int, asyncio.Task[BrokerChannel]] = {}
        self._failures: dict[int, int] = {}
        # Why the last connection attempt to each node failed, for the message of a later timeout.
        self._last_error_by_node: dict[int, KafkaError] = {}
        self._last_connection_error: KafkaError | None = None
        self._retry_at_ms: dict[int, int] = {}
        self._metadata_task: asyncio.Task[None] | None = None
        # Every Metadata request in flight: one outlives its waiter when the waiter times out, and
        # close() cancels it (a task left pending when the loop stops is destroyed mid-request).
        self._refresh_tasks: set[asyncio.Task[None]] = set()
        self.closed = False
        # Built once per client: loading certificates per connection would cost every reconnect.
        self._ssl_context = ssl_context(config) if config.uses_tls else None
        self._authenticator: Callable[[], SaslAuthenticator] | None = None
        if config.uses_sasl:
            assert config.sasl_mechanism is not None and config.sasl_username is not None
            self._authenticator = functools.partial(
                SaslAuthenticator, config.sasl_mechanism, config.sasl_username, config.sasl_password or ""
            )
        # The last refused login or failed TLS handshake, until a connection succeeds: a consumer's
        # poll() raises it (its fetches and metadata run on the loop, away from the caller).
        self.authentication_error: AuthenticationError | None = None
        # TLS connections whose socket is not gone yet: close() waits for their close_notify.
        self._tls_channels: set[BrokerChannel] = set()

    # -- connections ---------------------------------------------------------------------------

    def register_address(self, node_id: int, host: str, port: int) -> None:
        """Connect to ``host:port`` when asked for ``node_id`` (an id outside the brokers' ids)."""
        if self._extra_addresses.get(node_id) != (host, port):
            self._extra_addresses[node_id] = (host, port)
            channel = self._channels.pop(node_id, None)
            if channel is not None:
                channel.close()

    def _address(self, node_id: int) -> tuple[str, int]:
        extra = self._extra_addresses.get(node_id)
        if extra is not None:
            return extra
        broker = self.metadata.brokers.get(node_id)
        if broker is not None:
            return broker.host, broker.port
        address = self._bootstrap.get(node_id)
        if address is None:
            raise KafkaConnectionError(f"no address known for broker {node_id}")
        return address

    def ready_channel(self, node_id: int) -> BrokerChannel | None:
        channel = self._channels.get(node_id)
        if channel is None or channel.closed:
            return None
        return channel

    async def channel(self, node_id: int) -> BrokerChannel:
        """A ready connection to ``node_id``, connecting (after any backoff) when there is none."""
        if self.closed:
            raise ClientClosedError("client is closed")
        channel = self.ready_channel(node_id)
        if channel is not None:
            return channel
        task = self._connecting.get(node_id)
        if task is None:
            task = asyncio.ensure_future(self._connect(node_id))
            self._connecting[node_id] = task
            task.add_done_callback(functools.partial(self._connect_done, node_id))
        return await asyncio.shield(task)

    def _connect_done(self, node_id: int, task: asyncio.Task[BrokerChannel]) -> None:
        self._connecting.pop(node_id, None)
        # Whoever awaited the attempt may have given up (their timeout); the failure is kept in
        # _last_error_by_node, so reading it here only stops asyncio from logging it as lost.
        _retrieve_exception(task)

    async def _connect(self, node_id: int) -> BrokerChannel:
        wait_ms = self._retry_at_ms.get(node_id, 0) - self.clock.monotonic_ms()
        if wait_ms > 0:
            await asyncio.sleep(wait_ms / 1000)
        host, port = self._address(node_id)
        loop = asyncio.get_running_loop()
        timeout_s = self.config.socket_connection_setup_timeout_ms / 1000
        channel: BrokerChannel | None = None
        try:
            async with asyncio.timeout(timeout_s):
                if self._ssl_context is None:
                    _, channel = await loop.create_connection(
                        lambda: BrokerChannel(node_id, host, port, self.config, self._authenticator),
                        host,
                        port,
                    )
                else:
                    _, channel = await loop.create_connection(
                        lambda: BrokerChannel(node_id, host, port, self.config, self._authenticator),
                        host,
                        port,
                        ssl=self._ssl_context,
                        server_hostname=host,
                        ssl_handshake_timeout=timeout_s,
                    )
                    self._tls_channels.add(channel)
                    channel.lost.add_done_callback(functools.partial(self._tls_closed, channel))
                await channel.wait_ready()
        except BaseException as error:
            # Connected but never ready (the setup timed out, the attempt was cancelled, the
            # broker failed the handshake): the socket is closed here, not left to the collector.
            if channel is not None:
                channel.close()
            if not isinstance(error, OSError | TimeoutError | KafkaError):
                raise
            failures = self._failures.get(node_id, 0) + 1
            self._failures[node_id] = failures
            backoff_ms = min(
                self.config.reconnect_backoff_ms * 2 ** min(failures - 1, 16),
                self.config.reconnect_backoff_max_ms,
            )
            # Jitter so many clients do not reconnect in lockstep after a broker restart.
            backoff_ms = int(backoff_ms * random.uniform(0.8, 1.2))
            self._retry_at_ms[node_id] = self.clock.monotonic_ms() + backoff_ms
            failure: KafkaError
            if isinstance(error, KafkaError):
                failure = error
            elif isinstance(error, ssl.SSLError):
                failure = AuthenticationError(
                    f"TLS handshake with broker {node_id} at {host}:{port} failed: "
                    f"{describe_tls_failure(error, self.config)}"
                )
            elif self._closed_in_tls_handshake(error):
                # Retried, as Kafka's clients do (a broker may be restarting); the message says
                # the likelier cause.
                failure = KafkaConnectionError(
                    f"cannot connect to broker {node_id} at {host}:{port}: the broker closed the connection "
                    "during the TLS handshake (is it a TLS listener? a plaintext one closes on the TLS "
                    "client's first message)"
                )
            else:
                failure = KafkaConnectionError(
                    f"cannot connect to broker {node_id} at {host}:{port}: {_describe_os_error(error)}"
                )
            if isinstance(failure, AuthenticationError):
                self.authentication_error = failure
            self._last_error_by_node[node_id] = failure
            self._last_connection_error = failure
            if failure is error:
                raise
            raise failure from error
        if self.closed:
            channel.close()
            raise ClientClosedError("client is closed")
        self._last_error_by_node.pop(node_id, None)
        self.authentication_error = None
        self._failures.pop(node_id, None)
        self._retry_at_ms.pop(node_id, None)
        self._channels[node_id] = channel
        return channel

    def _tls_closed(self, channel: BrokerChannel, lost: asyncio.Future[None]) -> None:
        self._tls_channels.discard(channel)

    def _closed_in_tls_handshake(self, error: BaseException) -> bool:
        """A TCP connection that TLS could not start on: a reset or an early close, not a refusal."""
        return self._ssl_context is not None and isinstance(
            error, ConnectionResetError | ConnectionAbortedError
        )

    def least_loaded_node(self) -> int:
        """A broker to send a request any broker can answer: connected and least busy first."""
        candidates = list(self.metadata.brokers) or list(self._bootstrap)
        now_ms = self.clock.monotonic_ms()

        def load(node_id: int) -> tuple[int, int, int]:
            channel = self.ready_channel(node_id)
            backing_off = 1 if self._retry_at_ms.get(node_id, 0) > now_ms else 0
            return (backing_off, 0 if channel is not None else 1, channel.in_flight if channel else 0)

        return min(candidates, key=load)

    async def send(self, node_id: int, request: Any, *, timeout_ms: int | None = None) -> Any:
        """Send to one broker and wait for the response (request.timeout.ms by default)."""
        timeout_ms = self.config.request_timeout_ms if timeout_ms is None else timeout_ms
        connected = False
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                channel = await self.channel(node_id)
                connected = True
                return await channel.request(request)
        except TimeoutError:
            raise KafkaTimeoutError(self._timeout_message(node_id, request, timeout_ms, connected)) from None

    def _timeout_message(self, node_id: int, request: Any, timeout_ms: int, connected: bool) -> str:
        try:
            host, port = self._address(node_id)
            where = f"broker {node_id} at {host}:{port}" if node_id >= 0 else f"{host}:{port}"
        except KafkaError:
            where = f"broker {node_id}"
        if connected:
            return f"{type(request).__name__} to {where}: no answer within {timeout_ms} ms"
        last = self._last_error_by_node.get(node_id)
        cause = f" (last attempt: {last})" if last is not None else ""
        return f"no connection to {where} within {timeout_ms} ms{cause}"

    async def send_any(self, request: Any, *, timeout_ms: int | None = None) -> Any:
        """Send to whichever broker is least loaded; on a connection failure try the others."""
        timeout_ms = self.config.request_timeout_ms if timeout_ms is None else timeout_ms
        deadline_ms = self.clock.monotonic_ms() + timeout_ms
        last_error: KafkaError | None = None
        while True:
            remaining_ms = deadline_ms - self.clock.monotonic_ms()
            if remaining_ms <= 0:
                raise last_error or KafkaTimeoutError(f"{type(request).__name__} timed out")
            try:
                return await self.send(self.least_loaded_node(), request, timeout_ms=remaining_ms)
            except KafkaConnectionError as error:
                last_error = error
                await asyncio.sleep(self.config.retry_backoff_ms / 1000)

    async def with_retries(self, attempt: Callable[[], Awaitable[T]], timeout_ms: int | None = None) -> T:
        """Run ``attempt`` until it succeeds, retrying retriable errors, all within the timeout
        (request.timeout.ms by default): an attempt still running at the deadline is abandoned and
        ``KafkaTimeoutError`` names the last failure."""
        timeout_ms = self.config.request_timeout_ms if timeout_ms is None else timeout_ms
        last_error: KafkaError | None = None
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                while True:
                    try:
                        return await attempt()
                    except KafkaError as error:
                        if not error.retriable:
                            raise
                        last_error = error
                        if error.code is not None and error.code.invalid_metadata:
                            self.metadata.request_refresh()
                        await asyncio.sleep(self.config.retry_backoff_ms / 1000)
        except TimeoutError:
            cause = last_error or self._last_connection_error
            detail = f": {cause}" if cause is not None else ""
            raise KafkaTimeoutError(f"no answer within {timeout_ms} ms{detail}") from None

    # -- metadata ------------------------------------------------------------------------------

    async def refresh_metadata(self, topics: list[str] | None = None) -> None:
        """Fetch Metadata for ``topics`` (None: every topic). Concurrent refreshes share one request."""
        if topics is None and self._metadata_task is not None and not self._metadata_task.done():
            await asyncio.shield(self._metadata_task)
            return
        task = asyncio.ensure_future(self._refresh(topics))
        # The waiter below may give up (its own timeout) while the request goes on; its failure is
        # then nobody's to read, which asyncio would log as a lost exception.
        task.add_done_callback(_retrieve_exception)
        self._refresh_tasks.add(task)
        task.add_done_callback(self._refresh_tasks.discard)
        if topics is None:
            self._metadata_task = task
        await asyncio.shield(task)

    async def _refresh(self, topics: list[str] | None) -> None:
        request = MetadataRequest(
            topics=None
            if topics is None
            else [MetadataRequest.MetadataRequestTopic(name=name) for name in topics],
            allow_auto_topic_creation=self.allow_auto_topic_creation,
        )
        response = await self.send_any(request)
        self.metadata.update(response, self.clock.monotonic_ms(), all_topics=topics is None)

    async def refresh_wanted(self) -> None:
        """Refresh the topics callers need (or all topics when none is named)."""
        wanted = sorted(self.metadata.wanted_topics)
        await self.refresh_metadata(wanted or None)

    async def maybe_refresh(self) -> None:
        """Refresh when the view is stale (too old, or a caller saw a leader change)."""
        if self.metadata.stale(self.clock.monotonic_ms()):
            await self.refresh_wanted()

    async def wait_for_topic(self, topic: str, timeout_ms: int) -> int:
        """The partition count of ``topic``, refreshing metadata until it is known; raises
        ``KafkaTimeoutError`` (naming the last failure) after ``timeout_ms``."""
        self.metadata.wanted_topics.add(topic)
        last_error: KafkaError | None = None
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                while True:
                    count = self.metadata.partition_count(topic)
                    if count is not None:
                        return count
                    info = self.metadata.topics.get(topic)
                    if info is not None and info.error_code not in (
                        ErrorCode.NONE,
                        ErrorCode.LEADER_NOT_AVAILABLE,
                    ):
                        raise error_for_code(info.error_code, context=f"topic {topic!r}")
                    try:
                        await self.refresh_metadata(sorted(self.metadata.wanted_topics))
                    except KafkaError as error:
                        if not error.retriable:
                            raise
                        last_error = error
                    if self.metadata.partition_count(topic) is None:
                        await asyncio.sleep(self.config.retry_backoff_ms / 1000)
        except TimeoutError:
            cause = f" ({last_error})" if last_error is not None else ""
            raise KafkaTimeoutError(
                f"topic {topic!r} not present in metadata after {timeout_ms} ms{cause}"
            ) from None

    # -- shutdown ------------------------------------------------------------------------------

    async def close(self) -> None:
        self.closed = True
        # Connection attempts and Metadata requests still running are cancelled and waited for:
        # a task left pending when the client's loop stops is destroyed mid-request.
        unfinished = [*self._connecting.values(), *self._refresh_tasks]
        for task in unfinished:
            task.cancel()
        if unfinished:
            await asyncio.wait(unfinished)
        channels = list(self._channels.values())
        for channel in channels:
            channel.close()
        self._channels.clear()
        if self._tls_channels:
            # A TLS connection closes by exchanging close_notify, on the loop: the client's loop
            # stops after this, so wait for it (briefly) rather than leave sockets half closed.
            # Connections that failed to set up (a refused login) are among them.
            closing = list(self._tls_channels)
            _, pending = await asyncio.wait([channel.lost for channel in closing], timeout=_TLS_CLOSE_WAIT_S)
            for channel in closing:
                if channel.lost in pending:
                    channel.abort()
