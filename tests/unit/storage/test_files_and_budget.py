"""File descriptors, the partition budget, and creates and deletes that are all or nothing on disk."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest

from strom.base import limits
from strom.base.clock import ManualClock
from strom.storage.budget import FileBudget
from strom.storage.config import LogConfig
from strom.storage.errors import LogFileError, PartitionBudgetError
from strom.storage.files import DELETED_SUFFIX, empty_trash
from strom.storage.lock import DataDirectoryLock, DataDirectoryLockedError
from strom.storage.log_manager import TOPICS_DIRECTORY_NAME, LogManager

from .helpers import append, make_batch, read_all


def manager(data_dir: Path, *, segment_files: int = 64, partitions: int = 1000) -> LogManager:
    logs = LogManager(data_dir, LogConfig(), ManualClock(), FileBudget(4096, segment_files, partitions))
    logs.load()
    return logs


def test_budget_from_the_open_files_limit() -> None:
    budget = FileBudget.from_open_files_limit(20_000)
    assert budget.segment_files_max == (20_000 - limits.process_reserved_fds) // 2
    assert budget.partitions_max == budget.segment_files_max
    tiny = FileBudget.from_open_files_limit(10)
    assert tiny.segment_files_max == limits.segment_files_open_min
    huge = FileBudget.from_open_files_limit(10_000_000)
    assert huge.partitions_max == limits.partitions_per_broker_max


def test_many_partitions_are_served_through_a_few_descriptors(tmp_path: Path) -> None:
    batch = make_batch([b"v" * 50])
    logs = manager(tmp_path / "data", segment_files=4)
    logs.create_topic("wide", 40, {"segment.bytes": str(2 * len(batch))})
    for _round in range(3):  # two batches a segment: every partition rolls once
        for partition in range(40):
            log = logs.log("wide", partition)
            assert log is not None
            append(log, batch)
            assert logs.files.open_files <= 4
    for partition in range(40):
        log = logs.log("wide", partition)
        assert log is not None
        assert [offset for offset, _, _ in read_all(log)] == [0, 1, 2]
        assert log.segment_count == 2
    assert logs.files.open_files <= 4
    logs.close()
    reopened = manager(tmp_path / "data", segment_files=4)
    assert reopened.files.open_files <= 4
    log = reopened.log("wide", 39)
    assert log is not None and log.log_end_offset == 3
    reopened.close()


def test_creates_beyond_the_partition_budget_are_refused_and_change_nothing(tmp_path: Path) -> None:
    logs = manager(tmp_path / "data", partitions=10)
    logs.create_topic("six", 6)
    with pytest.raises(PartitionBudgetError, match="holds 6 partitions and accepts at most 10"):
        logs.create_topic("five", 5)
    with pytest.raises(PartitionBudgetError):
        logs.create_topic("dry", 5, validate_only=True)
    with pytest.raises(PartitionBudgetError):
        logs.create_partitions("six", 11)
    assert logs.topic_names() == ["six"]
    assert not (tmp_path / "data" / "five-0").exists()
    logs.create_partitions("six", 10)
    # Internal topics (__consumer_offsets) are always created: groups cannot work without them.
    logs.create_topic("__internal", 3, internal=True)
    assert logs.partitions_held == 13
    logs.delete_topic("six")
    assert logs.partitions_held == 3
    logs.create_topic("five", 5)
    logs.close()


def test_a_create_that_fails_half_way_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data_dir = tmp_path / "data"
    logs = manager(data_dir)
    real_mkdir = Path.mkdir

    def mkdir_fails_at_partition_3(self: Path, *args: object, **kwargs: object) -> None:
        if self.name == "half-3":
            raise OSError(errno.EMFILE, "Too many open files")
        real_mkdir(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "mkdir", mkdir_fails_at_partition_3)
    with pytest.raises(LogFileError, match="Too many open files"):
        logs.create_topic("half", 6)
    monkeypatch.undo()
    assert logs.topic("half") is None and logs.partitions_held == 0
    assert sorted(path.name for path in data_dir.iterdir()) == [TOPICS_DIRECTORY_NAME]
    assert list((data_dir / TOPICS_DIRECTORY_NAME).iterdir()) == []
    logs.create_topic("half", 6)  # the name was given back
    logs.close()


def test_load_removes_partition_directories_no_topic_claims(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    logs = manager(data_dir)
    logs.create_topic("kept", 2)
    logs.close()
    # What a crash leaves: a create's directories without its topic file, a grow's extra
    # directory not yet in the topic file, a deleted topic's directory not yet removed.
    (data_dir / "interrupted-0").mkdir()
    (data_dir / "interrupted-0" / "00000000000000000000.log").write_bytes(b"")
    (data_dir / "kept-2").mkdir()
    (data_dir / f"gone-0.0123456789ab{DELETED_SUFFIX}").mkdir()
    (data_dir / "not-a-partition").mkdir()
    reopened = LogManager(data_dir, LogConfig(), ManualClock(), FileBudget(4096, 64, 1000))
    messages = reopened.load()
    assert any("removing" in line and "interrupted-0" in line for line in messages)
    assert any("removing" in line and "kept-2" in line for line in messages)
    empty_trash(reopened.trash.take())
    names = sorted(path.name for path in data_dir.iterdir() if path.is_dir())
    assert names == [TOPICS_DIRECTORY_NAME, "kept-0", "kept-1", "not-a-partition"]
    kept = reopened.topic("kept")
    assert kept is not None and kept.partitions == 2
    reopened.close()


def test_a_topic_file_whose_directories_are_missing_still_loads(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    logs = manager(data_dir)
    logs.create_topic("lost", 2)
    logs.close()
    shutil.rmtree(data_dir / "lost-1")
    reopened = LogManager(data_dir, LogConfig(), ManualClock(), FileBudget(4096, 64, 1000))
    messages = reopened.load()
    assert any("lost-1 is missing" in line for line in messages)
    log = reopened.log("lost", 1)
    assert log is not None
    append(log, make_batch([b"x"]))
    reopened.close()


def test_delete_commits_by_removing_the_topic_file_then_renames_directories(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    logs = manager(data_dir)
    logs.create_topic("doomed", 3)
    log = logs.log("doomed", 0)
    assert log is not None
    append(log, make_batch([b"x"]))
    detached = logs.detach_topic("doomed")
    assert logs.topic("doomed") is None and logs.log("doomed", 0) is None
    with pytest.raises(LogFileError, match="is closed"):
        append(log, make_batch([b"y"]))
    renamed = logs.remove_topic_files(detached)
    assert not (data_dir / TOPICS_DIRECTORY_NAME / "doomed.json").exists()
    assert len(renamed) == 3 and all(path.name.endswith(DELETED_SUFFIX) for path in renamed)
    assert not (data_dir / "doomed-0").exists()
    logs.create_topic("doomed", 1)  # the names are free before the old files are gone
    empty_trash(renamed)
    assert not any(path.exists() for path in renamed)
    logs.close()


def test_new_partitions_have_no_files_until_written(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    logs = manager(data_dir)
    logs.create_topic("fresh", 2)
    assert list((data_dir / "fresh-0").iterdir()) == []
    log = logs.log("fresh", 0)
    assert log is not None
    append(log, make_batch([b"x"]))
    assert (data_dir / "fresh-0" / "00000000000000000000.log").stat().st_size > 0
    logs.close()
    # A clean close writes only what a reopen needs: with one segment, its log is all there is.
    assert list((data_dir / "fresh-1").iterdir()) == []
    assert [path.name for path in (data_dir / "fresh-0").iterdir()] == ["00000000000000000000.log"]
    reopened = manager(data_dir)
    log = reopened.log("fresh", 0)
    assert log is not None
    log.roll()
    append(log, make_batch([b"y"]))
    reopened.close()
    assert sorted(path.name for path in (data_dir / "fresh-0").iterdir()) == [
        "00000000000000000000.index",
        "00000000000000000000.log",
        "00000000000000000000.timeindex",
        "00000000000000000001.log",
        "producer_state.json",
    ]


def test_the_data_directory_lock_is_exclusive_and_names_its_holder(tmp_path: Path) -> None:
    lock = DataDirectoryLock(tmp_path / "data")
    with pytest.raises(DataDirectoryLockedError) as refused:
        DataDirectoryLock(tmp_path / "data")
    assert refused.value.holder_pid == os.getpid()
    assert str(tmp_path / "data") in str(refused.value) and str(os.getpid()) in str(refused.value)
    lock.release()
    DataDirectoryLock(tmp_path / "data").release()


def test_a_create_refused_for_want_of_descriptors_removes_its_directories_without_any(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data_dir = tmp_path / "data"
    logs = manager(data_dir)

    def exhausted(path: object, flags: int, mode: int = 0o777) -> int:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(os, "open", exhausted)  # fsyncing the data directory fails, and rmtree would
    with pytest.raises(LogFileError, match="Too many open files"):
        logs.create_topic("starved", 3)
    monkeypatch.undo()
    assert not list(data_dir.glob("starved-*"))
    logs.close()
