"""A logging filter that bounds how many lines a logger writes per second.

A peer decides how often the broker logs about it: every malformed frame, oversize request or
slow connection is worth a warning, but a fuzzer or a broken client retrying in a loop must not
fill the disk with them. Loggers that report peer faults (``strom.broker.peer``) carry a
``RateLimitFilter``: a token bucket that lets ``burst`` lines through at once and then
``lines_per_s`` on average. Lines it drops are counted, and the next line let through says how
many were dropped, so nothing is silently lost from the operator's view.
"""

from __future__ import annotations

import logging

from strom.base.clock import Clock, SystemClock

__all__ = ["RateLimitFilter"]


class RateLimitFilter(logging.Filter):
    """Token bucket over log records: ``burst`` at once, refilled at ``lines_per_s``."""

    def __init__(self, lines_per_s: float, burst: int, clock: Clock | None = None) -> None:
        super().__init__()
        assert lines_per_s > 0 and burst >= 1, (lines_per_s, burst)
        self.lines_per_s = lines_per_s
        self.burst = burst
        self._clock = clock or SystemClock()
        self._tokens = float(burst)
        self._refilled_ms = self._clock.monotonic_ms()
        self.suppressed = 0
        self.suppressed_total = 0

    def filter(self, record: logging.LogRecord) -> bool:
        now_ms = self._clock.monotonic_ms()
        elapsed_ms = now_ms - self._refilled_ms
        if elapsed_ms > 0:
            self._tokens = min(float(self.burst), self._tokens + elapsed_ms * self.lines_per_s / 1000)
            self._refilled_ms = now_ms
        if self._tokens < 1:
            self.suppressed += 1
            self.suppressed_total += 1
            return False
        self._tokens -= 1
        if self.suppressed:
            # Formatted here, once: the handler's formatter then sees a plain message.
            record.msg = f"{record.getMessage()} ({self.suppressed} similar lines suppressed)"
            record.args = None
            self.suppressed = 0
        return True
