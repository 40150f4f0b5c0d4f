"""The log of one partition: an ordered list of segments, the newest one active.

Directory ``<data_dir>/<topic>-<partition>/`` holds the segments (see ``segment``), plus:

* ``partition.json`` — ``{"log_start_offset": N}``, written atomically when the log start moves.
* ``producer_state.json`` — the idempotent-producer snapshot (see ``producer_state``), written at
  every segment roll and at close, with the offset it covers; batches after it are replayed on open.

Threading: everything runs on the broker's event loop thread except ``flush()``, which a worker
thread calls. ``flush`` only fsyncs file descriptors of a snapshot of the segment list, and the loop
thread replaces that list rather than mutating it, so the two never see a half-changed list.
"""

from __future__ import annotations

import json
import logging
import os
import struct
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from strom.protocol.records.header import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    TIMESTAMP_TYPE_BIT,
    BatchHeader,
    compute_crc,
    set_base_offset,
)
from strom.storage.config import LogConfig
from strom.storage.errors import OffsetOutOfRangeError, RecordTooLargeError
from strom.storage.files import fsync_directory, write_file_atomically
from strom.storage.producer_state import SNAPSHOT_FILE_NAME, ProducerStateTable
from strom.storage.segment import BatchInfo, Segment

PARTITION_FILE_NAME = "partition.json"

# baseOffset int64 + batchLength int32: enough of a header to step from one batch to the next.
_OFFSET_AND_LENGTH = struct.Struct(">qi")
_ATTRIBUTES = struct.Struct(">h")
_MAX_TIMESTAMP = struct.Struct(">q")
_MAX_TIMESTAMP_OFFSET = 35
_CRC = struct.Struct(">I")

log = logging.getLogger("strom.storage")


@dataclass(frozen=True)
class AppendResult:
    base_offset: int  # offset given to the first record
    last_offset: int
    log_append_time_ms: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int


