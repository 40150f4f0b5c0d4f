"""The pure helpers of benchmarks/consumer_protocol.py: gaps between arrivals and settled groups."""

from __future__ import annotations

from benchmarks.consumer_protocol import is_settled, longest_gap, longest_gap_at


def test_the_longest_gap_is_found_with_its_ends() -> None:
    arrivals = [1.0, 1.1, 1.5, 1.6, 3.0]
    assert longest_gap_at(arrivals, 1.0, 3.0) == (1.6, 3.0)
    assert longest_gap(arrivals, 1.0, 3.0) == 3.0 - 1.6


def test_the_window_ends_count_as_arrivals() -> None:
    # Nothing arrived in the window's first 0.9 s, or in its last second: gaps like any other.
    assert longest_gap_at([1.9, 2.0, 2.5], 1.0, 3.0) == (1.0, 1.9)
    assert longest_gap_at([1.1, 1.5, 2.0], 1.0, 3.0) == (2.0, 3.0)
    assert longest_gap_at([], 1.0, 3.0) == (1.0, 3.0)


def test_arrivals_outside_the_window_are_left_out() -> None:
    assert longest_gap_at([0.1, 0.2, 1.5, 9.0], 1.0, 2.0) == (1.0, 1.5)


def test_settled_means_every_partition_once_and_every_member_busy() -> None:
    topic = "t"
    assert is_settled([{(topic, 0)}, {(topic, 1)}], topic, 2)
    assert not is_settled([{(topic, 0), (topic, 1)}, {(topic, 1)}], topic, 2)  # owned twice
    assert not is_settled([{(topic, 0)}, set()], topic, 2)  # one unowned, one member idle
    assert not is_settled([{(topic, 0), (topic, 1)}, set()], topic, 2)  # a member idle
    # More members than partitions: some must stay idle.
    assert is_settled([{(topic, 0)}, set(), set()], topic, 1)


def test_gaps_begun_after_a_moment_can_be_left_out() -> None:
    arrivals = [1.0, 1.2, 1.3, 2.0]
    assert longest_gap_at(arrivals, 1.0, 2.0) == (1.3, 2.0)
    assert longest_gap_at(arrivals, 1.0, 2.0, begun_by_s=1.25) == (1.0, 1.2)
    assert longest_gap_at(arrivals, 1.0, 2.0, begun_by_s=1.3) == (1.3, 2.0)
