from __future__ import annotations

from pathlib import Path

from strom.storage.config import LogConfig

from .conftest import OpenLog
from .helpers import T0_MS, append, make_batch, read_all, read_values

DAY_MS = 86_400_000


def keyed(pairs: list[tuple[bytes, bytes | None]], timestamp_ms: int = T0_MS) -> bytes:
    return make_batch(
        [value for _, value in pairs], keys=[key for key, _ in pairs], timestamp_ms=timestamp_ms
    )


def test_keeps_the_latest_value_per_key_with_offsets_unchanged(open_log: OpenLog) -> None:
    log = open_log(LogConfig(cleanup_policy="compact"))
    append(log, keyed([(b"a", b"1"), (b"b", b"1"), (b"a", b"2")]))
    append(log, keyed([(b"c", b"1")]))
    append(log, keyed([(b"b", b"2"), (b"a", b"3")]))
    log.roll()
    append(log, keyed([(b"a", b"4")]))  # in the active segment: not looked at yet
    size_before = log.size_bytes
    freed = log.compact(T0_MS)
    assert freed > 0
    assert log.size_bytes == size_before - freed
    assert read_all(log) == [(3, b"c", b"1"), (4, b"b", b"2"), (5, b"a", b"3"), (6, b"a", b"4")]
    assert log.log_end_offset == 7
    assert append(log, keyed([(b"d", b"1")])).base_offset == 7
    assert log.compact(T0_MS) == 0  # nothing more to do until the active segment rolls


def test_reads_land_inside_the_gaps_compaction_leaves(open_log: OpenLog) -> None:
    log = open_log(LogConfig(cleanup_policy="compact", index_interval_bytes=0))
    for value in range(5):
        append(log, keyed([(b"k", str(value).encode())]))
    append(log, keyed([(b"other", b"x")]))
    log.roll()
    log.compact(T0_MS)
    assert [offset for offset, _, _ in read_all(log)] == [4, 5]
    # Offset 1 was compacted away: the read starts at the next batch that still exists.
    assert [offset for offset, _, _ in read_values(log.read(1, 1 << 20).records)] == [4, 5]


def test_tombstones_stay_for_delete_retention_then_go(open_log: OpenLog) -> None:
    log = open_log(LogConfig(cleanup_policy="compact", delete_retention_ms=DAY_MS))
    append(log, keyed([(b"a", b"1"), (b"b", b"1")]))
    append(log, keyed([(b"a", None)], timestamp_ms=T0_MS + 10))
    log.roll()
    log.compact(T0_MS + 1000)
    assert read_all(log) == [(1, b"b", b"1"), (2, b"a", None)]
    log.compact(T0_MS + 10 + DAY_MS)
    assert read_all(log) == [(1, b"b", b"1")]
    assert log.log_end_offset == 3


def test_min_compaction_lag_protects_young_segments(open_log: OpenLog) -> None:
    log = open_log(LogConfig(cleanup_policy="compact", min_compaction_lag_ms=60_000))
    append(log, keyed([(b"a", b"1"), (b"a", b"2")]))
    log.roll()
    append(log, keyed([(b"z", b"z")]))
    assert log.compact(T0_MS + 59_999) == 0
    assert log.compact(T0_MS + 60_001) > 0
    assert read_all(log) == [(1, b"a", b"2"), (2, b"z", b"z")]


def test_delete_policy_does_not_compact(open_log: OpenLog) -> None:
    log = open_log()
    append(log, keyed([(b"a", b"1"), (b"a", b"2")]))
    log.roll()
    assert log.compact(T0_MS) == 0
    assert not log.requires_keys
    assert open_log(LogConfig(cleanup_policy="compact,delete")).requires_keys


def test_compacted_log_reopens_with_the_same_contents(open_log: OpenLog) -> None:
    config = LogConfig(cleanup_policy="compact")
    log = open_log(config)
    append(log, keyed([(b"a", b"1"), (b"b", b"1"), (b"a", b"2")]))
    log.roll()
    log.compact(T0_MS)
    expected = read_all(log)
    log.close()
    assert read_all(open_log(config, recover_all=False)) == expected
    assert expected == [(1, b"b", b"1"), (2, b"a", b"2")]


