"""A watchdog for the event loop: how late does it run a timer?

Every client of a broker waits while the loop runs one callback, so a callback (or a blocking call
inside one) that takes long stalls everyone. The monitor sets a timer ``interval_ms`` ahead, again
and again, and measures how late it fires; the lateness is the longest any other work kept the
loop (to within one interval), plus whatever the operating system took (a loaded machine
descheduling the broker). A stall of ``limits.loop_stall_warning_ms`` or more is logged as a
warning, at most one line per ``WARNING_INTERVAL_S`` (the line gives the worst stall since the
previous one and how many there were), so an operator sees when admin work, compaction or a slow
disk blocks the loop; the worst stall since start is kept in ``max_lag_ms``. The line also says
how long Python's cyclic garbage collector ran during the worst stall (``gc.callbacks``): a full
collection over a large heap holds every thread, and is otherwise invisible; and how long the
loop's thread waited for a CPU meanwhile (runnable but not running, Linux's
``/proc/thread-self/schedstat``): on a loaded machine that is the share of the stall the operating
system took, not the broker's work (0 where the kernel does not say).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import threading
import time
from collections.abc import Callable

from strom.base import limits

log = logging.getLogger("strom.broker")

# One wake-up per interval (a plain timer callback, no task): 40 a second resolve stalls to 25 ms,
# half the 50 ms worth reporting. Measured cost: ~3 ms of CPU a second on an idle broker (each
# wake-up is a trip through epoll), nothing extra on a busy one (the loop is awake anyway).
INTERVAL_MS = 25
WARNING_INTERVAL_S = 1.0


class CollectorClock:
    """How long the cyclic garbage collector has run, in seconds (a ``gc.callbacks`` entry)."""

    def __init__(self) -> None:
        self.total_s = 0.0
        self._started = 0.0

    def __call__(self, phase: str, _info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.total_s += time.perf_counter() - self._started


class RunQueueClock:
    """How long the thread that opened it has waited for a CPU, in seconds: the second field of
    Linux's ``/proc/thread-self/schedstat`` (nanoseconds runnable but not running). Always 0
    where that file does not exist. Read with one ``pread`` of a descriptor opened once."""

    def __init__(self) -> None:
        self._fd: int | None = None
        with contextlib.suppress(OSError):
            self._fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)

    def __call__(self) -> float:
        if self._fd is None:
            return 0.0
        try:
            fields = os.pread(self._fd, 128, 0).split()
            return int(fields[1]) / 1e9
        except (OSError, IndexError, ValueError):
            return 0.0

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


# The broker's threads are looked up again at most this often (threads of a pool start lazily).
THREADS_REFRESH_S = 1.0


class OtherThreadsRunQueueClock:
    """How long the process's threads other than the one that made it have waited for a CPU, in
    seconds, summed. While the loop stalls this tells the scheduler's share that the loop's own
    clock cannot see: a worker thread holding the interpreter lock while it waits for a CPU keeps
    the loop waiting on the lock, which is not a wait for a CPU of the loop's thread. (Summed over
    threads it may count a thread that waited without holding the lock: a bound, not an exact
    share.) One ``pread`` per thread; the list of threads is refreshed at most every
    ``THREADS_REFRESH_S``; a thread that ended keeps what it had waited."""

    def __init__(self, monotonic_s: Callable[[], float] = time.monotonic) -> None:
        self._own = str(threading.get_native_id())
        self._monotonic_s = monotonic_s
        self._fds: dict[str, int] = {}
        self._last: dict[str, float] = {}
        self._ended_s = 0.0
        self._refreshed = float("-inf")
        self._available = os.path.isdir("/proc/self/task")

    def _refresh(self) -> None:
        self._refreshed = self._monotonic_s()
        try:
            tids = set(os.listdir("/proc/self/task")) - {self._own}
        except OSError:
            return
        for tid in tids - self._fds.keys():
            with contextlib.suppress(OSError):
                self._fds[tid] = os.open(f"/proc/self/task/{tid}/schedstat", os.O_RDONLY)

    def __call__(self) -> float:
        if not self._available:
            return 0.0
        if self._monotonic_s() - self._refreshed >= THREADS_REFRESH_S:
            self._refresh()
        total = self._ended_s
        for tid, fd in list(self._fds.items()):
            try:
                waited = int(os.pread(fd, 128, 0).split()[1]) / 1e9
            except (OSError, IndexError, ValueError):  # the thread ended: keep what it had
                os.close(fd)
                del self._fds[tid]
                ended = self._last.pop(tid, 0.0)
                self._ended_s += ended
                total += ended
                continue
            self._last[tid] = waited
            total += waited
        return total

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


class LoopLagMonitor:
    def __init__(
        self,
        warning_ms: int = limits.loop_stall_warning_ms,
        interval_ms: int = INTERVAL_MS,
        monotonic_s: Callable[[], float] = time.monotonic,
        run_queue_s: Callable[[], float] | None = None,
        others_run_queue_s: Callable[[], float] | None = None,
    ) -> None:
        self.warning_ms = warning_ms
        self._monotonic_s = monotonic_s
        # None: the loop thread's own RunQueueClock, opened by run() on that thread.
        self._run_queue_s = run_queue_s
        self._run_queue_at_arm = 0.0
        self._unreported_waited_ms = 0.0
        # None: an OtherThreadsRunQueueClock made by run() on the loop's thread.
        self._others_run_queue_s = others_run_queue_s
        self._others_at_arm = 0.0
        self._unreported_others_waited_ms = 0.0
        self.interval_ms = interval_ms
        self.max_lag_ms = 0.0
        self._unreported_count = 0
        self._unreported_max_ms = 0.0
        self._last_warning = float("-inf")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._expected = 0.0
        self._collector = CollectorClock()
        self._collector_at_arm = 0.0
        self._unreported_collector_ms = 0.0

    async def run(self) -> None:
        """Measure until cancelled."""
        self._loop = asyncio.get_running_loop()
        own_clock = None
        if self._run_queue_s is None:
            own_clock = RunQueueClock()  # opened here: the loop's thread
            self._run_queue_s = own_clock
        others_clock = None
        if self._others_run_queue_s is None:
            others_clock = OtherThreadsRunQueueClock()
            self._others_run_queue_s = others_clock
        gc.callbacks.append(self._collector)
        self._arm()
        try:
            await self._loop.create_future()  # never completes
        finally:
            gc.callbacks.remove(self._collector)
            if self._handle is not None:
                self._handle.cancel()
            if own_clock is not None:
                own_clock.close()
                self._run_queue_s = None
            if others_clock is not None:
                others_clock.close()
                self._others_run_queue_s = None

    def _arm(self) -> None:
        assert self._loop is not None
        self._expected = self._loop.time() + self.interval_ms / 1000
        self._collector_at_arm = self._collector.total_s
        if self._run_queue_s is not None:
            self._run_queue_at_arm = self._run_queue_s()
        if self._others_run_queue_s is not None:
            self._others_at_arm = self._others_run_queue_s()
        self._handle = self._loop.call_at(self._expected, self._tick)

    def _tick(self) -> None:
        assert self._loop is not None
        lag_ms = (self._loop.time() - self._expected) * 1000
        collector_ms = (self._collector.total_s - self._collector_at_arm) * 1000
        waited_ms = others_waited_ms = 0.0
        if lag_ms >= self.warning_ms:
            if self._run_queue_s is not None:
                waited_ms = (self._run_queue_s() - self._run_queue_at_arm) * 1000
            if self._others_run_queue_s is not None:
                others_waited_ms = (self._others_run_queue_s() - self._others_at_arm) * 1000
        self.observe(lag_ms, collector_ms, waited_ms, others_waited_ms)
        self._arm()

    def observe(
        self, lag_ms: float, collector_ms: float = 0.0, waited_ms: float = 0.0, others_waited_ms: float = 0.0
    ) -> None:
        """A timer ran ``lag_ms`` late; the garbage collector ran ``collector_ms`` meanwhile, the
        loop's thread waited ``waited_ms`` for a CPU and the broker's other threads
        ``others_waited_ms`` (summed)."""
        self.max_lag_ms = max(self.max_lag_ms, lag_ms)
        if lag_ms < self.warning_ms:
            return
        self._unreported_count += 1
        if lag_ms > self._unreported_max_ms:
            self._unreported_max_ms = lag_ms
            self._unreported_collector_ms = collector_ms
            self._unreported_waited_ms = waited_ms
            self._unreported_others_waited_ms = others_waited_ms
        now = self._monotonic_s()
        if now - self._last_warning < WARNING_INTERVAL_S:
            return
        log.warning(
            "event loop stalled for %.0f ms (%d stalls of %d ms or more since the last report; "
            "the garbage collector ran %.0f ms and the loop waited %.0f ms for a CPU during the worst,"
            " the broker's other threads %.0f ms)",
            self._unreported_max_ms,
            self._unreported_count,
            self.warning_ms,
            self._unreported_collector_ms,
            self._unreported_waited_ms,
            self._unreported_others_waited_ms,
        )
        self._last_warning = now
        self._unreported_count = 0
        self._unreported_max_ms = 0.0
        self._unreported_collector_ms = 0.0
        self._unreported_waited_ms = 0.0
        self._unreported_others_waited_ms = 0.0
