"""The pure helpers of benchmarks/coordinator_failover.py: statistics and reading broker logs."""

from __future__ import annotations

import datetime

import pytest

from benchmarks.coordinator_failover import cluster_stages, parse_load_lines, spread


def test_spread_is_min_median_max() -> None:
    assert spread([3.0, 1.0, 2.0]) == (1.0, 2.0, 3.0)
    assert spread([4.0, 1.0]) == (1.0, 2.5, 4.0)


def test_spread_of_nothing_is_refused() -> None:
    with pytest.raises(ValueError):
        spread([])


def _stamp(at: datetime.datetime) -> str:
    return at.strftime("%Y-%m-%d %H:%M:%S,") + f"{at.microsecond // 1000:03d}"


def test_parse_load_lines_takes_the_partitions_first_line_after_the_moment() -> None:
    at = datetime.datetime(2026, 11, 22, 19, 45, 1, 250_000)
    after = at + datetime.timedelta(seconds=5)
    text = "\n".join(
        [
            f"{_stamp(at)} INFO strom.broker.groups: coordinating __consumer_offsets-7: loaded from 3 records in 9 ms",
            f"{_stamp(after)} INFO strom.broker.groups: coordinating __consumer_offsets-12: loaded from 1 records in 4 ms",
            f"{_stamp(after)} INFO strom.broker.groups: coordinating __consumer_offsets-7: loaded from 5 records in 12 ms",
            f"{_stamp(after)} INFO strom.broker.groups: coordinating __consumer_offsets-7: loaded from 5 records in 30 ms",
            "a line without a timestamp: coordinating __consumer_offsets-7: loaded from 5 records in 99 ms",
        ]
    )
    moment = (at + datetime.timedelta(seconds=1)).timestamp()
    assert parse_load_lines(text, 7, moment) == 12.0
    assert parse_load_lines(text, 7, at.timestamp()) == 9.0
    assert parse_load_lines(text, 12, moment) == 4.0
    assert parse_load_lines(text, 3, moment) is None
    assert parse_load_lines(text, 7, (after + datetime.timedelta(seconds=1)).timestamp()) is None


def test_cluster_stages_add_up_to_the_figure() -> None:
    stages = cluster_stages(5_000.0, 5_040.0, 5_100.0, 6_000.0)
    assert stages == (5_000.0, 40.0, 60.0, 900.0)
    assert sum(stages) == 6_000.0


def test_cluster_stages_without_an_observed_expiry_merge_the_first_two() -> None:
    assert cluster_stages(None, 5_040.0, 5_100.0, 6_000.0) == (5_040.0, 0.0, 60.0, 900.0)
