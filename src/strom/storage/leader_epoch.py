"""The leader-epoch cache of one partition, and its checkpoint file.

Every batch a leader appends carries its leader epoch (the batch's ``partitionLeaderEpoch``). The
cache remembers where each epoch began: entries ``(epoch, start_offset)``, both strictly increasing.
It answers OffsetForLeaderEpoch ("where did epoch E end in your log?"), which is how a follower
finds the point where its log and the new leader's diverge (KIP-101, KIP-279), and it is cut back
whenever the log is truncated (from the end) or its start moves (retention, DeleteRecords).

The structure is pure: no files, no clock. ``read_checkpoint`` / ``write_checkpoint`` keep it in
``<partition dir>/leader-epoch-checkpoint`` in Kafka's text format::

    0                 format version
    2                 number of entries
    0 0               epoch start_offset
    3 1200

written atomically (temporary file, fsync, rename), so a crash leaves the old or the new file whole.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from strom.storage.files import write_file_atomically

CHECKPOINT_FILE_NAME = "leader-epoch-checkpoint"
CHECKPOINT_FORMAT_VERSION = 0

# OffsetForLeaderEpoch's "no such epoch / no offset" answers (Kafka's UNDEFINED_EPOCH and
# UNDEFINED_EPOCH_OFFSET).
UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class LeaderEpochCheckpointError(ValueError):
    """The checkpoint file is not in the expected format; the message names the file and line."""


class LeaderEpochCache:
    """Where each leader epoch starts in one partition's log."""

    def __init__(self, entries: Iterable[EpochEntry | tuple[int, int]] = ()) -> None:
        self._epochs: list[int] = []
        self._starts: list[int] = []
        for epoch, start_offset in entries:
            if self._epochs:
                assert epoch > self._epochs[-1], f"epochs must increase: {epoch} after {self._epochs[-1]}"
                assert start_offset > self._starts[-1], (
                    f"start offsets must increase: {start_offset} after {self._starts[-1]}"
                )
            assert epoch >= 0 and start_offset >= 0, (epoch, start_offset)
            self._epochs.append(epoch)
            self._starts.append(start_offset)

    def __repr__(self) -> str:
        return f"LeaderEpochCache({list(self.entries)!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LeaderEpochCache):
            return NotImplemented
        return self._epochs == other._epochs and self._starts == other._starts

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return tuple(EpochEntry(e, s) for e, s in zip(self._epochs, self._starts, strict=True))

    @property
    def latest_epoch(self) -> int:
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    @property
    def earliest_epoch(self) -> int:
        return self._epochs[0] if self._epochs else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; True if the cache changed.

        Called by a leader when it takes office (its epoch starts at its log end) and for every
        appended batch whose epoch is newer than the latest one (a follower copies the leader's
        epochs from the batches). An epoch at or below the latest is already known, or is older
        than what the log holds, and changes nothing. Entries starting at or after ``start_offset``
        describe a tail that has been truncated away and are dropped first.
        """
        assert epoch >= 0 and start_offset >= 0, (epoch, start_offset)
        if self._epochs and epoch <= self._epochs[-1]:
            return False
        cut = bisect_left(self._starts, start_offset)
        del self._epochs[cut:]
        del self._starts[cut:]
        self._epochs.append(epoch)
        self._starts.append(start_offset)
        return True

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: ``(epoch, end_offset)`` for ``requested_epoch``.

        * the latest epoch: it ends at the log end, ``(latest, log_end_offset)``;
        * an older epoch: it ends where the next larger epoch starts; the epoch answered is the
          largest one at or below the requested one that this log has (the requester may have an
          epoch this log never saw), or the requested epoch itself when it is older than them all;
        * an epoch newer than any here, or an empty cache, or UNDEFINED_EPOCH:
          ``(UNDEFINED_EPOCH, UNDEFINED_OFFSET)``.
        """
        if requested_epoch == UNDEFINED_EPOCH or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if requested_epoch == self._epochs[-1]:
            return requested_epoch, log_end_offset
        higher = bisect_right(self._epochs, requested_epoch)
        if higher == len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        end_offset = self._starts[higher]
        if higher == 0:
            return requested_epoch, end_offset
        return self._epochs[higher - 1], end_offset

    def epoch_at(self, offset: int) -> int:
        """The epoch the record at ``offset`` was written in (UNDEFINED_EPOCH before the first entry)."""
        index = bisect_right(self._starts, offset) - 1
        return self._epochs[index] if index >= 0 else UNDEFINED_EPOCH

    def truncate_from_end(self, end_offset: int) -> bool:
        """The log was truncated to ``end_offset``: drop epochs that start at or after it."""
        cut = bisect_left(self._starts, end_offset)
        if cut == len(self._starts):
            return False
        del self._epochs[cut:]
        del self._starts[cut:]
        return True

    def truncate_from_start(self, start_offset: int) -> bool:
        """The log now starts at ``start_offset``: the epoch covering it starts there; older ones go."""
        covering = bisect_right(self._starts, start_offset) - 1
        if covering < 0 or (covering == 0 and self._starts[0] == start_offset):
            return False
        del self._epochs[:covering]
        del self._starts[:covering]
        self._starts[0] = start_offset
        return True


