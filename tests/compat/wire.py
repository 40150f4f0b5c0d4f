"""A blocking raw-socket Kafka client for the bad-input tests, built on strom's own protocol
classes: send any request object (or any bytes), read the response back, tell whether the broker
closed the connection."""

from __future__ import annotations

import socket
import struct
from typing import Any

from strom.protocol.headers import decode_response_header, encode_request

SIZE_PREFIX = struct.Struct(">i")
CLIENT_ID = "strom-compat-wire"


class WireClient:
    def __init__(self, port: int, timeout_s: float = 10.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, request: Any, version: int, *, api_version_in_header: int | None = None) -> int:
        """Encode ``request`` at ``version`` and send it; returns the correlation id used."""
        self.correlation_id += 1
        header_version = version if api_version_in_header is None else api_version_in_header
        body = request.encode(version)
        self.send_raw(encode_request(request.API_KEY, header_version, self.correlation_id, CLIENT_ID, body))
        return self.correlation_id

    def _receive_exactly(self, count: int) -> bytes:
        chunks = []
        while count:
            chunk = self.sock.recv(count)
            if not chunk:
                raise ConnectionError("broker closed the connection")
            chunks.append(chunk)
            count -= len(chunk)
        return b"".join(chunks)

    def read_frame(self) -> bytes:
        (size,) = SIZE_PREFIX.unpack(self._receive_exactly(SIZE_PREFIX.size))
        return self._receive_exactly(size)

    def read_response(self, response_type: Any, api_key: int, version: int, correlation_id: int) -> Any:
        frame = self.read_frame()
        header, body_offset = decode_response_header(frame, api_key, version)
        assert header.correlation_id == correlation_id
        return response_type.decode(memoryview(frame)[body_offset:], version)

    def round_trip(self, request: Any, response_type: Any, version: int) -> Any:
        correlation_id = self.send(request, version)
        return self.read_response(response_type, request.API_KEY, version, correlation_id)

    def closed_by_peer(self, timeout_s: float = 5.0) -> bool:
        """True when the broker closes the connection within ``timeout_s``; False when it answers
        something instead, or keeps the connection open that long."""
        self.sock.settimeout(timeout_s)
        try:
            data = self.sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False
        return not data
