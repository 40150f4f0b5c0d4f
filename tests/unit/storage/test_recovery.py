from __future__ import annotations

import os
from pathlib import Path

from strom.storage.config import LogConfig

from .conftest import OpenLog
from .helpers import append, make_batch, read_all


def _active_log_file(tmp_path: Path) -> Path:
    return sorted((tmp_path / "topic-0").glob("*.log"))[-1]


def test_torn_tail_is_truncated_reported_and_appends_continue(tmp_path: Path, open_log: OpenLog) -> None:
    log = open_log()
    batch = make_batch([b"a" * 50, b"b" * 50])
    for _ in range(3):
        append(log, batch)
    log.close()
    log_file = _active_log_file(tmp_path)
    os.truncate(log_file, log_file.stat().st_size - 10)  # a write torn by a crash
    reopened = open_log()
    assert reopened.recovery_messages == [
        f"recovered topic-0: truncated {len(batch) - 10} bytes at offset 4 (torn batch)"
    ]
    assert reopened.log_end_offset == 4
    assert append(reopened, batch).base_offset == 4
    assert [offset for offset, _, _ in read_all(reopened)] == list(range(6))


def test_flipped_byte_in_the_last_batch_is_cut_by_crc(tmp_path: Path, open_log: OpenLog) -> None:
    log = open_log()
    batch = make_batch([b"c" * 100])
    for _ in range(3):
        append(log, batch)
    log.close()
    log_file = _active_log_file(tmp_path)
    content = bytearray(log_file.read_bytes())
    content[-5] ^= 0xFF
    log_file.write_bytes(bytes(content))
    reopened = open_log()
    assert reopened.recovery_messages == [
        f"recovered topic-0: truncated {len(batch)} bytes at offset 2 (CRC mismatch)"
    ]
    assert reopened.log_end_offset == 2
    assert log_file.stat().st_size == 2 * len(batch)


def test_partial_header_at_the_end_is_cut(tmp_path: Path, open_log: OpenLog) -> None:
    log = open_log()
    append(log, make_batch([b"d"]))
    log.close()
    with open(_active_log_file(tmp_path), "ab") as file:
        file.write(b"\x00" * 20)
    reopened = open_log()
    assert reopened.recovery_messages == [
        "recovered topic-0: truncated 20 bytes at offset 1 (partial batch header)"
    ]
    assert reopened.log_end_offset == 1


def test_unclean_shutdown_recovers_older_segments_and_drops_the_ones_after_damage(
    tmp_path: Path, open_log: OpenLog
) -> None:
    batch = make_batch([b"e" * 100])
    config = LogConfig(segment_bytes=len(batch) * 2)
    log = open_log(config)
    for _ in range(6):
        append(log, batch)
    log.close()
    first_segment = sorted((tmp_path / "topic-0").glob("*.log"))[0]
    content = bytearray(first_segment.read_bytes())
    content[len(batch) + 70] ^= 0xFF  # inside the second batch's record: only its CRC can tell
    first_segment.write_bytes(bytes(content))
    clean = open_log(config, recover_all=False)  # trusted indexes: older segments are not validated
    assert clean.log_end_offset == 6
    clean.close()
    reopened = open_log(config, recover_all=True)
    assert reopened.recovery_messages == [
        f"recovered topic-0: truncated {len(batch)} bytes at offset 1 (CRC mismatch)",
        "recovered topic-0: removed 2 segments after it",
    ]
    assert reopened.log_end_offset == 1
    assert reopened.segment_base_offsets == [0]
    assert append(reopened, batch).base_offset == 1


def test_index_files_are_rebuilt_and_lookups_still_work(tmp_path: Path, open_log: OpenLog) -> None:
    config = LogConfig(index_interval_bytes=0)
    log = open_log(config)
    for index in range(10):
        append(log, make_batch([f"{index}".encode()] * 2))
    log.roll()  # index files are written for inactive segments (the active one is always recovered)
    append(log, make_batch([b"last"] * 2))
    log.close()
    index_file = sorted((tmp_path / "topic-0").glob("*.index"))[0]
    assert index_file.stat().st_size == 9 * 8  # every batch but the first, 8 bytes an entry
    index_file.write_bytes(b"")
    reopened = open_log(config)
    assert [offset for offset, _, _ in read_all(reopened)] == list(range(22))
    # Rebuilt in memory by recovery; written back whole when the log closes.
    reopened.close()
    assert index_file.stat().st_size == 9 * 8
