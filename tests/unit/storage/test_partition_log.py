from __future__ import annotations

import errno
import os
import random
from pathlib import Path

import pytest

from strom.protocol.records.header import compute_crc, iter_batch_headers, parse_batch_header
from strom.storage.config import LogConfig
from strom.storage.errors import LogFileError, OffsetOutOfRangeError, RecordTooLargeError
from strom.storage.segment import Segment

from .conftest import OpenLog
from .helpers import T0_MS, append, make_batch, read_all, read_values


def test_append_assigns_consecutive_offsets_and_read_returns_them(open_log: OpenLog) -> None:
    log = open_log()
    first = append(log, make_batch([b"a", b"b", b"c"]))
    second = append(log, make_batch([b"d"]), make_batch([b"e", b"f"]))
    assert (first.base_offset, first.last_offset) == (0, 2)
    assert (second.base_offset, second.last_offset) == (3, 5)
    assert first.log_append_time_ms == -1
    assert log.log_end_offset == log.high_watermark == 6
    assert [value for _, _, value in read_all(log)] == [b"a", b"b", b"c", b"d", b"e", b"f"]
    assert [offset for offset, _, _ in read_all(log)] == list(range(6))


def test_read_starts_at_the_batch_containing_the_offset(open_log: OpenLog) -> None:
    log = open_log(LogConfig(index_interval_bytes=0))
    for index in range(20):
        append(log, make_batch([f"v{index}-{n}".encode() for n in range(3)]))
    for offset in (0, 1, 2, 3, 31, 59):
        result = log.read(offset, 1)
        header = parse_batch_header(result.records)
        assert header.base_offset == offset - offset % 3
        assert header.last_offset >= offset


