"""The console as a running service: the HTTP server, the worker threads that run the pages, and
the lag sampler. ``strom console`` runs it on its own event loop; ``strom broker --console-port``
runs it on the broker's loop, started through ``BrokerConsole`` with the address of one of the
broker's own listeners (the only thing the broker hands it), so the console imports nothing of
the broker and the broker nothing of the console.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from strom.base import limits
from strom.client.errors import KafkaError
from strom.console.app import Console, ConsoleOptions
from strom.console.http import HttpServer
from strom.console.source import ClientSource, ClusterSource

__all__ = ["BrokerConsole", "ConsoleServer"]

log = logging.getLogger("strom.console")


class ConsoleServer:
    """``login_source``: see ``Console`` (needed with ``options.login``). ``sample_lag`` False: no
    lag sampler (a console under --console-login with no credentials of its own has none to
    sample with; its group pages show the lag of the moment, without a trend)."""

    def __init__(
        self,
        source: ClusterSource,
        options: ConsoleOptions,
        port: int,
        *,
        login_source: Callable[[str, str], ClusterSource] | None = None,
        sample_lag: bool = True,
    ) -> None:
        self.source = source
        self.options = options
        self.sample_lag = sample_lag
        self.console = Console(source, options, login_source=login_source)
        self._executor = concurrent.futures.ThreadPoolExecutor(
            limits.console_worker_threads, thread_name_prefix="strom-console"
        )
        self._http = HttpServer(self.console.handle, options.host, port, self._executor)
        self._sampler: asyncio.Task[None] | None = None
        # The lag sampler asks every group in turn (seconds with 1,000 groups): a thread of its
        # own, so pages do not wait behind it.
        self._sampler_executor = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="strom-console-lag"
        )

    async def start(self) -> None:
        await self._http.start()
        self.console.prefetch()
        if self.sample_lag:
            self._sampler = asyncio.create_task(self._sample_forever())
        mode = " (read-only)" if self.options.read_only else ""
        mode += " (login required)" if self.options.login else ""
        log.info("console on %s%s", self.url, mode)

    @property
    def port(self) -> int:
        return self._http.port

    @property
    def url(self) -> str:
        host = self.options.host or "127.0.0.1"
        return f"http://{f'[{host}]' if ':' in host else host}:{self.port}/"

    async def stop(self) -> None:
        if self._sampler is not None:
            self._sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sampler
            self._sampler = None
        await self._http.stop()
        loop = asyncio.get_running_loop()
        # Pages still running finish in their threads; the clients close after them.
        await loop.run_in_executor(None, self._executor.shutdown)
        await loop.run_in_executor(None, self._sampler_executor.shutdown)
        await loop.run_in_executor(None, self.console.close)
        await loop.run_in_executor(None, self.source.close)

    async def _sample_forever(self) -> None:
        loop = asyncio.get_running_loop()
        interval_s = self.options.lag_sample_interval_ms / 1000
        while True:
            # Sleep first: beside a broker the console starts before the broker listens (and a
            # group's page records a sample of its own when it is opened).
            await asyncio.sleep(interval_s)
            # The topics' snapshot never grows too old to answer from (it refreshes behind views
            # otherwise, but a view after a long idle would wait for it).
            self.console.prefetch()
            try:
                await loop.run_in_executor(self._sampler_executor, self.console.sample_lag)
            except KafkaError as error:
                log.info("lag sample skipped: %s", error)
            except Exception:
                # Not the cluster's answer: a bug, logged loudly; the sampler goes on.
                log.exception("lag sample failed")


class BrokerConsole:
    """The console inside a broker's process: started before the broker listens (its pages say
    so until then), reading the broker through the listener address ``bootstrap()`` gives once
    the broker is up (``bootstrap`` raises LookupError before). It answers the interface of
    ``strom.broker.run.run_broker(..., beside=...)``: ``start(bootstrap)`` and ``stop()``."""

    def __init__(
        self,
        options: ConsoleOptions,
        port: int,
        client_settings: dict[str, Any] | None = None,
        *,
        login_settings: dict[str, Any] | None = None,
    ) -> None:
        """``login_settings`` (with ``options.login``): the users' clients' settings (a SASL
        listener's bootstrap, security.protocol, sasl.mechanism) to which a login adds theirs."""
        assert login_settings is not None or not options.login
        self._options = options
        self._port = port
        self._client_settings = dict(client_settings or {})
        self._login_settings = dict(login_settings or {})
        self.server: ConsoleServer | None = None

    async def start(self, bootstrap: Callable[[], str]) -> None:
        def settings() -> dict[str, Any]:
            try:
                address = bootstrap()
            except LookupError as error:
                raise KafkaError(f"the broker is not serving yet: {error}") from None
            return {**self._client_settings, "bootstrap.servers": address}

        def login_source(user: str, password: str) -> ClientSource:
            return ClientSource.for_user(self._login_settings, user, password)

        self.server = ConsoleServer(
            ClientSource(settings),
            self._options,
            self._port,
            login_source=login_source if self._options.login else None,
        )
        await self.server.start()

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop()
            self.server = None
