from __future__ import annotations

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
