"""The offset-reset planner: every target, the clamping into the log, and topic:partition parsing."""

from __future__ import annotations

import pytest

from strom.cli.reset_plan import PlannedReset, ResetTarget, parse_topic_partitions, plan_offset_reset

PARTITIONS = [("orders", 0), ("orders", 1)]
STARTS = {("orders", 0): 10, ("orders", 1): 0}
ENDS = {("orders", 0): 100, ("orders", 1): 50}
COMMITTED: dict[tuple[str, int], int | None] = {("orders", 0): 40, ("orders", 1): None}


def new_offsets(target: ResetTarget, at_time: dict[tuple[str, int], int | None] | None = None) -> list[int]:
    return [row.new_offset for row in plan_offset_reset(PARTITIONS, COMMITTED, STARTS, ENDS, target, at_time)]


def test_earliest_and_latest_are_the_log_bounds() -> None:
    assert new_offsets(ResetTarget("earliest")) == [10, 0]
    assert new_offsets(ResetTarget("latest")) == [100, 50]


def test_to_offset_is_clamped_into_each_log() -> None:
    assert new_offsets(ResetTarget("offset", 30)) == [30, 30]
    assert new_offsets(ResetTarget("offset", 5)) == [10, 5]  # below partition 0's log start
    assert new_offsets(ResetTarget("offset", 70)) == [70, 50]  # past partition 1's end


def test_shift_moves_from_committed_or_from_the_log_start() -> None:
    assert new_offsets(ResetTarget("shift", 5)) == [45, 5]
    assert new_offsets(ResetTarget("shift", -35)) == [10, 0]  # clamped at the start
    assert new_offsets(ResetTarget("shift", 1_000)) == [100, 50]  # clamped at the end


def test_datetime_uses_offsets_by_time_and_the_end_when_none_is_that_new() -> None:
    at_time: dict[tuple[str, int], int | None] = {("orders", 0): 60, ("orders", 1): None}
    assert new_offsets(ResetTarget("datetime", 1_700_000_000_000), at_time) == [60, 50]


def test_rows_carry_current_offsets_and_bounds_sorted_without_duplicates() -> None:
    plan = plan_offset_reset(
        [("orders", 1), ("orders", 0), ("orders", 1)], COMMITTED, STARTS, ENDS, ResetTarget("earliest")
    )
    assert plan == [
        PlannedReset("orders", 0, 40, 10, 10, 100),
        PlannedReset("orders", 1, None, 0, 0, 50),
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("orders", ("orders", None)),
        ("orders:0", ("orders", [0])),
        ("orders:2,0,2", ("orders", [0, 2])),
        ("a:b:1", ("a:b", [1])),
    ],
)
def test_parse_topic_partitions(text: str, expected: tuple[str, list[int] | None]) -> None:
    assert parse_topic_partitions(text) == expected


@pytest.mark.parametrize("text", [":1", "orders:", "orders:x", "orders:-1"])
def test_parse_topic_partitions_refuses_malformed(text: str) -> None:
    with pytest.raises(ValueError, match=r"orders|topic|partitions"):
        parse_topic_partitions(text)