@dataclass(frozen=True)
class ReadResult:
    records: bytes  # whole batches, exactly as stored (may be b"")
    high_watermark: int
    log_start_offset: int
    last_stable_offset: int  # = high watermark here (no transactions yet)


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
    ) -> None:
        assert segments, "a log always has an active segment"
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.config = config
        self._segments = segments
        self._log_start_offset = log_start_offset
        self._producer_states = producer_states
        self.recovery_messages: list[str] = []
        # Flush policy: messages appended in total / made durable in total; the append time of the
        # oldest message not yet fsynced (flush.ms bounds how long one waits).
        self._appended_messages = 0
        self._flushed_messages = 0
        self._first_unflushed_ms = -1
        self._directory_dirty = False
        self._closed = False

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
    ) -> PartitionLog:
        """Open (or create) the log in ``directory``.

        The active segment is always recovered (validated batch by batch, torn tail cut); the
        others too when ``recover_all`` (no clean shutdown marker), else their index files are used.
        """
        directory.mkdir(parents=True, exist_ok=True)
        name = f"{topic}-{partition}"
        messages: list[str] = []
        for leftover in [*directory.glob("*.cleaned"), *directory.glob("*.tmp")]:
            leftover.unlink()
        stored_log_start = _read_log_start_offset(directory / PARTITION_FILE_NAME)
        base_offsets = sorted(int(path.stem) for path in directory.glob("*.log") if path.stem.isdigit())
        segments: list[Segment] = []
        for position, base_offset in enumerate(base_offsets):
            segment = Segment(directory, base_offset, config.index_interval_bytes)
            segments.append(segment)
            is_last = position == len(base_offsets) - 1
            if not (recover_all or is_last) and segment.load_indexes():
                continue
            result = segment.recover()
            if result.truncated_bytes:
                messages.append(
                    f"recovered {name}: truncated {result.truncated_bytes} bytes at offset "
                    f"{result.truncated_at_offset} ({result.reason})"
                )
                if not is_last:
                    # Everything after a damaged segment would leave a hole in the offsets.
                    for later in base_offsets[position + 1 :]:
                        Segment(directory, later, config.index_interval_bytes).delete_files()
                    messages.append(
                        f"recovered {name}: removed {len(base_offsets) - position - 1} segments after it"
                    )
                    break
        if not segments:
            segments.append(Segment(directory, stored_log_start, config.index_interval_bytes))
        log_end = segments[-1].next_offset
        log_start = min(max(stored_log_start, segments[0].base_offset), log_end)
        log = cls(directory, topic, partition, config, segments, log_start, ProducerStateTable())
        log._load_producer_states()
        log.recovery_messages = messages
        log._write_partition_file()
        return log

    def _load_producer_states(self) -> None:
        snapshot = ProducerStateTable.read_snapshot(self.directory / SNAPSHOT_FILE_NAME)
        replay_from = self._segments[0].base_offset
        if snapshot is not None and snapshot[1] <= self.log_end_offset:
            self._producer_states, replay_from = snapshot
        for header in self._headers_from(replay_from):
            self._producer_states.replay(header)

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
        return self.log_end_offset

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
        config = self.config
        next_offset = self.log_end_offset
        base_offsets: list[int] = []
        for header in headers:
            if header.size_bytes > config.max_message_bytes:
                raise RecordTooLargeError(
                    f"batch of {header.size_bytes} bytes exceeds max.message.bytes={config.max_message_bytes}"
                )
            if header.size_bytes > config.segment_bytes:
                raise RecordTooLargeError(
                    f"batch of {header.size_bytes} bytes exceeds segment.bytes={config.segment_bytes}"
                )
            base_offsets.append(next_offset)
            next_offset += header.last_offset_delta + 1
        pending_producers = self._producer_states.check(headers, base_offsets)

        log_append_time = config.log_append_time
        batches: list[BatchInfo] = []
        position = 0
        message_count = 0
        for header, base_offset in zip(headers, base_offsets):
            set_base_offset(records, position, base_offset)
            max_timestamp = header.max_timestamp
            if log_append_time:
                max_timestamp = now_ms
                _stamp_log_append_time(records, position, header, now_ms)
            batches.append(
                BatchInfo(
                    base_offset, base_offset + header.last_offset_delta, max_timestamp, header.size_bytes
                )
            )
            message_count += header.record_count
            position += header.size_bytes
        assert position == len(records), "headers must describe all of records"

        self._write_batches(records, batches, now_ms)
        self._producer_states.commit(pending_producers)
        if self._appended_messages == self._flushed_messages:
            self._first_unflushed_ms = now_ms
        self._appended_messages += message_count
        return AppendResult(
            base_offset=base_offsets[0],
            last_offset=batches[-1].last_offset,
            log_append_time_ms=now_ms if log_append_time else -1,
            log_start_offset=self._log_start_offset,
        )

    def _write_batches(self, records: bytearray | memoryview, batches: list[BatchInfo], now_ms: int) -> None:
        """Write the batches to the active segment, rolling where a segment is full or old.

        One write for the whole request unless it has to be split across a roll.
        """
        view = memoryview(records)
        chunk_start = 0  # byte position in records of the first batch not yet written
        chunk_first = 0  # index in batches of that batch
        chunk_bytes = 0
        for index, batch in enumerate(batches):
            active = self._segments[-1]
            if self._must_roll(active, chunk_bytes, batch, now_ms):
                if chunk_bytes:
                    active.append(
                        view[chunk_start : chunk_start + chunk_bytes], batches[chunk_first:index], now_ms
                    )
                    chunk_start += chunk_bytes
                    chunk_first = index
                    chunk_bytes = 0
                self._roll()
            chunk_bytes += batch.size_bytes
        if chunk_bytes:
            self._segments[-1].append(
                view[chunk_start : chunk_start + chunk_bytes], batches[chunk_first:], now_ms
            )

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
        """Seal the active segment and start a new one at the log end offset."""
        active = self._segments[-1]
        active.seal()
        new_segment = Segment(self.directory, active.next_offset, self.config.index_interval_bytes)
        log.info("%s-%d: rolled a new segment at offset %d", self.topic, self.partition, active.next_offset)
        self._segments = [*self._segments, new_segment]
        self._directory_dirty = True
        # A snapshot per roll bounds how much of the log recovery must replay for producer state.
        self._producer_states.write_snapshot(self.directory / SNAPSHOT_FILE_NAME, new_segment.base_offset)

    def roll(self) -> None:
        """Start a new segment now (an empty active segment is kept as it is)."""
        if self._segments[-1].size_bytes:
            self._roll()

    # ---- read ----------------------------------------------------------------------------------

    def read(
        self, offset: int, max_bytes: int, *, min_one_batch: bool = True, max_offset: int | None = None
    ) -> ReadResult:
        """Whole batches from the one containing ``offset``, at most ``max_bytes`` unless the first
        batch alone is larger and ``min_one_batch`` (then it comes whole, as in KIP-74)."""
        log_end = self.log_end_offset
        if offset < self._log_start_offset or offset > log_end:
            raise OffsetOutOfRangeError(
                f"offset {offset} of {self.topic}-{self.partition} is outside "
                f"[{self._log_start_offset}, {log_end}]"
            )
        limit = log_end if max_offset is None else min(max_offset, log_end)
        parts: list[bytes] = []
        budget = max_bytes
        segments = self._segments
        index = max(bisect_right(self.segment_base_offsets, offset) - 1, 0)
        want_first = min_one_batch
        while index < len(segments) and offset < limit:
            segment = segments[index]
            found = segment.find_batch(offset)
            index += 1
            if found is None:
                continue
            position, header = found
            if header.base_offset >= limit:
                break
            available = segment.size_bytes - position
            data = segment.read_bytes(position, min(budget, available)) if budget > 0 else b""
            whole = _whole_batches_length(data, limit)
            if whole == 0:
                if want_first and not parts:
                    parts.append(segment.read_bytes(position, header.size_bytes))
                break
            parts.append(data if whole == len(data) else data[:whole])
            budget -= whole
            want_first = False
            if whole < available:
                break
            offset = segment.next_offset
        records = parts[0] if len(parts) == 1 else b"".join(parts)
        high_watermark = self.high_watermark
        return ReadResult(records, high_watermark, self._log_start_offset, high_watermark)

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
        """DeleteRecords: move the log start to ``offset`` (-1 = high watermark), delete the whole
        segments below it (never the active one); returns the new log start offset."""
        if offset == -1:
            offset = self.high_watermark
        if offset < 0 or offset > self.high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot delete records before {offset} of {self.topic}-{self.partition}: "
                f"high watermark is {self.high_watermark}"
            )
        if offset > self._log_start_offset:
            self._log_start_offset = offset
            self._write_partition_file()
            self._delete_leading_segments(lambda segment: segment.next_offset <= self._log_start_offset)
        return self._log_start_offset

    def truncate_to(self, offset: int) -> None:
        """Remove every offset >= ``offset`` (a batch containing it goes whole)."""
        if offset >= self.log_end_offset:
            return
        keep: list[Segment] = []
        for segment in self._segments:
            if segment.base_offset >= offset and keep:
                segment.delete_files()
            else:
                keep.append(segment)
        if keep[0].base_offset >= offset:
            for segment in keep:
                segment.delete_files()
            keep = [Segment(self.directory, offset, self.config.index_interval_bytes)]
            self._log_start_offset = offset
            self._write_partition_file()
        else:
            keep[-1].truncate_to_offset(offset)
        self._segments = keep
        self._producer_states = ProducerStateTable()
        for header in self._headers_from(keep[0].base_offset):
            self._producer_states.replay(header)
        self._producer_states.write_snapshot(self.directory / SNAPSHOT_FILE_NAME, self.log_end_offset)

    # ---- retention -----------------------------------------------------------------------------

    def apply_retention(self, now_ms: int) -> int:
        """Delete leading whole segments past retention.ms or retention.bytes, or wholly below the
        log start offset; never the active segment. Returns the bytes freed."""
        config = self.config
        freed = self._delete_leading_segments(lambda segment: segment.next_offset <= self._log_start_offset)
        if not config.deletes:
            return freed
        if config.retention_ms >= 0:
            freed += self._delete_leading_segments(
                lambda segment: now_ms - segment.max_timestamp_ms > config.retention_ms
            )
        if config.retention_bytes >= 0:
            excess = self.size_bytes - config.retention_bytes

            def over_size(segment: Segment) -> bool:
                nonlocal excess
                if excess >= segment.size_bytes:
                    excess -= segment.size_bytes
                    return True
                return False

            freed += self._delete_leading_segments(over_size)
        return freed

    def _delete_leading_segments(self, expired: Callable[[Segment], bool]) -> int:
        segments = self._segments
        count = 0
        while count < len(segments) - 1 and expired(segments[count]):
            count += 1
        if count == 0:
            return 0
        self._segments = segments[count:]
        freed = 0
        for segment in segments[:count]:
            freed += segment.size_bytes
            segment.delete_files()
        if self._segments[0].base_offset > self._log_start_offset:
            self._log_start_offset = self._segments[0].base_offset
            self._write_partition_file()
        self._directory_dirty = True
        return freed

    # ---- compaction ----------------------------------------------------------------------------

    def compact(self, now_ms: int) -> int:
        """Keep the latest record per key in the non-active segments; see ``compaction``."""
        from strom.storage.compaction import compact_log

        if not self.config.compacted:
            return 0
        return compact_log(self, now_ms)

    def _inactive_segments(self) -> list[Segment]:
        return self._segments[:-1]

    def _replace_segment(self, old: Segment, cleaned_path: Path) -> Segment:
        """Swap a segment's log file for a cleaned one (same base offset) and reindex it."""
        old.close()
        os.replace(cleaned_path, old.log_path)
        fsync_directory(self.directory)
        new_segment = Segment(self.directory, old.base_offset, self.config.index_interval_bytes)
        result = new_segment.recover()
        assert result.truncated_bytes == 0, f"cleaned segment is damaged: {result.reason}"
        new_segment.seal()
        self._segments = [new_segment if segment is old else segment for segment in self._segments]
        return new_segment

    # ---- producer state ------------------------------------------------------------------------

    def producer_state(self, producer_id: int) -> tuple[int, int] | None:
        """(epoch, last sequence) of an idempotent producer seen on this partition."""
        entry = self._producer_states.get(producer_id)
        if entry is None:
            return None
        return entry.epoch, entry.last_sequence

    # ---- flushing ------------------------------------------------------------------------------

    def needs_flush(self, now_ms: int) -> bool:
        unflushed = self._appended_messages - self._flushed_messages
        if unflushed <= 0:
            return False
        return (
            unflushed >= self.config.flush_messages
            or now_ms - self._first_unflushed_ms >= self.config.flush_ms
        )

    def flush(self) -> None:
        """fsync every segment written since the last flush (called from a worker thread)."""
        appended = self._appended_messages
        if self._directory_dirty:
            self._directory_dirty = False
            fsync_directory(self.directory)
        for segment in list(self._segments):
            if segment.dirty:
                segment.fsync()
        self._flushed_messages = appended

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.flush()
        self._producer_states.write_snapshot(self.directory / SNAPSHOT_FILE_NAME, self.log_end_offset)
        self._write_partition_file()
        for segment in self._segments:
            segment.close()

    def delete_files(self) -> None:
        """Close and remove the whole partition directory."""
        self._closed = True
        for segment in self._segments:
            segment.delete_files()
        for path in self.directory.iterdir():
            path.unlink()
        self.directory.rmdir()

    def _write_partition_file(self) -> None:
        document = {"log_start_offset": self._log_start_offset}
        write_file_atomically(self.directory / PARTITION_FILE_NAME, json.dumps(document).encode())


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


def _stamp_log_append_time(
    records: bytearray | memoryview, position: int, header: BatchHeader, now_ms: int
) -> None:
    """LogAppendTime: set the timestamp-type bit and the max timestamp, then recompute the CRC
    (the one case where the broker changes bytes the CRC covers)."""
    _ATTRIBUTES.pack_into(records, position + ATTRIBUTES_OFFSET, header.attributes | TIMESTAMP_TYPE_BIT)
    _MAX_TIMESTAMP.pack_into(records, position + _MAX_TIMESTAMP_OFFSET, now_ms)
    _CRC.pack_into(records, position + CRC_OFFSET, compute_crc(records, position, header.size_bytes))
