"""How long a thread has waited for a CPU: the second field of Linux's ``schedstat`` of a thread
(nanoseconds runnable but not running). Stall tests subtract it, for the broker's event-loop
thread and for their own probe, from the gaps they measure: on a machine loaded by other work a
gap is partly the scheduler's, and the bounds are about what the broker's own work cost."""

from __future__ import annotations

import contextlib
import os

OWN_THREAD = "/proc/thread-self/schedstat"


def main_thread_of(pid: int) -> str:
    """The ``schedstat`` of a process's main thread (a broker's event loop runs there)."""
    return f"/proc/{pid}/task/{pid}/schedstat"


class RunQueueWait:
    """Seconds the thread of ``path`` has been runnable but not running; 0 where Linux does not
    keep it. Open it on the thread it measures when ``path`` is ``OWN_THREAD``."""

    def __init__(self, path: str) -> None:
        self._fd: int | None = None
        with contextlib.suppress(OSError):
            self._fd = os.open(path, os.O_RDONLY)

    def __call__(self) -> float:
        if self._fd is None:
            return 0.0
        try:
            return int(os.pread(self._fd, 128, 0).split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            return 0.0

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
