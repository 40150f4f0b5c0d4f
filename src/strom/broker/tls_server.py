"""A listener that accepts TLS connections and hands each one to the broker once its handshake
succeeded, logging (rate-limited) the ones that fail: a plaintext client on a TLS port, an unknown
or missing client certificate, a peer that stalls.

``loop.create_server(ssl=...)`` would do the accepting, but a failed handshake there ends in
silence (the event loop logs it only in debug mode), and a handshake started later on an accepted
stream (``StreamWriter.start_tls``) stalls under uvloop; so this server accepts sockets itself and
runs each handshake with ``loop.connect_accepted_socket``, which raises when it fails. It offers
what the broker uses of ``asyncio.Server``: ``sockets``, ``close()``, ``wait_closed()``.

A connection closed before it sent its first byte is a port probe (the ``strom`` command's
reachability check, a load balancer's health check), not a failed handshake: it is closed with a
debug line only.

A failed handshake is answered with the TLS alert that says why (an unknown CA, a missing client
certificate), as Kafka's TLS layer sends it before it closes: the event loop's TLS transport drops
what OpenSSL wrote when the handshake failed and closes the socket, which leaves a client with a
bare disconnect. So the server's context makes its TLS objects of ``_KeepsFailedHandshakeOutput``,
which keeps those bytes, and this server writes them through a duplicate of the socket's
descriptor before it closes that too.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import errno
import logging
import socket
import ssl
from collections.abc import Callable
from typing import Any

from strom.base import limits

# Makes the protocol of a connection whose handshake succeeded (it serves the connection from its
# connection_made on).
ProtocolFactory = Callable[[], asyncio.BaseProtocol]
_LISTEN_BACKLOG = 100
# After an accept fails for want of descriptors (EMFILE), wait this long before accepting again.
_ACCEPT_RETRY_S = 0.1
# The least a handshake is given once its first byte came, however long that byte took.
_HANDSHAKE_TIMEOUT_MIN_S = 1.0

log = logging.getLogger("strom.broker.peer")

# The TLS objects made for the handshake the current task runs (``TlsServer._handshake``).
_HANDSHAKE_OBJECTS: contextvars.ContextVar[list[_KeepsFailedHandshakeOutput]] = contextvars.ContextVar(
    "strom_tls_handshake_objects"
)


class _KeepsFailedHandshakeOutput(ssl.SSLObject):
    """An ``SSLObject`` that keeps what OpenSSL wrote when the handshake failed (the alert), which
    the event loop's transport would drop. Its other methods are ``SSLObject``'s: only the
    handshake pays for it."""

    failed_handshake_output: bytes = b""
    _outgoing: ssl.MemoryBIO | None = None

    @classmethod
    def _create(cls, incoming: ssl.MemoryBIO, outgoing: ssl.MemoryBIO, *args: Any, **kwargs: Any) -> Any:
        made = super()._create(incoming, outgoing, *args, **kwargs)  # type: ignore[misc]
        made._outgoing = outgoing
        made_for = _HANDSHAKE_OBJECTS.get(None)
        if made_for is not None:
            made_for.append(made)
        return made

    def do_handshake(self) -> None:
        try:
            super().do_handshake()
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            raise
        except ssl.SSLError:
            if self._outgoing is not None:
                self.failed_handshake_output = self._outgoing.read()
            raise


class TlsServer:
    def __init__(
        self,
        protocol_factory: ProtocolFactory,
        context: ssl.SSLContext,
        on_handshake_failed: Callable[[str, BaseException], None],
    ) -> None:
        self._protocol_factory = protocol_factory
        context.sslobject_class = _KeepsFailedHandshakeOutput
        self._context = context
        self._on_handshake_failed = on_handshake_failed
        self.sockets: list[socket.socket] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._acceptors: list[asyncio.Task[None]] = []

    async def start(self, host: str | None, port: int) -> None:
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        try:
            for family, kind, protocol, _, address in dict.fromkeys(infos):
                listening = socket.socket(family, kind, protocol)
                self.sockets.append(listening)
                listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    listening.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                # Every address of the listener on the one port the first got (for port 0).
                bound_port = self.sockets[0].getsockname()[1] if len(self.sockets) > 1 else port
                listening.bind((address[0], bound_port, *address[2:]))
                listening.listen(_LISTEN_BACKLOG)
                listening.setblocking(False)
        except OSError:
            self.close()
            raise
        self._acceptors = [asyncio.create_task(self._accept(listening)) for listening in self.sockets]

    async def _accept(self, listening: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                connection, address = await loop.sock_accept(listening)
            except OSError as error:
                if error.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    await asyncio.sleep(_ACCEPT_RETRY_S)
                    continue
                if error.errno in (errno.ECONNABORTED, errno.EPROTO, errno.EAGAIN):
                    continue
                raise
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            task = asyncio.create_task(self._handshake(connection, str(address[0])))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _handshake(self, connection: socket.socket, client_host: str) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limits.tls_handshake_ms_max / 1000
        try:
            if not await _sends_something(connection, deadline):
                # Closed before its first byte: a port probe (``strom``'s reachability check, a
                # load balancer's health check), not a failed handshake worth a line.
                with contextlib.suppress(OSError):
                    connection.close()
                log.debug("a connection from %s closed before it sent a byte", client_host)
                return
            made: list[_KeepsFailedHandshakeOutput] = []
            _HANDSHAKE_OBJECTS.set(made)
            # The transport closes the socket when the handshake fails: this descriptor stays open
            # to send the alert then.
            spare = connection.dup()
            try:
                await loop.connect_accepted_socket(
                    self._protocol_factory,
                    connection,
                    ssl=self._context,
                    ssl_handshake_timeout=max(deadline - loop.time(), _HANDSHAKE_TIMEOUT_MIN_S),
                )
            except (OSError, ssl.SSLError, TimeoutError):
                _send_alert(spare, b"".join(made_one.failed_handshake_output for made_one in made))
                raise
            finally:
                spare.close()
        except (OSError, ssl.SSLError, TimeoutError) as error:
            with contextlib.suppress(OSError):
                connection.close()
            self._on_handshake_failed(client_host, error)

    def close(self) -> None:
        for task in [*self._acceptors, *self._tasks]:
            task.cancel()
        for listening in self.sockets:
            with contextlib.suppress(OSError):
                listening.close()

    async def wait_closed(self) -> None:
        await asyncio.gather(*self._acceptors, *self._tasks, return_exceptions=True)
        self._acceptors = []


def _send_alert(connection: socket.socket, alert: bytes) -> None:
    """The alert a failed handshake wrote (a few dozen bytes: the socket's buffer takes them at
    once), sent without waiting; a peer already gone is no matter."""
    if not alert:
        return
    with contextlib.suppress(OSError):
        connection.setblocking(False)
        connection.send(alert)


async def _sends_something(connection: socket.socket, deadline: float) -> bool:
    """Wait (until ``deadline``, then TimeoutError) until ``connection`` is readable; whether the
    peer sent a byte (peeked, left for the handshake) rather than closing or resetting it."""
    loop = asyncio.get_running_loop()
    readable: asyncio.Future[None] = loop.create_future()

    def ready() -> None:
        if not readable.done():
            readable.set_result(None)

    descriptor = connection.fileno()
    loop.add_reader(descriptor, ready)
    try:
        async with asyncio.timeout_at(deadline):
            await readable
    finally:
        loop.remove_reader(descriptor)
    try:
        return bool(connection.recv(1, socket.MSG_PEEK))
    except (BlockingIOError, InterruptedError):
        return True  # not readable after all: the handshake decides
    except OSError:
        return False  # reset before a byte
