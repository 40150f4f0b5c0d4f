"""One segment of a partition log: the ``.log`` file and its sparse ``.index`` and ``.timeindex``.

Files (Kafka's layout, so operators recognise them), named by the segment's base offset as 20 digits:

* ``<base>.log`` — record batches exactly as on the wire, base offsets rewritten.
* ``<base>.index`` — entries of (relative offset int32, file position int32), big-endian, one every
  ``index.interval.bytes`` of log. The relative offset is the base offset of the indexed batch.
* ``<base>.timeindex`` — entries of (timestamp int64, relative offset int32): the segment's running
  maximum timestamp and the base offset of the batch that reached it, added with the offset index
  entries when the maximum grew, plus a final entry when the segment stops being active.
* ``<base>.txnindex`` — the aborted transactions whose ABORT marker is in this segment, one
  36-byte entry each in marker order: producer id int64, first offset int64, last offset int64
  (the marker's), last stable offset int64 (the partition's first unstable offset right after the
  abort), CRC-32C uint32 of those 32 bytes; big-endian, absolute offsets, no file header. Only a
  segment that holds an ABORT marker has one.

The offset and time indexes live in memory (arrays) for lookups. The index files are written whole when the log
is closed cleanly (``write_index_files``) and read back on the next open, so a cleanly shut down log
opens without reading its segments; after a crash there is no clean-shutdown marker and every
segment is recovered from its ``.log`` (which rebuilds the indexes), so index files are never
trusted unless the shutdown that wrote them was clean.

The transaction index is different: aborts are rare and must survive a crash as the markers do, so
an entry is appended to the file when its marker is written (``append_aborted``) and made durable by
the next ``fsync`` with the ``.log``; its entries are also kept in memory (four int64 arrays, 32
bytes per aborted transaction, made on the first: a segment without aborts pays one attribute)
for ``collect_aborted``. On open the file is read back and checked
against the segment (``load_txn_index``): a torn tail and entries past the segment's end (a marker
cut by recovery) are cut; anything else wrong, or a recovered segment whose ABORT markers differ
from its entries, makes the partition log rebuild the file from the batches (``replace_aborted``).

A segment holds no file descriptor of its own: its ``.log`` (and ``.txnindex``) are reached through
the log manager's ``OpenFileCache`` (opened when used, closed when the cache needs room), so a
broker's descriptors do not grow with its segments. A new segment's file is created by its first append. All file access is
``os.pread``/``os.write`` on unbuffered descriptors: there is no Python buffer for the flushing
thread to race with.
"""

from __future__ import annotations

import os
import struct
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import crc32c as _crc32c

from strom.protocol.records.control import parse_end_txn_marker
from strom.protocol.records.header import (
    CONTROL_BIT,
    CURRENT_MAGIC,
    HEADER,
    HEADER_BYTES,
    LOG_OVERHEAD_BYTES,
    BatchHeader,
    CorruptBatchError,
    compute_crc,
)
from strom.storage.files import write_file_atomically, write_file_synced
from strom.storage.open_files import OpenFileCache

OFFSET_INDEX_ENTRY = struct.Struct(">ii")
TIME_INDEX_ENTRY = struct.Struct(">qi")
TXN_INDEX_FIELDS = struct.Struct(">qqqq")  # producer id, first, last, last stable offset
TXN_INDEX_CRC = struct.Struct(">I")
TXN_INDEX_ENTRY_BYTES = TXN_INDEX_FIELDS.size + TXN_INDEX_CRC.size  # 36
TXN_INDEX_SUFFIX = ".txnindex"

# Reads while scanning headers fetch this much at once, so a scan costs one syscall per window
# rather than one per batch.
SCAN_WINDOW_BYTES = 1 << 20

# Relative offsets in the index files are int32: a segment must roll before offsets outgrow it.
RELATIVE_OFFSET_MAX = 2**31 - 1


class BatchInfo(NamedTuple):
    """What a segment needs to know of a batch it appends (offsets already assigned)."""

    base_offset: int
    last_offset: int
    max_timestamp: int
    size_bytes: int


class RecoveryResult(NamedTuple):
    truncated_bytes: int
    truncated_at_offset: int  # the offset the next batch will get after truncation
    reason: str  # why the tail was cut, "" if nothing was
    abort_markers: list[tuple[int, int]]  # (offset, producer id) of each ABORT marker kept


