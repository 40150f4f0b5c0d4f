"""Log compaction: keep the latest record per key in the non-active segments.

One pass over the cleanable segments (the inactive ones below the last stable offset, stopping at the
first that holds a record younger than min.compaction.lag.ms) maps every key to its latest offset; a second pass rewrites the
segments keeping, per batch, the records that are still the latest for their key. Offsets never
change: a batch keeps its base offset and its last offset delta, only losing records; a batch that
loses them all is dropped. So offsets become sparse, and the log start offset stays where it was:
a read at an offset that was compacted away gets the next batch that survived (Kafka's semantics;
``Segment.find_batch`` finds the first batch whose last offset is at or after the offset).
Tombstones (null value) stay until they are older than delete.retention.ms. Records without a key
are kept (Kafka refuses them on compacted topics at produce time, see ``LogConfig.requires_keys``).
Batches whose records cannot be decoded are kept whole.

Transactions (``TxnOutcomes``, from what the log knew when the compaction was planned): only the
segments wholly below the last stable offset are cleaned (``PartitionLog.plan_compaction``), so
every transactional batch there belongs to a decided transaction. The batches of an aborted one are
removed whole and never count as a key's latest value; those of a committed one compact like any
other. (A batch of a transaction still in progress would be kept whole and not count either: it
cannot be below the last stable offset, the guard costs nothing.) A control batch (COMMIT / ABORT
marker) goes, as in Kafka's cleaner, once no record of its transaction is left (none of its
producer's transactional batches since that producer's previous marker kept one: always so for an
abort) and it is past the delete horizon (older than delete.retention.ms, as tombstones); an ABORT
marker takes its aborted transaction out of the transaction index (the merged segment's carries
the others over). A marker also stays while a producer state the log may still be rebuilt from (a
snapshot, an in-memory copy) has its transaction in progress: replayed from there, the transaction
would otherwise never end (``PartitionLog._marker_pins``). Other control batches stay. See
docs/transactions.md.

Adjacent cleaned segments are merged while the result fits segment.bytes (and its offsets fit a
segment's 32-bit relative offsets), as Kafka's cleaner groups them, so a log that keeps rolling
small segments does not keep them all. A merged group takes the base offset of its first segment;
an emptied segment stays as an empty file when nothing can take it in, so the log's first segment
(and its base offset) never goes away through compaction.

Threads: ``run_compaction`` reads and writes files only (a worker thread runs it); it writes each
group next to its first segment as ``<base>.log.cleaned``, fsynced, and builds the new segment's
in-memory indexes (and ``<base>.txnindex.cleaned`` when the merged segment's aborted transactions
differ from the first segment's). ``PartitionLog.finish_compaction`` (the loop thread) then renames
the cleaned files over the first segment's (or removes the first's ``.txnindex`` when no aborted
transaction is left) and sends the other segments of the group to the trash, so a crash leaves
either the old segments or the merged one plus leftovers that ``PartitionLog.open`` recognises (a
segment starting below the previous one's end) and removes; a ``.txnindex`` that a crash left
naming a marker that went no longer matches the segment's markers and is rebuilt. A group dropping
a marker is swapped in only if every group before it was: the marker's records may be in one. The
active segment is never touched, so the hot path never waits for compaction. Keys of the latest
records are not looked at in the active segment: a key overwritten there is compacted once the
segment rolls (Kafka's rule too).
"""

from __future__ import annotations

import os
from bisect import bisect_right
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

from strom.protocol.records.batch import AbsoluteRecord, Record, build_batch, decode_batch
from strom.protocol.records.control import parse_end_txn_marker
from strom.protocol.records.header import HEADER, BatchHeader, CorruptBatchError
from strom.storage.files import write_file_synced
from strom.storage.segment import (
    RELATIVE_OFFSET_MAX,
    AbortedTxn,
    BatchInfo,
    Segment,
    encode_aborted_txn,
)

if TYPE_CHECKING:
    from strom.storage.partition_log import CompactionJob


