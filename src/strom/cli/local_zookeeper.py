"""A real ZooKeeper for development and tests: Debian's ``zookeeper`` jar run with ``java``, on
127.0.0.1 (``strom cluster up`` and tests/cluster both use it).

``ZooKeeperServer(work_dir)`` writes a standalone config (``clientPortAddress=127.0.0.1``, a free
port, a data dir under ``work_dir``, a short tick so sessions can time out within a test), starts
``org.apache.zookeeper.server.quorum.QuorumPeerMain`` and waits until it answers the ``srvr``
command. It is stopped by its PID (``stop`` = SIGTERM, then SIGKILL), and can be killed,
paused (SIGSTOP) and resumed (SIGCONT), and restarted on the same port and data.

Installed by ``make system-deps`` (apt-get install zookeeper). If it is missing,
``ZooKeeperMissingError`` says so with that instruction (tests fail with it: they are never skipped).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
ZOOKEEPER_CONF_DIR = Path("/etc/zookeeper/conf")
# The jar's manifest lists its dependencies; an slf4j binding (if installed) puts its log in ours.
LOG_BINDING_JAR = Path("/usr/share/java/slf4j-simple.jar")
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0


class ZooKeeperMissingError(RuntimeError):
    pass


class ZooKeeperStartError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _four_letter_word(port: int, word: bytes, timeout_s: float = 2.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as connection:
        connection.sendall(word)
        chunks = []
        while chunk := connection.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks)


class ZooKeeperServer:
    def __init__(
        self,
        work_dir: Path,
        *,
        tick_time_ms: int = 200,
        max_session_timeout_ms: int = 30_000,
        port: int | None = None,
    ) -> None:
        java = shutil.which("java")
        if java is None or not ZOOKEEPER_JAR.exists():
            raise ZooKeeperMissingError(
                "a real ZooKeeper is needed (java and /usr/share/java/zookeeper.jar): run `make system-deps`"
            )
        self.java = java
        self.work_dir = work_dir
        self.data_dir = work_dir / "zookeeper-data"
        self.config_path = work_dir / "zoo.cfg"
        self.log_path = work_dir / "zookeeper.log"
        self.tick_time_ms = tick_time_ms
        # ZooKeeper grants session timeouts between 2 and 20 ticks by default; tests want short ones.
        self.min_session_timeout_ms = 2 * tick_time_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.port = port or free_port()
        self._process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def connect_string(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self._process is not None, "ZooKeeper is not running"
        return self._process.pid

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def _write_config(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(
            "\n".join(
                [
                    f"tickTime={self.tick_time_ms}",
                    f"dataDir={self.data_dir}",
                    f"clientPort={self.port}",
                    "clientPortAddress=127.0.0.1",
                    f"minSessionTimeout={self.min_session_timeout_ms}",
                    f"maxSessionTimeout={self.max_session_timeout_ms}",
                    "maxClientCnxns=0",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=srvr,ruok,stat",
                    "autopurge.purgeInterval=0",
                    "",
                ]
            ),
            encoding="utf-8",
        )

    def command(self) -> list[str]:
        classpath = [str(ZOOKEEPER_CONF_DIR), str(ZOOKEEPER_JAR)]
        if LOG_BINDING_JAR.exists():
            classpath.append(str(LOG_BINDING_JAR))
        return [
            self.java,
            "-Xmx128m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Dzookeeper.admin.enableServer=false",
            # Timestamps in its log, to line its events up with the clients' after a failure.
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
            "-cp",
            ":".join(classpath),
            MAIN_CLASS,
            str(self.config_path),
        ]

    def start(self) -> None:
        assert not self.running, "ZooKeeper already running"
        self._write_config()
        self.starts += 1
        with self.log_path.open("ab") as log_file:
            log_file.write(f"\n===== start #{self.starts}: {' '.join(self.command())}\n".encode())
            log_file.flush()
            self._process = subprocess.Popen(
                self.command(),
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.work_dir,
                start_new_session=True,
            )
        self._wait_until_serving()

    def _wait_until_serving(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                raise ZooKeeperStartError(
                    f"ZooKeeper exited with {self._process.returncode} before serving:\n{self.log_tail()}"
                )
            with contextlib.suppress(OSError):
                if b"Mode: standalone" in _four_letter_word(self.port, b"srvr"):
                    return
            time.sleep(0.1)
        self.kill()
        raise ZooKeeperStartError(f"ZooKeeper not serving after {START_TIMEOUT_S} s:\n{self.log_tail()}")

    def _signal(self, signum: int) -> None:
        assert self._process is not None, "ZooKeeper is not running"
        os.kill(self._process.pid, signum)

    def stop(self) -> None:
        """SIGTERM by PID and wait; SIGKILL if it does not exit in time."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGCONT)
                os.kill(process.pid, signal.SIGTERM)
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(STOP_TIMEOUT_S)
        self._process = None

    def kill(self) -> None:
        """SIGKILL by PID: sessions are lost only once it comes back and lets them time out."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            process.kill()
            process.wait(STOP_TIMEOUT_S)
        self._process = None

    def pause(self) -> None:
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    def restart(self) -> None:
        self.stop()
        self.start()

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(
                self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:]
            )
        except FileNotFoundError:
            return "(no log)"
