"""The open segment files of a whole log manager: at most ``capacity_files`` descriptors at once.

Every ``.log`` file of every segment is reached through one ``OpenFileCache``: a file is opened on
first use and stays open while it is used often; when the cache is full the least recently used
file is closed (and reopened by the next read or write that needs it). So the number of descriptors
strom holds for its logs never grows with the number of partitions or segments; the broker derives
the capacity from the process's open-files limit (``budget``), leaving the rest to connections.

Threads: the event loop reads and appends, the fsync worker fsyncs, the admin worker builds and
compacts logs, so the cache is shared. A descriptor is *pinned* while a thread uses it
(``acquire``/``release``, or the one-call helpers): a pinned file is never closed under its user;
``forget`` and ``replace`` take a path's entry out of the cache at once (the next user opens the file
anew) and the old descriptor is closed when its last user releases it. Opening, forgetting and
renaming happen under the cache's lock, so no thread can open the old file under a path that is
being replaced. The lock is never held across reads, writes or fsyncs.

While every entry is pinned the cache may exceed its capacity by the number of pinned files (one
per thread using the storage at that moment, a handful); the reserve in the budget covers that.

If opening fails because the process is out of descriptors (EMFILE/ENFILE, e.g. connections took
them), the cache closes its least recently used unpinned files and tries once more; if that fails
too the ``OSError`` goes to the caller, which turns it into a storage error for that request.
"""

from __future__ import annotations

import errno
import os
import threading
from collections import OrderedDict

# Errors that mean "no descriptor left", in the process or the whole system.
OUT_OF_DESCRIPTORS_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE})
# When opening fails for want of descriptors, at most this many idle files are closed before the
# one retry: enough to let a roll, a read and a flush through, not so many that the cache is emptied.
EVICT_ON_EXHAUSTION_FILES = 8

_OPEN_FLAGS = os.O_RDWR | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)


class _Entry:
    __slots__ = ("fd", "forgotten", "pins")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.pins = 0
        self.forgotten = False  # out of the map: closed when the last pin goes


