"""Small durable-file helpers shared by the storage modules."""

from __future__ import annotations

import os
from pathlib import Path


def write_file_atomically(path: Path, content: bytes) -> None:
    """Write ``content`` to ``path`` so a crash leaves either the old or the new file, whole:
    write a temporary file, fsync it, rename it over the target, fsync the directory."""
    temporary = path.with_name(path.name + ".tmp")
    write_file_synced(temporary, content)
    os.replace(temporary, path)
    fsync_directory(path.parent)


def write_file_synced(path: Path, content: bytes) -> None:
    """Create or truncate ``path``, write all of ``content`` (os.write may write less than asked
    for) and fsync it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(content)
        written = 0
        while written < len(view):
            written += os.write(fd, view[written:])
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
