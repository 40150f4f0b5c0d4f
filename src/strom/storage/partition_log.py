"""The log of one partition: an ordered list of segments, the newest one active.

Directory ``<data_dir>/<topic>-<partition>/`` holds the segments (see ``segment``), plus:

* ``partition.json`` — ``{"log_start_offset": N}``, written atomically when the log start moves
  (by the next ``flush``: DeleteRecords waits for it, retention lets the flush scheduler do it).
* ``producer_state.json`` — the idempotent-producer snapshot (see ``producer_state``), taken at
  every segment roll (written by the next ``flush``) and at close, with the offset it covers;
  batches after it are replayed on open.
* ``leader-epoch-checkpoint`` — where each leader epoch starts (see ``leader_epoch``), only for a
  replicated partition (a broker in a cluster).

**Transactions** (KIP-98, the partition's side; docs/transactions.md): transactional batches start
their producer's transaction, a COMMIT or ABORT marker (``append_marker`` on the leader, a control
batch copied by ``append_as_follower``) ends it. The producer state keeps each transaction in
progress (and the snapshot carries it); the last stable offset is the lowest first offset among
them, capped at the high watermark. Each abort is noted in the ``.txnindex`` of the segment holding
its marker (see ``segment``): ``aborted_transactions`` answers read_committed fetches from it. On
open the transaction indexes are checked against the segments and rebuilt from the batches when
they do not match, replaying the producer state from far enough back to know where each aborted
transaction began. Compaction removes markers past the delete horizon whose records are gone, but
not those a producer state the log may replay from still needs to end a transaction
(``_marker_pins``). A log without transactions pays one attribute test per batch for all this.

**Replication** (a broker in a cluster; a single node uses none of it and pays nothing for it):
the leader-epoch cache is loaded on first use (``leader_epochs``); a leader stamps its epoch into
the ``partitionLeaderEpoch`` of every batch it appends (``become_leader``); a follower appends the
leader's batches as they came (``append_as_follower``) and cuts a divergent tail
(``truncate_to``); the high watermark is kept apart from the log end (``set_high_watermark``),
while a log that was never given one reports its log end, as a single node has nothing to wait for.

Files of segments that leave the log (retention, DeleteRecords, compaction) are renamed to
``.deleted`` names and handed to the ``Trash``; a worker thread removes them. A fresh partition has
no files at all until its first append creates the first segment's ``.log``.

Threading: everything runs on the broker's event loop thread except ``flush()``, which a worker
thread calls, and compaction's reading and writing (``compaction.run_compaction``), which the admin
worker does on segments that no longer change. Both work on a snapshot of the segment list, and the
loop thread replaces that list rather than mutating it, so no thread sees a half-changed list; only
the loop thread swaps in what compaction built (``finish_compaction``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import struct
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from strom.protocol.records.batch import CREATE_TIME, LOG_APPEND_TIME, NO_PARTITION_LEADER_EPOCH
from strom.protocol.records.control import EndTxnMarker, build_end_txn_marker, parse_end_txn_marker
from strom.protocol.records.header import (
    ATTRIBUTES_OFFSET,
    BASE_OFFSET,
    CONTROL_BIT,
    CRC_OFFSET,
    HEADER,
    NO_SEQUENCE,
    TIMESTAMP_TYPE_BIT,
    BatchHeader,
    CorruptBatchError,
    compute_crc,
    set_base_offset,
    set_partition_leader_epoch,
)
from strom.storage.config import LogConfig
from strom.storage.errors import (
    LogFileError,
    OffsetOutOfOrderError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)
from strom.storage.files import DELETED_SUFFIX, Trash, fsync_directory, write_file_atomically
from strom.storage.leader_epoch import (
    CHECKPOINT_FILE_NAME,
    LeaderEpochCache,
    LeaderEpochCheckpointError,
    read_checkpoint,
    write_checkpoint,
)
from strom.storage.open_files import OpenFileCache
from strom.storage.producer_state import SNAPSHOT_FILE_NAME, ProducerEntry, ProducerStateTable
from strom.storage.segment import TXN_INDEX_SUFFIX, AbortedTxn, BatchInfo, Segment

if TYPE_CHECKING:
    from strom.storage.compaction import CompactionResult

PARTITION_FILE_NAME = "partition.json"
# Leftovers of an interrupted write that opening a log removes.
LEFTOVER_SUFFIXES = (".cleaned", ".tmp", DELETED_SUFFIX)
# Capacity of the file cache of a log opened on its own (tests, tools); the broker passes the log
# manager's shared cache instead.
STANDALONE_OPEN_FILES = 64
# The producer state is copied in memory every this many appended batches, the last few copies
# kept: a truncation (a follower cutting a divergent tail after a leader change) rebuilds the state
# from the newest copy at or below the cut, replaying at most this many batch headers, instead of
# every header since the last snapshot on disk — on the event loop, a stall that grew with the log
# (230 ms at 22,000 one-record batches, holding up the new leader's high watermark).
PRODUCER_STATE_COPY_BATCHES = 1000
PRODUCER_STATE_COPIES_KEPT = 2


def _base_offset(segment: Segment) -> int:
    return segment.base_offset


# baseOffset int64 + batchLength int32: enough of a header to step from one batch to the next.
_OFFSET_AND_LENGTH = struct.Struct(">qi")
_ATTRIBUTES = struct.Struct(">h")
_MAX_TIMESTAMP = struct.Struct(">q")
_MAX_TIMESTAMP_OFFSET = 35
_CRC = struct.Struct(">I")

log = logging.getLogger("strom.storage")


class AppendResult(NamedTuple):
    """What an append returns (a NamedTuple: one is built per produced partition, and it costs a
    third of a frozen dataclass)."""

    base_offset: int  # offset given to the first record
    last_offset: int
    log_append_time_ms: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int


class ReadResult(NamedTuple):
    """What a read returns (a NamedTuple: one is built per partition of every fetch, and it costs
    a third of a frozen dataclass)."""

    records: bytes  # whole batches, exactly as stored (may be b"")
    high_watermark: int
    log_start_offset: int
    last_stable_offset: int
    # read_committed only: (producer id, first offset) of the aborted transactions the records overlap.
    aborted_transactions: list[tuple[int, int]] | None = None


class ProducerView(NamedTuple):
    """What DescribeProducers reports of one producer of a partition."""

    producer_id: int
    producer_epoch: int
    last_sequence: int  # -1 when none is known
    last_timestamp_ms: int
    coordinator_epoch: int  # of its last transaction marker, -1 when none
    current_txn_start_offset: int  # first offset of its transaction in progress, -1 when none


class PartitionLog:
    """Append, read, retention, compaction and flushing of one partition's segments.

    Open one with ``PartitionLog.open``; what recovery did is in ``recovery_messages``.
    """

    def __init__(
        self,
        directory: Path,
        topic: str,
        partition: int,
        config: LogConfig,
        segments: list[Segment],
        log_start_offset: int,
        producer_states: ProducerStateTable,
        files: OpenFileCache,
        trash: Trash,
    ) -> None:
        assert segments, "a log always has an active segment"
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.config = config
        self._segments = segments
        self._log_start_offset = log_start_offset
        self._producer_states = producer_states
        # (offset covered, the producer entries then): see PRODUCER_STATE_COPY_BATCHES.
        self._producer_state_copies: list[tuple[int, dict[int, ProducerEntry]]] = []
        self._batches_since_state_copy = 0
        self._files = files
        self._trash = trash
        self.recovery_messages: list[str] = []
        # Written by the next flush (a worker thread): the partition file, a producer snapshot.
        self._partition_file_due = False
        self._pending_snapshot: _DueSnapshot | None = None
        # What the files on disk say, so that close writes only what changed: the log start of
        # partition.json (0 when there is none), the log end a reopen would rebuild producer state
        # up to from the snapshot and the segments as they are.
        self._log_start_on_disk = log_start_offset
        self._producer_state_on_disk = segments[-1].next_offset
        # Per producer, the lowest offset covered by a snapshot that is, or may be (being written,
        # or written by a write that failed), the producer_state.json a reopen reads, and that has
        # the producer's transaction in progress: see ``_marker_pins``.
        self._snapshot_file_pins: dict[int, int] = {}
        # Flush policy: messages appended in total / made durable in total; the append time of the
        # oldest message not yet fsynced (flush.ms bounds how long one waits).
        self._appended_messages = 0
        self._flushed_messages = 0
        self._first_unflushed_ms = -1
        self._directory_dirty = False
        self._closed = False
        # The end of the inactive segments the last compaction planned worked on: a pass for new
        # segments only (``plan_compaction(only_new=True)``) skips the log until one is past it.
        self._compaction_planned_through = -1
        # Replication (a broker in a cluster): the leader-epoch cache, loaded on first use; whether
        # its checkpoint was rewritten since the last flush (written at once, made durable by the
        # flush); the epoch stamped into appended batches while this broker leads; the high
        # watermark, None while nobody set one (it is then the log end).
        self._leader_epochs: LeaderEpochCache | None = None
        self._epochs_unsynced = False
        self._stamp_epoch: int | None = None
        self._high_watermark: int | None = None

    # ---- opening ---------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: Path,
        topic: str,
        partition: int,
        config: LogConfig,
        *,
        recover_all: bool = True,
        files: OpenFileCache | None = None,
        trash: Trash | None = None,
    ) -> PartitionLog:
        """Open (or create) the log in ``directory``.

        The active segment is always recovered (validated batch by batch, torn tail cut); the
        others too when ``recover_all`` (no clean shutdown marker), else their index files are used.
        ``files`` is the cache every segment file is opened through (shared by the log manager);
        ``trash`` collects the files of segments that leave the log. A log opened on its own gets
        its own small cache and a trash emptied by ``close``.
        """
        files = files if files is not None else OpenFileCache(STANDALONE_OPEN_FILES)
        trash = trash if trash is not None else Trash()
        directory.mkdir(parents=True, exist_ok=True)
        name = f"{topic}-{partition}"
        messages: list[str] = []
        log_sizes: dict[int, int] = {}
        txn_index_bases: set[int] = set()
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.name.endswith(LEFTOVER_SUFFIXES):
                    os.unlink(entry.path)
                    continue
                stem, _, suffix = entry.name.partition(".")
                if suffix == "log" and stem.isdigit():
                    log_sizes[int(stem)] = entry.stat().st_size
                elif suffix == TXN_INDEX_SUFFIX[1:] and stem.isdigit():
                    txn_index_bases.add(int(stem))
        stored_log_start = _read_log_start_offset(directory / PARTITION_FILE_NAME)
        base_offsets = sorted(log_sizes)
        segments: list[Segment] = []
        # (offset, producer id) of the ABORT markers of each segment recovered, by base offset.
        abort_markers: dict[int, list[tuple[int, int]]] = {}
        for position, base_offset in enumerate(base_offsets):
            segment = Segment(
                directory, base_offset, config.index_interval_bytes, files, size_bytes=log_sizes[base_offset]
            )
            if segments and base_offset < segments[-1].next_offset:
                # A merge by compaction that a crash interrupted: the merged segment before this
                # one holds what survived of it.
                segment.delete_files()
                messages.append(
                    f"recovered {name}: removed segment {base_offset}, already merged into "
                    f"segment {segments[-1].base_offset}"
                )
                continue
            segments.append(segment)
            is_last = position == len(base_offsets) - 1
            if not (recover_all or is_last) and segment.load_indexes():
                continue
            result = segment.recover()
            abort_markers[base_offset] = result.abort_markers
            if result.truncated_bytes:
                messages.append(
                    f"recovered {name}: truncated {result.truncated_bytes} bytes at offset "
                    f"{result.truncated_at_offset} ({result.reason})"
                )
                if not is_last:
                    # Everything after a damaged segment would leave a hole in the offsets.
                    for later in base_offsets[position + 1 :]:
                        Segment(directory, later, config.index_interval_bytes, files).delete_files()
                    messages.append(
                        f"recovered {name}: removed {len(base_offsets) - position - 1} segments after it"
                    )
                    break
        if not segments:
            segments.append(Segment(directory, stored_log_start, config.index_interval_bytes, files))
        rebuild = _load_txn_indexes(name, segments, txn_index_bases, abort_markers, messages)
        log_end = segments[-1].next_offset
        log_start = min(max(stored_log_start, segments[0].base_offset), log_end)
        log = cls(
            directory, topic, partition, config, segments, log_start, ProducerStateTable(), files, trash
        )
        log.recovery_messages = messages
        log._load_producer_states(rebuild)
        log._log_start_on_disk = stored_log_start
        if log_start != stored_log_start:
            log._write_partition_file()
        return log

    @classmethod
    def new(
        cls,
        directory: Path,
        topic: str,
        partition: int,
        config: LogConfig,
        *,
        files: OpenFileCache,
        trash: Trash,
    ) -> PartitionLog:
        """The log of a partition just created: ``directory`` exists and is empty. No file is
        touched (the first append creates the first segment's file)."""
        segment = Segment(directory, 0, config.index_interval_bytes, files)
        return cls(directory, topic, partition, config, [segment], 0, ProducerStateTable(), files, trash)

    def _load_producer_states(self, rebuild: list[Segment] | None = None) -> None:
        """The producer state at the log end: the newest snapshot or in-memory copy it can start
        from, and the batches after it replayed. The transaction indexes of ``rebuild`` are
        rebuilt on the way (from the first segment when the snapshot starts after one of them:
        where an aborted transaction began is known only from a state before it)."""
        snapshot = ProducerStateTable.read_snapshot(self.directory / SNAPSHOT_FILE_NAME)
        replay_from = self._segments[0].base_offset
        log_end = self.log_end_offset
        if snapshot is not None:
            self._snapshot_file_pins = _pins(snapshot[1], snapshot[0].ongoing)
        if snapshot is not None and snapshot[1] <= log_end:
            self._producer_states, replay_from = snapshot
        for covered, entries in reversed(self._producer_state_copies):
            if replay_from < covered <= log_end:
                copied = {producer_id: entry.copy() for producer_id, entry in entries.items()}
                self._producer_states, replay_from = ProducerStateTable(copied), covered
                break
        if rebuild and min(segment.base_offset for segment in rebuild) < replay_from:
            self._producer_states, replay_from = ProducerStateTable(), self._segments[0].base_offset
        self._replay(replay_from, rebuild or [])
        # The state at the log end as loaded is the first copy: a cut above it (the tail a
        # restarted follower fetched since) replays only what came after.
        self._copy_producer_states()

    def _replay(self, offset: int, rebuild: list[Segment]) -> None:
        """Take the batches from ``offset`` on into the producer state (headers only, and the
        record of each control batch); collect the aborted transactions of the ``rebuild``
        segments and write their transaction indexes anew."""
        states = self._producer_states
        rebuilt: dict[int, list[AbortedTxn]] = {segment.base_offset: [] for segment in rebuild}
        for segment in self._segments:
            if segment.next_offset <= offset:
                continue
            aborted = rebuilt.get(segment.base_offset)
            start = segment.position_of_offset_index_floor(offset)
            for position, header in segment.scan_headers(start):
                if header.base_offset < offset:
                    continue
                if not header.attributes & CONTROL_BIT:
                    states.replay(header)
                    continue
                marker = _read_marker(segment.read_bytes(position, header.size_bytes))
                if marker is None:
                    continue
                completed = states.replay_marker(header, marker, recovering=True)
                if aborted is not None and not completed.commit:
                    aborted.append(
                        AbortedTxn(
                            completed.producer_id,
                            completed.first_offset,
                            completed.last_offset,
                            completed.last_stable_offset,
                        )
                    )
        name = f"{self.topic}-{self.partition}"
        for segment in rebuild:
            txns = rebuilt[segment.base_offset]
            try:
                segment.replace_aborted(txns)
            except OSError as error:
                # Kept in memory; the file stays as it was and is rebuilt again on the next open.
                segment.replace_aborted(txns, write=False)
                log.warning("%s: cannot rewrite %s: %s", name, segment.txnindex_path.name, error)
            self.recovery_messages.append(
                f"recovered {name}: rebuilt the transaction index of segment {segment.base_offset} "
                f"({len(txns)} aborted transactions)"
            )

    def _count_batches_for_state_copy(self, batches: int) -> None:
        self._batches_since_state_copy += batches
        if self._batches_since_state_copy >= PRODUCER_STATE_COPY_BATCHES:
            self._copy_producer_states()

    def _copy_producer_states(self) -> None:
        self._batches_since_state_copy = 0
        entries = {producer_id: entry.copy() for producer_id, entry in self._producer_states.entries.items()}
        kept = self._producer_state_copies[-(PRODUCER_STATE_COPIES_KEPT - 1) :]
        self._producer_state_copies = [*kept, (self.log_end_offset, entries)]

    def _headers_from(self, offset: int) -> Iterator[BatchHeader]:
        for segment in self._segments:
            if segment.next_offset <= offset:
                continue
            start = segment.position_of_offset_index_floor(offset)
            for _position, header in segment.scan_headers(start):
                if header.base_offset >= offset:
                    yield header

    # ---- properties --------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        """The next offset to be assigned."""
        return self._segments[-1].next_offset

    @property
    def high_watermark(self) -> int:
        """The offset below which records are replicated to the whole ISR (what consumers may
        read); the log end while no replica state ever set one (a single node)."""
        high_watermark = self._high_watermark
        return self.log_end_offset if high_watermark is None else high_watermark

    def track_high_watermark(self) -> None:
        """From now on the replica state sets the high watermark. Until it does, nothing is known
        to be replicated: it starts at the log start (a restarted leader's consumers wait for the
        in-sync replicas to fetch, a moment; a follower learns it from its leader)."""
        if self._high_watermark is None:
            self._high_watermark = self._log_start_offset

    def set_high_watermark(self, offset: int) -> None:
        """The replica state moved the high watermark (never past the log end)."""
        assert offset >= 0, offset
        self._high_watermark = min(offset, self.log_end_offset)

    @property
    def last_stable_offset(self) -> int:
        """The offset below which every transaction is decided (committed or aborted): the lowest
        first offset of the transactions in progress, capped at the high watermark — what a
        read_committed consumer may read up to. Never below the log start: a transaction whose
        beginning retention removed holds its readers at the log start until it ends."""
        high_watermark = self.high_watermark
        first_unstable = self._producer_states.first_unstable_offset()
        if first_unstable is None or first_unstable >= high_watermark:
            return high_watermark
        return max(first_unstable, self._log_start_offset)

    @property
    def size_bytes(self) -> int:
        return sum(segment.size_bytes for segment in self._segments)

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    @property
    def segment_base_offsets(self) -> list[int]:
        return [segment.base_offset for segment in self._segments]

    @property
    def requires_keys(self) -> bool:
        """Produce must refuse records without a key (compacted topic)."""
        return self.config.requires_keys

    def reconfigure(self, config: LogConfig) -> None:
        self.config = config
        for segment in self._segments:
            segment.index_interval_bytes = config.index_interval_bytes

    # ---- append --------------------------------------------------------------------------------

    def append(
        self, records: bytearray | memoryview, headers: list[BatchHeader], now_ms: int
    ) -> AppendResult:
        """Assign offsets to the batches in ``records`` (validated, ``headers`` parsed in order) and
        write them; see the module docs of ``producer_state`` for the idempotence checks."""
        assert headers, "append needs at least one batch"
        if self._closed:
            raise LogFileError(f"{self.topic}-{self.partition} is closed (stopping, or its topic deleted)")
        if len(headers) == 1:
            return self._append_one(records, headers[0], now_ms)
        config = self.config
        next_offset = self.log_end_offset
        base_offsets: list[int] = []
        for header in headers:
            assert not header.attributes & CONTROL_BIT, "markers are written by append_marker"
            _check_batch_size(header.size_bytes, config)
            base_offsets.append(next_offset)
            next_offset += header.last_offset_delta + 1
        pending_producers = self._producer_states.check(headers, base_offsets)

        log_append_time = config.log_append_time
        batches: list[BatchInfo] = []
        position = 0
        message_count = 0
        stamp_epoch = self._stamp_epoch
        for header, base_offset in zip(headers, base_offsets):
            set_base_offset(records, position, base_offset)
            if stamp_epoch is not None:
                set_partition_leader_epoch(records, position, stamp_epoch)
            max_timestamp = header.max_timestamp
            if log_append_time:
                max_timestamp = now_ms
                _stamp_log_append_time(records, position, header, now_ms)
            size_bytes = header.size_bytes
            batches.append(
                BatchInfo(base_offset, base_offset + header.last_offset_delta, max_timestamp, size_bytes)
            )
            message_count += header.record_count
            position += size_bytes
        assert position == len(records), "headers must describe all of records"

        rolled = self._write_batches(records, batches, now_ms)
        self._appended(pending_producers, len(batches), message_count, rolled, now_ms)
        return AppendResult(
            base_offset=base_offsets[0],
            last_offset=batches[-1].last_offset,
            log_append_time_ms=now_ms if log_append_time else -1,
            log_start_offset=self._log_start_offset,
        )

    def _append_one(self, records: bytearray | memoryview, header: BatchHeader, now_ms: int) -> AppendResult:
        """``append`` of one batch (what every Produce of v3 and later carries per partition): the
        same steps without the lists and loops of several."""
        assert not header.attributes & CONTROL_BIT, "markers are written by append_marker"
        config = self.config
        size_bytes = header.size_bytes
        _check_batch_size(size_bytes, config)
        assert size_bytes == len(records), "headers must describe all of records"
        base_offset = self._segments[-1].next_offset
        # A batch without a producer id or sequence (not idempotent) has no producer state to check.
        pending_producers = (
            None
            if header.producer_id < 0 or header.base_sequence == NO_SEQUENCE
            else self._producer_states.check([header], [base_offset])
        )
        BASE_OFFSET.pack_into(records, 0, base_offset)
        if self._stamp_epoch is not None:
            set_partition_leader_epoch(records, 0, self._stamp_epoch)
        max_timestamp = header.max_timestamp
        log_append_time = config.log_append_time
        if log_append_time:
            max_timestamp = now_ms
            _stamp_log_append_time(records, 0, header, now_ms)
        last_offset = base_offset + header.last_offset_delta
        rolled = self._write_batches(
            records, [BatchInfo(base_offset, last_offset, max_timestamp, size_bytes)], now_ms
        )
        self._appended(pending_producers, 1, header.record_count, rolled, now_ms)
        return AppendResult(
            base_offset, last_offset, now_ms if log_append_time else -1, self._log_start_offset
        )

    def _appended(
        self,
        pending_producers: dict[int, ProducerEntry] | None,
        batches: int,
        messages: int,
        rolled: bool,
        now_ms: int,
    ) -> None:
        """What an append of data batches, once written, changes besides the segments."""
        if pending_producers:
            self._producer_states.commit(pending_producers)
        self._count_batches_for_state_copy(batches)
        if rolled:
            # A snapshot per roll bounds how much of the log recovery must replay for producer
            # state; it is taken now (it covers everything below the log end) and written by flush.
            self._pending_snapshot = self._snapshot_due(self.log_end_offset)
        if self._appended_messages == self._flushed_messages:
            self._first_unflushed_ms = now_ms
        self._appended_messages += messages

    def append_as_follower(
        self, records: bytes | bytearray | memoryview, headers: list[BatchHeader], now_ms: int
    ) -> None:
        """Append batches copied from the leader (validated, ``headers`` parsed in order), keeping
        the offsets and leader epochs the leader gave them: per batch, no byte rewritten.

        The first batch must start at or after the log end and offsets must increase (a leader's
        compacted log may skip offsets), else OffsetOutOfOrderError and nothing is written. The
        producer state takes the batches in without checking them (the leader did), so sequence
        checks hold if this replica becomes the leader; a batch of a newer leader epoch records
        where that epoch starts (in the checkpoint before the batch is written: a checkpoint may be
        ahead of the log after a crash, which opening cuts back, never behind it)."""
        assert headers, "append needs at least one batch"
        if self._closed:
            raise LogFileError(f"{self.topic}-{self.partition} is closed (stopping, or its topic deleted)")
        old_log_end = next_offset = self.log_end_offset
        batches: list[BatchInfo] = []
        message_count = 0
        epochs = self.leader_epochs
        latest_epoch = epochs.latest_epoch
        epochs_changed = False
        position = 0
        markers: dict[int, EndTxnMarker] = {}  # by index in headers
        for index, header in enumerate(headers):
            if header.attributes & CONTROL_BIT:
                marker = _read_marker(memoryview(records)[position : position + header.size_bytes])
                if marker is not None:
                    markers[index] = marker
            position += header.size_bytes
            if header.base_offset < next_offset:
                raise OffsetOutOfOrderError(
                    f"{self.topic}-{self.partition}: a replicated batch starts at offset "
                    f"{header.base_offset}, below the log end {next_offset}"
                )
            batches.append(
                BatchInfo(header.base_offset, header.last_offset, header.max_timestamp, header.size_bytes)
            )
            next_offset = header.last_offset + 1
            message_count += header.record_count
            epoch = header.partition_leader_epoch
            if epoch > latest_epoch:
                epochs_changed |= epochs.assign(epoch, header.base_offset)
                latest_epoch = epoch
        if epochs_changed:
            self._write_leader_epochs()
        rolled = self._write_batches(records, batches, now_ms)
        producer_states = self._producer_states
        if not markers:
            for header in headers:
                producer_states.replay(header)
        else:
            self._replay_with_markers(headers, markers, old_log_end)
        self._count_batches_for_state_copy(len(headers))
        if rolled:
            self._pending_snapshot = self._snapshot_due(self.log_end_offset)
        if self._appended_messages == self._flushed_messages:
            self._first_unflushed_ms = now_ms
        self._appended_messages += message_count

    def _replay_with_markers(
        self, headers: list[BatchHeader], markers: dict[int, EndTxnMarker], old_log_end: int
    ) -> None:
        """A follower's batches, some of them markers, taken into the producer state in order;
        each abort noted in the transaction index of the segment its marker went to. If that
        write fails the batches are cut again (the state rebuilt) and LogFileError raised."""
        producer_states = self._producer_states
        for index, header in enumerate(headers):
            if not header.attributes & CONTROL_BIT:
                producer_states.replay(header)
                continue
            marker = markers.get(index)
            if marker is None:
                continue
            if not marker.commit:
                offset = header.base_offset
                first_offset, last_stable = producer_states.completion(header.producer_id, offset)
                try:
                    self._segment_of(offset).append_aborted(
                        AbortedTxn(header.producer_id, first_offset, offset, last_stable)
                    )
                except OSError as error:
                    self.truncate_to(old_log_end)
                    raise LogFileError(
                        f"cannot write the transaction index of {self.topic}-{self.partition}: {error}"
                    ) from error
            producer_states.replay_marker(header, marker)

    def _segment_of(self, offset: int) -> Segment:
        segments = self._segments
        return segments[max(bisect_right(segments, offset, key=_base_offset) - 1, 0)]

    # ---- transactions --------------------------------------------------------------------------

    def append_marker(
        self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, now_ms: int
    ) -> int:
        """Write the COMMIT (``commit``) or ABORT marker ending ``producer_id``'s transaction at
        the log end, stamped with the leader epoch as ``append`` stamps batches; returns its
        offset. It ends the producer's transaction in progress (a marker with none is written all
        the same, as Kafka does); an abort is noted in the transaction index.

        Refused, with nothing written: InvalidProducerEpochError for a producer epoch older than
        the producer's (fenced), TransactionCoordinatorFencedError for a coordinator epoch older
        than the one of the producer's last marker (a zombie coordinator), LogFileError when the
        files cannot be written."""
        if self._closed:
            raise LogFileError(f"{self.topic}-{self.partition} is closed (stopping, or its topic deleted)")
        producer_states = self._producer_states
        producer_states.check_marker(producer_id, producer_epoch, coordinator_epoch)
        offset = self.log_end_offset
        stamp_epoch = self._stamp_epoch
        batch = build_end_txn_marker(
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            commit=commit,
            coordinator_epoch=coordinator_epoch,
            timestamp_ms=now_ms,
            base_offset=offset,
            partition_leader_epoch=NO_PARTITION_LEADER_EPOCH if stamp_epoch is None else stamp_epoch,
            timestamp_type=LOG_APPEND_TIME if self.config.log_append_time else CREATE_TIME,
        )
        header = BatchHeader._make(HEADER.unpack_from(batch))
        rolled = self._write_batches(batch, [BatchInfo(offset, offset, now_ms, len(batch))], now_ms)
        if not commit:
            first_offset, last_stable = producer_states.completion(producer_id, offset)
            active = self._segments[-1]
            try:
                active.append_aborted(AbortedTxn(producer_id, first_offset, offset, last_stable))
            except OSError as error:
                try:
                    active.truncate_to_offset(offset)
                except OSError:
                    log.exception("%s-%d: could not take back a marker", self.topic, self.partition)
                raise LogFileError(
                    f"cannot write the transaction index of {self.topic}-{self.partition}: {error}"
                ) from error
        producer_states.replay_marker(header, EndTxnMarker(commit, coordinator_epoch))
        self._count_batches_for_state_copy(1)
        if rolled:
            self._pending_snapshot = self._snapshot_due(self.log_end_offset)
        if self._appended_messages == self._flushed_messages:
            self._first_unflushed_ms = now_ms
        self._appended_messages += 1
        return offset

    def aborted_transactions(self, start_offset: int, upper_offset: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of every aborted transaction that overlaps
        [``start_offset``, ``upper_offset``): what a read_committed fetch of those offsets must
        be told, in the order their markers were written."""
        found: list[tuple[int, int]] = []
        if start_offset >= upper_offset:
            return found
        segments = self._segments
        for index in range(max(bisect_right(segments, start_offset, key=_base_offset) - 1, 0), len(segments)):
            if segments[index].collect_aborted(start_offset, upper_offset, found):
                break
        return found

    def producers(self) -> list[ProducerView]:
        """Every producer this partition keeps state for (DescribeProducers)."""
        return [
            ProducerView(
                producer_id,
                entry.epoch,
                entry.last_sequence,
                entry.last_timestamp_ms,
                entry.coordinator_epoch,
                entry.txn_first_offset,
            )
            for producer_id, entry in self._producer_states.entries.items()
        ]

    def _write_batches(
        self, records: bytes | bytearray | memoryview, batches: list[BatchInfo], now_ms: int
    ) -> bool:
        """Write the batches to the active segment, rolling where a segment is full or old;
        returns whether it rolled.

        One write for the whole request unless it has to be split across a roll. All or nothing:
        the files of every segment written are opened (new ones created) before the first byte is
        written, so running out of descriptors, or any other failure, leaves the log as it was and
        raises LogFileError.
        """
        active = self._segments[-1]
        if len(batches) == 1 and not self._must_roll(active, 0, batches[0], now_ms):
            # The usual case, kept short: one batch into the active segment.
            try:
                active.append(records, batches, now_ms)
            except OSError as error:
                raise LogFileError(f"cannot append to {self.topic}-{self.partition}: {error}") from error
            return False
        # The plan: (segment, first batch, end batch, first byte, bytes) per chunk, new segments too.
        plan: list[tuple[Segment, int, int, int, int]] = []
        new_segments: list[Segment] = []
        target = self._segments[-1]
        chunk_start = chunk_first = chunk_bytes = 0
        for index, batch in enumerate(batches):
            if self._must_roll(target, chunk_bytes, batch, now_ms):
                if chunk_bytes:
                    plan.append((target, chunk_first, index, chunk_start, chunk_bytes))
                    chunk_start += chunk_bytes
                    chunk_first = index
                    chunk_bytes = 0
                target = Segment(
                    self.directory, batch.base_offset, self.config.index_interval_bytes, self._files
                )
                new_segments.append(target)
            chunk_bytes += batch.size_bytes
        plan.append((target, chunk_first, len(batches), chunk_start, chunk_bytes))

        old_log_end = active.next_offset
        view = memoryview(records)
        # One chunk (the usual case) cannot fail half-way: its file is opened before it is written.
        pins: list[tuple[Segment, int]] = []
        written: list[Segment] = []
        try:
            if len(plan) > 1:
                for segment, *_rest in plan:
                    pins.append((segment, segment.pin()))
            for segment, first, end, start, size in plan:
                segment.append(view[start : start + size], batches[first:end], now_ms)
                written.append(segment)
        except OSError as error:
            self._undo_write(active, old_log_end, written, new_segments)
            raise LogFileError(f"cannot append to {self.topic}-{self.partition}: {error}") from error
        finally:
            for segment, fd in pins:
                segment.unpin(fd)
        if not new_segments:
            return False
        for segment in [active, *new_segments[:-1]]:
            segment.seal()
            log.info(
                "%s-%d: rolled a new segment at offset %d", self.topic, self.partition, segment.next_offset
            )
        self._segments = [*self._segments, *new_segments]
        self._directory_dirty = True
        return True

    def _undo_write(
        self, active: Segment, old_log_end: int, written: list[Segment], new_segments: list[Segment]
    ) -> None:
        """Take back the part of a failed append that reached the files (best effort: if this fails
        too, recovery on the next start cuts what is not whole)."""
        try:
            for segment in new_segments:
                segment.delete_files()
            if active in written:
                active.truncate_to_offset(old_log_end)
        except OSError:
            log.exception("%s-%d: could not take back a failed append", self.topic, self.partition)

    def _must_roll(self, active: Segment, pending_bytes: int, batch: BatchInfo, now_ms: int) -> bool:
        size = active.size_bytes + pending_bytes
        if size == 0:
            return False
        if size + batch.size_bytes > self.config.segment_bytes:
            return True
        if not active.can_hold(batch.last_offset):
            return True
        rolling_base = active.rolling_base_ms if active.rolling_base_ms is not None else now_ms
        return now_ms - rolling_base >= self.config.segment_ms

    def _roll(self) -> None:
        """Seal the active segment and start a new one at the log end offset (its file is created
        by its first append)."""
        active = self._segments[-1]
        active.seal()
        new_segment = Segment(
            self.directory, active.next_offset, self.config.index_interval_bytes, self._files
        )
        log.info("%s-%d: rolled a new segment at offset %d", self.topic, self.partition, active.next_offset)
        self._segments = [*self._segments, new_segment]
        self._directory_dirty = True
        self._pending_snapshot = self._snapshot_due(new_segment.base_offset)

    def roll(self) -> None:
        """Start a new segment now (an empty active segment is kept as it is)."""
        if self._segments[-1].size_bytes:
            self._roll()

    # ---- read ----------------------------------------------------------------------------------

    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        min_one_batch: bool = True,
        max_offset: int | None = None,
        read_committed: bool = False,
    ) -> ReadResult:
        """Whole batches from the one containing ``offset``, at most ``max_bytes`` unless the first
        batch alone is larger and ``min_one_batch`` (then it comes whole, as in KIP-74).
        ``read_committed`` (a consumer's isolation level): no batch at or past the last stable
        offset, and the aborted transactions the batches overlap in the result.

        OffsetOutOfRangeError outside [log start, log end]; LogFileError if a segment file cannot
        be opened or read (out of descriptors, an I/O error)."""
        log_end = self.log_end_offset
        if offset < self._log_start_offset or offset > log_end:
            raise OffsetOutOfRangeError(
                f"offset {offset} of {self.topic}-{self.partition} is outside "
                f"[{self._log_start_offset}, {log_end}]"
            )
        limit = log_end if max_offset is None else min(max_offset, log_end)
        try:
            if read_committed:
                return self._read_committed(offset, max_bytes, min_one_batch, limit)
            return self._read(offset, max_bytes, min_one_batch, limit)
        except OSError as error:
            raise LogFileError(f"cannot read {self.topic}-{self.partition}: {error}") from error

    def _read_committed(self, offset: int, max_bytes: int, min_one_batch: bool, limit: int) -> ReadResult:
        last_stable = self.last_stable_offset
        result = self._read(offset, max_bytes, min_one_batch, min(limit, last_stable))
        aborted: list[tuple[int, int]] = []
        if result.records:
            aborted = self.aborted_transactions(offset, _end_offset(result.records))
        return ReadResult(
            result.records, result.high_watermark, result.log_start_offset, last_stable, aborted
        )

    def _read(self, offset: int, max_bytes: int, min_one_batch: bool, limit: int) -> ReadResult:
        if offset >= limit:  # nothing to read (a follower or consumer at the end): the usual case
            high_watermark = self.high_watermark
            stable = self.last_stable_offset if self._producer_states.ongoing else high_watermark
            return ReadResult(b"", high_watermark, self._log_start_offset, stable)
        parts: list[bytes] = []
        budget = max_bytes
        segments = self._segments
        index = max(bisect_right(segments, offset, key=_base_offset) - 1, 0)
        want_first = min_one_batch
        while index < len(segments) and offset < limit:
            segment = segments[index]
            found = segment.locate_batch(offset)
            index += 1
            if found is None:
                continue
            position, header, window, window_start = found
            if header.base_offset >= limit:
                break
            available = segment.size_bytes - position
            wanted = min(budget, available) if budget > 0 else 0
            start = position - window_start
            if wanted and start + wanted <= len(window):
                # Already read while looking for the batch (a small fetch near the end: the usual case).
                data = window[start : start + wanted]
            else:
                data = segment.read_bytes(position, wanted) if wanted else b""
            whole = _whole_batches_length(data, limit)
            if whole == 0:
                if want_first and not parts:
                    size = header.size_bytes
                    if start + size <= len(window):
                        parts.append(window[start : start + size])
                    else:
                        parts.append(segment.read_bytes(position, size))
                break
            parts.append(data if whole == len(data) else data[:whole])
            budget -= whole
            want_first = False
            if whole < available:
                break
            offset = segment.next_offset
        records = parts[0] if len(parts) == 1 else b"".join(parts)
        high_watermark = self.high_watermark
        stable = self.last_stable_offset if self._producer_states.ongoing else high_watermark
        return ReadResult(records, high_watermark, self._log_start_offset, stable)

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """Batch granularity: (base offset, max timestamp) of the earliest batch whose max timestamp
        is >= ``timestamp_ms`` (the client skips the earlier records of that batch), else None."""
        for segment in self._segments:
            if segment.max_timestamp_ms < timestamp_ms or segment.next_offset <= self._log_start_offset:
                continue
            header = segment.find_timestamp(timestamp_ms, self._log_start_offset)
            if header is not None:
                return max(header.base_offset, self._log_start_offset), header.max_timestamp
        return None

    def max_timestamp(self) -> tuple[int, int]:
        """(last offset of the batch holding the largest timestamp, that timestamp), (-1, -1) if empty."""
        best: Segment | None = None
        for segment in self._segments:
            if segment.max_timestamp_ms >= 0 and (
                best is None or segment.max_timestamp_ms > best.max_timestamp_ms
            ):
                best = segment
        if best is None:
            return -1, -1
        found = best.find_batch(best.max_timestamp_base_offset)
        assert found is not None
        return found[1].last_offset, best.max_timestamp_ms

    # ---- moving the start or the end ----------------------------------------------------------

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: move the log start to ``offset`` (-1 = high watermark), drop the whole
        segments below it (never the active one); returns the new log start offset.

        The new start is durable once the next ``flush`` has run (the caller waits for it)."""
        if offset == -1:
            offset = self.high_watermark
        if offset < 0 or offset > self.high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot delete records before {offset} of {self.topic}-{self.partition}: "
                f"high watermark is {self.high_watermark}"
            )
        if offset > self._log_start_offset:
            self._log_start_offset = offset
            self._partition_file_due = True
            self._delete_leading_segments(lambda _segment, end: end <= self._log_start_offset)
            self._log_start_moved()
        return self._log_start_offset

    def truncate_to(self, offset: int) -> None:
        """Remove every offset >= ``offset`` (a batch containing it goes whole): a follower cuts
        the tail where its log diverges from the leader's. The leader epochs starting at or after
        the new end go too, the high watermark is capped, and the producer state is rebuilt (from
        the snapshot if it covers no more than what is left)."""
        if offset >= self.log_end_offset:
            return
        if offset <= self._segments[0].base_offset:
            self.restart_at(offset)
            return
        keep: list[Segment] = []
        dropped: list[Segment] = []
        for segment in self._segments:
            if segment.base_offset >= offset and keep:
                dropped.append(segment)
            else:
                keep.append(segment)
        keep[-1].truncate_to_offset(offset)
        self._segments = keep
        if dropped:
            self._discard_segments(dropped)
        self._after_truncation()

    def restart_at(self, offset: int) -> None:
        """Drop the whole log and start it empty at ``offset`` (a follower whose log ends before
        the leader's log start, or that shares nothing with it)."""
        old = self._segments
        self._segments = [Segment(self.directory, offset, self.config.index_interval_bytes, self._files)]
        self._discard_segments(old)
        self._producer_state_copies = []
        self._log_start_offset = offset
        self._write_partition_file()
        self._after_truncation()

    def _after_truncation(self) -> None:
        log_end = self.log_end_offset
        if self._high_watermark is not None:
            self._high_watermark = min(self._high_watermark, log_end)
        if self._leader_epochs is not None:
            changed = self._leader_epochs.truncate_from_end(log_end)
            changed |= self._leader_epochs.truncate_from_start(self._log_start_offset)
            if changed:
                self._write_leader_epochs()
        self._producer_state_copies = [
            (covered, entries) for covered, entries in self._producer_state_copies if covered <= log_end
        ]
        self._producer_states = ProducerStateTable()
        self._load_producer_states()
        # Written now, not by the next flush: a snapshot beyond the new end must never be read.
        self._pending_snapshot = None
        self._write_snapshot()

    # ---- leader epochs -------------------------------------------------------------------------

    @property
    def leader_epochs(self) -> LeaderEpochCache:
        """Where each leader epoch starts in this log (loaded on first use: only a replicated
        partition needs it)."""
        epochs = self._leader_epochs
        if epochs is None:
            epochs = self._leader_epochs = self._load_leader_epochs()
        return epochs

    def _load_leader_epochs(self) -> LeaderEpochCache:
        """The checkpoint, cut to the log as it is, completed from the batch headers it may have
        missed: those of the active segment (a crash between a batch and its checkpoint; epochs are
        written to the checkpoint before the batches that start them, so older segments are
        covered), or every batch when there is no checkpoint (a log from before replication)."""
        path = self.directory / CHECKPOINT_FILE_NAME
        complete = path.exists()
        try:
            epochs = read_checkpoint(path)
        except LeaderEpochCheckpointError as error:
            log.warning("%s-%d: %s; rebuilding it from the log", self.topic, self.partition, error)
            epochs, complete = LeaderEpochCache(), False
        changed = epochs.truncate_from_end(self.log_end_offset)
        changed |= epochs.truncate_from_start(self._log_start_offset)
        scan_from = self._segments[0].base_offset
        if complete:
            latest_start = epochs.entries[-1].start_offset if epochs.entries else 0
            scan_from = max(self._segments[-1].base_offset, latest_start)
        latest = epochs.latest_epoch
        for header in self._headers_from(scan_from):
            epoch = header.partition_leader_epoch
            if epoch > latest:
                changed |= epochs.assign(epoch, max(header.base_offset, self._log_start_offset))
                latest = epoch
        if changed or (not complete and epochs.entries):
            self._leader_epochs = epochs
            self._write_leader_epochs()
        return epochs

    def _write_leader_epochs(self) -> None:
        """Rewrite the checkpoint now (no fsync: the next flush makes it durable; it changes only
        when leadership moves, so this costs the loop a few small writes per election)."""
        assert self._leader_epochs is not None
        write_checkpoint(self.directory / CHECKPOINT_FILE_NAME, self._leader_epochs, sync=False)
        self._epochs_unsynced = True

    def become_leader(self, leader_epoch: int) -> None:
        """This broker leads the partition in ``leader_epoch``: the epoch starts at the log end and
        every batch appended from now on carries it."""
        if self.leader_epochs.assign(leader_epoch, self.log_end_offset):
            self._write_leader_epochs()
        self._stamp_epoch = leader_epoch

    def become_follower(self) -> None:
        """Another broker leads: batches come with their epochs (``append_as_follower``)."""
        self._stamp_epoch = None

    @property
    def leader_epoch(self) -> int | None:
        """The epoch stamped into appended batches, None unless this broker leads the partition."""
        return self._stamp_epoch

    def _log_start_moved(self) -> None:
        if self._leader_epochs is not None and self._leader_epochs.truncate_from_start(
            self._log_start_offset
        ):
            self._write_leader_epochs()

    # ---- retention -----------------------------------------------------------------------------

    def apply_retention(self, now_ms: int) -> int:
        """Drop leading whole segments past retention.ms or retention.bytes, or wholly below the
        log start offset; never the active segment. Returns the bytes freed.

        A segment ends where the next one begins, not at its last record: compaction may have
        emptied a segment, and offsets it held must stay readable (the next record that survived)."""
        config = self.config
        freed = self._delete_leading_segments(lambda _segment, end: end <= self._log_start_offset)
        if not config.deletes:
            return freed
        if config.retention_ms >= 0:
            freed += self._delete_leading_segments(
                lambda segment, _end: now_ms - segment.max_timestamp_ms > config.retention_ms
            )
        if config.retention_bytes >= 0:
            excess = self.size_bytes - config.retention_bytes

            def over_size(segment: Segment, _end: int) -> bool:
                nonlocal excess
                if excess >= segment.size_bytes:
                    excess -= segment.size_bytes
                    return True
                return False

            freed += self._delete_leading_segments(over_size)
        return freed

    def _delete_leading_segments(self, expired: Callable[[Segment, int], bool]) -> int:
        """Drop the leading segments ``expired(segment, next segment's base offset)`` says are
        gone, stopping at the first that is not (and always before the active one)."""
        segments = self._segments
        count = 0
        while count < len(segments) - 1 and expired(segments[count], segments[count + 1].base_offset):
            count += 1
        if count == 0:
            return 0
        self._segments = segments[count:]
        freed = sum(segment.size_bytes for segment in segments[:count])
        self._discard_segments(segments[:count])
        if self._segments[0].base_offset > self._log_start_offset:
            self._log_start_offset = self._segments[0].base_offset
            self._partition_file_due = True
            self._log_start_moved()
        return freed

    def _discard_segments(self, segments: list[Segment]) -> None:
        """Rename the files of segments that left the log to ``.deleted`` names and hand them to
        the trash (a worker removes them)."""
        deleted: list[Path] = []
        for segment in segments:
            segment.close()
            cached = segment.cached_paths()
            for path in segment.file_paths():
                target = path.with_name(path.name + DELETED_SUFFIX)
                try:
                    if path in cached:
                        self._files.replace(str(path), str(target))
                    else:
                        os.rename(path, target)
                except FileNotFoundError:
                    continue
                deleted.append(target)
        self._trash.add(deleted)
        self._directory_dirty = True

    # ---- compaction ----------------------------------------------------------------------------

    def compact(self, now_ms: int) -> int:
        """Keep the latest record per key in the non-active segments, all in this thread (see
        ``compaction``; the broker runs the middle step in a worker thread). Returns bytes freed."""
        from strom.storage.compaction import run_compaction

        job = self.plan_compaction(now_ms)
        if job is None:
            return 0
        return self.finish_compaction(run_compaction(job))

    def plan_compaction(self, now_ms: int, *, only_new: bool = False) -> CompactionJob | None:
        """What a compaction of this log would work on now, or None (not compacted, nothing
        inactive, or with ``only_new`` no inactive segment since the last compaction planned).
        Cheap: the loop thread calls it; ``run_compaction`` does the work elsewhere.

        Only the inactive segments wholly below the last stable offset are cleaned (Kafka's
        rule): above it a record may still be aborted, or cut by a new leader, and must not make
        an older value of its key go; and a read_committed consumer reading up to it sees the
        latest value of every key as of there."""
        if not self.config.compacted or self._closed:
            return None
        stable = self.last_stable_offset
        inactive: list[Segment] = []
        for segment in self._segments[:-1]:
            if segment.next_offset > stable:
                break
            inactive.append(segment)
        if not inactive:
            return None
        through = inactive[-1].next_offset
        if only_new and through <= self._compaction_planned_through:
            return None
        self._compaction_planned_through = through
        aborted = [txn for segment in self._segments for txn in segment.aborted_txns()]
        return CompactionJob(
            self,
            inactive,
            self.config,
            now_ms,
            aborted,
            dict(self._producer_states.ongoing),
            self._marker_pins(),
        )

    def _marker_pins(self) -> dict[int, int]:
        """Per producer, the lowest offset of a producer state this log may still be rebuilt from
        (the snapshot due, the snapshot file, the in-memory copies) that has the producer's
        transaction in progress. Compaction keeps the producer's markers at or past it: replayed
        from that state, the log must still hold the marker that ends the transaction, or the
        transaction would stay open for good and pin the last stable offset. (A state taken
        before the transaction began is no danger: the marker goes only once none of the
        transaction's records are left, so a replay sees neither.) Every state taken from now on
        covers the log end, past every marker there is."""
        pins: dict[int, int] = {}
        # The pending snapshot before the file's pins: a flush pins the file before it unsets it.
        pending = self._pending_snapshot
        if pending is not None:
            pins = _merge_pins(pins, pending.pins)
        pins = _merge_pins(pins, self._snapshot_file_pins)
        for covered, entries in self._producer_state_copies:
            in_txn = {producer_id for producer_id, entry in entries.items() if entry.txn_first_offset >= 0}
            pins = _merge_pins(pins, _pins(covered, in_txn))
        return pins

    def finish_compaction(self, result: CompactionResult) -> int:
        """Swap in the segments compaction built (loop thread). A group whose segments are no longer
        all in the log (retention, truncation or deletion got there first) is thrown away, and with
        it every later group that drops a marker: the records of that marker's transaction may be
        in a group thrown away, still in the log."""
        freed = 0
        thrown_away = False
        for group in result.groups:
            segments = self._segments
            try:
                start = next(i for i, segment in enumerate(segments) if segment is group.old_segments[0])
            except StopIteration:
                start = -1
            count = len(group.old_segments)
            if (
                self._closed
                or start < 0
                or start + count >= len(segments)  # the active segment is never replaced
                or any(segments[start + i] is not old for i, old in enumerate(group.old_segments))
                or (thrown_away and group.drops_markers)
            ):
                thrown_away = True
                self._trash.add([group.cleaned_path])
                if group.cleaned_txn_index_path is not None:
                    self._trash.add([group.cleaned_txn_index_path])
                continue
            first = group.old_segments[0]
            first.close()
            self._files.replace(str(group.cleaned_path), str(first.log_path))
            if group.cleaned_txn_index_path is not None:
                self._files.replace(str(group.cleaned_txn_index_path), str(first.txnindex_path))
            elif group.new_segment.aborted_count == 0 and first.aborted_count:
                # Every ABORT marker of the group went: so does its transaction index.
                group.new_segment.replace_aborted([])
            later = group.old_segments[1:]
            self._segments = [*segments[:start], group.new_segment, *segments[start + count :]]
            self._discard_segments(later)
            self._directory_dirty = True
            freed += sum(segment.size_bytes for segment in group.old_segments) - group.new_segment.size_bytes
        return freed

    # ---- producer state ------------------------------------------------------------------------

    def producer_state(self, producer_id: int) -> tuple[int, int] | None:
        """(epoch, last sequence) of an idempotent producer seen on this partition."""
        entry = self._producer_states.get(producer_id)
        if entry is None:
            return None
        return entry.epoch, entry.last_sequence

    # ---- flushing ------------------------------------------------------------------------------

    def needs_flush(self, now_ms: int) -> bool:
        """The flush policy (flush.messages, flush.ms) asks for an fsync of the appended data."""
        unflushed = self._appended_messages - self._flushed_messages
        if unflushed <= 0:
            return False
        return (
            unflushed >= self.config.flush_messages
            or now_ms - self._first_unflushed_ms >= self.config.flush_ms
        )

    @property
    def has_pending_files(self) -> bool:
        """A partition file, producer snapshot or epoch checkpoint waits for the next ``flush``."""
        return self._partition_file_due or self._pending_snapshot is not None or self._epochs_unsynced

    def flush(self) -> None:
        """Write the pending partition file and producer snapshot and fsync every segment written
        since the last flush (called from a worker thread; a closed log is skipped)."""
        if self._closed:
            return
        appended = self._appended_messages
        if self._partition_file_due:
            self._partition_file_due = False
            try:
                self._write_partition_file()
            except OSError:
                self._partition_file_due = True
                raise
        snapshot = self._pending_snapshot
        if snapshot is not None:
            # Pinned as a file before it stops being pending (the loop thread reads the pending
            # snapshot first, then the file's pins), and still pinned if the write fails halfway.
            self._snapshot_file_pins = _merge_pins(self._snapshot_file_pins, snapshot.pins)
            self._pending_snapshot = None
            try:
                write_file_atomically(self.directory / SNAPSHOT_FILE_NAME, snapshot.content)
            except OSError:
                if self._pending_snapshot is None:
                    self._pending_snapshot = snapshot
                raise
            self._producer_state_on_disk = snapshot.offset
            self._snapshot_file_pins = snapshot.pins
        if self._epochs_unsynced:
            self._epochs_unsynced = False
            with contextlib.suppress(FileNotFoundError):
                _fsync_file(self.directory / CHECKPOINT_FILE_NAME)
            self._directory_dirty = True
        if self._directory_dirty:
            self._directory_dirty = False
            fsync_directory(self.directory)
        for segment in list(self._segments):
            if segment.dirty:
                segment.fsync()
        self._flushed_messages = appended

    def close(self, *, sync: bool = True) -> None:
        """Make everything durable, write the index files and the producer snapshot, close.

        ``sync=False``: write the index files and the snapshot and leave the fsyncs (of them and
        of the segments) to the caller, who syncs the file system once for every log (the log
        manager's clean shutdown; without that sync it writes no clean-shutdown marker). The
        partition file, rarely written, is always made durable on its own.
        """
        if self._closed:
            return
        if sync:
            self.flush()
        elif self._partition_file_due:
            self._partition_file_due = False
            self._write_partition_file()
        self._closed = True
        # What a reopen reads anyway needs no file: the active segment is always recovered (so
        # its index files are never read), and with no other segment the producer state is
        # rebuilt from it for free. A broker of thousands of small partitions then stops quickly.
        if self._producer_state_on_disk != self.log_end_offset and len(self._segments) > 1:
            self._write_snapshot(sync=sync)
        if self._log_start_on_disk != self._log_start_offset:
            self._write_partition_file()
        for segment in self._segments[:-1]:
            segment.write_index_files(sync=sync)
        for segment in self._segments:
            segment.close()

    def stop(self) -> None:
        """No more flushes, compactions or files written by this log (its topic is being deleted;
        the loop thread calls this, ``detach`` follows in a worker)."""
        self._closed = True

    def detach(self) -> None:
        """Stop using the log without writing anything: its descriptors are closed."""
        self._closed = True
        for segment in self._segments:
            segment.close()

    def delete_files(self) -> None:
        """Close and remove the whole partition directory."""
        self.detach()
        shutil.rmtree(self.directory, ignore_errors=True)

    def _write_partition_file(self) -> None:
        log_start = self._log_start_offset
        write_file_atomically(
            self.directory / PARTITION_FILE_NAME, json.dumps({"log_start_offset": log_start}).encode()
        )
        self._log_start_on_disk = log_start

    def _write_snapshot(self, *, sync: bool = True) -> None:
        covered = self.log_end_offset
        pins = _pins(covered, self._producer_states.ongoing)
        self._snapshot_file_pins = _merge_pins(self._snapshot_file_pins, pins)
        self._producer_states.write_snapshot(self.directory / SNAPSHOT_FILE_NAME, covered, sync=sync)
        self._producer_state_on_disk = covered
        self._snapshot_file_pins = pins

    def _snapshot_due(self, covered: int) -> _DueSnapshot:
        """A snapshot of the producer state now, covering everything below ``covered`` (the log
        end), for the next ``flush`` to write."""
        states = self._producer_states
        return _DueSnapshot(states.snapshot_bytes(covered), covered, _pins(covered, states.ongoing))


@dataclass(frozen=True)
class CompactionJob:
    """The inactive segments of a log as they were when compaction was planned (they do not change
    while it runs: only the loop thread replaces segments, and it checks they are still there),
    with what was known then of transactions: every aborted one, and the first offset of each one
    in progress by producer id."""

    log: PartitionLog
    segments: list[Segment]
    config: LogConfig
    now_ms: int
    aborted: list[AbortedTxn]
    ongoing: dict[int, int]
    # Per producer, the offset from which its markers must stay (``PartitionLog._marker_pins``).
    marker_pins: dict[int, int]


class _DueSnapshot(NamedTuple):
    """A producer snapshot for the next flush to write: the file's content, the offset it covers
    (exclusive) and its pins (see ``PartitionLog._marker_pins``)."""

    content: bytes
    offset: int
    pins: dict[int, int]


def _pins(covered: int, producers_in_txn: Iterable[int]) -> dict[int, int]:
    """The pins of a producer state covering everything below ``covered`` in which
    ``producers_in_txn`` have a transaction in progress."""
    return dict.fromkeys(producers_in_txn, covered)


def _merge_pins(pins: dict[int, int], more: dict[int, int]) -> dict[int, int]:
    """A new dict (the loop thread reads these while a flush replaces them): the lowest pin of
    each producer of either."""
    merged = dict(pins)
    for producer_id, offset in more.items():
        if offset < merged.get(producer_id, offset + 1):
            merged[producer_id] = offset
    return merged


def _read_marker(batch: bytes | memoryview) -> EndTxnMarker | None:
    """The COMMIT / ABORT marker of a control batch; None for another control type or a control
    record that does not parse (it ends no transaction: recovery and followers skip it)."""
    try:
        return parse_end_txn_marker(batch)
    except CorruptBatchError:
        return None


def _load_txn_indexes(
    name: str,
    segments: list[Segment],
    txn_index_bases: set[int],
    abort_markers: dict[int, list[tuple[int, int]]],
    messages: list[str],
) -> list[Segment]:
    """Read the segments' transaction indexes back; the segments whose index must be rebuilt: a
    damaged file, or (a recovered segment) entries that do not name exactly its ABORT markers."""
    rebuild: list[Segment] = []
    for segment in segments:
        damaged = False
        if segment.base_offset in txn_index_bases:
            cut, damaged = segment.load_txn_index()
            if cut:
                messages.append(f"recovered {name}: {cut}")
        markers = abort_markers.get(segment.base_offset)
        if damaged or (
            markers is not None
            and markers != [(txn.last_offset, txn.producer_id) for txn in segment.aborted_txns()]
        ):
            rebuild.append(segment)
    return rebuild


def _end_offset(records: bytes) -> int:
    """The offset after the last of the whole batches ``records`` holds (at least one)."""
    position = 0
    last_start = 0
    end = len(records)
    while end - position >= _OFFSET_AND_LENGTH.size:
        _base_offset_of_batch, batch_length = _OFFSET_AND_LENGTH.unpack_from(records, position)
        last_start = position
        position += batch_length + 12
    header = BatchHeader._make(HEADER.unpack_from(records, last_start))
    return header.last_offset + 1


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_log_start_offset(path: Path) -> int:
    try:
        return int(json.loads(path.read_bytes())["log_start_offset"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def _whole_batches_length(data: bytes, limit_offset: int) -> int:
    """Length of the leading whole batches of ``data`` whose base offset is below ``limit_offset``."""
    position = 0
    end = len(data)
    while end - position >= _OFFSET_AND_LENGTH.size:
        base_offset, batch_length = _OFFSET_AND_LENGTH.unpack_from(data, position)
        size = batch_length + 12
        if position + size > end or base_offset >= limit_offset:
            break
        position += size
    return position


def _check_batch_size(size_bytes: int, config: LogConfig) -> None:
    if size_bytes > config.max_message_bytes:
        raise RecordTooLargeError(
            f"batch of {size_bytes} bytes exceeds max.message.bytes={config.max_message_bytes}"
        )
    if size_bytes > config.segment_bytes:
        raise RecordTooLargeError(f"batch of {size_bytes} bytes exceeds segment.bytes={config.segment_bytes}")


def _stamp_log_append_time(
    records: bytearray | memoryview, position: int, header: BatchHeader, now_ms: int
) -> None:
    """LogAppendTime: set the timestamp-type bit and the max timestamp, then recompute the CRC
    (the one case where the broker changes bytes the CRC covers)."""
    _ATTRIBUTES.pack_into(records, position + ATTRIBUTES_OFFSET, header.attributes | TIMESTAMP_TYPE_BIT)
    _MAX_TIMESTAMP.pack_into(records, position + _MAX_TIMESTAMP_OFFSET, now_ms)
    _CRC.pack_into(records, position + CRC_OFFSET, compute_crc(records, position, header.size_bytes))