class OpenFileCache:
    """File descriptors of segment files by path, least recently used closed first."""

    def __init__(self, capacity_files: int) -> None:
        assert capacity_files >= 1
        self.capacity_files = capacity_files
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._pinned_forgotten: dict[int, _Entry] = {}  # by descriptor
        self._open_files = 0  # includes forgotten entries still pinned
        self.opens_total = 0
        self.evictions_total = 0

    @property
    def open_files(self) -> int:
        """Descriptors held right now (for tests, metrics and logs)."""
        return self._open_files

    # ---- using a file ----------------------------------------------------------------------------

    def acquire(self, path: str, *, create: bool = False) -> int:
        """The descriptor of ``path`` (opened read-write in append mode if needed), pinned until
        ``release(path, fd)``. Without ``create`` a missing file raises FileNotFoundError."""
        with self._lock:  # the hot case (appends, reads of a busy segment), inlined
            entry = self._entries.get(path)
            if entry is not None:
                self._entries.move_to_end(path)
                entry.pins += 1
                return entry.fd
        return self._pin(path, create).fd

    def release(self, path: str, fd: int) -> None:
        with self._lock:
            entry = self._entries.get(path)
            if entry is None or entry.fd != fd:
                entry = self._pinned_forgotten.get(fd)
                assert entry is not None, f"release of descriptor {fd} that was never acquired"
            elif entry.pins > 1 or self._open_files <= self.capacity_files:
                entry.pins -= 1  # the hot case, inlined
                return
            self._unpin_locked(entry)

    def pread(self, path: str, size_bytes: int, position: int) -> bytes:
        entry = self._pinned(path, False)
        try:
            return os.pread(entry.fd, size_bytes, position)
        finally:
            self._unpin(entry)

    def write_all(self, path: str, data: memoryview, size_before: int) -> None:
        """Write all of ``data`` at the end of ``path`` (opened, created if missing), whose size is
        ``size_before``: a failed write is cut off again (best effort) and raises OSError."""
        entry = self._pinned(path, True)
        fd = entry.fd
        try:
            written = 0
            try:
                while written < len(data):  # os.write may write less than asked for (disk full)
                    written += os.write(fd, data[written:])
            except OSError:
                if written:
                    os.ftruncate(fd, size_before)
                raise
        finally:
            self._unpin(entry)

    def fsync(self, path: str) -> None:
        """fsync the file (a descriptor opened after the writes flushes them just as well)."""
        entry = self._pin(path, False)
        try:
            os.fsync(entry.fd)
        finally:
            with self._lock:
                self._unpin_locked(entry)

    # ---- changing what a path names -------------------------------------------------------------

    def forget(self, path: str) -> None:
        """Close ``path``'s descriptor (once unpinned); its next user opens the file anew."""
        with self._lock:
            self._forget_locked(path)

    def replace(self, source: str, target: str) -> None:
        """``os.replace(source, target)`` with both paths' descriptors forgotten first, atomically
        with respect to every other user of the cache."""
        with self._lock:
            self._forget_locked(source)
            self._forget_locked(target)
            os.replace(source, target)

    def close_all(self) -> None:
        with self._lock:
            for path in list(self._entries):
                self._forget_locked(path)

    # ---- internals -------------------------------------------------------------------------------

    def _pinned(self, path: str, create: bool) -> _Entry:
        """``path``'s entry, pinned; the hot case (reads and appends of a file already open) under
        the lock once, without ``_pin``'s checks."""
        with self._lock:
            entry = self._entries.get(path)
            if entry is not None:
                self._entries.move_to_end(path)
                entry.pins += 1
                return entry
        return self._pin(path, create)

    def _unpin(self, entry: _Entry) -> None:
        with self._lock:
            if entry.pins > 1 or not (entry.forgotten or self._open_files > self.capacity_files):
                entry.pins -= 1  # the hot case
            else:
                self._unpin_locked(entry)

    def _pin(self, path: str, create: bool) -> _Entry:
        with self._lock:
            entry = self._entries.get(path)
            if entry is not None:
                self._entries.move_to_end(path)
            else:
                entry = _Entry(self._open(path, create))
                self._entries[path] = entry
                self._open_files += 1
                self.opens_total += 1
            entry.pins += 1
            if self._open_files > self.capacity_files:
                self._evict_idle(self._open_files - self.capacity_files)
            return entry

    def _unpin_locked(self, entry: _Entry) -> None:
        entry.pins -= 1
        if entry.pins:
            return
        if entry.forgotten:
            del self._pinned_forgotten[entry.fd]
            self._close(entry.fd)
        elif self._open_files > self.capacity_files:
            self._evict_idle(self._open_files - self.capacity_files)

    def _open(self, path: str, create: bool) -> int:
        flags = _OPEN_FLAGS | (os.O_CREAT if create else 0)
        try:
            return os.open(path, flags, 0o644)
        except OSError as error:
            if error.errno not in OUT_OF_DESCRIPTORS_ERRNOS:
                raise
            if not self._evict_idle(EVICT_ON_EXHAUSTION_FILES):
                raise
            return os.open(path, flags, 0o644)

    def _evict_idle(self, count: int) -> int:
        """Close up to ``count`` unpinned files, least recently used first; returns how many."""
        closed = 0
        for path in list(self._entries):
            if closed >= count:
                break
            entry = self._entries[path]
            if entry.pins:
                continue
            del self._entries[path]
            self._close(entry.fd)
            self.evictions_total += 1
            closed += 1
        return closed

    def _forget_locked(self, path: str) -> None:
        entry = self._entries.pop(path, None)
        if entry is None:
            return
        if entry.pins:
            entry.forgotten = True
            self._pinned_forgotten[entry.fd] = entry
        else:
            self._close(entry.fd)

    def _close(self, fd: int) -> None:
        self._open_files -= 1
        os.close(fd)
