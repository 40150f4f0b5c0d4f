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
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import ssl
from collections.abc import Callable

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


class TlsServer:
    def __init__(
        self,
        protocol_factory: ProtocolFactory,
        context: ssl.SSLContext,
        on_handshake_failed: Callable[[str, BaseException], None],
    ) -> None:
        self._protocol_factory = protocol_factory
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
            await loop.connect_accepted_socket(
                self._protocol_factory,
                connection,
                ssl=self._context,
                ssl_handshake_timeout=max(deadline - loop.time(), _HANDSHAKE_TIMEOUT_MIN_S),
            )
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