def read_checkpoint(path: Path) -> LeaderEpochCache:
    """The cache kept in ``path``; an empty cache when the file does not exist."""
    try:
        text = path.read_text(encoding="ascii")
    except FileNotFoundError:
        return LeaderEpochCache()
    except UnicodeDecodeError:
        raise LeaderEpochCheckpointError(f"{path}: not a text file") from None
    lines = text.splitlines()

    def fail(line_number: int, why: str) -> LeaderEpochCheckpointError:
        return LeaderEpochCheckpointError(f"{path}:{line_number}: {why}")

    if len(lines) < 2:
        raise fail(len(lines) + 1, "expected a version line and a count line")
    if lines[0].strip() != str(CHECKPOINT_FORMAT_VERSION):
        raise fail(1, f"unknown format version {lines[0].strip()!r} (expected {CHECKPOINT_FORMAT_VERSION})")
    try:
        count = int(lines[1])
    except ValueError:
        raise fail(2, f"entry count {lines[1]!r} is not an integer") from None
    if count < 0 or count != len(lines) - 2:
        raise fail(2, f"says {count} entries, the file has {len(lines) - 2}")
    entries: list[EpochEntry] = []
    for number, line in enumerate(lines[2:], start=3):
        fields = line.split()
        if len(fields) != 2:
            raise fail(number, f"expected 'epoch start_offset', got {line!r}")
        try:
            epoch, start_offset = int(fields[0]), int(fields[1])
        except ValueError:
            raise fail(number, f"expected two integers, got {line!r}") from None
        if epoch < 0 or start_offset < 0:
            raise fail(number, f"negative epoch or offset in {line!r}")
        if entries and (epoch <= entries[-1].epoch or start_offset <= entries[-1].start_offset):
            raise fail(
                number, f"entry {line!r} does not follow {entries[-1].epoch} {entries[-1].start_offset}"
            )
        entries.append(EpochEntry(epoch, start_offset))
    return LeaderEpochCache(entries)


def write_checkpoint(path: Path, cache: LeaderEpochCache, *, sync: bool = True) -> None:
    """Replace ``path`` with the cache's entries, atomically and (unless ``sync=False``, for a
    caller that fsyncs it later) durably."""
    entries = cache.entries
    lines = [str(CHECKPOINT_FORMAT_VERSION), str(len(entries))]
    lines.extend(f"{entry.epoch} {entry.start_offset}" for entry in entries)
    write_file_atomically(path, ("\n".join(lines) + "\n").encode("ascii"), sync=sync)
