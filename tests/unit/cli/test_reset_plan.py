"""The offset-reset planner: every target, the clamping into the log, and topic:partition parsing."""

from __future__ import annotations

import re

import pytest

from strom.cli.reset_plan import (
    PlannedReset,
    ResetTarget,
    export_csv,
    parse_duration_ms,
    parse_reset_csv,
    parse_topic_partitions,
    plan_offset_reset,
)

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


def test_to_current_keeps_committed_and_uses_the_end_elsewhere() -> None:
    plan = plan_offset_reset(
        [("t", 0), ("t", 1)], {("t", 0): 7}, {("t", 0): 0, ("t", 1): 0}, {("t", 0): 9, ("t", 1): 4},
        ResetTarget("current"),
    )  # fmt: skip
    assert [row.new_offset for row in plan] == [7, 4]


def test_file_offsets_are_clamped_into_the_log() -> None:
    plan = plan_offset_reset(
        [("t", 0), ("t", 1)], {}, {("t", 0): 2, ("t", 1): 0}, {("t", 0): 9, ("t", 1): 4},
        ResetTarget("file", offsets={("t", 0): 1, ("t", 1): 3}),
    )  # fmt: skip
    assert [row.new_offset for row in plan] == [2, 3]


@pytest.mark.parametrize(
    ("text", "expected_ms"),
    [("PT1H30M", 5_400_000), ("P1D", 86_400_000), ("PT0.5S", 500), ("p1dt2h", 93_600_000), ("PT0S", 0)],
)
def test_parse_duration_ms(text: str, expected_ms: int) -> None:
    assert parse_duration_ms(text) == expected_ms


@pytest.mark.parametrize("text", ["P", "PT", "1H", "PT1H2", "P1DT", "PT-1H", "P1W", ""])
def test_parse_duration_ms_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="PnDTnHnMnS"):
        parse_duration_ms(text)


def test_csv_export_and_parse_round_trip() -> None:
    plan = plan_offset_reset(
        [("a", 1), ("a", 0)],
        {},
        {("a", 0): 0, ("a", 1): 0},
        {("a", 0): 5, ("a", 1): 6},
        ResetTarget("latest"),
    )
    text = export_csv(plan)
    assert text == "a,0,5\na,1,6\n"
    assert parse_reset_csv(text, "g") == {("a", 0): 5, ("a", 1): 6}
    assert parse_reset_csv("\ng,a,0,3\nh,a,1,4\n", "g") == {("a", 0): 3}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a,0\n", "line 1: expected topic,partition,offset"),
        ("a,x,1\n", "line 1: partition and offset must be numbers"),
        ("a,0,-1\n", "not negative"),
        ("a,0,1\na,0,2\n", "line 2: a:0 appears twice"),
        ("h,a,0,1\n", "no offsets for group 'g' in the file (1 rows are for other groups)"),
        ("", "no offsets for group 'g'"),
    ],
)
def test_parse_reset_csv_refuses(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_reset_csv(text, "g")