@dataclass(frozen=True)
class CleanedGroup:
    """Adjacent segments and the one segment (written at ``cleaned_path``) that replaces them,
    with its transaction index at ``cleaned_txn_index_path`` when the first segment's own does not
    serve (None: it does)."""

    old_segments: list[Segment]
    cleaned_path: Path
    new_segment: Segment
    cleaned_txn_index_path: Path | None = None
    # A marker of the group went: the group is only right if the groups before it are swapped in.
    drops_markers: bool = False


class Outcome(Enum):
    COMMITTED = "committed"  # and every batch outside a transaction
    ABORTED = "aborted"
    UNDECIDED = "undecided"


class TxnOutcomes:
    """The outcome of the transaction each batch belongs to: from the aborted transactions (per
    producer, disjoint offset ranges: a producer has one transaction at a time) and the first
    offset of each producer's transaction in progress."""

    def __init__(self, aborted: Sequence[AbortedTxn], ongoing: Mapping[int, int]) -> None:
        ranges: dict[int, list[tuple[int, int]]] = {}
        for txn in aborted:
            ranges.setdefault(txn.producer_id, []).append((txn.first_offset, txn.last_offset))
        self._firsts: dict[int, list[int]] = {}
        self._lasts: dict[int, list[int]] = {}
        for producer_id, spans in ranges.items():
            spans.sort()
            self._firsts[producer_id] = [first for first, _last in spans]
            self._lasts[producer_id] = [last for _first, last in spans]
        self._ongoing = dict(ongoing)

    def outcome(self, header: BatchHeader) -> Outcome:
        if not header.is_transactional or header.is_control:
            return Outcome.COMMITTED
        producer_id = header.producer_id
        offset = header.base_offset
        ongoing_first = self._ongoing.get(producer_id)
        if ongoing_first is not None and offset >= ongoing_first:
            return Outcome.UNDECIDED
        firsts = self._firsts.get(producer_id)
        if firsts:
            slot = bisect_right(firsts, offset) - 1
            if slot >= 0 and offset <= self._lasts[producer_id][slot]:
                return Outcome.ABORTED
        return Outcome.COMMITTED


@dataclass(frozen=True)
class CompactionResult:
    groups: list[CleanedGroup]


def run_compaction(job: CompactionJob) -> CompactionResult:
    """Compact the job's cleanable segments into cleaned files (any thread; touches no log state)."""
    config = job.config
    cleanable: list[Segment] = []
    for segment in job.segments:
        if (
            config.min_compaction_lag_ms > 0
            and segment.max_timestamp_ms > job.now_ms - config.min_compaction_lag_ms
        ):
            break
        cleanable.append(segment)
    if not cleanable:
        return CompactionResult([])
    outcomes = TxnOutcomes(job.aborted, job.ongoing)
    latest_offsets: dict[bytes, int] = {}
    for segment in cleanable:
        for _raw, _header, records in _record_batches(segment, outcomes):
            for record in records or ():
                if record.key is not None:
                    latest_offsets[record.key] = record.offset
    markers = _MarkerCleaner(job.now_ms, config.delete_retention_ms, job.marker_pins)
    groups = _GroupWriter(
        job.log.directory, config.segment_bytes, config.index_interval_bytes, job.aborted, markers
    )
    for segment in cleanable:
        dropped_before = markers.dropped
        output, changed = _clean_segment(
            segment, outcomes, latest_offsets, job.now_ms, config.delete_retention_ms, markers
        )
        groups.add(segment, output, changed, markers.dropped > dropped_before)
    groups.finish()
    return CompactionResult(groups.groups)


# The records of a batch of an aborted transaction: it goes whole.
_ABORTED: list[AbsoluteRecord] = []


