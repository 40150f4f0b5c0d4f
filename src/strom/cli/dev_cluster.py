"""A cluster on this machine for development and tests: one ZooKeeper and N ``strom broker``
processes on 127.0.0.1, each stopped by its PID (``strom cluster up``, tests/cluster).

Layout under the work directory: ``zookeeper/`` (its data, config and log), ``broker-N/`` (broker
N's data directory) and ``broker-N.log``. Starting the same directory again brings the same cluster
back (the brokers keep their node ids and data; ZooKeeper keeps the cluster's state).

What tests/cluster and ``benchmarks.cluster`` both need to drive such a cluster lives here too:
``wait_until`` (a condition polled up to a deadline), ``LocalCluster.live_bootstrap`` (the
brokers running now) and ``LocalCluster.restart_stopped`` (bring back what a test or a benchmark
killed or stopped).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from strom.cli.local_zookeeper import ZooKeeperServer, free_port

BROKER_START_TIMEOUT_S = 60.0
BROKER_STOP_TIMEOUT_S = 60.0
WAIT_TIMEOUT_S = 60.0
WAIT_INTERVAL_S = 0.05


class BrokerStartError(RuntimeError):
    pass


def wait_until(
    condition: Callable[[], bool],
    what: str,
    timeout_s: float = WAIT_TIMEOUT_S,
    *,
    interval_s: float = WAIT_INTERVAL_S,
    failure: type[Exception] = TimeoutError,
) -> None:
    """Poll ``condition`` until it holds; ``failure`` naming ``what`` after ``timeout_s``. A
    condition that raises counts as not yet (a broker going away while it is asked)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if condition():
                return
        except Exception:
            pass
        if time.monotonic() > deadline:
            raise failure(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)


class BrokerProcess:
    """One ``strom broker --zookeeper ... --node-id N`` subprocess."""

    def __init__(
        self,
        node_id: int,
        port: int,
        data_dir: Path,
        log_path: Path,
        zookeeper_connect: str,
        settings: Mapping[str, str] | None = None,
        metrics_port: int | None = None,
        console_port: int | None = None,
    ) -> None:
        self.node_id = node_id
        self.port = port
        self.data_dir = data_dir
        self.log_path = log_path
        self.zookeeper_connect = zookeeper_connect
        self.settings = dict(settings or {})
        self.metrics_port = metrics_port  # serves /metrics there when set
        self.console_port = console_port  # serves the web console there when set
        self.process: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        command = [sys.executable, "-m", "strom.cli.main", "broker", "--host", "127.0.0.1"]
        command += ["--port", str(self.port), "--data-dir", str(self.data_dir)]
        command += ["--zookeeper", self.zookeeper_connect, "--node-id", str(self.node_id)]
        for key, value in self.settings.items():
            command += ["--set", f"{key}={value}"]
        if self.metrics_port is not None:
            command += ["--metrics-port", str(self.metrics_port)]
        if self.console_port is not None:
            command += ["--console-port", str(self.console_port)]
        return command

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str | None:
        return None if self.metrics_port is None else f"http://127.0.0.1:{self.metrics_port}/metrics"

    @property
    def pid(self) -> int:
        assert self.process is not None, f"broker {self.node_id} is not running"
        return self.process.pid

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        assert not self.running, f"broker {self.node_id} is running already"
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log_file:
            self.process = subprocess.Popen(
                self.command(),
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def wait_listening(self, timeout_s: float = BROKER_START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            if self.process is None or self.process.poll() is not None:
                raise BrokerStartError(f"broker {self.node_id} exited:\n{self.log_tail()}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return
            if time.monotonic() > deadline:
                raise BrokerStartError(
                    f"broker {self.node_id} not listening after {timeout_s} s:\n{self.log_tail()}"
                )
            time.sleep(0.05)

    def signal(self, signum: int) -> None:
        if self.running:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def stop(self, timeout_s: float = BROKER_STOP_TIMEOUT_S) -> int | None:
        """SIGTERM by PID (the broker moves its leaderships away and stops); SIGKILL if it does
        not exit in time. Its exit code (None if it was not running)."""
        process = self.process
        if process is None:
            return None
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGCONT)
                os.kill(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout_s)
        self.process = None
        return process.returncode

    def kill(self) -> None:
        """kill -9 by PID."""
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            process.kill()
            process.wait(BROKER_STOP_TIMEOUT_S)
        self.process = None

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(
                self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:]
            )
        except FileNotFoundError:
            return "(no log)"


class LocalCluster:
    """A ZooKeeper and ``broker_count`` brokers (node ids 1..N) under ``work_dir``."""

    def __init__(
        self,
        work_dir: Path,
        broker_count: int = 3,
        *,
        settings: Mapping[str, str] | None = None,
        base_port: int = 0,
        zookeeper_port: int = 0,
        zookeeper: ZooKeeperServer | None = None,
        chroot: str = "",
        metrics_base_port: int | None = None,
        console_port: int | None = None,
    ) -> None:
        """``metrics_base_port``: broker N serves ``/metrics`` on it + N - 1 (0: free ports; None: off).
        ``console_port``: broker 1 serves the web console there (None: off)."""
        self.work_dir = work_dir
        work_dir.mkdir(parents=True, exist_ok=True)
        self._own_zookeeper = zookeeper is None
        self.zookeeper = zookeeper or ZooKeeperServer(work_dir / "zookeeper", port=zookeeper_port or None)
        self.zookeeper_connect = self.zookeeper.connect_string + chroot
        self.brokers: dict[int, BrokerProcess] = {}
        for node_id in range(1, broker_count + 1):
            port = base_port + node_id - 1 if base_port else free_port()
            metrics_port = None
            if metrics_base_port is not None:
                metrics_port = metrics_base_port + node_id - 1 if metrics_base_port else free_port()
            self.brokers[node_id] = BrokerProcess(
                node_id,
                port,
                work_dir / f"broker-{node_id}",
                work_dir / f"broker-{node_id}.log",
                self.zookeeper_connect,
                settings,
                metrics_port,
                console_port if node_id == 1 else None,
            )

    @property
    def bootstrap(self) -> str:
        return ",".join(broker.address for broker in self.brokers.values())

    @property
    def live_bootstrap(self) -> str:
        """The addresses of the brokers running now."""
        return ",".join(broker.address for broker in self.brokers.values() if broker.running)

    def restart_stopped(self) -> None:
        """Start every broker that is not running (killed, stopped); returns once all listen."""
        for broker in self.brokers.values():
            if not broker.running:
                broker.start()
        for broker in self.brokers.values():
            broker.wait_listening()

    def start(self) -> None:
        """Start ZooKeeper (unless it was given) and every broker; returns once all listen."""
        if self._own_zookeeper and not self.zookeeper.running:
            (self.work_dir / "zookeeper").mkdir(parents=True, exist_ok=True)
            self.zookeeper.start()
        self.restart_stopped()

    def stop(self) -> None:
        """SIGTERM the brokers one after the other (each moves its leaderships to those still
        up), then ZooKeeper; SIGKILL whatever does not exit in time."""
        for broker in self.brokers.values():
            broker.stop()
        if self._own_zookeeper:
            self.zookeeper.stop()
