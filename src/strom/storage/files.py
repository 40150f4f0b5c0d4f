"""Small durable-file helpers shared by the storage modules."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path


def write_file_atomically(path: Path, content: bytes, *, sync: bool = True) -> None:
    """Write ``content`` to ``path`` so a crash leaves either the old or the new file, whole:
    write a temporary file, fsync it, rename it over the target, fsync the directory.

    ``sync=False`` leaves out both fsyncs, for a caller that syncs the whole file system after
    writing many files (a clean shutdown) and does not rely on the file until then."""
    temporary = path.with_name(path.name + ".tmp")
    write_file_synced(temporary, content, sync=sync)
    os.replace(temporary, path)
    if sync:
        fsync_directory(path.parent)


def write_file_synced(path: Path, content: bytes, *, sync: bool = True) -> None:
    """Create or truncate ``path``, write all of ``content`` (os.write may write less than asked
    for) and fsync it (unless ``sync=False``, see ``write_file_atomically``)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(content)
        written = 0
        while written < len(view):
            written += os.write(fd, view[written:])
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def fsync_directory(directory: Path) -> None:
    """Make a rename or a new file in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# Suffix of a file or directory that left the logs and waits for a worker thread to remove it.
DELETED_SUFFIX = ".deleted"


class Trash:
    """Files and directories taken out of the logs, to be removed later by a worker thread.

    Unlinking a large segment or a partition directory takes time the event loop does not have, so
    the loop only renames what goes (a ``.deleted`` name, as Kafka does) and drops the path here;
    ``empty_trash`` removes it in the background. Whatever a crash leaves behind under a
    ``.deleted`` name is removed on the next load.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._paths: list[Path] = []

    def add(self, paths: list[Path]) -> None:
        with self._lock:
            self._paths.extend(paths)

    def take(self) -> list[Path]:
        with self._lock:
            paths, self._paths = self._paths, []
        return paths

    def __len__(self) -> int:
        return len(self._paths)


def empty_trash(paths: list[Path], stop: threading.Event | None = None) -> None:
    """Remove files and directory trees (a worker thread's job); missing ones are fine. Returns
    early once ``stop`` is set (a broker shutting down): what is left is removed on the next load."""
    for path in paths:
        if stop is not None and stop.is_set():
            return
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
