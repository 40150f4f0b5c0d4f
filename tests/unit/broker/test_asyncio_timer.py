"""The coordinator's keyed timers: replace, push back, pull in, cancel.

The deadlines are checked on a manual loop whose clock moves only when the test says so (no
sleeping, nothing that depends on how busy the machine is); one test runs the timer on asyncio's
and uvloop's own loops and waits, with a deadline, for what fires there.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import uvloop

from strom.broker.groups import AsyncioTimer

# Deadlines are floats in seconds (as asyncio's loop.time()); a handle counts as due this close to
# its deadline, so whole-millisecond steps never miss one through rounding.
DUE_TOLERANCE_S = 1e-9


class ManualHandle:
    def __init__(self, deadline: float, callback: Callable[[str], None], key: str, sequence: int) -> None:
        self.deadline = deadline
        self.callback = callback
        self.key = key
        self.sequence = sequence
        self.cancelled = False

    def when(self) -> float:
        return self.deadline

    def cancel(self) -> None:
        self.cancelled = True


class ManualLoop:
    """``time()`` and ``call_at()`` as asyncio's loop has them; ``advance_ms`` runs what falls due,
    in deadline order, with the clock set to each handle's deadline while it runs."""

    def __init__(self, start_ms: int = 0) -> None:
        self.now = start_ms / 1000
        self._handles: list[ManualHandle] = []
        self._sequence = 0

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Callable[[str], None], key: str, /) -> ManualHandle:
        self._sequence += 1
        handle = ManualHandle(when, callback, key, self._sequence)
        self._handles.append(handle)
        return handle

    def live_handles(self) -> int:
        return sum(not handle.cancelled for handle in self._handles)

    def advance_ms(self, milliseconds: int) -> None:
        target = self.now + milliseconds / 1000
        while True:
            due = [
                handle
                for handle in self._handles
                if not handle.cancelled and handle.deadline <= target + DUE_TOLERANCE_S
            ]
            if not due:
                break
            handle = min(due, key=lambda candidate: (candidate.deadline, candidate.sequence))
            self._handles.remove(handle)
            self.now = max(self.now, handle.deadline)
            handle.callback(handle.key)
        self.now = target


def test_rescheduling_a_key_later_pushes_its_deadline_back_and_fires_once() -> None:
    loop = ManualLoop()
    timer = AsyncioTimer()
    timer.bind(loop)
    fired: list[str] = []
    timer.schedule("session", 20, lambda: fired.append("first"))
    loop.advance_ms(5)
    timer.schedule("session", 60, lambda: fired.append("pushed back"))  # a heartbeat: due at 65 ms
    loop.advance_ms(40)  # 45 ms: the first deadline has passed
    assert fired == []
    assert loop.live_handles() == 1  # the early handle re-armed itself for the later deadline
    loop.advance_ms(19)  # 64 ms
    assert fired == []
    loop.advance_ms(2)  # 66 ms
    assert fired == ["pushed back"]
    loop.advance_ms(1_000)
    assert fired == ["pushed back"]
    assert loop.live_handles() == 0


def test_many_pushes_back_keep_one_loop_handle() -> None:
    loop = ManualLoop()
    timer = AsyncioTimer()
    timer.bind(loop)
    fired: list[int] = []
    for beat in range(100):  # a heartbeat every 3 ms, each pushing the 10 ms session back
        timer.schedule("session", 10, lambda beat=beat: fired.append(beat))
        loop.advance_ms(3)
        assert loop.live_handles() == 1
    assert fired == []
    loop.advance_ms(10)
    assert fired == [99]


def test_an_earlier_deadline_is_honoured() -> None:
    loop = ManualLoop()
    timer = AsyncioTimer()
    timer.bind(loop)
    fired: list[str] = []
    timer.schedule("join", 5_000, lambda: fired.append("late"))
    timer.schedule("join", 10, lambda: fired.append("soon"))
    loop.advance_ms(9)
    assert fired == []
    loop.advance_ms(2)
    assert fired == ["soon"]
    loop.advance_ms(10_000)  # the replaced 5 s timer never fires
    assert fired == ["soon"]
    assert loop.live_handles() == 0


