"""What every benchmark needs: a ``strom broker`` subprocess on a free loopback port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

BROKER_START_TIMEOUT_S = 30.0
BROKER_STOP_TIMEOUT_S = 30.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def touch_page_cache(directory: Path, size_bytes: int) -> None:
    """Write ``size_bytes`` to a file in ``directory`` and delete it, so that the page cache a
    broker then writes into is memory touched before. On this kind of machine (a virtual machine)
    the first touch of a page is slow, most likely the host mapping it then, and a case
    that appends a few hundred MB into untouched memory measures that: the kernel's copy into the
    page cache became most of the broker's CPU (3 µs of it per 1 KiB record instead of 0.8), which
    a broker that has been running a while does not pay."""
    path = directory / "page-cache-warm-up"
    chunk = bytes(1 << 20)
    with path.open("wb") as file:
        for _ in range(size_bytes // len(chunk) + 1):
            file.write(chunk)
    path.unlink()


class Broker:
    """A ``strom broker`` on 127.0.0.1 with its data under ``work_dir``; ``stop()`` by its PID."""

    def __init__(
        self,
        work_dir: Path,
        settings: Mapping[str, str] | None = None,
        source_dir: Path | None = None,
        arguments: Sequence[str] = (),
    ) -> None:
        """``source_dir``: run the strom found there (a ``src`` directory, e.g. another revision's)
        instead of the installed one. ``arguments``: more ``strom broker`` options."""
        self.port = free_port()
        self.log_path = work_dir / "broker.log"
        command = [sys.executable, "-m", "strom.cli.main", "broker", "--host", "127.0.0.1"]
        command += ["--port", str(self.port), "--data-dir", str(work_dir / "data"), "--log-level", "warning"]
        for key, value in (settings or {}).items():
            command += ["--set", f"{key}={value}"]
        command += list(arguments)
        environment = dict(os.environ)
        if source_dir is not None:
            # PYTHONPATH comes before the editable install's path entry, so that copy is imported.
            environment["PYTHONPATH"] = os.pathsep.join(
                [str(source_dir), *filter(None, [environment.get("PYTHONPATH")])]
            )
        with self.log_path.open("wb") as log_file:
            self.process = subprocess.Popen(
                command, stdout=log_file, stderr=subprocess.STDOUT, env=environment
            )
        deadline = time.monotonic() + BROKER_START_TIMEOUT_S
        while True:
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("broker did not start:\n" + self.log_path.read_text())
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(BROKER_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(BROKER_STOP_TIMEOUT_S)