class AbortedTxn(NamedTuple):
    """An aborted transaction, as the transaction index keeps it."""

    producer_id: int
    first_offset: int
    last_offset: int  # the offset of its ABORT marker
    last_stable_offset: int  # the partition's first unstable offset right after the abort


def encode_aborted_txn(txn: AbortedTxn) -> bytes:
    fields = TXN_INDEX_FIELDS.pack(*txn)
    return fields + TXN_INDEX_CRC.pack(_crc32c.crc32c(fields))


def abort_marker_producer(batch: bytes | memoryview, header: BatchHeader) -> int | None:
    """The producer id of a control batch that is an ABORT marker, else None (a COMMIT, another
    control type, or a control record that does not parse: no transaction ends there)."""
    try:
        marker = parse_end_txn_marker(batch)
    except CorruptBatchError:
        return None
    if marker is None or marker.commit:
        return None
    return header.producer_id


def segment_file_stem(base_offset: int) -> str:
    return f"{base_offset:020d}"


class Segment:
    """A segment's files and the facts about it the partition log asks for without reading it.

    ``size_bytes`` is the size of the ``.log`` file (0 for a new segment whose file does not exist
    yet); the caller knows it from listing the directory.
    """

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        index_interval_bytes: int,
        files: OpenFileCache,
        *,
        size_bytes: int = 0,
    ) -> None:
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        stem = segment_file_stem(base_offset)
        self.log_path = directory / f"{stem}.log"
        self.index_path = directory / f"{stem}.index"
        self.timeindex_path = directory / f"{stem}.timeindex"
        self._files = files
        self._log_key = str(self.log_path)
        self.size_bytes = size_bytes
        self.next_offset = base_offset
        self.max_timestamp_ms = -1
        self.max_timestamp_base_offset = -1  # base offset of the batch holding the max timestamp
        # Time the segment's age for segment.ms counts from: the first append's clock in memory,
        # the first batch's max timestamp after a reopen (Kafka's rule).
        self.rolling_base_ms: int | None = None
        self._index_offsets = array("q")  # absolute base offsets of indexed batches
        self._index_positions = array("q")
        self._time_timestamps = array("q")
        self._time_offsets = array("q")  # absolute base offsets
        self._bytes_since_index_entry = 0
        self._aborted: _AbortedTxns | None = None  # the transaction index, once it has an entry
        self.dirty = False  # written since the last fsync
        self.txn_index_dirty = False  # the .txnindex was written since the last fsync
        self.index_files_current = False  # the index files on disk match the arrays in memory
        self.closed = False

    @property
    def files(self) -> OpenFileCache:
        """The cache this segment's ``.log`` is opened through."""
        return self._files

    # ---- opening ---------------------------------------------------------------------------

    def load_indexes(self) -> bool:
        """Load a cleanly closed segment's facts from its index files and its tail.

        Returns False when the index files do not fit the log (the caller then recovers).
        """
        try:
            index_bytes = self.index_path.read_bytes()
            time_bytes = self.timeindex_path.read_bytes()
        except FileNotFoundError:
            return False
        if len(index_bytes) % OFFSET_INDEX_ENTRY.size or len(time_bytes) % TIME_INDEX_ENTRY.size:
            return False
        previous_offset = -1
        previous_position = -1
        for relative_offset, position in OFFSET_INDEX_ENTRY.iter_unpack(index_bytes):
            offset = self.base_offset + relative_offset
            if offset <= previous_offset or position <= previous_position or position >= self.size_bytes:
                return False
            self._index_offsets.append(offset)
            self._index_positions.append(position)
            previous_offset, previous_position = offset, position
        for timestamp, relative_offset in TIME_INDEX_ENTRY.iter_unpack(time_bytes):
            self._time_timestamps.append(timestamp)
            self._time_offsets.append(self.base_offset + relative_offset)
        if self._time_timestamps:
            self.max_timestamp_ms = self._time_timestamps[-1]
            self.max_timestamp_base_offset = self._time_offsets[-1]
        # The tail after the last index entry holds the last offset and may hold a newer maximum.
        tail_position = self._index_positions[-1] if self._index_positions else 0
        position = tail_position
        for position, header in self.scan_headers(tail_position):
            self._note_batch_facts(header.base_offset, header.last_offset, header.max_timestamp)
            position += header.size_bytes
        if position != self.size_bytes:
            return False
        self._bytes_since_index_entry = self.size_bytes - tail_position
        first = self.first_header()
        if first is not None:
            self.rolling_base_ms = first.max_timestamp
        self.index_files_current = True
        return True

    def recover(self) -> RecoveryResult:
        """Validate every batch (length, magic, CRC), cut the file at the first bad or torn one,
        and rebuild the indexes from what is left."""
        self._reset_facts()
        position = 0
        reason = ""
        abort_markers: list[tuple[int, int]] = []
        reader = _WindowReader(self._files, self._log_key, self.size_bytes)
        while position < self.size_bytes:
            left = self.size_bytes - position
            if left < HEADER_BYTES:
                reason = "partial batch header"
                break
            header = BatchHeader._make(HEADER.unpack_from(reader.read(position, HEADER_BYTES)))
            if header.magic != CURRENT_MAGIC:
                reason = f"bad magic {header.magic}"
                break
            if header.batch_length < HEADER_BYTES - LOG_OVERHEAD_BYTES:
                reason = "bad batch length"
                break
            if header.size_bytes > left:
                reason = "torn batch"
                break
            if header.base_offset < self.next_offset or header.last_offset_delta < 0:
                reason = "offsets out of order"
                break
            batch = reader.read(position, header.size_bytes)
            if compute_crc(batch, 0, header.size_bytes) != header.crc:
                reason = "CRC mismatch"
                break
            if header.attributes & CONTROL_BIT:
                producer_id = abort_marker_producer(batch, header)
                if producer_id is not None:
                    abort_markers.append((header.base_offset, producer_id))
            self._index_batch(header.base_offset, position, header.max_timestamp)
            self._note_batch_facts(header.base_offset, header.last_offset, header.max_timestamp)
            self._bytes_since_index_entry += header.size_bytes
            if self.rolling_base_ms is None:
                self.rolling_base_ms = header.max_timestamp
            position += header.size_bytes
        truncated = self.size_bytes - position
        if truncated:
            self._truncate_file(position)
        self.index_files_current = False
        return RecoveryResult(truncated, self.next_offset, reason, abort_markers)

    # ---- appending -------------------------------------------------------------------------

    def pin(self) -> int:
        """Open the ``.log`` file (creating it) and keep it open until ``unpin``: an append that
        pins every file it will write first cannot fail half-way for want of a descriptor."""
        return self._files.acquire(self._log_key, create=True)

    def unpin(self, fd: int) -> None:
        self._files.release(self._log_key, fd)

    def append(self, data: bytes | bytearray | memoryview, batches: list[BatchInfo], now_ms: int) -> None:
        """Write ``data`` (the given batches, back to back) at the end with one write call.

        A failed write is cut off again (best effort) and raises OSError with nothing noted.
        """
        assert not self.closed
        position = self.size_bytes
        self._files.write_all(self._log_key, memoryview(data), position)
        for batch in batches:  # index_batches, inlined: this is the produce path
            self._index_batch(batch.base_offset, position, batch.max_timestamp)
            self._note_batch_facts(batch.base_offset, batch.last_offset, batch.max_timestamp)
            self._bytes_since_index_entry += batch.size_bytes
            position += batch.size_bytes
        self.size_bytes = position
        self.index_files_current = False
        if self.rolling_base_ms is None:
            self.rolling_base_ms = now_ms
        self.dirty = True

    def index_batches(self, position: int, batches: list[BatchInfo]) -> None:
        """Note batches now in the file from ``position`` on (written by ``append`` or by the
        compaction that built this segment) in the in-memory indexes."""
        for batch in batches:
            self._index_batch(batch.base_offset, position, batch.max_timestamp)
            self._note_batch_facts(batch.base_offset, batch.last_offset, batch.max_timestamp)
            self._bytes_since_index_entry += batch.size_bytes
            position += batch.size_bytes
        self.size_bytes = position
        self.index_files_current = False

    def seal(self) -> None:
        """The segment stops being active: record its exact max timestamp in the time index."""
        if self.max_timestamp_ms >= 0 and (
            not self._time_timestamps or self._time_timestamps[-1] < self.max_timestamp_ms
        ):
            self._time_timestamps.append(self.max_timestamp_ms)
            self._time_offsets.append(self.max_timestamp_base_offset)
            self.index_files_current = False

    def can_hold(self, last_offset: int) -> bool:
        return last_offset - self.base_offset <= RELATIVE_OFFSET_MAX

    # ---- reading ---------------------------------------------------------------------------

    def read_bytes(self, position: int, size_bytes: int) -> bytes:
        return self._files.pread(self._log_key, size_bytes, position)

    def scan_headers(
        self, position: int, end: int | None = None, *, window_bytes: int = SCAN_WINDOW_BYTES
    ) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each batch from ``position`` (a batch start) to ``end``.

        The log was validated when written or recovered, so headers are trusted here.
        """
        stop = self.size_bytes if end is None else end
        yield from _walk_headers(
            _WindowReader(self._files, self._log_key, stop, window_bytes), position, stop
        )

    def first_header(self) -> BatchHeader | None:
        if self.size_bytes < HEADER_BYTES:
            return None
        return BatchHeader._make(HEADER.unpack_from(self.read_bytes(0, HEADER_BYTES)))

    def find_batch(self, offset: int) -> tuple[int, BatchHeader] | None:
        """(position, header) of the first batch whose last offset is >= ``offset``, if any."""
        found = self.locate_batch(offset)
        return None if found is None else (found[0], found[1])

    def locate_batch(self, offset: int) -> tuple[int, BatchHeader, bytes, int] | None:
        """``find_batch``, and the bytes read ahead to find the batch: (position, header, bytes
        read, the position they start at). A small fetch finds its records there, not in a
        second read of the file."""
        if offset >= self.next_offset:
            return None
        slot = bisect_right(self._index_offsets, offset) - 1
        start = self._index_positions[slot] if slot >= 0 else 0
        # The batch is at most one index interval away: a small read-ahead finds it in one pread.
        window_bytes = min(SCAN_WINDOW_BYTES, max(self.index_interval_bytes * 2, 8192))
        reader = _WindowReader(self._files, self._log_key, self.size_bytes, window_bytes)
        for position, header in _walk_headers(reader, start, self.size_bytes):
            if header.last_offset >= offset:
                return position, header, reader.window, reader.window_start
        return None

    def position_of_offset_index_floor(self, offset: int) -> int:
        slot = bisect_right(self._index_offsets, offset) - 1
        return self._index_positions[slot] if slot >= 0 else 0

    def find_timestamp(self, timestamp_ms: int, min_offset: int = 0) -> BatchHeader | None:
        """The first batch whose max timestamp is >= ``timestamp_ms`` and whose last offset is >=
        ``min_offset``, if any."""
        if self.max_timestamp_ms < timestamp_ms:
            return None
        # Every batch up to an entry with a smaller running maximum is too old: start after it.
        slot = bisect_right(self._time_timestamps, timestamp_ms - 1) - 1
        start = self.position_of_offset_index_floor(self._time_offsets[slot]) if slot >= 0 else 0
        for _position, header in self.scan_headers(start):
            if header.max_timestamp >= timestamp_ms and header.last_offset >= min_offset:
                return header
        return None

    # ---- changing ----------------------------------------------------------------------------

    def truncate_to_offset(self, offset: int) -> None:
        """Remove every batch whose last offset is >= ``offset`` (a partial batch goes whole)."""
        found = self.find_batch(offset)
        if found is None:
            return
        position, _header = found
        self._truncate_file(position)
        self._forget_from(position)
        self._cut_aborted(self.next_offset)

    def _forget_from(self, position: int) -> None:
        """The batches from ``position`` on were cut: their index
        entries go and the facts are those of what is left, reading again only the batches after
        the last offset index entry kept — not the whole segment, which ``recover`` would validate
        again batch by batch (a follower cutting a divergent tail does this on the event loop)."""
        kept = bisect_left(self._index_positions, position)
        del self._index_offsets[kept:]
        del self._index_positions[kept:]
        # A time index entry is made with an offset index entry, when the running maximum grew,
        # and names the batch holding it: those made at the entries kept name batches up to the
        # last one kept, those made later name batches after it.
        last_kept = self._index_offsets[-1] if self._index_offsets else self.base_offset - 1
        while self._time_offsets and self._time_offsets[-1] > last_kept:
            self._time_offsets.pop()
            self._time_timestamps.pop()
        start = self._index_positions[-1] if self._index_positions else 0
        self.next_offset = self.base_offset
        self.max_timestamp_ms = self._time_timestamps[-1] if self._time_timestamps else -1
        self.max_timestamp_base_offset = self._time_offsets[-1] if self._time_offsets else -1
        self._bytes_since_index_entry = 0
        if start == 0:
            self.rolling_base_ms = None
        for batch_position, kept_header in self.scan_headers(start, position):
            if batch_position == 0:
                self.rolling_base_ms = kept_header.max_timestamp
            self._note_batch_facts(
                kept_header.base_offset, kept_header.last_offset, kept_header.max_timestamp
            )
            self._bytes_since_index_entry += kept_header.size_bytes
        self.index_files_current = False

    def fsync(self) -> None:
        """fsync the log file (safe from a worker thread; a closed segment is skipped)."""
        if self.closed:
            return
        if self.txn_index_dirty:
            self.txn_index_dirty = False
            try:
                self._files.fsync(str(self.txnindex_path))
            except OSError:
                if not self.closed:
                    self.txn_index_dirty = True
                    raise
        self.dirty = False
        try:
            self._files.fsync(self._log_key)
        except OSError:
            # The loop thread deleted or replaced the segment meanwhile; nothing left to make durable.
            if not self.closed:
                self.dirty = True
                raise

    def write_index_files(self, *, sync: bool = True) -> None:
        """Write both index files whole from memory and fsync them (clean shutdown; ``sync=False``
        when the caller syncs the file system afterwards); a segment whose ``.log`` was never
        created gets none."""
        if self.index_files_current or not self.log_path.exists():
            return
        index = b"".join(
            OFFSET_INDEX_ENTRY.pack(offset - self.base_offset, position)
            for offset, position in zip(self._index_offsets, self._index_positions)
        )
        times = b"".join(
            TIME_INDEX_ENTRY.pack(timestamp, offset - self.base_offset)
            for timestamp, offset in zip(self._time_timestamps, self._time_offsets)
        )
        write_file_synced(self.index_path, index, sync=sync)
        write_file_synced(self.timeindex_path, times, sync=sync)
        self.index_files_current = True

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._files.forget(self._log_key)
        if self._aborted is not None:
            self._files.forget(str(self.txnindex_path))

    def file_paths(self) -> tuple[Path, Path, Path, Path]:
        return self.log_path, self.index_path, self.timeindex_path, self.txnindex_path

    def cached_paths(self) -> tuple[Path, Path]:
        """The files reached through the open-file cache (renamed through it, see ``replace``)."""
        return self.log_path, self.txnindex_path

    # ---- the transaction index ---------------------------------------------------------------

    @property
    def txnindex_path(self) -> Path:
        return self.log_path.with_suffix(TXN_INDEX_SUFFIX)

    @property
    def aborted_count(self) -> int:
        aborted = self._aborted
        return 0 if aborted is None else len(aborted.lasts)

    def aborted_txns(self) -> list[AbortedTxn]:
        aborted = self._aborted
        if aborted is None:
            return []
        return [
            AbortedTxn(*fields)
            for fields in zip(aborted.producers, aborted.firsts, aborted.lasts, aborted.stables)
        ]

    def append_aborted(self, txn: AbortedTxn) -> None:
        """Note an aborted transaction whose ABORT marker was just appended to this segment: one
        entry appended to the ``.txnindex`` (created by the first), durable with the next fsync.
        A failed write is cut off again (best effort) and raises OSError with nothing noted."""
        assert not self.closed
        assert self.base_offset <= txn.last_offset < self.next_offset, (txn, self.base_offset)
        aborted = self._aborted
        if aborted is None:
            aborted = self._aborted = _AbortedTxns()  # first: close forgets the file from now on
        assert not aborted.lasts or aborted.lasts[-1] < txn.last_offset
        entry = encode_aborted_txn(txn)
        size = len(aborted.lasts) * TXN_INDEX_ENTRY_BYTES
        key = str(self.txnindex_path)
        fd = self._files.acquire(key, create=True)
        try:
            try:
                written = os.write(fd, entry)
                if written != len(entry):
                    raise OSError(f"short write to {self.txnindex_path} ({written} of {len(entry)} bytes)")
            except OSError:
                os.ftruncate(fd, size)
                raise
        finally:
            self._files.release(key, fd)
        aborted.add(txn)
        self.txn_index_dirty = True

    def collect_aborted(self, start_offset: int, upper_offset: int, into: list[tuple[int, int]]) -> bool:
        """Add (producer id, first offset) of each aborted transaction of this segment that
        overlaps [start_offset, upper_offset) to ``into``; True when no later segment can hold one
        that does (an entry's last stable offset reached ``upper_offset``: every transaction still
        in progress then began at or after it)."""
        aborted = self._aborted
        if aborted is None:
            return False
        lasts = aborted.lasts
        firsts = aborted.firsts
        producers = aborted.producers
        stables = aborted.stables
        for slot in range(bisect_left(lasts, start_offset), len(lasts)):
            if firsts[slot] < upper_offset:
                into.append((producers[slot], firsts[slot]))
            if stables[slot] >= upper_offset:
                return True
        return False

    def load_txn_index(self) -> tuple[str, bool]:
        """Read the ``.txnindex`` back (after the segment's facts are known: ``recover`` or
        ``load_indexes``). Returns (what was cut, "" if nothing; whether the file is damaged
        beyond that and must be rebuilt). A torn last entry and the entries whose marker lies
        past the segment's end (cut by recovery) are cut from the file; entries that are not in
        marker order, fail their CRC or name offsets outside the segment stop the reading there
        and ask for a rebuild."""
        aborted = self._aborted = _AbortedTxns()
        try:
            data = self.txnindex_path.read_bytes()
        except FileNotFoundError:
            self._aborted = None
            return "", False
        whole = len(data) - len(data) % TXN_INDEX_ENTRY_BYTES
        previous_last = self.base_offset - 1
        position = 0
        damaged = ""
        while position < whole:
            fields = data[position : position + TXN_INDEX_FIELDS.size]
            (crc,) = TXN_INDEX_CRC.unpack_from(data, position + TXN_INDEX_FIELDS.size)
            txn = AbortedTxn._make(TXN_INDEX_FIELDS.unpack(fields))
            intact = crc == _crc32c.crc32c(fields)
            if intact and txn.last_offset >= self.next_offset:
                break  # its marker is gone (recovery cut the log's tail): cut from here
            if (
                not intact
                or txn.producer_id < 0
                or txn.last_offset <= previous_last
                or not 0 <= txn.first_offset <= txn.last_offset
                or not 0 <= txn.last_stable_offset <= txn.last_offset + 1
            ):
                damaged = f"a damaged entry at byte {position}"
                break
            aborted.add(txn)
            previous_last = txn.last_offset
            position += TXN_INDEX_ENTRY_BYTES
        cut = ""
        if position < len(data):
            cut = f"cut {len(data) - position} bytes of {self.txnindex_path.name}"
            if not damaged:
                os.truncate(self.txnindex_path, position)
        return (damaged or cut), bool(damaged)

    def replace_aborted(self, txns: list[AbortedTxn], *, write: bool = True) -> None:
        """The segment's aborted transactions are ``txns`` (a rebuild, or what compaction carried
        over); ``write`` rewrites the file whole (removed when there are none)."""
        aborted = None
        if txns:
            aborted = _AbortedTxns()
            for txn in txns:
                aborted.add(txn)
        self._aborted = aborted
        if not write:
            return
        self._files.forget(str(self.txnindex_path))
        if txns:
            write_file_atomically(self.txnindex_path, b"".join(map(encode_aborted_txn, txns)))
        else:
            self.txnindex_path.unlink(missing_ok=True)

    def _cut_aborted(self, offset: int) -> None:
        """Drop the aborted transactions whose marker is at or after ``offset`` (file and memory)."""
        aborted = self._aborted
        if aborted is None:
            return
        kept = bisect_left(aborted.lasts, offset)
        if kept == len(aborted.lasts):
            return
        aborted.cut(kept)
        key = str(self.txnindex_path)
        try:
            fd = self._files.acquire(key)
        except FileNotFoundError:
            return  # entries that were never written (a failed rebuild): memory was all there is
        try:
            os.ftruncate(fd, kept * TXN_INDEX_ENTRY_BYTES)
        finally:
            self._files.release(key, fd)
        self.txn_index_dirty = True

    def delete_files(self) -> None:
        self.close()
        for path in self.file_paths():
            path.unlink(missing_ok=True)

    # ---- internals -------------------------------------------------------------------------

    def _reset_facts(self) -> None:
        self.next_offset = self.base_offset
        self.max_timestamp_ms = -1
        self.max_timestamp_base_offset = -1
        self.rolling_base_ms = None
        self._index_offsets = array("q")
        self._index_positions = array("q")
        self._time_timestamps = array("q")
        self._time_offsets = array("q")
        self._bytes_since_index_entry = 0

    def _index_batch(self, base_offset: int, position: int, max_timestamp: int) -> int:
        """Add index entries for a batch at ``position`` if one is due; returns bit 1 for an offset
        index entry and bit 2 for a time index entry."""
        if position == 0 or self._bytes_since_index_entry < self.index_interval_bytes:
            return 0
        self._bytes_since_index_entry = 0
        self._index_offsets.append(base_offset)
        self._index_positions.append(position)
        added = 1
        running_max = max(self.max_timestamp_ms, max_timestamp)
        if running_max >= 0 and (not self._time_timestamps or running_max > self._time_timestamps[-1]):
            holder = base_offset if max_timestamp >= self.max_timestamp_ms else self.max_timestamp_base_offset
            self._time_timestamps.append(running_max)
            self._time_offsets.append(holder)
            added |= 2
        return added

    def _note_batch_facts(self, base_offset: int, last_offset: int, max_timestamp: int) -> None:
        self.next_offset = last_offset + 1
        if max_timestamp > self.max_timestamp_ms:
            self.max_timestamp_ms = max_timestamp
            self.max_timestamp_base_offset = base_offset

    def _truncate_file(self, size_bytes: int) -> None:
        fd = self._files.acquire(self._log_key)
        try:
            os.ftruncate(fd, size_bytes)
        finally:
            self._files.release(self._log_key, fd)
        self.size_bytes = size_bytes
        self.dirty = True


class _AbortedTxns:
    """A segment's transaction index in memory: one slot per aborted transaction in each array,
    in marker order (so ``lasts`` is sorted)."""

    __slots__ = ("firsts", "lasts", "producers", "stables")

    def __init__(self) -> None:
        self.producers = array("q")
        self.firsts = array("q")
        self.lasts = array("q")
        self.stables = array("q")

    def add(self, txn: AbortedTxn) -> None:
        self.producers.append(txn.producer_id)
        self.firsts.append(txn.first_offset)
        self.lasts.append(txn.last_offset)
        self.stables.append(txn.last_stable_offset)

    def cut(self, kept: int) -> None:
        for slots in (self.producers, self.firsts, self.lasts, self.stables):
            del slots[kept:]


def _walk_headers(reader: _WindowReader, position: int, stop: int) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each batch from ``position`` (a batch start) to ``stop``."""
    while stop - position >= HEADER_BYTES:
        header = BatchHeader._make(HEADER.unpack_from(reader.read(position, HEADER_BYTES)))
        yield position, header
        position += header.size_bytes


class _WindowReader:
    """Serves small reads of a file from a window read ahead with one pread."""

    def __init__(
        self, files: OpenFileCache, path: str, file_end: int, window_bytes: int = SCAN_WINDOW_BYTES
    ) -> None:
        self._files = files
        self._path = path
        self._window_bytes = window_bytes
        self._file_end = file_end
        self.window = b""  # the bytes read last, from window_start
        self.window_start = 0

    def read(self, position: int, size_bytes: int) -> bytes | memoryview:
        offset = position - self.window_start
        if offset < 0 or offset + size_bytes > len(self.window):
            want = max(size_bytes, min(self._window_bytes, self._file_end - position))
            self.window = self._files.pread(self._path, want, position)
            self.window_start = position
            offset = 0
        return memoryview(self.window)[offset : offset + size_bytes]
