"""The leader-epoch cache (OffsetForLeaderEpoch answers, truncation) and its checkpoint file."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strom.storage.leader_epoch import (
    CHECKPOINT_FILE_NAME,
    UNDEFINED_EPOCH,
    UNDEFINED_OFFSET,
    EpochEntry,
    LeaderEpochCache,
    LeaderEpochCheckpointError,
    read_checkpoint,
    write_checkpoint,
)


def cache_of(*entries: tuple[int, int]) -> LeaderEpochCache:
    return LeaderEpochCache(entries)


def test_assign_records_new_epochs_and_ignores_known_or_older_ones() -> None:
    cache = LeaderEpochCache()
    assert cache.latest_epoch == UNDEFINED_EPOCH
    assert cache.assign(0, 0)
    assert not cache.assign(0, 10), "the same epoch again changes nothing"
    assert cache.assign(3, 100)
    assert not cache.assign(2, 150), "an older epoch is never added after a newer one"
    assert cache.entries == (EpochEntry(0, 0), EpochEntry(3, 100))
    assert cache.latest_epoch == 3 and cache.earliest_epoch == 0


def test_assign_drops_entries_of_a_truncated_tail() -> None:
    cache = cache_of((0, 0), (2, 50), (4, 80))
    assert cache.assign(5, 60)
    assert cache.entries == (EpochEntry(0, 0), EpochEntry(2, 50), EpochEntry(5, 60))
    assert cache.assign(6, 50)
    assert cache.entries == (EpochEntry(0, 0), EpochEntry(6, 50))


@pytest.mark.parametrize(
    ("requested", "expected"),
    [
        (4, (4, 200)),  # the latest epoch ends at the log end
        (2, (2, 150)),  # ends where the next epoch starts
        (3, (2, 150)),  # an epoch this log never had: the largest below it, ending at the next start
        (0, (0, 100)),
        (-1, (UNDEFINED_EPOCH, UNDEFINED_OFFSET)),
        (5, (UNDEFINED_EPOCH, UNDEFINED_OFFSET)),  # newer than anything here
    ],
)
def test_end_offset_for(requested: int, expected: tuple[int, int]) -> None:
    cache = cache_of((0, 0), (2, 100), (4, 150))
    assert cache.end_offset_for(requested, log_end_offset=200) == expected


def test_end_offset_for_an_epoch_older_than_the_cache() -> None:
    cache = cache_of((3, 40), (5, 90))
    assert cache.end_offset_for(1, log_end_offset=120) == (1, 40)
    assert LeaderEpochCache().end_offset_for(1, log_end_offset=0) == (UNDEFINED_EPOCH, UNDEFINED_OFFSET)


def test_epoch_at() -> None:
    cache = cache_of((1, 10), (4, 20))
    assert [cache.epoch_at(offset) for offset in (0, 10, 19, 20, 99)] == [UNDEFINED_EPOCH, 1, 1, 4, 4]


def test_truncate_from_end() -> None:
    cache = cache_of((0, 0), (2, 100), (4, 150))
    assert not cache.truncate_from_end(200)
    assert cache.truncate_from_end(150)
    assert cache.entries == (EpochEntry(0, 0), EpochEntry(2, 100))
    assert cache.truncate_from_end(99)
    assert cache.entries == (EpochEntry(0, 0),)


def test_truncate_from_start() -> None:
    cache = cache_of((0, 0), (2, 100), (4, 150))
    assert not cache.truncate_from_start(0)
    assert cache.truncate_from_start(120)
    assert cache.entries == (EpochEntry(2, 120), EpochEntry(4, 150))
    assert cache.truncate_from_start(150)
    assert cache.entries == (EpochEntry(4, 150),)
    assert cache.truncate_from_start(170)
    assert cache.entries == (EpochEntry(4, 170),)


def test_checkpoint_round_trip_in_kafkas_text_format(tmp_path: Path) -> None:
    path = tmp_path / CHECKPOINT_FILE_NAME
    assert read_checkpoint(path) == LeaderEpochCache(), "no file: an empty cache"
    cache = cache_of((0, 0), (3, 1200))
    write_checkpoint(path, cache)
    assert path.read_text() == "0\n2\n0 0\n3 1200\n"
    assert read_checkpoint(path) == cache
    write_checkpoint(path, LeaderEpochCache())
    assert read_checkpoint(path) == LeaderEpochCache()
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("", "version line"),
        ("1\n0\n", "unknown format version"),
        ("0\nx\n", "not an integer"),
        ("0\n2\n0 0\n", "says 2 entries"),
        ("0\n1\n0\n", "expected 'epoch start_offset'"),
        ("0\n1\na b\n", "two integers"),
        ("0\n2\n3 10\n2 20\n", "does not follow"),
        ("0\n1\n-1 0\n", "negative"),
    ],
)
def test_a_damaged_checkpoint_is_refused_with_the_line(tmp_path: Path, content: str, problem: str) -> None:
    path = tmp_path / CHECKPOINT_FILE_NAME
    path.write_text(content)
    with pytest.raises(LeaderEpochCheckpointError, match=problem):
        read_checkpoint(path)


@given(
    st.lists(st.tuples(st.integers(0, 5), st.integers(0, 30)), max_size=30),
    st.integers(0, 40),
)
def test_entries_stay_strictly_increasing(steps: list[tuple[int, int]], truncate_at: int) -> None:
    cache = LeaderEpochCache()
    epoch = 0
    for bump, start in steps:
        epoch += bump
        cache.assign(epoch, start)
        entries = cache.entries
        assert all(a.epoch < b.epoch and a.start_offset < b.start_offset for a, b in pairwise(entries))
    cache.truncate_from_end(truncate_at)
    assert all(entry.start_offset < truncate_at for entry in cache.entries)
