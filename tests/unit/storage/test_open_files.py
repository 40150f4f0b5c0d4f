"""The shared cache of open segment files: bounded, least recently used first, safe to share."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from strom.storage.open_files import OpenFileCache


def _files(tmp_path: Path, count: int) -> list[str]:
    paths = []
    for index in range(count):
        path = tmp_path / f"{index}.log"
        path.write_bytes(f"file {index}".encode())
        paths.append(str(path))
    return paths


def test_never_holds_more_than_its_capacity_and_closes_the_least_recently_used(tmp_path: Path) -> None:
    cache = OpenFileCache(3)
    paths = _files(tmp_path, 5)
    for path in paths[:3]:
        cache.pread(path, 6, 0)
    cache.pread(paths[0], 6, 0)  # 0 is now the most recently used; 1 is the least
    cache.pread(paths[3], 6, 0)
    assert cache.open_files == 3
    assert cache.evictions_total == 1
    opens = cache.opens_total
    cache.pread(paths[0], 6, 0)  # still open
    assert cache.opens_total == opens
    cache.pread(paths[1], 6, 0)  # was closed: reopened
    assert cache.opens_total == opens + 1
    assert cache.pread(paths[4], 100, 0) == b"file 4"
    assert cache.open_files == 3


def test_a_pinned_file_is_never_closed_under_its_user(tmp_path: Path) -> None:
    cache = OpenFileCache(1)
    first, second = _files(tmp_path, 2)
    fd = cache.acquire(first)
    assert cache.pread(second, 6, 0) == b"file 1"  # over capacity while `first` is pinned
    assert os.pread(fd, 6, 0) == b"file 0"
    cache.release(first, fd)
    cache.pread(second, 6, 0)
    assert cache.open_files == 1


def test_forget_while_pinned_closes_on_release_and_the_next_user_opens_anew(tmp_path: Path) -> None:
    cache = OpenFileCache(4)
    (path,) = _files(tmp_path, 1)
    fd = cache.acquire(path)
    cache.forget(path)
    os.fstat(fd)  # still open for its user
    fresh = cache.acquire(path)
    assert fresh != fd
    cache.release(path, fd)
    with pytest.raises(OSError):
        os.fstat(fd)
    cache.release(path, fresh)
    assert cache.open_files == 1


def test_replace_never_leaves_the_old_file_open_under_the_new_name(tmp_path: Path) -> None:
    cache = OpenFileCache(4)
    target = tmp_path / "00.log"
    target.write_bytes(b"old")
    cache.pread(str(target), 3, 0)
    replacement = tmp_path / "00.log.cleaned"
    replacement.write_bytes(b"new")
    cache.replace(str(replacement), str(target))
    assert cache.pread(str(target), 3, 0) == b"new"


def test_create_only_when_asked(tmp_path: Path) -> None:
    cache = OpenFileCache(4)
    missing = str(tmp_path / "missing.log")
    with pytest.raises(FileNotFoundError):
        cache.pread(missing, 1, 0)
    fd = cache.acquire(missing, create=True)
    cache.release(missing, fd)
    assert os.path.exists(missing)


def test_out_of_descriptors_closes_idle_files_and_retries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = OpenFileCache(10)
    paths = _files(tmp_path, 3)
    cache.pread(paths[0], 1, 0)
    cache.pread(paths[1], 1, 0)
    real_open = os.open
    failures = [1]

    def open_once_exhausted(path: str, flags: int, mode: int = 0o777) -> int:
        if failures and path == paths[2]:
            failures.pop()
            raise OSError(errno.EMFILE, "Too many open files")
        return real_open(path, flags, mode)

    monkeypatch.setattr(os, "open", open_once_exhausted)
    assert cache.pread(paths[2], 6, 0) == b"file 2"
    assert cache.open_files == 1  # the idle ones were given back


def test_out_of_descriptors_with_nothing_to_give_back_raises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = OpenFileCache(10)
    (path,) = _files(tmp_path, 1)

    def exhausted(path: str, flags: int, mode: int = 0o777) -> int:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(os, "open", exhausted)
    with pytest.raises(OSError) as raised:
        cache.pread(path, 1, 0)
    assert raised.value.errno == errno.EMFILE
    assert cache.open_files == 0


def test_write_all_appends_creating_the_file_and_unpins_it(tmp_path: Path) -> None:
    cache = OpenFileCache(1)
    path = str(tmp_path / "new.log")
    cache.write_all(path, memoryview(b"abc"), 0)
    cache.write_all(path, memoryview(b"def"), 3)
    assert Path(path).read_bytes() == b"abcdef"
    (other,) = _files(tmp_path, 1)
    cache.pread(other, 6, 0)  # the written file is not pinned: it gives way at capacity 1
    assert cache.open_files == 1


def test_write_all_finishes_short_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = OpenFileCache(4)
    path = str(tmp_path / "short.log")
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real_write(fd, bytes(data)[:2]))
    cache.write_all(path, memoryview(b"abcdefg"), 0)
    assert Path(path).read_bytes() == b"abcdefg"


def test_write_all_that_fails_half_way_cuts_the_file_back_and_raises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = OpenFileCache(1)
    (path,) = _files(tmp_path, 1)  # "file 0": 6 bytes
    real_write = os.write
    calls = []

    def disk_full_after_two_bytes(fd: int, data: bytes) -> int:
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, bytes(data)[:2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", disk_full_after_two_bytes)
    with pytest.raises(OSError) as raised:
        cache.write_all(path, memoryview(b"more bytes"), 6)
    assert raised.value.errno == errno.ENOSPC
    monkeypatch.undo()
    assert Path(path).read_bytes() == b"file 0"
    other = tmp_path / "other.log"
    other.write_bytes(b"other!")
    cache.pread(str(other), 6, 0)  # unpinned after the failure too
    assert cache.open_files == 1
