"""Running the real ``strom`` executable (the console script the install put beside this Python),
as a user at a terminal runs it, and places to point it at: a port nothing listens on, and a
listener that accepts connections but never answers."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# Long enough for a command on a loaded machine; a command that needs more is a failure.
COMMAND_TIMEOUT_S = 120.0


def strom_executable() -> str:
    """The ``strom`` console script of the interpreter running the tests (``.venv/bin/strom``)."""
    path = Path(sys.executable).parent / "strom"
    assert path.exists(), f"no strom executable beside {sys.executable}: run make install-test"
    return str(path)


@dataclass(frozen=True)
class Finished:
    returncode: int
    stdout: str
    stderr: str
    elapsed_s: float

    @property
    def stderr_lines(self) -> list[str]:
        return self.stderr.splitlines()


def run_strom(
    *argv: str,
    stdin: bytes | str | None = None,
    timeout_s: float = COMMAND_TIMEOUT_S,
    cwd: Path | None = None,
) -> Finished:
    """Run ``strom ARGV`` to completion; stdout and stderr as text (undecodable bytes escaped)."""
    data = stdin.encode() if isinstance(stdin, str) else stdin
    started = time.monotonic()
    finished = subprocess.run(
        [strom_executable(), *argv],
        input=data,
        stdin=None if data is not None else subprocess.DEVNULL,
        capture_output=True,
        timeout=timeout_s,
        check=False,
        cwd=cwd,
    )
    return Finished(
        finished.returncode,
        finished.stdout.decode("utf-8", errors="backslashreplace"),
        finished.stderr.decode("utf-8", errors="backslashreplace"),
        time.monotonic() - started,
    )


def refused_address() -> str:
    """host:port of a loopback port nothing listens on (connecting is refused at once)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"


@contextlib.contextmanager
def silent_listener() -> Iterator[str]:
    """host:port of a socket that completes TCP handshakes (the kernel does, from the backlog) but
    never reads or answers: a broker that is hung, or a port that is not Kafka's."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield f"127.0.0.1:{listener.getsockname()[1]}"
