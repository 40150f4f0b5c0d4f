"""A watchdog for the event loop: how late does it run a timer?

Every client of a broker waits while the loop runs one callback, so a callback (or a blocking call
inside one) that takes long stalls everyone. The monitor sleeps ``interval_ms`` at a time and
measures how late it wakes up; the lateness is the longest any other work kept the loop (to within
one interval), plus whatever the operating system took (a loaded machine descheduling the broker).
A stall of ``limits.loop_stall_warning_ms`` or more is logged as a warning, at most one line per
``WARNING_INTERVAL_S`` (the line gives the worst stall since the previous one and how many there
were), so an operator sees when admin work, compaction or a slow disk blocks the loop; the worst
stall since start is kept in ``max_lag_ms``.
"""

from __future__ import annotations

import asyncio
import logging
import time

from strom.base import limits

log = logging.getLogger("strom.broker")

# One wake-up per interval: ~100 a second costs nothing measurable and resolves stalls to 10 ms.
INTERVAL_MS = 10
WARNING_INTERVAL_S = 1.0


class LoopLagMonitor:
    def __init__(
        self, warning_ms: int = limits.loop_stall_warning_ms, interval_ms: int = INTERVAL_MS
    ) -> None:
        self.warning_ms = warning_ms
        self.interval_ms = interval_ms
        self.max_lag_ms = 0.0
        self._unreported_count = 0
        self._unreported_max_ms = 0.0
        self._last_warning = 0.0

    async def run(self) -> None:
        interval_s = self.interval_ms / 1000
        while True:
            expected = time.perf_counter() + interval_s
            await asyncio.sleep(interval_s)
            self.observe((time.perf_counter() - expected) * 1000)

    def observe(self, lag_ms: float) -> None:
        self.max_lag_ms = max(self.max_lag_ms, lag_ms)
        if lag_ms < self.warning_ms:
            return
        self._unreported_count += 1
        self._unreported_max_ms = max(self._unreported_max_ms, lag_ms)
        now = time.monotonic()
        if now - self._last_warning < WARNING_INTERVAL_S:
            return
        log.warning(
            "event loop stalled for %.0f ms (%d stalls of %d ms or more since the last report)",
            self._unreported_max_ms,
            self._unreported_count,
            self.warning_ms,
        )
        self._last_warning = now
        self._unreported_count = 0
        self._unreported_max_ms = 0.0
