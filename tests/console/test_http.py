"""The console's HTTP server over loopback: what it refuses and when (head and form size, time,
connections, chunked bodies), and that a failing page does not take the server down."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable, Callable

import pytest

from strom.base import limits
from strom.console.http import HttpError, HttpServer, Request, Response, parse_form, parse_head


def echo(request: Request) -> Response:
    if request.path == "/boom":
        raise RuntimeError("a bug")
    return Response(
        200,
        f"{request.method} {request.path} {sorted(request.query.items())} {sorted(request.form.items())}".encode(),
    )


def serve(
    test: Callable[[int], Awaitable[None]], handle: Callable[[Request], Response] = echo, **options: int
) -> None:
    async def main() -> None:
        with concurrent.futures.ThreadPoolExecutor(2) as executor:
            server = HttpServer(handle, "127.0.0.1", 0, executor, **options)
            await server.start()
            try:
                await test(server.port)
            finally:
                await server.stop()

    asyncio.run(main())


async def exchange(port: int, data: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), timeout=30)
    writer.close()
    await writer.wait_closed()
    return answer


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def test_get_and_post_are_parsed() -> None:
    async def test(port: int) -> None:
        answer = await exchange(port, b"GET /topics?q=a%20b&q=ignored HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status_of(answer) == 200
        assert answer.endswith(b"GET /topics [('q', 'a b')] []")
        body = b"name=a%2Fb&csrf=t"
        answer = await exchange(
            port,
            b"POST /topics HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body,
        )
        assert answer.endswith(b"POST /topics [] [('csrf', 't'), ('name', 'a/b')]")
        assert b"Connection: close" in answer

    serve(test)


def test_oversize_head_and_form_are_refused_before_they_are_read() -> None:
    async def test(port: int) -> None:
        big = b"GET / HTTP/1.1\r\nX-Filler: " + b"a" * limits.console_request_head_bytes_max + b"\r\n\r\n"
        assert status_of(await exchange(port, big)) == 431
        declared = limits.console_form_bytes_max + 1
        answer = await exchange(
            port,
            b"POST /topics HTTP/1.1\r\nContent-Type: application/x-www-form-urlencoded\r\n"
            + f"Content-Length: {declared}\r\n\r\n".encode(),
        )
        assert status_of(answer) == 413
        chunked = b"POST /topics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
        assert status_of(await exchange(port, chunked)) == 501
        no_length = b"POST /topics HTTP/1.1\r\nContent-Type: application/x-www-form-urlencoded\r\n\r\n"
        assert status_of(await exchange(port, no_length)) == 411
        json_body = b"POST /topics HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
        assert status_of(await exchange(port, json_body)) == 415
        assert status_of(await exchange(port, b"BREW /pot HTCPCP/1.0\r\n\r\n")) == 400

    serve(test)


def test_a_request_that_trickles_is_cut_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "console_request_receive_ms_max", 300)

    async def test(port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), timeout=30)
        assert status_of(answer) == 408
        writer.close()
        await writer.wait_closed()

    serve(test)


def test_connections_beyond_the_bound_get_503() -> None:
    async def test(port: int) -> None:
        held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
        # The server has taken both (a request on a third shows it): each holds a slot.
        for _ in range(100):
            answer = await exchange(port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            if status_of(answer) == 503:
                break
            await asyncio.sleep(0.05)
        assert status_of(answer) == 503
        for _, writer in held:
            writer.close()
            await writer.wait_closed()

    serve(test, connections_max=2)


def test_a_failing_page_is_a_500_and_the_server_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    async def test(port: int) -> None:
        assert status_of(await exchange(port, b"GET /boom HTTP/1.1\r\n\r\n")) == 500
        assert status_of(await exchange(port, b"GET /fine HTTP/1.1\r\n\r\n")) == 200

    serve(test)
    assert "console page GET /boom failed" in caplog.text


def test_parse_head_and_form_refuse_malformed_input() -> None:
    assert parse_head(b"GET /a/b?x=1&y= HTTP/1.1\r\nHost: h\r\nX-A:  v ") == (
        "GET",
        "/a/b",
        {"x": "1", "y": ""},
        {"host": "h", "x-a": "v"},
    )
    for head in [
        b"GET /",
        b"GET http://evil/ HTTP/1.1",
        b"GET / HTTP/1.1\r\nno colon",
        b"GET / HTTP/1.1\r\n bad: x",
    ]:
        with pytest.raises(HttpError) as caught:
            parse_head(head)
        assert caught.value.status == 400
    with pytest.raises(HttpError):
        parse_head(b"GET /?" + b"&".join(b"a%d=1" % i for i in range(200)) + b" HTTP/1.1")
    with pytest.raises(HttpError):
        parse_form(b"\xff\xfe")
    assert parse_form(b"a=1&a=2&b=%3Cx%3E") == {"a": "1", "b": "<x>"}


def test_a_console_beside_a_broker_that_is_not_up_yet_says_so() -> None:
    from strom.console.app import ConsoleOptions
    from strom.console.server import BrokerConsole

    def not_yet() -> str:
        raise LookupError("the broker is not listening yet")

    async def main() -> None:
        console = BrokerConsole(ConsoleOptions(), 0)
        await console.start(not_yet)
        try:
            assert console.server is not None
            answer = await exchange(console.server.port, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert status_of(answer) == 502
            assert b"the broker is not serving yet: the broker is not listening yet" in answer
        finally:
            await console.stop()

    asyncio.run(main())


def test_a_console_takes_its_topics_snapshot_when_it_starts_and_every_interval_after() -> None:
    """No view waits for the metadata snapshot: the console takes it when it starts and again
    every lag-sample interval once it is no longer fresh, whether anyone looks or not."""
    import time

    from strom.client.admin import TopicDescription
    from strom.console.app import ConsoleOptions
    from strom.console.server import ConsoleServer
    from tests.console.fakes import FakeSource

    class Counting(FakeSource):
        def __init__(self) -> None:
            super().__init__()
            self.asked_topics = 0

        def topics(self) -> dict[str, TopicDescription]:
            self.asked_topics += 1
            return super().topics()

    source = Counting()
    source.add_topic("orders")
    options = ConsoleOptions(lag_sample_interval_ms=50, snapshot_fresh_ms=10, snapshot_stale_ms=60_000)

    async def main() -> None:
        server = ConsoleServer(source, options, 0)
        await server.start()
        try:
            deadline = time.monotonic() + 30
            while source.asked_topics < 3:  # at the start, then at two intervals (no view at all)
                assert time.monotonic() < deadline, source.asked_topics
                await asyncio.sleep(0.01)
            answer = await exchange(server.port, b"GET /topics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert status_of(answer) == 200 and b'data-name="orders"' in answer
        finally:
            await server.stop()

    asyncio.run(main())
