"""The exclusive lock on a data directory: one broker per directory, as Kafka's ``.lock``.

Two brokers on one directory would both append to the same segment files and each recover the
other's live files on start, losing acknowledged records. The broker takes ``<data_dir>/.lock``
with ``flock(LOCK_EX | LOCK_NB)`` before it reads or writes anything else there and holds it until
it exits (the kernel drops it when the process dies, however it dies). The holder's PID is written
into the file so that a refused broker can say who holds it.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from strom.storage.errors import StorageError

LOCK_FILE_NAME = ".lock"


class DataDirectoryLockedError(StorageError):
    """Another process holds the data directory's lock."""

    def __init__(self, directory: Path, holder_pid: int | None) -> None:
        holder = f"process {holder_pid}" if holder_pid is not None else "another process"
        super().__init__(
            f"data directory {directory} is in use by {holder} (it holds {directory / LOCK_FILE_NAME}); "
            "stop that broker first or give this one another --data-dir"
        )
        self.directory = directory
        self.holder_pid = holder_pid


class DataDirectoryLock:
    """Held from construction until ``release`` (or the end of the process)."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / LOCK_FILE_NAME
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            raise DataDirectoryLockedError(directory, holder) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None