def test_a_small_read_is_served_from_the_bytes_read_to_find_its_batch(
    open_log: OpenLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finding the batch reads ahead; a read those bytes cover takes no second read of the file,
    and every read, covered or not, returns exactly the whole batches the log holds."""
    log = open_log(LogConfig(index_interval_bytes=4096))
    # Batches of 70 to 500 bytes: a batch starts less than 4096 + 500 bytes after the index entry
    # below it, and the 8192 bytes read from that entry cover any read of up to 3000 bytes.
    batches = [make_batch([f"v{index:02}".encode() * (1 + index * 3)]) for index in range(120)]
    for batch in batches:
        append(log, batch)
    stored = log.read(0, 1 << 30).records
    starts = [header.base_offset for header in iter_batch_headers(stored)]
    positions = [0]
    for header in iter_batch_headers(stored):
        positions.append(positions[-1] + header.size_bytes)
    preads: list[int] = []
    files = log._segments[-1]._files
    real_pread = files.pread

    def counting_pread(path: str, size_bytes: int, position: int) -> bytes:
        preads.append(size_bytes)
        return real_pread(path, size_bytes, position)

    monkeypatch.setattr(files, "pread", counting_pread)
    for index, offset in enumerate(starts):
        for max_bytes in (1, 100, 5_000, 1 << 20):
            preads.clear()
            records = log.read(offset, max_bytes).records
            end = index + 1
            while end < len(starts) and positions[end + 1] - positions[index] <= max_bytes:
                end += 1
            assert records == stored[positions[index] : positions[end]]
            if min(max_bytes, len(stored) - positions[index]) <= 3000:
                assert len(preads) == 1, (offset, max_bytes, preads)


def test_rolls_by_bytes_and_reads_across_segments(open_log: OpenLog) -> None:
    batch = make_batch([b"x" * 100])
    log = open_log(LogConfig(segment_bytes=len(batch) * 3))
    for _ in range(10):
        append(log, batch)
    assert log.segment_base_offsets == [0, 3, 6, 9]
    assert [offset for offset, _, _ in read_all(log)] == list(range(10))
    # A read from the middle of one segment continues into the next ones.
    assert [offset for offset, _, _ in read_values(log.read(4, 1 << 20).records)] == list(range(4, 10))


def test_one_request_larger_than_a_segment_is_split_across_a_roll(open_log: OpenLog) -> None:
    batch = make_batch([b"y" * 50])
    log = open_log(LogConfig(segment_bytes=len(batch) * 2))
    append(log, *[batch] * 5)
    assert log.segment_base_offsets == [0, 2, 4]
    assert [offset for offset, _, _ in read_all(log)] == list(range(5))


def test_rolls_by_time(open_log: OpenLog) -> None:
    log = open_log(LogConfig(segment_ms=1000))
    append(log, make_batch([b"a"]), now_ms=T0_MS)
    append(log, make_batch([b"b"]), now_ms=T0_MS + 999)
    assert log.segment_count == 1
    append(log, make_batch([b"c"]), now_ms=T0_MS + 1000)
    assert log.segment_base_offsets == [0, 2]


def test_batch_larger_than_max_message_bytes_is_refused(open_log: OpenLog) -> None:
    batch = make_batch([b"z" * 500])
    log = open_log(LogConfig(max_message_bytes=len(batch) - 1))
    with pytest.raises(RecordTooLargeError, match=r"max\.message\.bytes"):
        append(log, batch)
    assert log.log_end_offset == 0


def test_max_bytes_smaller_than_the_first_batch_still_returns_it_whole(open_log: OpenLog) -> None:
    log = open_log()
    big = make_batch([b"q" * 1000])
    append(log, big, make_batch([b"r"]))
    result = log.read(0, 10)
    assert result.records == bytes(log.read(0, len(big)).records)
    assert len(result.records) == len(big)
    assert log.read(0, 10, min_one_batch=False).records == b""


def test_max_bytes_cuts_at_whole_batches(open_log: OpenLog) -> None:
    log = open_log()
    batch = make_batch([b"w" * 100])
    for _ in range(5):
        append(log, batch)
    result = log.read(0, len(batch) * 2 + len(batch) // 2)
    assert len(result.records) == len(batch) * 2
    assert len(iter_batch_headers(result.records)) == 2


def test_max_offset_stops_before_the_given_offset(open_log: OpenLog) -> None:
    log = open_log()
    for _ in range(4):
        append(log, make_batch([b"m"]))
    assert [offset for offset, _, _ in read_values(log.read(0, 1 << 20, max_offset=2).records)] == [0, 1]


def test_offsets_out_of_range_on_both_sides(open_log: OpenLog) -> None:
    log = open_log()
    append(log, make_batch([b"a", b"b"]))
    assert log.read(2, 1000).records == b""
    with pytest.raises(OffsetOutOfRangeError):
        log.read(3, 1000)
    log.roll()
    append(log, make_batch([b"c"]))
    log.delete_records_before(2)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(1, 1000)
    result = log.read(2, 1000)
    assert result.log_start_offset == 2
    assert result.high_watermark == result.last_stable_offset == 3


def test_log_append_time_rewrites_timestamp_and_keeps_crc_valid(open_log: OpenLog) -> None:
    log = open_log(LogConfig(message_timestamp_type="LogAppendTime"))
    result = append(log, make_batch([b"a", b"b"], timestamp_ms=5), now_ms=T0_MS + 42)
    assert result.log_append_time_ms == T0_MS + 42
    stored = log.read(0, 1000).records
    header = parse_batch_header(stored)
    assert header.timestamp_type == 1
    assert header.max_timestamp == T0_MS + 42
    assert compute_crc(stored, 0, header.size_bytes) == header.crc


def test_offset_for_timestamp_and_max_timestamp(open_log: OpenLog) -> None:
    log = open_log(LogConfig(index_interval_bytes=0, segment_bytes=400))
    for index in range(12):
        append(log, make_batch([b"t" * 40, b"u" * 40], timestamp_ms=1000 * (index + 1)))
    assert log.segment_count > 2
    assert log.offset_for_timestamp(0) == (0, 1001)
    assert log.offset_for_timestamp(5001) == (8, 5001)
    assert log.offset_for_timestamp(5002) == (10, 6001)
    assert log.offset_for_timestamp(12_002) is None
    assert log.max_timestamp() == (23, 12_001)


def test_max_timestamp_of_an_empty_log(open_log: OpenLog) -> None:
    assert open_log().max_timestamp() == (-1, -1)


def test_delete_records_moves_start_and_deletes_whole_segments(open_log: OpenLog) -> None:
    batch = make_batch([b"d" * 100])
    log = open_log(LogConfig(segment_bytes=len(batch) * 2))
    for _ in range(6):
        append(log, batch)
    assert log.segment_base_offsets == [0, 2, 4]
    assert log.delete_records_before(3) == 3
    assert log.segment_base_offsets == [2, 4]
    assert [offset for offset, _, _ in read_values(log.read(3, 1 << 20).records)] == [3, 4, 5]
    assert log.delete_records_before(1) == 3  # never moves backwards
    assert log.delete_records_before(-1) == 6  # -1 = high watermark
    assert log.segment_base_offsets == [4]  # the active segment stays
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(7)


def test_retention_by_time_removes_whole_old_segments_but_never_the_active_one(open_log: OpenLog) -> None:
    batch_bytes = len(make_batch([b"r" * 100]))
    log = open_log(LogConfig(segment_bytes=batch_bytes * 2, retention_ms=10_000))
    for index in range(5):
        append(log, make_batch([b"r" * 100], timestamp_ms=T0_MS + index * 1000))
    assert log.segment_base_offsets == [0, 2, 4]
    assert log.apply_retention(T0_MS + 10_500) == 0
    freed = log.apply_retention(T0_MS + 11_001)  # the first segment's newest record is 1001 ms old + 10 s
    assert freed == batch_bytes * 2
    assert log.segment_base_offsets == [2, 4]
    assert log.log_start_offset == 2
    log.apply_retention(T0_MS + 100_000)
    assert log.segment_base_offsets == [4]
    assert log.log_start_offset == 4
    assert log.log_end_offset == 5


def test_retention_by_size(open_log: OpenLog) -> None:
    batch = make_batch([b"s" * 100])
    log = open_log(LogConfig(segment_bytes=len(batch) * 2, retention_bytes=len(batch) * 3))
    for _ in range(7):
        append(log, batch)
    assert log.size_bytes == len(batch) * 7
    assert log.apply_retention(T0_MS) == len(batch) * 4
    assert log.size_bytes == len(batch) * 3
    assert log.log_start_offset == 4


def test_retention_does_nothing_on_a_compact_only_topic(open_log: OpenLog) -> None:
    batch = make_batch([b"c"], keys=[b"k"])
    log = open_log(LogConfig(segment_bytes=len(batch), retention_ms=0, cleanup_policy="compact"))
    for _ in range(3):
        append(log, batch)
    assert log.apply_retention(T0_MS + 10**9) == 0
    assert log.segment_count == 3


def test_truncate_to_removes_the_tail_and_appends_continue(open_log: OpenLog) -> None:
    batch = make_batch([b"a", b"b"])
    log = open_log(LogConfig(segment_bytes=len(batch) * 2))
    for _ in range(4):
        append(log, batch)
    log.truncate_to(5)  # inside the batch 4..5: it goes whole
    assert log.log_end_offset == 4
    assert log.segment_base_offsets == [0, 4]
    log.truncate_to(3)
    assert log.log_end_offset == 2
    assert append(log, batch).base_offset == 2
    assert [offset for offset, _, _ in read_all(log)] == [0, 1, 2, 3]


def test_flush_policy_by_messages_and_by_time(open_log: OpenLog) -> None:
    log = open_log(LogConfig(flush_messages=5, flush_ms=1000))
    assert not log.needs_flush(T0_MS)
    append(log, make_batch([b"1", b"2"]), now_ms=T0_MS)
    assert not log.needs_flush(T0_MS + 999)
    assert log.needs_flush(T0_MS + 1000)
    append(log, make_batch([b"3", b"4", b"5"]), now_ms=T0_MS + 1)
    assert log.needs_flush(T0_MS + 1)
    log.flush()
    assert not log.needs_flush(T0_MS + 10_000)
    append(log, make_batch([b"6"]), now_ms=T0_MS + 20_000)
    assert not log.needs_flush(T0_MS + 20_999)
    assert log.needs_flush(T0_MS + 21_000)


def test_default_flush_policy_never_asks_for_fsync(open_log: OpenLog) -> None:
    log = open_log()
    append(log, make_batch([b"x"] * 50))
    assert not log.needs_flush(T0_MS + 10**12)


def test_offsets_survive_close_and_reopen(open_log: OpenLog) -> None:
    batch = make_batch([b"p" * 100])
    config = LogConfig(segment_bytes=len(batch) * 2, index_interval_bytes=0)
    log = open_log(config)
    for _ in range(5):
        append(log, batch)
    log.delete_records_before(1)
    log.close()
    reopened = open_log(config, recover_all=False)
    assert reopened.recovery_messages == []
    assert reopened.log_start_offset == 1
    assert reopened.log_end_offset == 5
    assert reopened.segment_base_offsets == [0, 2, 4]
    assert append(reopened, batch).base_offset == 5
    assert [offset for offset, _, _ in read_values(reopened.read(1, 1 << 20).records)] == list(range(1, 6))
    assert reopened.offset_for_timestamp(T0_MS) == (1, T0_MS)


def _fail_opening(monkeypatch: pytest.MonkeyPatch, name_suffix: str) -> None:
    """Opening any file whose name ends with ``name_suffix`` fails as if descriptors ran out."""
    real_open = os.open

    def exhausted(path: str, flags: int, mode: int = 0o777) -> int:
        if str(path).endswith(name_suffix):
            raise OSError(errno.EMFILE, "Too many open files")
        return real_open(path, flags, mode)

    monkeypatch.setattr(os, "open", exhausted)


def test_out_of_descriptors_at_a_roll_refuses_the_append_and_leaves_the_log_as_it_was(
    tmp_path: Path, open_log: OpenLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    batch = make_batch([b"r" * 60])
    log = open_log(LogConfig(segment_bytes=len(batch) * 2))
    append(log, batch, batch)
    _fail_opening(monkeypatch, f"{2:020d}.log")
    with pytest.raises(LogFileError, match="Too many open files"):
        append(log, batch)  # needs a new segment at offset 2
    assert log.log_end_offset == 2 and log.segment_base_offsets == [0]
    assert not (tmp_path / "topic-0" / f"{2:020d}.log").exists()
    # The same request split over a roll: nothing of it is written either.
    with pytest.raises(LogFileError):
        append(log, batch, batch, batch)
    assert log.log_end_offset == 2 and log.size_bytes == 2 * len(batch)
    monkeypatch.undo()
    assert append(log, batch).base_offset == 2  # usable again once descriptors are back
    assert log.segment_base_offsets == [0, 2]
    log.close()
    reopened = open_log(LogConfig(segment_bytes=len(batch) * 2))
    assert [offset for offset, _, _ in read_all(reopened)] == [0, 1, 2]


def test_a_write_failing_after_part_of_a_request_was_written_takes_that_part_back(
    open_log: OpenLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    batch = make_batch([b"w" * 60])
    log = open_log(LogConfig(segment_bytes=len(batch) * 2))
    append(log, batch)
    real_write = os.write

    def disk_full_in_the_new_segment(fd: int, data: bytes) -> int:
        if os.readlink(f"/proc/self/fd/{fd}").endswith(f"{2:020d}.log"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", disk_full_in_the_new_segment)
    with pytest.raises(LogFileError, match="No space left"):
        append(log, batch, batch, batch)  # offset 1 fits the first segment, 2 and 3 do not
    monkeypatch.undo()
    assert log.log_end_offset == 1 and log.segment_base_offsets == [0]
    assert [offset for offset, _, _ in read_all(log)] == [0]
    assert append(log, batch).base_offset == 1


def segment_facts(segment: Segment) -> tuple[object, ...]:
    """What a truncation must leave exactly as a whole recovery of the segment would."""
    return (
        segment.next_offset,
        segment.size_bytes,
        segment.max_timestamp_ms,
        list(segment._index_offsets),
        list(segment._index_positions),
        segment._bytes_since_index_entry,
        list(segment._time_timestamps),
    )


@pytest.mark.parametrize("seed", range(6))
def test_truncate_to_leaves_the_indexes_a_full_recovery_would_build(open_log: OpenLog, seed: int) -> None:
    """Truncation drops the index entries past the cut and reads again only the batches after
    the last entry kept; the indexes and facts must be those ``recover`` builds from the file."""
    chooser = random.Random(seed)
    log = open_log(LogConfig(index_interval_bytes=300))
    timestamp = T0_MS
    for _ in range(60):
        timestamp += chooser.randint(-5, 10)  # not monotonic: the running maximum matters
        values = [b"v" * chooser.randint(1, 80) for _ in range(chooser.randint(1, 3))]
        append(log, make_batch(values, timestamp_ms=timestamp))
    cuts = sorted(chooser.sample(range(1, log.log_end_offset), 8), reverse=True)
    for cut in cuts:
        log.truncate_to(cut)
        segment = log._segments[-1]
        truncated = segment_facts(segment)
        segment.recover()
        assert truncated == segment_facts(segment), f"cut at {cut}"
