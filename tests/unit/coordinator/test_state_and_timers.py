from __future__ import annotations

import itertools

import pytest

from strom.base.clock import ManualClock
from strom.coordinator import (
    ALLOWED_PREVIOUS,
    GroupState,
    IllegalStateTransition,
    ManualTimer,
    java_string_hashcode,
    partition_for_group,
    session_timeout_key,
)
from strom.coordinator.group import Group

ALL_MOVES = list(itertools.product(GroupState, GroupState))
LEGAL = [(current, target) for current, target in ALL_MOVES if current in ALLOWED_PREVIOUS[target]]
ILLEGAL = [(current, target) for current, target in ALL_MOVES if current not in ALLOWED_PREVIOUS[target]]


@pytest.mark.parametrize(("current", "target"), LEGAL)
def test_legal_transitions_change_state_and_timestamp(current: GroupState, target: GroupState) -> None:
    group = Group("g", state=current, state_timestamp_ms=1)
    group.transition_to(target, 42)
    assert group.state is target
    assert group.state_timestamp_ms == 42


@pytest.mark.parametrize(("current", "target"), ILLEGAL)
def test_illegal_transitions_raise_naming_group_and_states(current: GroupState, target: GroupState) -> None:
    group = Group("orders", state=current)
    with pytest.raises(IllegalStateTransition) as raised:
        group.transition_to(target, 42)
    message = str(raised.value)
    assert "orders" in message and current.value in message and target.value in message
    assert group.state is current


def test_table_matches_kafka() -> None:
    assert ALLOWED_PREVIOUS[GroupState.STABLE] == {GroupState.COMPLETING_REBALANCE}
    assert ALLOWED_PREVIOUS[GroupState.EMPTY] == {GroupState.PREPARING_REBALANCE}
    assert GroupState.DEAD in ALLOWED_PREVIOUS[GroupState.DEAD]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("a", 97),
        ("hello", 99162322),
        ("polygenelubricants", -(2**31)),
        ("\U0001f600", 0xD83D * 31 + 0xDE00),
    ],
)
def test_java_string_hashcode(text: str, expected: int) -> None:
    assert java_string_hashcode(text) == expected


def test_partition_for_group_uses_kafka_abs() -> None:
    # hashCode("polygenelubricants") is Integer.MIN_VALUE: Kafka's abs maps it to 0.
    assert partition_for_group("polygenelubricants", 50) == 0
    assert partition_for_group("hello", 50) == 99162322 % 50
    assert partition_for_group("group-with-negative-hash-xyz", 7) in range(7)


def test_manual_timer_runs_due_operations_in_order_and_replaces_keys() -> None:
    clock = ManualClock()
    timer = ManualTimer(clock)
    fired: list[tuple[str, int]] = []
    timer.schedule("a", 100, lambda: fired.append(("a", clock.monotonic_ms())))
    timer.schedule("b", 50, lambda: fired.append(("b", clock.monotonic_ms())))
    timer.schedule("a", 70, lambda: fired.append(("a2", clock.monotonic_ms())))
    timer.schedule("c", 10, lambda: timer.schedule("d", 5, lambda: fired.append(("d", clock.monotonic_ms()))))
    assert timer.pending_keys() == ["c", "b", "a"]
    timer.advance(60)
    assert fired == [("d", 15), ("b", 50)]
    assert clock.monotonic_ms() == 60
    timer.cancel("a")
    timer.advance(100)
    assert fired == [("d", 15), ("b", 50)]
    assert timer.pending_keys() == []


def test_key_helpers_do_not_collide() -> None:
    assert session_timeout_key("g", "m") != session_timeout_key("g/m", "")
