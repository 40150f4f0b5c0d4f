"""An in-process broker driven through its dispatch function: real handlers, real storage in a
temporary directory, a manual clock, and no sockets."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.base.clock import ManualClock
from strom.broker.config import BrokerConfig
from strom.broker.server import BrokerServer
from strom.protocol.api import response_class
from strom.protocol.headers import decode_response_header, encode_request


class InProcessBroker:
    def __init__(self, data_dir: Path, values: dict[str, str] | None = None) -> None:
        self.clock = ManualClock()
        self.loop = asyncio.new_event_loop()
        self.config = BrokerConfig(host="127.0.0.1", port=0, data_dir=data_dir, values=values or {})
        self.server = BrokerServer(self.config, clock=self.clock)
        self.server.state.load()

        async def start_groups() -> None:
            self.server.state.groups.start()

        self.loop.run_until_complete(start_groups())
        self._correlation = itertools.count(1)

    def raw(self, frame_with_size: bytes) -> bytes | None:
        """Dispatch one frame (with its size prefix); the response frame without its prefix, or None."""
        response = self.loop.run_until_complete(self.server._dispatch(frame_with_size[4:], "test", 1))
        return None if response is None else b"".join(response)[4:]

    def call(self, request: Any, version: int) -> Any:
        correlation_id = next(self._correlation)
        frame = encode_request(request.API_KEY, version, correlation_id, "tests", request.encode(version))
        response = self.raw(frame)
        assert response is not None, "no response"
        header, offset = decode_response_header(response, request.API_KEY, version)
        assert header.correlation_id == correlation_id
        return response_class(request.API_KEY).decode(memoryview(response)[offset:], version)

    def close(self) -> None:
        self.server.state.close()
        self.loop.close()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[InProcessBroker]:
    instance = InProcessBroker(tmp_path / "data")
    yield instance
    instance.close()
