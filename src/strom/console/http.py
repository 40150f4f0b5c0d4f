"""A small HTTP/1.1 server on asyncio: one request per connection, every part of it bounded.

Bounds (``strom.base.limits``): the request line and headers (``console_request_head_bytes_max``,
else 431), a form body by its Content-Length (``console_form_bytes_max``, else 413, refused before
a byte of it is read; no chunked bodies), the time to receive the request and to send the answer,
and the connections open at once (one more gets 503 at once). The answer is computed by a
synchronous ``handle(Request) -> Response`` in a worker thread, never on the event loop (beside a
broker the loop is the broker's).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

from strom.base import limits

__all__ = ["HttpError", "HttpServer", "Request", "Response", "parse_form", "parse_head"]

log = logging.getLogger("strom.console")

# Closing a connection: at most this long and this many bytes of unread input are taken and
# dropped after the answer (see HttpServer._linger).
LINGER_S = 1.0
LINGER_BYTES_MAX = 2 * limits.console_form_bytes_max

# How long a closing connection may take to hand the kernel the rest of its answer.
CLOSE_WAIT_S = 5.0

# A form has a handful of fields; parse_qs refuses more than this many (a bound on work per request).
FORM_FIELDS_MAX = 100

REASONS = {
    200: "OK",
    303: "See Other",
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    409: "Conflict",
    411: "Length Required",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    421: "Misdirected Request",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    502: "Bad Gateway",
    503: "Service Unavailable",
}


class HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, str] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    form: dict[str, str] = field(default_factory=dict)


@dataclass
class Response:
    status: int
    body: bytes
    content_type: str = "text/html; charset=utf-8"
    headers: list[tuple[str, str]] = field(default_factory=list)

    def encode(self) -> bytes:
        lines = [
            f"HTTP/1.1 {self.status} {REASONS.get(self.status, 'Unknown')}",
            f"Content-Type: {self.content_type}",
            f"Content-Length: {len(self.body)}",
            "Connection: close",
        ]
        lines += [f"{name}: {value}" for name, value in self.headers]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + self.body


def _first_values(pairs: dict[str, list[str]]) -> dict[str, str]:
    return {key: values[0] for key, values in pairs.items()}


def parse_head(head: bytes) -> tuple[str, str, dict[str, str], dict[str, str]]:
    """Method, path, query (first value of each name) and headers (names lower-cased) of a
    request head; ``HttpError(400)`` for anything malformed."""
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes every byte
        raise HttpError(400, "undecodable request") from None
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise HttpError(400, "malformed request line")
    method, target, _ = parts
    if not target.startswith("/"):
        raise HttpError(400, "the request target must be a path")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, separator, value = line.partition(":")
        if not separator or not name or name != name.strip():
            raise HttpError(400, "malformed header line")
        headers[name.lower()] = value.strip()
    split = urlsplit(target)
    try:
        query = _first_values(parse_qs(split.query, keep_blank_values=True, max_num_fields=FORM_FIELDS_MAX))
    except ValueError:
        raise HttpError(400, "too many query fields") from None
    return method, split.path, query, headers


def parse_form(body: bytes) -> dict[str, str]:
    try:
        return _first_values(
            parse_qs(
                body.decode("utf-8"),
                keep_blank_values=True,
                max_num_fields=FORM_FIELDS_MAX,
                strict_parsing=False,
            )
        )
    except (UnicodeDecodeError, ValueError):
        raise HttpError(400, "malformed form") from None


async def read_request(reader: asyncio.StreamReader) -> Request:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        raise HttpError(431, "request head too large") from None
    method, path, query, headers = parse_head(head[:-4])
    form: dict[str, str] = {}
    if "transfer-encoding" in headers:
        raise HttpError(501, "chunked request bodies are not accepted")
    length_text = headers.get("content-length")
    if method == "POST":
        if length_text is None:
            raise HttpError(411, "a POST needs a Content-Length")
        content_type = headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type != "application/x-www-form-urlencoded":
            raise HttpError(415, "forms are accepted as application/x-www-form-urlencoded only")
    if length_text is not None:
        if not length_text.isdigit():
            raise HttpError(400, "malformed Content-Length")
        length = int(length_text)
        if length > limits.console_form_bytes_max:
            raise HttpError(413, f"a form is at most {limits.console_form_bytes_max} bytes")
        body = await reader.readexactly(length)
        if method == "POST":
            form = parse_form(body)
    return Request(method, path, query, headers, form)


class HttpServer:
    """Serves ``handle`` on ``host:port`` (port 0: a free one) until ``stop()``."""

    def __init__(
        self,
        handle: Callable[[Request], Response],
        host: str,
        port: int,
        executor: concurrent.futures.Executor,
        *,
        connections_max: int = limits.console_connections_max,
    ) -> None:
        self._handle = handle
        self._host = host
        self._port = port
        self._executor = executor
        self._connections_max = connections_max
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._accept, self._host, self._port, limit=limits.console_request_head_bytes_max
        )

    @property
    def port(self) -> int:
        assert self._server is not None and self._server.sockets
        return int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()
        self._server = None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # Each connection in a task of our own, so stop() can cancel it quietly.
        task = asyncio.create_task(self._serve(reader, writer))
        self._tasks.add(task)
        try:
            await task
        except asyncio.CancelledError:
            pass
        finally:
            self._tasks.discard(task)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if len(self._tasks) > self._connections_max:
                await self._send(writer, _plain(503, "too many connections to the console; try again"))
                return
            try:
                async with asyncio.timeout(limits.console_request_receive_ms_max / 1000):
                    request = await read_request(reader)
            except HttpError as error:
                await self._send(writer, _plain(error.status, error.message))
                return
            except TimeoutError:
                await self._send(writer, _plain(408, "the request did not arrive in time"))
                return
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            loop = asyncio.get_running_loop()
            try:
                response = await loop.run_in_executor(self._executor, self._handle, request)
            except Exception:
                # A bug of the console: logged with its traceback, the peer told, the server goes on.
                log.exception("console page %s %s failed", request.method, request.path)
                response = _plain(500, "the console failed on this page; its log says why")
            await self._send(writer, response)
        finally:
            try:
                await self._linger(reader, writer)
            finally:
                # Also when stop() cancels the connection while it lingers.
                writer.close()
            try:
                async with asyncio.timeout(CLOSE_WAIT_S):
                    await writer.wait_closed()
            except TimeoutError:
                writer.transport.abort()  # a peer that does not take the rest of the answer
            except ConnectionError:
                pass

    @staticmethod
    async def _linger(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Half-close, then read and drop what the peer still sends (a request the console answered
        without reading: 503, 413), briefly and boundedly: closing a socket with unread input
        resets the connection, and the peer may lose the answer with it."""
        try:
            if writer.can_write_eof():
                writer.write_eof()
            dropped = 0
            async with asyncio.timeout(LINGER_S):
                while dropped < LINGER_BYTES_MAX:
                    chunk = await reader.read(LINGER_BYTES_MAX)
                    if not chunk:
                        return
                    dropped += len(chunk)
        except (TimeoutError, ConnectionError, OSError, RuntimeError):
            return

    async def _send(self, writer: asyncio.StreamWriter, response: Response) -> None:
        writer.write(response.encode())
        with contextlib.suppress(ConnectionError, TimeoutError):
            async with asyncio.timeout(limits.console_response_send_ms_max / 1000):
                await writer.drain()


def _plain(status: int, message: str) -> Response:
    return Response(status, (message + "\n").encode(), "text/plain; charset=utf-8")
