"""Keyed timers: ``schedule(key, delay_ms, operation)`` replaces any timer with the same key.

The coordinator never sleeps or polls; it asks for an operation to run later under a key built by
one of the helpers below, so two kinds of timer never collide and re-arming is just scheduling again.
The broker drives these from asyncio; tests use ``ManualTimer`` over a ``ManualClock``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from strom.base.clock import ManualClock


class Timer(Protocol):
    def schedule(self, key: str, delay_ms: int, operation: Callable[[], None]) -> None: ...

    def cancel(self, key: str) -> None: ...


def session_timeout_key(group_id: str, member_id: str) -> str:
    return f"session/{group_id}/{member_id}"


def pending_member_key(group_id: str, member_id: str) -> str:
    return f"pending-member/{group_id}/{member_id}"


def join_key(group_id: str) -> str:
    return f"join/{group_id}"


def initial_delay_key(group_id: str) -> str:
    return f"initial-delay/{group_id}"


def sync_timeout_key(group_id: str) -> str:
    return f"sync/{group_id}"


def consumer_session_key(group_id: str, member_id: str) -> str:
    """A member of a consumer group (KIP-848) must heartbeat before this fires."""
    return f"consumer-session/{group_id}/{member_id}"


def consumer_rebalance_key(group_id: str, member_id: str) -> str:
    """A member of a consumer group revoking partitions must be done before this fires."""
    return f"consumer-rebalance/{group_id}/{member_id}"


def offsets_expiry_key() -> str:
    return "offsets-expiry"


def group_timer_keys(group_id: str, member_ids: list[str]) -> list[str]:
    """Every key a group may have armed: used when the group is unloaded or deleted."""
    keys = [join_key(group_id), initial_delay_key(group_id), sync_timeout_key(group_id)]
    for member_id in member_ids:
        keys.append(session_timeout_key(group_id, member_id))
        keys.append(pending_member_key(group_id, member_id))
    return keys


class ManualTimer:
    """Timers over a ``ManualClock``: ``advance(ms)`` moves the clock and runs what fell due, in order.

    Operations due at the same instant run in the order they were scheduled. An operation may
    schedule or cancel timers; one scheduled to fall due inside the advanced window runs too.
    """

    def __init__(self, clock: ManualClock) -> None:
        self._clock = clock
        self._sequence = 0
        # key -> (due monotonic ms, scheduling sequence, operation)
        self._timers: dict[str, tuple[int, int, Callable[[], None]]] = {}

    def schedule(self, key: str, delay_ms: int, operation: Callable[[], None]) -> None:
        assert delay_ms >= 0, f"timer {key!r} scheduled {delay_ms} ms in the past"
        self._sequence += 1
        self._timers[key] = (self._clock.monotonic_ms() + delay_ms, self._sequence, operation)

    def cancel(self, key: str) -> None:
        self._timers.pop(key, None)

    def pending_keys(self) -> list[str]:
        return sorted(self._timers, key=lambda key: self._timers[key][:2])

    def due_in_ms(self, key: str) -> int | None:
        """How long until ``key`` fires, or None if it is not armed."""
        entry = self._timers.get(key)
        return None if entry is None else entry[0] - self._clock.monotonic_ms()

    def advance(self, ms: int) -> None:
        assert ms >= 0, f"time never goes backwards (advance by {ms} ms)"
        target_ms = self._clock.monotonic_ms() + ms
        while self._timers:
            key = min(self._timers, key=lambda candidate: self._timers[candidate][:2])
            due_ms, _, operation = self._timers[key]
            if due_ms > target_ms:
                break
            del self._timers[key]
            self._clock.advance(max(0, due_ms - self._clock.monotonic_ms()))
            operation()
        self._clock.advance(target_ms - self._clock.monotonic_ms())