def _record_batches(
    segment: Segment, outcomes: TxnOutcomes
) -> Iterator[tuple[bytes, BatchHeader, list[AbsoluteRecord] | None]]:
    """(raw batch bytes, its header, its records with absolute offsets) for each batch of
    ``segment``; None for the records of a batch not compacted record by record (control, of a
    transaction in progress, or not decodable), ``_ABORTED`` for a batch of an aborted transaction."""
    for position, header in segment.scan_headers(0):
        raw = segment.read_bytes(position, header.size_bytes)
        if header.is_control:
            yield raw, header, None
            continue
        if header.is_transactional:
            outcome = outcomes.outcome(header)
            if outcome is Outcome.ABORTED:
                yield raw, header, _ABORTED
                continue
            if outcome is Outcome.UNDECIDED:
                yield raw, header, None
                continue
        try:
            yield raw, header, decode_batch(raw).absolute_records()
        except CorruptBatchError:
            yield raw, header, None


def _past_delete_horizon(timestamp_ms: int, now_ms: int, delete_retention_ms: int) -> bool:
    """A tombstone or marker this old has been there delete.retention.ms: a consumer that was
    reading the log then has had that long to see it, so it may go."""
    return now_ms - timestamp_ms >= delete_retention_ms


class _MarkerCleaner:
    """Decides, batch by batch in log order over the cleaned segments, which markers go: a COMMIT
    or ABORT marker whose transaction kept no record (none of its producer's transactional batches
    since the producer's previous marker kept one), past the delete horizon, and before its
    producer's pin (``PartitionLog._marker_pins``). Remembers the ABORT markers dropped, whose
    aborted transactions leave the transaction index."""

    def __init__(self, now_ms: int, delete_retention_ms: int, pins: Mapping[int, int]) -> None:
        self._now_ms = now_ms
        self._delete_retention_ms = delete_retention_ms
        self._pins = pins
        # Producers whose transaction since their last marker kept a record (or a whole batch).
        self._with_records: set[int] = set()
        self.dropped = 0
        self.dropped_aborts: set[int] = set()  # offsets of the ABORT markers dropped

    def batch_kept(self, header: BatchHeader) -> None:
        """A data batch stays (with at least one of its records)."""
        if header.is_transactional:
            self._with_records.add(header.producer_id)

    def keep(self, raw: bytes, header: BatchHeader) -> bool:
        """Whether the control batch ``raw`` stays."""
        try:
            marker = parse_end_txn_marker(raw)
        except CorruptBatchError:
            marker = None
        if marker is None:
            return True  # another control type, or unreadable: it ends no transaction, it stays
        producer_id = header.producer_id
        with_records = producer_id in self._with_records
        self._with_records.discard(producer_id)
        if (
            with_records
            or not _past_delete_horizon(header.max_timestamp, self._now_ms, self._delete_retention_ms)
            or header.base_offset >= self._pins.get(producer_id, header.base_offset + 1)
        ):
            return True
        self.dropped += 1
        if not marker.commit:
            self.dropped_aborts.add(header.base_offset)
        return False


def _clean_segment(
    segment: Segment,
    outcomes: TxnOutcomes,
    latest_offsets: dict[bytes, int],
    now_ms: int,
    delete_retention_ms: int,
    markers: _MarkerCleaner,
) -> tuple[list[bytes], bool]:
    """The segment's batches after cleaning, and whether anything changed."""

    def keep(record: AbsoluteRecord) -> bool:
        if record.key is None:
            return True
        if latest_offsets.get(record.key) != record.offset:
            return False
        if record.value is None:
            return not _past_delete_horizon(record.timestamp, now_ms, delete_retention_ms)
        return True

    output: list[bytes] = []
    changed = False
    for raw, header, records in _record_batches(segment, outcomes):
        if header.is_control:
            if markers.keep(raw, header):
                output.append(raw)
            else:
                changed = True
            continue
        if records is None:
            output.append(raw)
            markers.batch_kept(header)
            continue
        if records is _ABORTED:
            changed = True
            continue
        kept = [record for record in records if keep(record)]
        if kept:
            markers.batch_kept(header)
        if len(kept) == len(records):
            output.append(raw)
            continue
        changed = True
        if kept:
            output.append(_rebuild_batch(kept))
    return output, changed


