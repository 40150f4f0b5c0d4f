"""The coordinator's keyed timers on a real event loop: replace, push back, pull in, cancel."""

from __future__ import annotations

import asyncio

from strom.broker.groups import AsyncioTimer


def run(body: object) -> None:
    asyncio.run(body)  # type: ignore[arg-type]


def test_rescheduling_a_key_replaces_its_timer_and_fires_once() -> None:
    async def body() -> None:
        timer = AsyncioTimer()
        timer.bind(asyncio.get_running_loop())
        fired: list[str] = []
        timer.schedule("session", 20, lambda: fired.append("first"))
        await asyncio.sleep(0.005)
        timer.schedule("session", 60, lambda: fired.append("pushed back"))  # a heartbeat
        await asyncio.sleep(0.04)
        assert fired == []  # the first deadline passed without firing
        await asyncio.sleep(0.06)
        assert fired == ["pushed back"]

    run(body())


def test_an_earlier_deadline_is_honoured() -> None:
    async def body() -> None:
        timer = AsyncioTimer()
        timer.bind(asyncio.get_running_loop())
        fired: list[str] = []
        timer.schedule("join", 5_000, lambda: fired.append("late"))
        timer.schedule("join", 10, lambda: fired.append("soon"))
        await asyncio.sleep(0.05)
        assert fired == ["soon"]

    run(body())


def test_cancel_and_timers_scheduled_before_the_loop_is_bound() -> None:
    timer = AsyncioTimer()
    fired: list[str] = []
    timer.schedule("expiry", 10, lambda: fired.append("expiry"))
    timer.schedule("gone", 10, lambda: fired.append("gone"))
    timer.cancel("gone")

    async def body() -> None:
        timer.bind(asyncio.get_running_loop())
        timer.schedule("also-gone", 10, lambda: fired.append("also-gone"))
        timer.cancel("also-gone")
        await asyncio.sleep(0.05)
        assert fired == ["expiry"]
        timer.schedule("never", 10, lambda: fired.append("never"))
        timer.cancel_all()
        await asyncio.sleep(0.03)
        assert fired == ["expiry"]

    run(body())