def test_keys_are_independent() -> None:
    loop = ManualLoop()
    timer = AsyncioTimer()
    timer.bind(loop)
    fired: list[str] = []
    timer.schedule("session-a", 30, lambda: fired.append("a"))
    timer.schedule("session-b", 10, lambda: fired.append("b"))
    timer.schedule("session-c", 20, lambda: fired.append("c"))
    timer.cancel("session-c")
    loop.advance_ms(100)
    assert fired == ["b", "a"]


def test_cancel_and_timers_scheduled_before_the_loop_is_bound() -> None:
    timer = AsyncioTimer()
    fired: list[str] = []
    timer.schedule("expiry", 10, lambda: fired.append("expiry"))
    timer.schedule("gone", 10, lambda: fired.append("gone"))
    timer.cancel("gone")
    loop = ManualLoop(start_ms=1_000)
    loop.advance_ms(500)  # time before binding does not count
    timer.bind(loop)  # "expiry" gets its full delay from now: due at 1510 ms
    timer.schedule("also-gone", 10, lambda: fired.append("also-gone"))
    timer.cancel("also-gone")
    loop.advance_ms(9)
    assert fired == []
    loop.advance_ms(2)
    assert fired == ["expiry"]
    timer.schedule("never", 10, lambda: fired.append("never"))
    timer.cancel_all()
    loop.advance_ms(1_000)
    assert fired == ["expiry"]
    assert loop.live_handles() == 0


def test_a_failing_operation_is_logged_and_other_timers_still_fire(caplog: pytest.LogCaptureFixture) -> None:
    loop = ManualLoop()
    timer = AsyncioTimer()
    timer.bind(loop)
    fired: list[str] = []

    def broken() -> None:
        raise RuntimeError("boom")

    timer.schedule("broken", 5, broken)
    timer.schedule("fine", 10, lambda: fired.append("fine"))
    with caplog.at_level(logging.ERROR, logger="strom.broker.groups"):
        loop.advance_ms(20)
    assert fired == ["fine"]
    assert "coordinator timer broken failed" in caplog.text


@pytest.mark.parametrize("run", [asyncio.run, uvloop.run], ids=["asyncio", "uvloop"])
def test_on_a_real_loop_each_key_runs_its_latest_operation_once(
    run: Callable[[Coroutine[Any, Any, list[str]]], list[str]],
) -> None:
    """The loops' own handles (``call_at``, ``cancel()``): only the order of events is checked,
    never how long they took. uvloop answers call_at of a time already come with a plain Handle (no
    ``when()``): a key scheduled at once and again before it fired (a member's session armed twice
    in one turn of the loop; found by the broker fuzzer) must not fail on it."""

    async def body() -> list[str]:
        loop = asyncio.get_running_loop()
        timer = AsyncioTimer()
        timer.bind(loop)
        fired: list[str] = []
        done: asyncio.Future[None] = loop.create_future()

        def last() -> None:
            fired.append("pushed back")
            done.set_result(None)

        timer.schedule("session", 10, lambda: fired.append("first"))
        timer.schedule("session", 30, last)  # replaces the operation, whenever the first deadline passes
        timer.schedule("pulled-in", 5_000, lambda: fired.append("late"))
        timer.schedule("pulled-in", 1, lambda: fired.append("pulled in"))
        timer.schedule("now", 0, lambda: fired.append("now"))
        timer.schedule("now", 0, lambda: fired.append("now again"))
        timer.schedule("now", -5, lambda: fired.append("now, replaced"))
        await asyncio.wait_for(done, timeout=30)
        timer.cancel_all()
        return fired

    assert sorted(run(body())) == ["now, replaced", "pulled in", "pushed back"]
