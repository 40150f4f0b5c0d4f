"""The fault-injecting proxy itself, in front of a small echo server on 127.0.0.1: what passes, what
is held until the link heals, what is lost and reset, how the source of a Kafka connection is
recognised. The cluster tests rely on each of these."""

from __future__ import annotations

import contextlib
import gc
import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest

from tools.fault_proxy import Direction, Fault, FaultProxy, broker_name, source_of_kafka_request

QUIET_S = 0.3  # how long "nothing arrives" is watched for


class EchoServer:
    """Answers every byte it receives with the same byte; counts what it received."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.received = 0
        self._lock = threading.Lock()
        self._connections: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return
            self._connections.append(connection)
            threading.Thread(target=self._echo, args=(connection,), daemon=True).start()

    def _echo(self, connection: socket.socket) -> None:
        try:
            while data := connection.recv(65536):
                with self._lock:
                    self.received += len(data)
                connection.sendall(data)
        except OSError:
            pass

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread; close() does not
        self._listener.close()
        for connection in self._connections:
            connection.close()
        self._thread.join(5)


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    server = EchoServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def proxy() -> Iterator[FaultProxy]:
    with FaultProxy() as running:
        yield running


def kafka_frame(client_id: str, body: bytes = b"body") -> bytes:
    encoded = client_id.encode()
    header = struct.pack(">hhih", 1, 12, 7, len(encoded)) + encoded
    return struct.pack(">i", len(header) + len(body)) + header + body


def connect(port: int) -> socket.socket:
    connection = socket.create_connection(("127.0.0.1", port), timeout=5)
    return connection


def receive(connection: socket.socket, count: int, timeout_s: float = 5.0) -> bytes:
    connection.settimeout(timeout_s)
    data = b""
    while len(data) < count:
        chunk = connection.recv(count - len(data))
        if not chunk:
            break
        data += chunk
    return data


def nothing_arrives(connection: socket.socket) -> bool:
    """Neither a byte nor the end of the stream within QUIET_S."""
    connection.settimeout(QUIET_S)
    try:
        connection.recv(1)
    except TimeoutError:
        return True
    return False


def wait_for(condition: object, what: str, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_the_source_of_a_kafka_connection_is_named_by_its_client_id() -> None:
    assert source_of_kafka_request(kafka_frame("strom-replica-3")[4:]) == "broker-3"
    assert source_of_kafka_request(kafka_frame("strom-controller-12")[4:]) == "broker-12"
    assert source_of_kafka_request(kafka_frame("strom-broker-1")[4:]) == "broker-1"
    assert source_of_kafka_request(kafka_frame("rdkafka")[4:]) == "client"
    assert source_of_kafka_request(b"\x00\x01") == "client"


def test_traffic_passes_until_a_link_is_cut(echo: EchoServer, proxy: FaultProxy) -> None:
    port = proxy.add_route("echo", echo.port, source="tester")
    with connect(port) as connection:
        connection.sendall(b"hello")
        assert receive(connection, 5) == b"hello"
    wait_for(lambda: proxy.bytes_forwarded == 10, "both ways counted")


def test_a_blackholed_link_holds_the_bytes_until_it_heals(echo: EchoServer, proxy: FaultProxy) -> None:
    port = proxy.add_route("echo", echo.port, source="tester")
    with connect(port) as connection:
        connection.sendall(b"a")
        assert receive(connection, 1) == b"a"
        proxy.cut("tester", "echo", Fault.BLACKHOLE)
        connection.sendall(b"held")
        assert nothing_arrives(connection)
        assert echo.received == 1
        proxy.heal()
        assert receive(connection, 4) == b"held"


def test_one_direction_can_be_blackholed_alone(echo: EchoServer, proxy: FaultProxy) -> None:
    """Requests get through, answers do not: the destination acts, the source never hears."""
    port = proxy.add_route("echo", echo.port, source="tester")
    with connect(port) as connection:
        connection.sendall(b"a")
        assert receive(connection, 1) == b"a"
        proxy.cut("tester", "echo", Fault.BLACKHOLE, Direction.BACKWARD)
        connection.sendall(b"bcd")
        wait_for(lambda: echo.received == 4, "the request at the destination")
        assert nothing_arrives(connection)
        proxy.heal()
        assert receive(connection, 3) == b"bcd"


def test_a_dropping_link_loses_bytes_and_resets_the_connection_when_it_heals(
    echo: EchoServer, proxy: FaultProxy
) -> None:
    port = proxy.add_route("echo", echo.port, source="tester")
    with connect(port) as connection:
        connection.sendall(b"a")
        assert receive(connection, 1) == b"a"
        proxy.cut("tester", "echo", Fault.DROP, Direction.FORWARD)
        connection.sendall(b"lost")
        wait_for(lambda: proxy.bytes_dropped == 4, "the bytes dropped")
        assert nothing_arrives(connection)
        proxy.heal()
        with pytest.raises(ConnectionResetError):
            connection.settimeout(5)
            while connection.recv(1):
                pass
            raise ConnectionResetError("closed")  # a FIN instead of an RST is good enough
    assert echo.received == 1


def test_a_refusing_link_resets_its_connections_and_only_them(echo: EchoServer, proxy: FaultProxy) -> None:
    """One route in front of a destination; the source of each connection is its Kafka client id."""
    port = proxy.add_route(broker_name(1), echo.port)
    cut_frame, kept_frame = kafka_frame("strom-replica-3"), kafka_frame("strom-replica-2")
    with connect(port) as cut, connect(port) as kept:
        cut.sendall(cut_frame)
        kept.sendall(kept_frame)
        assert receive(cut, len(cut_frame)) == cut_frame
        assert receive(kept, len(kept_frame)) == kept_frame
        assert proxy.connections(broker_name(3), broker_name(1)) == 1
        proxy.cut(broker_name(3), broker_name(1), Fault.REFUSE)
        with pytest.raises(ConnectionResetError):
            cut.sendall(cut_frame)
            receive(cut, 1)
        kept.sendall(kept_frame)
        assert receive(kept, len(kept_frame)) == kept_frame
    with connect(port) as again:
        again.sendall(cut_frame)
        with pytest.raises(ConnectionResetError):
            receive(again, 1)
    proxy.heal()
    with connect(port) as healed:
        healed.sendall(cut_frame)
        assert receive(healed, len(cut_frame)) == cut_frame


def _connect_until(port: int, stop: threading.Event, clients: list[socket.socket]) -> None:
    while not stop.is_set():
        with contextlib.suppress(OSError):
            clients.append(socket.create_connection(("127.0.0.1", port), timeout=0.2))


def test_stopping_while_connections_arrive_leaves_no_socket_open(echo: EchoServer) -> None:
    # Clients connecting as the proxy stops: a connection accepted just before its server closed
    # reaches the proxy's callback a moment later; it must be closed too, not left to the garbage
    # collector (whose ResourceWarning fails whichever test runs next).
    for _attempt in range(5):
        proxy = FaultProxy()
        proxy.start()
        port = proxy.add_route("echo", echo.port, source="client")
        clients: list[socket.socket] = []
        stop_connecting = threading.Event()
        connecting = threading.Thread(target=_connect_until, args=(port, stop_connecting, clients))
        connecting.start()
        time.sleep(0.05)
        proxy.stop()
        stop_connecting.set()
        connecting.join(5)
        for client in clients:
            client.close()
        assert clients
        assert proxy.connections() == 0
    gc.collect()  # an unclosed transport or socket would warn here (filterwarnings = error)
