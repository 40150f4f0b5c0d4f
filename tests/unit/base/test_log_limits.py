"""RateLimitFilter: a burst, then a steady rate; dropped lines are counted and reported."""

from __future__ import annotations

import logging

from strom.base.clock import ManualClock
from strom.base.log_limits import RateLimitFilter


def _record(message: str = "closing connection %d", *args: object) -> logging.LogRecord:
    return logging.LogRecord("strom.broker.peer", logging.WARNING, __file__, 1, message, args or (7,), None)


def test_a_burst_passes_then_lines_are_dropped_until_tokens_refill() -> None:
    clock = ManualClock()
    limiter = RateLimitFilter(lines_per_s=2, burst=3, clock=clock)
    assert [limiter.filter(_record()) for _ in range(5)] == [True, True, True, False, False]
    assert limiter.suppressed == 2
    clock.advance(499)  # not yet a whole token at 2 lines per second
    assert not limiter.filter(_record())
    clock.advance(1)
    record = _record()
    assert limiter.filter(record)
    assert record.getMessage() == "closing connection 7 (3 similar lines suppressed)"
    assert limiter.suppressed == 0
    assert limiter.suppressed_total == 3


def test_the_bucket_never_holds_more_than_the_burst() -> None:
    clock = ManualClock()
    limiter = RateLimitFilter(lines_per_s=10, burst=2, clock=clock)
    clock.advance(3_600_000)
    assert [limiter.filter(_record()) for _ in range(3)] == [True, True, False]


def test_a_steady_flood_is_held_to_the_rate() -> None:
    clock = ManualClock()
    limiter = RateLimitFilter(lines_per_s=5, burst=50, clock=clock)
    passed = 0
    for _ in range(10_000):  # 10,000 lines over 10 s
        passed += limiter.filter(_record())
        clock.advance(1)
    # The burst, then 5 a second for 10 s (the last token may still be a fraction short).
    assert 50 + 5 * 10 - 1 <= passed <= 50 + 5 * 10
    assert limiter.suppressed_total == 10_000 - passed


def test_logger_with_the_filter_writes_only_what_passes() -> None:
    clock = ManualClock()
    logger = logging.getLogger("tests.log_limits")
    logger.propagate = False
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    handler = Collect()
    logger.addHandler(handler)
    limiter = RateLimitFilter(lines_per_s=1, burst=1, clock=clock)
    logger.addFilter(limiter)
    try:
        for index in range(4):
            logger.warning("line %d", index)
        clock.advance(1000)
        logger.warning("line %d", 4)
    finally:
        logger.removeFilter(limiter)
        logger.removeHandler(handler)
    assert lines == ["line 0", "line 4 (3 similar lines suppressed)"]
