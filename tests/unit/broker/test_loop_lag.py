"""The event-loop watchdog: stalls worth reporting are logged, at most a line a second."""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time

import pytest

from strom.broker.loop_lag import LoopLagMonitor, OtherThreadsRunQueueClock, RunQueueClock


def test_stalls_are_reported_at_most_once_a_second_with_the_worst_in_between(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = [100.0]
    monitor = LoopLagMonitor(warning_ms=50, monotonic_s=lambda: clock[0])
    with caplog.at_level(logging.WARNING, logger="strom.broker"):
        monitor.observe(10)  # not a stall worth a line
        monitor.observe(60)
        clock[0] += 0.5
        monitor.observe(120, collector_ms=95, waited_ms=20, others_waited_ms=7)
        monitor.observe(70, collector_ms=3, waited_ms=60, others_waited_ms=65)
        clock[0] += 0.6
        monitor.observe(55)
    assert [record.getMessage() for record in caplog.records] == [
        "event loop stalled for 60 ms (1 stalls of 50 ms or more since the last report; "
        "the garbage collector ran 0 ms and the loop waited 0 ms for a CPU during the worst, "
        "the broker's other threads 0 ms)",
        "event loop stalled for 120 ms (3 stalls of 50 ms or more since the last report; "
        "the garbage collector ran 95 ms and the loop waited 20 ms for a CPU during the worst, "
        "the broker's other threads 7 ms)",
    ]
    assert monitor.max_lag_ms == 120


def test_a_blocked_loop_is_measured() -> None:
    monitor = LoopLagMonitor(interval_ms=1)

    async def block_the_loop() -> None:
        task = asyncio.create_task(monitor.run())
        await asyncio.sleep(0.01)
        blocked_until = asyncio.get_running_loop().time() + 0.05
        while asyncio.get_running_loop().time() < blocked_until:  # a callback that never yields
            pass
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(block_the_loop())
    assert monitor.max_lag_ms >= 40


def test_a_stall_in_the_garbage_collector_is_told_apart() -> None:
    """A full collection over a heap of many containers holds the loop; the monitor sees it."""
    monitor = LoopLagMonitor(interval_ms=1, warning_ms=10_000)
    seen: list[float] = []
    observe = monitor.observe

    def record(lag_ms: float, collector_ms: float = 0.0, waited_ms: float = 0.0, others: float = 0.0) -> None:
        seen.append(collector_ms)
        observe(lag_ms, collector_ms, waited_ms, others)

    monitor.observe = record  # type: ignore[method-assign]

    async def collect_a_large_heap() -> None:
        task = asyncio.create_task(monitor.run())
        await asyncio.sleep(0.01)
        heap = [[index] for index in range(300_000)]
        gc.collect()
        del heap
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(collect_a_large_heap())
    assert max(seen) > 0


def test_the_time_the_loop_waited_for_a_cpu_is_told_apart() -> None:
    """A stall the operating system caused (the loop's thread runnable, not running) is measured
    from the run-queue clock between arming the timer and its firing."""
    waited = [0.0, 0.0]
    monitor = LoopLagMonitor(
        interval_ms=1, warning_ms=20, run_queue_s=lambda: waited[0], others_run_queue_s=lambda: waited[1]
    )
    seen: list[tuple[float, float, float]] = []
    observe = monitor.observe

    def record(lag_ms: float, collector_ms: float = 0.0, waited_ms: float = 0.0, others: float = 0.0) -> None:
        seen.append((lag_ms, waited_ms, others))
        observe(lag_ms, collector_ms, waited_ms, others)

    monitor.observe = record  # type: ignore[method-assign]

    async def stall_while_descheduled() -> None:
        task = asyncio.create_task(monitor.run())
        await asyncio.sleep(0.01)
        blocked_until = asyncio.get_running_loop().time() + 0.05
        waited[0] += 0.04  # as if the kernel had left the thread waiting 40 ms of it
        waited[1] += 0.03  # and a worker thread (holding the interpreter's lock, say) 30 ms
        while asyncio.get_running_loop().time() < blocked_until:
            pass
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(stall_while_descheduled())
    lag_ms, waited_ms, others_ms = max(seen)
    assert lag_ms >= 40 and waited_ms == pytest.approx(40) and others_ms == pytest.approx(30)


def test_the_run_queue_clock_reads_this_threads_wait() -> None:
    clock = RunQueueClock()
    try:
        first = clock()
        assert first >= 0.0
        assert clock() >= first
    finally:
        clock.close()


def test_the_other_threads_clock_sums_their_waits_and_keeps_an_ended_threads() -> None:
    """Two busy threads beside this one: their waits are counted (never this thread's), the sum
    never goes back when one of them ends, and the clock sees threads started after it."""
    now = [0.0]
    clock = OtherThreadsRunQueueClock(monotonic_s=lambda: now[0])
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            pass

    try:
        first = clock()
        threads = [threading.Thread(target=spin) for _ in range(2)]
        for thread in threads:
            thread.start()
        time.sleep(0.2)  # two spinning threads and this one share the CPUs: someone waits
        now[0] += 2  # the list of threads is read again
        during = clock()
        stop.set()
        for thread in threads:
            thread.join()
        now[0] += 2
        after = clock()
        assert first >= 0.0
        assert during >= first
        assert after >= during
    finally:
        stop.set()
        clock.close()
