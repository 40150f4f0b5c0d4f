"""How long a thread has waited for a CPU: the second field of Linux's ``schedstat`` of a thread
(nanoseconds runnable but not running). Stall tests subtract it, for the broker's event-loop
thread and for their own probe, from the gaps they measure: on a machine loaded by other work a
gap is partly the scheduler's, and the bounds are about what the broker's own work cost."""

from __future__ import annotations

import contextlib
import os

OWN_THREAD = "/proc/thread-self/schedstat"


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


class ProcessRunQueueWait:
    """Seconds every thread of process ``pid`` has waited for a CPU, summed (threads that ended
    keep what they had waited). A broker's worker thread descheduled while it holds the
    interpreter's lock holds the event loop too, so a stall bound leaves all of them out."""

    def __init__(self, pid: int) -> None:
        self._pid = pid
        self._threads: dict[str, RunQueueWait] = {}
        self._last: dict[str, float] = {}
        self._ended_s = 0.0

    def __call__(self) -> float:
        with contextlib.suppress(OSError):
            for tid in os.listdir(f"/proc/{self._pid}/task"):
                if tid not in self._threads:
                    self._threads[tid] = RunQueueWait(f"/proc/{self._pid}/task/{tid}/schedstat")
        total = self._ended_s
        for tid, clock in list(self._threads.items()):
            waited = clock()
            if waited == 0.0 and self._last.get(tid, 0.0) > 0.0:  # ended: keep what it had
                clock.close()
                del self._threads[tid]
                ended = self._last.pop(tid)
                self._ended_s += ended
                total += ended
                continue
            self._last[tid] = waited
            total += waited
        return total

    def close(self) -> None:
        for clock in self._threads.values():
            clock.close()
        self._threads.clear()