def test_compaction_never_moves_the_log_start_offset(tmp_path: Path, open_log: OpenLog) -> None:
    # One batch a segment; every key is overwritten later, so the first segments empty out.
    first = keyed([(b"a", b"1")])
    config = LogConfig(cleanup_policy="compact", segment_bytes=len(first))
    log = open_log(config)
    for value in range(6):
        append(log, keyed([(b"a" if value < 5 else b"b", str(value).encode())]))
    append(log, keyed([(b"c", b"6")]))
    assert log.segment_count == 7
    assert log.compact(T0_MS) > 0
    log.apply_retention(T0_MS)  # a segment emptied by compaction is not "below the log start"
    assert log.log_start_offset == 0
    assert read_all(log) == [(4, b"a", b"4"), (5, b"b", b"5"), (6, b"c", b"6")]
    # Offsets compacted away read as the next record that survived, not OFFSET_OUT_OF_RANGE.
    for offset in range(5):
        assert read_values(log.read(offset, 1 << 20).records)[0][0] == 4
    assert log.offset_for_timestamp(0) == (4, T0_MS)
    log.close()
    for recover_all in (False, True):
        reopened = open_log(config, recover_all=recover_all)
        assert reopened.log_start_offset == 0
        assert read_values(reopened.read(0, 1 << 20).records)[0][0] == 4
        reopened.apply_retention(T0_MS)
        assert reopened.log_start_offset == 0
        reopened.close()


def test_small_cleaned_segments_are_merged_into_one(open_log: OpenLog) -> None:
    batch = keyed([(b"k0", b"v")])
    log = open_log(LogConfig(cleanup_policy="compact", segment_bytes=len(batch) * 3))
    for index in range(9):
        append(log, keyed([(f"k{index % 3}".encode(), str(index).encode())]))
    append(log, keyed([(b"z", b"active")]))
    assert log.segment_base_offsets == [0, 3, 6, 9]
    log.compact(T0_MS)
    # Three survivors (6, 7, 8) fit one segment: the cleaned segments became one at base 0.
    assert log.segment_base_offsets == [0, 9]
    assert [offset for offset, _, _ in read_all(log)] == [6, 7, 8, 9]
    assert log.compact(T0_MS) == 0  # nothing left to do until more rolls


def test_a_merge_interrupted_by_a_crash_is_finished_on_open(tmp_path: Path, open_log: OpenLog) -> None:
    batch = keyed([(b"k0", b"v")])
    config = LogConfig(cleanup_policy="compact", segment_bytes=len(batch) * 2)
    log = open_log(config)
    for index in range(4):
        append(log, keyed([(b"same", str(index).encode())]))
    append(log, keyed([(b"z", b"active")]))
    directory = tmp_path / "topic-0"
    old_second = (directory / f"{2:020d}.log").read_bytes()
    log.compact(T0_MS)
    assert log.segment_base_offsets == [0, 4]
    log.close()
    # The crash came after the merged file replaced segment 0 and before segment 2 went away.
    (directory / f"{2:020d}.log").write_bytes(old_second)
    (directory / ".strom_clean_shutdown").unlink(missing_ok=True)
    reopened = open_log(config)
    assert any("already merged" in line for line in reopened.recovery_messages)
    assert reopened.segment_base_offsets == [0, 4]
    assert [offset for offset, _, _ in read_all(reopened)] == [3, 4]


def test_a_pass_for_new_segments_only_skips_a_log_until_another_segment_is_inactive(
    open_log: OpenLog,
) -> None:
    """The broker's cleaner pass (every log.cleaner.backoff.ms) plans a compaction only when an
    inactive segment is past what the last compaction planned; the retention pass plans every time."""
    log = open_log(LogConfig(cleanup_policy="compact"))
    append(log, keyed([(b"a", b"1"), (b"a", b"2")]))
    log.roll()
    append(log, keyed([(b"b", b"1")]))
    assert log.plan_compaction(T0_MS, only_new=True) is not None  # a segment never compacted
    assert log.plan_compaction(T0_MS, only_new=True) is None  # nothing new since
    assert log.plan_compaction(T0_MS) is not None  # the full pass: every time
    log.roll()
    append(log, keyed([(b"c", b"1")]))
    job = log.plan_compaction(T0_MS, only_new=True)
    assert job is not None and len(job.segments) == 2
