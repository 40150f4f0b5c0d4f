"""A TCP proxy on 127.0.0.1 that can be told to lose the network: every connection to one broker
listener goes through one, so a partition is a proxy switched off.

States: ``open`` forwards both ways; ``blackhole`` keeps every connection open but drops whatever
arrives on either side (a partition as a client sees it: no answers, no reset, timeouts), and new
connections are accepted and fed into the same hole; back to ``open``, connections that lived
through the hole are closed (their streams lost bytes, as TCP connections across a long partition
end up reset) and new ones forward again.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket

READ_CHUNK_BYTES = 64 * 1024


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class FaultProxy:
    def __init__(self, name: str, listen_port: int, target_port: int) -> None:
        self.name = name
        self.listen_port = listen_port
        self.target_port = target_port
        self.state = "open"
        self._server: asyncio.Server | None = None
        self._connections: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter | None]] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._holed: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.listen_port)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for client, upstream in list(self._connections):
            _close(client)
            if upstream is not None:
                _close(upstream)
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    def set_state(self, state: str) -> None:
        assert state in ("open", "blackhole"), state
        if state == self.state:
            return
        self.state = state
        if state == "open":
            for writer in list(self._holed):
                _close(writer)
            self._holed.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        entry: tuple[asyncio.StreamWriter, asyncio.StreamWriter | None] = (writer, None)
        try:
            if self.state != "open":
                self._holed.add(writer)
                await _drain_into_hole(reader)
                return
            try:
                upstream_reader, upstream_writer = await asyncio.open_connection(
                    "127.0.0.1", self.target_port
                )
            except OSError:
                return  # the broker is down: the client sees its connection closed
            entry = (writer, upstream_writer)
            self._connections.add(entry)
            await asyncio.gather(
                self._pipe(reader, upstream_writer, writer),
                self._pipe(upstream_reader, writer, upstream_writer),
            )
        finally:
            self._connections.discard(entry)
            self._holed.discard(writer)
            _close(writer)
            if entry[1] is not None:
                _close(entry[1])
            self._tasks.discard(task)

    async def _pipe(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, source_writer: asyncio.StreamWriter
    ) -> None:
        try:
            while True:
                data = await source.read(READ_CHUNK_BYTES)
                if not data:
                    break
                if self.state != "open":
                    # The partition began while this connection lived: it goes into the hole (its
                    # bytes dropped both ways) and is closed when the partition ends.
                    self._holed.add(source_writer)
                    self._holed.add(sink)
                    await _drain_into_hole(source)
                    break
                sink.write(data)
                await sink.drain()
        except (OSError, ConnectionError):
            pass
        finally:
            _close(sink)


async def _drain_into_hole(reader: asyncio.StreamReader) -> None:
    with contextlib.suppress(OSError, ConnectionError):
        while await reader.read(READ_CHUNK_BYTES):
            pass


def _close(writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(Exception):
        writer.close()
