"""Log compaction: keep the latest record per key in the non-active segments.

One pass over the cleanable segments (the inactive ones, stopping at the first that holds a record
younger than min.compaction.lag.ms) maps every key to its latest offset; a second pass rewrites each
segment keeping, per batch, the records that are still the latest for their key. Offsets never
change: a batch keeps its base offset and its last offset delta, only losing records; a batch that
loses them all is dropped. Tombstones (null value) stay until they are older than
delete.retention.ms. Records without a key are kept (Kafka refuses them on compacted topics at
produce time, see ``LogConfig.requires_keys``). Control and transactional batches are kept whole.

The rewritten segment is written next to the old one as ``<base>.log.cleaned``, fsynced, and renamed
over it, so a crash leaves either the old or the new segment; leftover ``.cleaned`` files are
removed on open. The active segment is never touched, so the hot path never waits for compaction.
Keys of the latest records are not looked at in the active segment: a key overwritten there is
compacted once the segment rolls (Kafka's rule too).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from strom.protocol.records.batch import AbsoluteRecord, Record, build_batch, decode_batch
from strom.storage.files import write_file_synced

if TYPE_CHECKING:
    from strom.storage.partition_log import PartitionLog
    from strom.storage.segment import Segment


def compact_log(log: PartitionLog, now_ms: int) -> int:
    """Compact ``log``'s cleanable segments; returns the bytes freed."""
    config = log.config
    cleanable: list[Segment] = []
    for segment in log._inactive_segments():
        if (
            config.min_compaction_lag_ms > 0
            and segment.max_timestamp_ms > now_ms - config.min_compaction_lag_ms
        ):
            break
        cleanable.append(segment)
    if not cleanable:
        return 0
    latest_offsets: dict[bytes, int] = {}
    for segment in cleanable:
        for records in _record_batches(segment):
            for record in records[1]:
                if record.key is not None:
                    latest_offsets[record.key] = record.offset
    freed = 0
    for segment in cleanable:
        freed += _clean_segment(log, segment, latest_offsets, now_ms, config.delete_retention_ms)
    return freed


def _record_batches(segment: Segment) -> list[tuple[bytes, list[AbsoluteRecord]]]:
    """(raw batch bytes, its records with absolute offsets) for each data batch of ``segment``;
    control and transactional batches come with an empty record list (they are kept whole)."""
    batches: list[tuple[bytes, list[AbsoluteRecord]]] = []
    for position, header in segment.scan_headers(0):
        raw = segment.read_bytes(position, header.size_bytes)
        if header.is_control or header.is_transactional:
            batches.append((raw, []))
            continue
        batches.append((raw, decode_batch(raw).absolute_records()))
    return batches


def _clean_segment(
    log: PartitionLog,
    segment: Segment,
    latest_offsets: dict[bytes, int],
    now_ms: int,
    delete_retention_ms: int,
) -> int:
    def keep(record: AbsoluteRecord) -> bool:
        if record.key is None:
            return True
        if latest_offsets.get(record.key) != record.offset:
            return False
        if record.value is None:
            return now_ms - record.timestamp < delete_retention_ms
        return True

    output: list[bytes] = []
    changed = False
    for raw, records in _record_batches(segment):
        if not records:
            output.append(raw)
            continue
        kept = [record for record in records if keep(record)]
        if len(kept) == len(records):
            output.append(raw)
            continue
        changed = True
        if kept:
            output.append(_rebuild_batch(kept))
    if not changed:
        return 0
    content = b"".join(output)
    cleaned_path = segment.log_path.with_name(segment.log_path.name + ".cleaned")
    write_file_synced(cleaned_path, content)
    freed = segment.size_bytes - len(content)
    log._replace_segment(segment, cleaned_path)
    return freed


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
