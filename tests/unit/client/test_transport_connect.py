"""A connection attempt that never becomes ready closes its socket: the setup timing out, or the
client closing while the attempt waits (a socket left to the garbage collector is a leaked file
handle, and a ResourceWarning in whichever later code collects it). A Metadata request that outlives
its waiter is cancelled by close() (a task pending when the loop stops is destroyed mid-request,
which asyncio reports on stderr: `strom` printed it after its own error line)."""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from strom.client.config import ClientConfig
from strom.client.errors import KafkaError, KafkaTimeoutError
from strom.client.transport import LoopThread, Transport

WAIT_S = 5.0


class SilentBroker:
    """Accepts connections and never answers (a broker stuck before its ApiVersions answer)."""

    def __init__(self) -> None:
        self.accepted = asyncio.Event()
        self.closed_by_client = asyncio.Event()
        self.server: asyncio.Server | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted.set()
        while await reader.read(65536):
            pass  # the client's ApiVersions request, unanswered
        self.closed_by_client.set()
        writer.close()

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"127.0.0.1:{port}"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


def test_a_connection_whose_setup_times_out_is_closed() -> None:
    asyncio.run(setup_times_out())


def test_closing_the_client_closes_a_connection_still_being_set_up() -> None:
    asyncio.run(closed_while_setting_up())


def test_closing_the_client_cancels_a_metadata_request_its_waiter_gave_up_on() -> None:
    asyncio.run(metadata_outlives_its_waiter())


async def metadata_outlives_its_waiter() -> None:
    broker = SilentBroker()
    async with broker as address:
        # The request may wait 60 s for its answer; the caller gives up on the topic after 0.2 s.
        transport = Transport(ClientConfig(bootstrap_servers=address, request_timeout_ms=60_000))
        with pytest.raises(KafkaTimeoutError):
            await transport.wait_for_topic("greetings", 200)
        await transport.close()
        left = [task for task in asyncio.all_tasks() if "Transport." in task.get_coro().__qualname__]
        assert left == [], f"the client's tasks still pending after close: {left}"


async def setup_times_out() -> None:
    broker = SilentBroker()
    async with broker as address:
        transport = Transport(ClientConfig(bootstrap_servers=address, socket_connection_setup_timeout_ms=200))
        with pytest.raises(KafkaError):
            await transport.channel(-1)
        await asyncio.wait_for(broker.closed_by_client.wait(), WAIT_S)
        await transport.close()


async def closed_while_setting_up() -> None:
    broker = SilentBroker()
    async with broker as address:
        transport = Transport(ClientConfig(bootstrap_servers=address))
        attempt = asyncio.ensure_future(transport.channel(-1))
        await asyncio.wait_for(broker.accepted.wait(), WAIT_S)
        await transport.close()
        await asyncio.wait_for(broker.closed_by_client.wait(), WAIT_S)
        with pytest.raises((asyncio.CancelledError, KafkaError)):
            await attempt


def test_a_client_objects_loop_thread_runs_uvloop() -> None:
    """Each client object's thread runs uvloop's loop (compiled, as the broker's); the transport
    above also runs on asyncio's own loop, as the tests here drive it."""
    thread = LoopThread("strom-test")
    try:
        assert isinstance(thread.loop, uvloop.Loop)

        async def running_loop() -> asyncio.AbstractEventLoop:
            return asyncio.get_running_loop()

        assert thread.run(running_loop(), WAIT_S) is thread.loop
    finally:
        thread.stop()
