"""A real Spark standalone cluster for tests: a master and workers started from the pyspark
package's own ``bin/spark-class`` (``org.apache.spark.deploy.master.Master`` and
``...worker.Worker``), on 127.0.0.1, every port (the web UIs' too) chosen by the OS (port 0: no
race for a "free" port), small daemons, stopped by PID.

Executors run the Python of the driver's ``PYSPARK_PYTHON`` (this venv's), which has strom
installed: that is how strom's code reaches them here. docs/spark.md says what a cluster of
several machines needs.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.spark.processes import descendants

# A JVM starting on a loaded 2-core machine.
START_DEADLINE_S = 120.0
STOP_DEADLINE_S = 30.0
# Heap of the master's and workers' own JVMs (they only schedule; executors have their own).
DAEMON_MEMORY = "256m"


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _environment(work_dir: Path) -> dict[str, str]:
    environment = dict(os.environ)
    environment.update(
        {
            "SPARK_HOME": str(spark_home()),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": sys.executable,
            "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
            # No REST submission server (it would listen on 6066).
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
            "SPARK_LOG_DIR": str(work_dir / "logs"),
            "SPARK_PID_DIR": str(work_dir),
        }
    )
    return environment


@dataclass
class Daemon:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for(self, pattern: str) -> re.Match[str]:
        deadline = time.monotonic() + START_DEADLINE_S
        while True:
            found = re.search(pattern, self.log_text())
            if found:
                return found
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited ({self.process.returncode}):\n{self.log_text()[-3000:]}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{self.name}: no {pattern!r} within {START_DEADLINE_S} s:\n{self.log_text()[-3000:]}"
                )
            time.sleep(0.2)

    def stop(self) -> None:
        """SIGTERM (a worker then stops its executors), SIGKILL if it lingers, then whatever it
        started and left behind."""
        below = descendants(self.process.pid) - {self.process.pid}
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_DEADLINE_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for pid in below:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@dataclass
class StandaloneCluster:
    master_url: str
    work_dir: Path
    daemons: list[Daemon] = field(default_factory=list)

    @property
    def worker_dirs(self) -> list[Path]:
        return sorted(self.work_dir.glob("worker-*/work"))

    def stop(self) -> None:
        for daemon in reversed(self.daemons):  # workers first, the master last
            daemon.stop()


def _start(name: str, arguments: Sequence[str], work_dir: Path) -> Daemon:
    log_path = work_dir / f"{name}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [str(spark_home() / "bin" / "spark-class"), *arguments],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=_environment(work_dir),
            cwd=work_dir,
        )
    return Daemon(name, process, log_path)


def start_standalone(
    work_dir: Path, *, workers: int = 2, cores: int = 2, memory: str = "2g"
) -> StandaloneCluster:
    """Master and ``workers`` workers of ``cores`` cores and ``memory`` for executors each; returns
    once every worker has registered with the master."""
    cluster = StandaloneCluster("", work_dir)
    try:
        master = _start(
            "master",
            [
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--webui-port",
                "0",
            ],
            work_dir,
        )
        cluster.daemons.append(master)
        cluster.master_url = master.wait_for(r"Starting Spark master at (spark://127\.0\.0\.1:\d+)").group(1)
        master.wait_for(r"I have been elected leader")
        for index in range(workers):
            worker_dir = work_dir / f"worker-{index}" / "work"
            worker_dir.mkdir(parents=True)
            arguments = [
                "org.apache.spark.deploy.worker.Worker",
                "--host", "127.0.0.1", "--port", "0", "--webui-port", "0",
                "--cores", str(cores), "--memory", memory, "--work-dir", str(worker_dir),
                cluster.master_url,
            ]  # fmt: skip
            cluster.daemons.append(_start(f"worker-{index}", arguments, work_dir))
        for daemon in cluster.daemons[1:]:
            daemon.wait_for(r"Successfully registered with master")
    except BaseException:
        cluster.stop()
        raise
    return cluster
