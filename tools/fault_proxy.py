"""A fault-injecting TCP proxy on 127.0.0.1, for network partitions between brokers, ZooKeeper and
clients. Two users: the partition tests (``tests/cluster/fault_support.ProxiedCluster``) and the
fault campaign (``tools/chaos/cluster.py``).

Why a proxy and not network namespaces: every server of the tests must listen on 127.0.0.1 and
nothing may go to another address; namespaces would need veth addresses, root and ``ip netns exec``
around each broker. A proxy in the test process needs none of that, and it can cut one *link*
(a source and a destination) in one *direction* while the rest of the traffic flows.

How the brokers are put behind it: each broker opens two listeners, the first for the other
brokers and the second for clients, and advertises the proxy's port for the first one. Brokers
reach each other at the first advertised endpoint of a registration, so every byte between
brokers goes through the proxy. Each broker's ZooKeeper connect string names a proxy port of its
own, so its session can be cut alone. The partition tests let clients go straight to the brokers
(an isolated leader still takes their writes); the campaign advertises a route for the client
listener too (source ``client``), so it can cut the clients from a broker as well.

A route is a listening port in front of one destination. Its source is either fixed (a broker's
own ZooKeeper route) or learnt from the first Kafka request of the connection: strom's brokers
name themselves in the request header's client id (``strom-replica-N`` for fetchers,
``strom-controller-N`` for the controller's commands, ``strom-broker-N`` for requests to the
controller), so one route in front of broker M can cut what broker N sends M and leave the rest.

Faults, per link and direction (``FORWARD`` = what the source sends, ``BACKWARD`` = the answers):

* ``BLACKHOLE``: bytes are held (not read any further: TCP pushes back), connections stay open, new
  ones are accepted and held. Healing delivers what was held, as TCP's retransmissions would
  after a partition shorter than its give-up time; peers that gave up meanwhile have closed
  their end, and the proxy closes the other end once the held bytes are through.
* ``DROP``: bytes are read and thrown away (a lossy link); a connection that lost bytes cannot be
  trusted any more, so it is reset when the link heals.
* ``REFUSE``: connections are reset at once (an RST), and new ones as soon as their source is
  known (like a firewall's REJECT).

Everything runs on one asyncio loop in a daemon thread; the control methods are called from the
test's thread and return once the change is in effect.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import re
import socket
import struct
import threading
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")

READ_CHUNK_BYTES = 64 * 1024
# The first request of an inter-broker connection names its source; no strom request is larger.
FIRST_FRAME_BYTES_MAX = 64 * 1024 * 1024
CONTROL_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 5.0
# Stopping, the proxy looks this many times, this long apart, for connections accepted as its
# servers closed.
SHUTDOWN_SETTLE_ROUNDS = 3
SHUTDOWN_SETTLE_S = 0.02
UNKNOWN_SOURCE = "client"  # any connection that is not a strom broker's: a client
# The destination name of the routes in front of ZooKeeper, one per broker (each its own source).
ZOOKEEPER = "zookeeper"
_BROKER_CLIENT_ID = re.compile(r"strom-(?:replica|controller|broker)-(\d+)$")


class Fault(enum.Enum):
    BLACKHOLE = "blackhole"
    DROP = "drop"
    REFUSE = "refuse"


class Direction(enum.Flag):
    FORWARD = enum.auto()  # source -> destination: requests
    BACKWARD = enum.auto()  # destination -> source: answers
    BOTH = FORWARD | BACKWARD


def broker_name(node_id: int) -> str:
    return f"broker-{node_id}"


def source_of_kafka_request(frame: bytes) -> str:
    """The sender of a Kafka request frame (without its size prefix): ``broker-N`` when the client
    id is one of a strom broker's, else ``client``. Header v1/v2: api key, api version, correlation
    id, then the client id as an int16-prefixed nullable string."""
    if len(frame) < 10:
        return UNKNOWN_SOURCE
    (length,) = struct.unpack_from(">h", frame, 8)
    if length < 0 or len(frame) < 10 + length:
        return UNKNOWN_SOURCE
    client_id = frame[10 : 10 + length].decode("utf-8", "replace")
    match = _BROKER_CLIENT_ID.match(client_id)
    return broker_name(int(match.group(1))) if match else UNKNOWN_SOURCE


@dataclass
class Route:
    destination: str
    target_port: int
    source: str | None  # None: learnt from the first Kafka request
    port: int = 0
    server: asyncio.Server | None = None


@dataclass(eq=False)
class _Connection:
    route: Route
    downstream: asyncio.StreamWriter  # towards the source
    source: str = UNKNOWN_SOURCE
    upstream: asyncio.StreamWriter | None = None  # towards the destination
    lossy: bool = False
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    closed: bool = False

    @property
    def link(self) -> tuple[str, str]:
        return (self.source, self.route.destination)


def _reset(writer: asyncio.StreamWriter | None) -> None:
    """Close with an RST (SO_LINGER 0), not a FIN: the peer sees its connection reset."""
    if writer is None:
        return
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class FaultProxy:
    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fault-proxy", daemon=True)
        self._routes: list[Route] = []
        self._faults: dict[tuple[str, str, Direction], Fault] = {}
        self._connections: set[_Connection] = set()
        self._changed = asyncio.Event()
        self._stopping = False
        self.bytes_forwarded = 0
        self.bytes_dropped = 0

    # ---- control (the test's thread) ----------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if not self._thread.is_alive():
            if not self._loop.is_running():
                self._loop.close()  # never started (or stopped already: closing again is harmless)
            return
        self._call(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(CONTROL_TIMEOUT_S)
        self._loop.close()

    def __enter__(self) -> FaultProxy:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _call(self, work: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(work, self._loop).result(CONTROL_TIMEOUT_S)

    def add_route(self, destination: str, target_port: int, *, source: str | None = None) -> int:
        """Listen on a free port of 127.0.0.1 in front of ``target_port``; the port. ``source``
        fixed, or None to learn it from each connection's first Kafka request."""
        route = Route(destination, target_port, source)
        self._call(self._listen(route))
        return route.port

    def cut(self, source: str, destination: str, fault: Fault, direction: Direction = Direction.BOTH) -> None:
        """From now on, ``fault`` on the link from ``source`` to ``destination`` in ``direction``."""
        self._call(self._set(source, destination, direction, fault))

    def heal(self, source: str | None = None, destination: str | None = None) -> None:
        """Remove the faults of the links matching (None matches every name)."""
        self._call(self._heal(source, destination))

    def isolate(self, name: str, others: list[str], fault: Fault = Fault.BLACKHOLE) -> None:
        """Cut ``name`` from each of ``others``, both ways."""
        for other in others:
            self.cut(name, other, fault)
            self.cut(other, name, fault)

    def faults(self) -> dict[tuple[str, str, Direction], Fault]:
        return dict(self._faults)

    def connections(self, source: str | None = None, destination: str | None = None) -> int:
        """How many connections are open on the matching links."""
        return sum(
            1
            for connection in list(self._connections)
            if not connection.closed
            and source in (None, connection.source)
            and destination in (None, connection.route.destination)
        )

    # ---- the loop -------------------------------------------------------------------------------

    async def _listen(self, route: Route) -> None:
        route.server = await asyncio.start_server(
            lambda reader, writer: self._serve(route, reader, writer), "127.0.0.1", 0
        )
        route.port = route.server.sockets[0].getsockname()[1]
        self._routes.append(route)

    async def _shutdown(self) -> None:
        self._stopping = True
        # First stop accepting, then close the servers: a connection accepted just before becomes
        # a transport and reaches ``_serve`` a moment later (which closes it, as the proxy is
        # stopping). Closed first, the server would refuse to take that connection in, and
        # asyncio (3.11) would leave its socket to the garbage collector.
        loop = asyncio.get_running_loop()
        for route in self._routes:
            if route.server is not None:
                for listening in route.server.sockets:
                    loop.remove_reader(listening.fileno())
        await asyncio.sleep(SHUTDOWN_SETTLE_S)
        for route in self._routes:
            if route.server is not None:
                route.server.close()
        for _ in range(SHUTDOWN_SETTLE_ROUNDS):
            connections = list(self._connections)
            tasks = [task for connection in connections for task in connection.tasks]
            for connection in connections:
                self._close(connection, reset=True)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await asyncio.sleep(SHUTDOWN_SETTLE_S)
            if not self._connections:
                break

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def _set(self, source: str, destination: str, direction: Direction, fault: Fault) -> None:
        for single in (Direction.FORWARD, Direction.BACKWARD):
            if single in direction:
                self._faults[(source, destination, single)] = fault
        if fault is Fault.REFUSE:
            for connection in list(self._connections):
                if connection.link == (source, destination):
                    self._close(connection, reset=True)
        self._notify()

    async def _heal(self, source: str | None, destination: str | None) -> None:
        for key in list(self._faults):
            if source in (None, key[0]) and destination in (None, key[1]):
                del self._faults[key]
        for connection in list(self._connections):
            healed = all(
                self._fault(connection.link, d) is None for d in (Direction.FORWARD, Direction.BACKWARD)
            )
            if connection.lossy and healed:
                self._close(connection, reset=True)
        self._notify()

    def _fault(self, link: tuple[str, str], direction: Direction) -> Fault | None:
        return self._faults.get((*link, direction))

    def _close(self, connection: _Connection, *, reset: bool) -> None:
        if connection.closed:
            return
        connection.closed = True
        self._connections.discard(connection)
        for writer in (connection.downstream, connection.upstream):
            if writer is None:
                continue
            if reset:
                _reset(writer)
            else:
                with contextlib.suppress(Exception):
                    writer.close()
        current = asyncio.current_task()
        for task in connection.tasks:
            if task is not current:
                task.cancel()

    async def _serve(self, route: Route, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = _Connection(route, writer)
        if self._stopping:
            _reset(writer)
            return
        self._connections.add(connection)
        task = asyncio.current_task()
        assert task is not None
        connection.tasks.append(task)
        try:
            first = b""
            if route.source is not None:
                connection.source = route.source
            else:
                size_bytes = await reader.readexactly(4)
                (size,) = struct.unpack(">i", size_bytes)
                if not 0 <= size <= FIRST_FRAME_BYTES_MAX:
                    self._close(connection, reset=True)
                    return
                frame = await reader.readexactly(size)
                connection.source = source_of_kafka_request(frame)
                first = size_bytes + frame
            if self._fault(connection.link, Direction.FORWARD) is Fault.REFUSE:
                self._close(connection, reset=True)
                return
            await self._pump(connection, reader, first)
        except (OSError, asyncio.IncompleteReadError):
            self._close(connection, reset=True)
        except asyncio.CancelledError:
            # The end of this connection (cut or shut down), not of the proxy: asyncio's server
            # would log a cancelled callback task as an error.
            self._close(connection, reset=True)

    async def _pass(self, connection: _Connection, direction: Direction) -> bool:
        """Wait while the link is blackholed; whether the chunk in hand goes through (False: it
        is dropped). Raises ConnectionResetError when the link refuses."""
        while True:
            changed = self._changed
            fault = self._fault(connection.link, direction)
            if fault is None:
                return True
            if fault is Fault.DROP:
                connection.lossy = True
                return False
            if fault is Fault.REFUSE or connection.closed:
                raise ConnectionResetError("refused")
            await changed.wait()

    async def _open_upstream(self, connection: _Connection) -> None:
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            reader, writer = await asyncio.open_connection("127.0.0.1", connection.route.target_port)
        connection.upstream = writer
        backward = asyncio.get_running_loop().create_task(self._backward(connection, reader))
        connection.tasks.append(backward)

    async def _pump(self, connection: _Connection, reader: asyncio.StreamReader, first: bytes) -> None:
        """Source to destination; the upstream connection is opened when the first bytes may go
        (a blackholed destination never sees the connection until the link heals)."""
        chunk = first
        while True:
            if not chunk:
                chunk = await reader.read(READ_CHUNK_BYTES)
                if not chunk:
                    break
            if await self._pass(connection, Direction.FORWARD):
                if connection.upstream is None:
                    await self._open_upstream(connection)
                assert connection.upstream is not None
                connection.upstream.write(chunk)
                await connection.upstream.drain()
                self.bytes_forwarded += len(chunk)
            else:
                self.bytes_dropped += len(chunk)
            chunk = b""
        self._close(connection, reset=False)

    async def _backward(self, connection: _Connection, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                chunk = await reader.read(READ_CHUNK_BYTES)
                if not chunk:
                    break
                if await self._pass(connection, Direction.BACKWARD):
                    connection.downstream.write(chunk)
                    await connection.downstream.drain()
                    self.bytes_forwarded += len(chunk)
                else:
                    self.bytes_dropped += len(chunk)
            self._close(connection, reset=False)
        except (OSError, asyncio.IncompleteReadError):
            self._close(connection, reset=True)
