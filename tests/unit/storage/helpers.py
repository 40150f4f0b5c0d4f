"""Helpers for the storage tests: v2 batches built with the protocol's record codec."""

from __future__ import annotations

from collections.abc import Sequence

from strom.protocol.records.batch import Record, build_batch, decode_batch
from strom.protocol.records.control import parse_end_txn_marker
from strom.protocol.records.header import iter_batch_headers, validate_batches
from strom.storage.partition_log import AppendResult, PartitionLog

T0_MS = 1_700_000_000_000


def make_batch(
    values: Sequence[bytes | None],
    *,
    keys: Sequence[bytes | None] | None = None,
    timestamp_ms: int = T0_MS,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
) -> bytes:
    """One uncompressed batch of ``values`` (record i at timestamp_ms + i)."""
    record_keys = keys if keys is not None else [None] * len(values)
    records = [
        Record(offset_delta=index, timestamp_delta=timestamp_ms + index, key=key, value=value)
        for index, (key, value) in enumerate(zip(record_keys, values))
    ]
    return build_batch(
        records,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=transactional,
    )


def append(log: PartitionLog, *batches: bytes, now_ms: int = T0_MS) -> AppendResult:
    buffer = bytearray(b"".join(batches))
    return log.append(buffer, validate_batches(buffer), now_ms)


def read_values(data: bytes) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record in ``data`` (whole batches)."""
    result: list[tuple[int, bytes | None, bytes | None]] = []
    position = 0
    for header in iter_batch_headers(data):
        for record in decode_batch(data, position).absolute_records():
            result.append((record.offset, record.key, record.value))
        position += header.size_bytes
    return result


def read_all(log: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    return read_values(log.read(log.log_start_offset, 1 << 30).records)


def read_committed(
    log: PartitionLog, start_offset: int | None = None, max_bytes: int = 1 << 30
) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record a read_committed consumer gets from ``start_offset``
    (the log start) to the last stable offset, filtering as Kafka's clients do: the aborted
    transactions a fetch returns, by first offset, mark their producer as aborted from the batch
    that reaches that offset on; that producer's transactional batches are skipped until its
    ABORT marker; control batches are never records."""
    position = log.log_start_offset if start_offset is None else start_offset
    seen: list[tuple[int, bytes | None, bytes | None]] = []
    while True:
        result = log.read(position, max_bytes, read_committed=True)
        records = result.records
        if not records:
            return seen
        assert result.aborted_transactions is not None
        aborted = sorted(result.aborted_transactions, key=lambda txn: txn[1])
        aborted_producers: set[int] = set()
        batch_position = 0
        for header in iter_batch_headers(records):
            assert header.last_offset < result.last_stable_offset, "a record past the last stable offset"
            while aborted and aborted[0][1] <= header.last_offset:
                aborted_producers.add(aborted.pop(0)[0])
            if header.is_control:
                marker = parse_end_txn_marker(records, batch_position)
                if marker is not None and not marker.commit:
                    aborted_producers.discard(header.producer_id)
            elif not (header.is_transactional and header.producer_id in aborted_producers):
                for record in decode_batch(records, batch_position).absolute_records():
                    if record.offset >= position:
                        seen.append((record.offset, record.key, record.value))
            batch_position += header.size_bytes
            position = max(position, header.last_offset + 1)