@dataclass
class _Group:
    segments: list[Segment] = field(default_factory=list)
    batches: list[bytes] = field(default_factory=list)
    size_bytes: int = 0
    changed: bool = False
    drops_markers: bool = False


class _GroupWriter:
    """Groups adjacent cleaned segments into as few segments as segment.bytes allows and writes
    each group that differs from what is on disk (a group of one unchanged segment is left alone)."""

    def __init__(
        self,
        directory: Path,
        segment_bytes: int,
        index_interval_bytes: int,
        aborted: list[AbortedTxn],
        markers: _MarkerCleaner,
    ) -> None:
        self._directory = directory
        self._segment_bytes = segment_bytes
        self._index_interval_bytes = index_interval_bytes
        self._aborted = aborted
        self._markers = markers
        self._current = _Group()
        self.groups: list[CleanedGroup] = []

    def add(self, segment: Segment, batches: list[bytes], changed: bool, drops_markers: bool) -> None:
        size = sum(map(len, batches))
        current = self._current
        if current.segments and (
            current.size_bytes + size > self._segment_bytes
            or segment.next_offset - 1 - current.segments[0].base_offset > RELATIVE_OFFSET_MAX
        ):
            self.finish()
            current = self._current
        current.segments.append(segment)
        current.batches.extend(batches)
        current.size_bytes += size
        current.changed = current.changed or changed or len(current.segments) > 1
        current.drops_markers = current.drops_markers or drops_markers

    def finish(self) -> None:
        current, self._current = self._current, _Group()
        if not current.changed:
            return
        first = current.segments[0]
        cleaned_path = first.log_path.with_name(first.log_path.name + ".cleaned")
        content = b"".join(current.batches)
        write_file_synced(cleaned_path, content)
        new_segment = Segment(self._directory, first.base_offset, self._index_interval_bytes, first.files)
        infos: list[BatchInfo] = []
        for raw in current.batches:
            header = BatchHeader._make(HEADER.unpack_from(raw))
            infos.append(BatchInfo(header.base_offset, header.last_offset, header.max_timestamp, len(raw)))
        new_segment.index_batches(0, infos)
        new_segment.rolling_base_ms = first.rolling_base_ms
        new_segment.seal()
        assert new_segment.size_bytes == len(content) == os.path.getsize(cleaned_path)
        # The merged segment's aborted transactions are its segments', but for those whose ABORT
        # marker went. (None left: PartitionLog.finish_compaction removes the file.)
        end = current.segments[-1].next_offset
        dropped = self._markers.dropped_aborts
        txns = [
            txn
            for txn in self._aborted
            if first.base_offset <= txn.last_offset < end and txn.last_offset not in dropped
        ]
        new_segment.replace_aborted(txns, write=False)
        cleaned_txn_index_path = None
        if txns and txns != first.aborted_txns():
            cleaned_txn_index_path = first.txnindex_path.with_name(first.txnindex_path.name + ".cleaned")
            write_file_synced(cleaned_txn_index_path, b"".join(map(encode_aborted_txn, txns)))
        self.groups.append(
            CleanedGroup(
                current.segments,
                cleaned_path,
                new_segment,
                cleaned_txn_index_path,
                current.drops_markers,
            )
        )


def _rebuild_batch(kept: list[AbsoluteRecord]) -> bytes:
    """A batch holding ``kept`` with the original batch's offsets, timestamps and producer fields."""
    header = kept[0].batch
    records = [
        Record(
            offset_delta=record.offset - header.base_offset,
            timestamp_delta=record.timestamp - header.base_timestamp,
            key=record.key,
            value=record.value,
            headers=record.headers,
        )
        for record in kept
    ]
    return build_batch(
        records,
        base_offset=header.base_offset,
        base_timestamp=header.base_timestamp,
        compression=header.compression,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        partition_leader_epoch=header.partition_leader_epoch,
        timestamp_type=header.timestamp_type,
        is_transactional=header.is_transactional,
        is_control=header.is_control,
        last_offset_delta=header.last_offset_delta,
        max_timestamp=header.max_timestamp,
    )
