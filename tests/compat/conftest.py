"""The compat harness: a real ``strom broker`` subprocess on 127.0.0.1, driven by real Kafka clients.

``start_broker(**settings)`` (function scope) and ``shared_broker`` (module scope, for tests that only
need a broker and use unique topic names) give a ``BrokerProcess``: ``bootstrap``, ``data_dir``,
``pid``, ``restart()``, ``stop()`` (SIGTERM, wait), ``kill()`` (SIGKILL). Each broker's stdout and
stderr go to a file in its tmp dir; when a test fails, the tail of every live broker's log is
attached to the failure report. Every broker is stopped by its PID at teardown, whatever happened.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

BROKER_START_TIMEOUT_S = 30.0
BROKER_STOP_TIMEOUT_S = 30.0
LOG_TAIL_LINES = 150

# Brokers alive right now, so a failing test can show their logs.
_LIVE_BROKERS: list[BrokerProcess] = []


def free_port() -> int:
    """A port nothing listens on right now (the broker binds it a moment later; loopback only)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class BrokerStartError(RuntimeError):
    """The broker did not accept connections in time; the message carries its log."""


class BrokerProcess:
    """One ``strom broker`` subprocess on a fixed port and data dir, restartable."""

    def __init__(
        self, work_dir: Path, settings: dict[str, str] | None = None, arguments: list[str] | None = None
    ) -> None:
        self.work_dir = work_dir
        self.data_dir = work_dir / "data"
        self.log_path = work_dir / "broker.log"
        self.settings = dict(settings or {})
        self.arguments = list(arguments or [])  # more options of ``strom broker`` (--add-scram)
        self.port = free_port()
        self._process: subprocess.Popen[bytes] | None = None
        self._log_file: object | None = None
        self.starts = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self._process is not None, "broker is not running"
        return self._process.pid

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def command(self) -> list[str]:
        command = [
            sys.executable,
            "-m",
            "strom.cli.main",
            "broker",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
        ]
        for key, value in self.settings.items():
            command += ["--set", f"{key}={value}"]
        return command + self.arguments

    def start(self) -> None:
        assert not self.running, "broker already running"
        self.starts += 1
        with self.log_path.open("ab") as log_file:
            log_file.write(f"\n===== start #{self.starts}: {' '.join(self.command())}\n".encode())
            log_file.flush()
            self._process = subprocess.Popen(
                self.command(),
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C on the test run does not hit the broker twice
            )
        if self not in _LIVE_BROKERS:
            _LIVE_BROKERS.append(self)
        self._wait_until_accepting()

    def _wait_until_accepting(self) -> None:
        deadline = time.monotonic() + BROKER_START_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                raise BrokerStartError(
                    f"broker exited with {self._process.returncode} before listening:\n{self.log_tail()}"
                )
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return
            time.sleep(0.05)
        self.kill()
        raise BrokerStartError(f"broker not listening after {BROKER_START_TIMEOUT_S} s:\n{self.log_tail()}")

    def stop(self) -> int | None:
        """SIGTERM and wait; SIGKILL if it does not exit in time. Returns the exit status."""
        process = self._process
        if process is None:
            return None
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGTERM)
            try:
                process.wait(BROKER_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.kill(process.pid, signal.SIGKILL)
                process.wait(BROKER_STOP_TIMEOUT_S)
        self._process = None
        return process.returncode

    def kill(self) -> None:
        """SIGKILL and reap: the broker gets no chance to flush or close anything."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
            process.wait(BROKER_STOP_TIMEOUT_S)
        self._process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return "(no broker log)"

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def close(self) -> None:
        try:
            self.stop()
        finally:
            if self in _LIVE_BROKERS:
                _LIVE_BROKERS.remove(self)


StartBroker = Callable[..., BrokerProcess]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.failed and "compat" in item.keywords:
        for broker in _LIVE_BROKERS:
            report.sections.append((f"strom broker log ({broker.log_path})", broker.log_tail()))


@pytest.fixture
def start_broker(tmp_path: Path) -> Iterator[StartBroker]:
    """Factory: ``start_broker(**settings)`` starts a broker (keys with dots: pass a dict as ``settings``)."""
    started: list[BrokerProcess] = []

    def factory(settings: dict[str, str] | None = None) -> BrokerProcess:
        broker = BrokerProcess(tmp_path / f"broker{len(started)}", settings)
        broker.work_dir.mkdir(parents=True)
        started.append(broker)
        broker.start()
        return broker

    yield factory
    for broker in started:
        broker.close()


@pytest.fixture(scope="module")
def shared_broker_settings() -> dict[str, str]:
    """Broker keys for ``shared_broker``; a module overrides this fixture to change them."""
    return {}


@pytest.fixture(scope="module")
def shared_broker(
    tmp_path_factory: pytest.TempPathFactory, shared_broker_settings: dict[str, str]
) -> Iterator[BrokerProcess]:
    """One broker for a whole module; tests must use their own topic names."""
    broker = BrokerProcess(tmp_path_factory.mktemp("shared-broker"), shared_broker_settings)
    try:
        broker.start()
        yield broker
    finally:
        broker.close()
