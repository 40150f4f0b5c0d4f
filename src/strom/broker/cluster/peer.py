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

Every connection goes to the other broker's endpoint of the inter-broker listener
(``inter.broker.listener.name``) with that listener's security (``InterBrokerSecurity``): over
TLS when it is SSL or SASL_SSL (this broker's keystore as its client certificate), and on a SASL
listener logged in (``strom.security.sasl_client``, the exchange strom's client runs) before its
first request, and again before the session the other broker granted runs out
(``connections.max.reauth.ms``). A PLAINTEXT listener's connections do none of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import ssl
import time
from typing import Any

from strom.base import limits
from strom.broker.listener_security import InterBrokerSecurity
from strom.cluster.model import BrokerRegistration
from strom.protocol.framing import FrameReceiver
from strom.protocol.headers import decode_response_header, encode_request
from strom.protocol.messages.sasl_authenticate import SaslAuthenticateResponse
from strom.protocol.messages.sasl_handshake import SaslHandshakeResponse
from strom.protocol.primitives import DecodeError
from strom.security.sasl_client import SaslClient, SaslClientError

log = logging.getLogger("strom.broker.cluster")

SASL_HANDSHAKE_VERSION = 1
SASL_AUTHENTICATE_VERSION = 2
# Log in again when this much of the session the other broker granted has passed (Kafka's
# clients pick 85-95 %); the rest leaves time for the exchange on a loaded machine.
REAUTHENTICATE_AT_LIFETIME_FRACTION = 0.85
# A failure to log in to (or to trust) another broker is a warning, at most once this often per
# broker address: a fetcher tries again every few hundred milliseconds.
SECURITY_FAILURE_LOG_INTERVAL_S = 30.0
_last_security_failure_logged: dict[tuple[str, int], float] = {}


class PeerError(Exception):
    """The peer could not be reached, or the connection broke (the request's outcome is unknown)."""


class PeerSecurityError(PeerError):
    """The other broker refused this broker's login or certificate, or showed one this broker does
    not trust: trying again does not help until a setting changes."""


def _warn_security_failure(host: str, port: int, message: str) -> None:
    now = time.monotonic()
    last = _last_security_failure_logged.get((host, port))
    if last is not None and now - last < SECURITY_FAILURE_LOG_INTERVAL_S:
        return
    _last_security_failure_logged[(host, port)] = now
    log.warning("%s", message)


class PeerDialer:
    """Where and how this broker connects to another: the endpoint of the inter-broker listener
    in its registration, with that listener's security."""

    def __init__(self, security: InterBrokerSecurity | None = None) -> None:
        self.security = security if security is not None and not security.plaintext else None
        self.listener = security.listener if security is not None else None

    def address(self, broker: BrokerRegistration) -> tuple[str, int]:
        """``broker``'s endpoint of the inter-broker listener; its registration's host and port
        when it has none of that name (what a LeaderAndIsr's live leaders carry)."""
        if self.listener is not None:
            for endpoint in broker.endpoints:
                if endpoint.listener == self.listener:
                    return endpoint.host, endpoint.port
        return broker.host, broker.port

    def connection(self, host: str, port: int, client_id: str) -> PeerConnection:
        return PeerConnection(host, port, client_id, self.security)


PLAINTEXT_DIALER = PeerDialer()


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
        owner.close(owner.refused_tls() or PeerError(f"{owner.host}:{owner.port} closed the connection"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        owner = self._owner
        reason = f"failed: {exc}" if exc is not None else "closed"
        owner.close(owner.refused_tls(exc) or PeerError(f"connection to {owner.host}:{owner.port} {reason}"))


class PeerConnection:
    def __init__(
        self, host: str, port: int, client_id: str, security: InterBrokerSecurity | None = None
    ) -> None:
        self.host = host
        self.port = port
        self._client_id = client_id
        self._security = security
        # When to log in again (the event loop's clock), None: never (not SASL, or no lifetime).
        self._reauthenticate_at: float | None = None
        self.logins = 0  # SASL exchanges completed on this connection
        self.answers = 0  # answers received on this connection
        self.established = False  # connected (and through the TLS handshake)
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
                if self._reauthenticate_at is not None:
                    await self._login(self._transport, timeout_ms)
                return self._transport
            loop = asyncio.get_running_loop()
            security = self._security
            context = security.ssl_context if security is not None else None
            try:
                async with asyncio.timeout(timeout_ms / 1000):
                    if context is None:
                        transport, _reader = await loop.create_connection(
                            lambda: _AnswerReader(self), self.host, self.port
                        )
                    else:
                        transport, _reader = await loop.create_connection(
                            lambda: _AnswerReader(self),
                            self.host,
                            self.port,
                            ssl=context,
                            server_hostname=self.host,
                            ssl_handshake_timeout=limits.tls_handshake_ms_max / 1000,
                        )
            except ssl.SSLCertVerificationError as error:
                assert security is not None
                failure: PeerError = PeerSecurityError(
                    f"cannot connect to {self.host}:{self.port} over TLS ({security.describe()}): the other"
                    f" broker's certificate is not trusted: {error.verify_message or error} (its CA must be"
                    " in the listener's ssl.truststore; ssl.endpoint.identification.algorithm= skips the"
                    " host name check)"
                )
                self._closed_error = failure
                _warn_security_failure(self.host, self.port, str(failure))
                raise failure from None
            except (OSError, TimeoutError) as error:
                failure = PeerError(f"cannot connect to {self.host}:{self.port}: {error or 'timed out'}")
                self._closed_error = failure
                raise failure from None
            if self._closed_error is not None:  # closed while connecting (a fetcher gave it up)
                transport.close()
                raise self._closed_error
            self.established = True
            if security is not None and security.sasl_mechanism is not None:
                # Due at once: requests of others wait for this lock (see ``request``) until logged in.
                self._reauthenticate_at = loop.time()
                self._transport = transport
                try:
                    await self._login(transport, timeout_ms)
                except BaseException:
                    # Half logged in (an answer lost, or this task cancelled): unusable.
                    self.close(PeerError(f"logging in to {self.host}:{self.port} did not finish"))
                    raise
            self._transport = transport
            return transport

    async def _login(self, transport: asyncio.Transport, timeout_ms: int) -> None:
        """The SASL exchange on ``transport`` (new, or due to re-authenticate), when it is due."""
        security = self._security
        assert security is not None and security.sasl_mechanism is not None
        loop = asyncio.get_running_loop()
        if self._reauthenticate_at is None or loop.time() < self._reauthenticate_at:
            return
        client = SaslClient(security.sasl_mechanism, security.sasl_username, security.sasl_password)
        request: Any = client.start()
        response_type: Any = SaslHandshakeResponse
        version = SASL_HANDSHAKE_VERSION
        try:
            while request is not None:
                response = await self._exchange(transport, request, version, response_type, timeout_ms)
                response_type, version = SaslAuthenticateResponse, SASL_AUTHENTICATE_VERSION
                if client.hashes_next:  # PBKDF2 off the loop, which serves clients meanwhile
                    request = await asyncio.to_thread(client.receive, response)
                else:
                    request = client.receive(response)
        except SaslClientError as error:
            failure = PeerSecurityError(
                f"cannot log in to the broker at {self.host}:{self.port} ({security.describe()}): {error}"
            )
            self.close(failure)
            _warn_security_failure(self.host, self.port, str(failure))
            raise failure from None
        self.logins += 1
        lifetime_ms = client.session_lifetime_ms
        self._reauthenticate_at = (
            loop.time() + lifetime_ms * REAUTHENTICATE_AT_LIFETIME_FRACTION / 1000
            if lifetime_ms > 0
            else None
        )

    async def _exchange(
        self, transport: asyncio.Transport, request: Any, version: int, response_type: Any, timeout_ms: int
    ) -> Any:
        if self._closed_error is not None:
            raise self._closed_error
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

    async def open(self, timeout_ms: int) -> None:
        """Connect (and log in) now rather than at the first request; PeerError as ``request``."""
        await self._connect(timeout_ms)

    async def request(self, request: Any, version: int, response_type: Any, timeout_ms: int) -> Any:
        """Send ``request`` at ``version``; its decoded answer, or PeerError (connection failed,
        or no answer within ``timeout_ms``: the connection is then closed, as its stream can no
        longer be trusted to match answers to requests)."""
        transport = self._transport
        if transport is None or self._reauthenticate_at is not None:
            transport = await self._connect(timeout_ms)
        return await self._exchange(transport, request, version, response_type, timeout_ms)

    def _complete(self, frame: bytearray) -> None:
        correlation_id = int.from_bytes(frame[:4], "big", signed=True)
        pending = self._pending.pop(correlation_id, None)
        if pending is None:
            return  # answered after its request timed out
        self.answers += 1
        future, response_type, api_key, version = pending
        _, body_offset = decode_response_header(frame, api_key, version)
        response = response_type.decode(memoryview(frame)[body_offset:], version)
        if not future.done():
            future.set_result(response)

    def refused_tls(self, exc: Exception | None = None) -> PeerError | None:
        """Why the other broker ended this TLS connection before its first answer, if that is
        likely its refusal of this broker's client certificate: with TLS 1.3 the handshake
        seems to succeed here, and the refusal comes later, as an alert (``exc``) or a close."""
        security = self._security
        if security is None or security.ssl_context is None or not self.established or self.answers:
            return None
        if self._closed_error is not None:
            return None  # closed on purpose first
        if isinstance(exc, ssl.SSLError) and "ALERT" in (exc.reason or ""):
            failure: PeerError = PeerSecurityError(
                f"the broker at {self.host}:{self.port} refused this broker's TLS connection ({exc.reason}):"
                f" {security.describe()}'s keystore must hold a certificate its truststore trusts"
            )
        else:
            failure = PeerError(
                f"the broker at {self.host}:{self.port} closed this broker's TLS connection before its first"
                f" answer: does it trust this broker's certificate ({security.describe()}'s keystore)?"
            )
        _warn_security_failure(self.host, self.port, str(failure))
        return failure

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
                if self._security is not None and self._security.ssl_context is not None:
                    # Every request in flight has failed: nothing to flush, and TLS's closing
                    # exchange would keep the socket open until the other broker answers it.
                    transport.abort()
                else:
                    transport.close()
