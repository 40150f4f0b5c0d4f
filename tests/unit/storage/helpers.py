"""Helpers for the storage tests: v2 batches built with the protocol's record codec."""

from __future__ import annotations

from collections.abc import Sequence

from strom.protocol.records.batch import Record, build_batch, decode_batch
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
) -> bytes:
    """One uncompressed batch of ``values`` (record i at timestamp_ms + i)."""
    record_keys = keys if keys is not None else [None] * len(values)
    records = [
        Record(offset_delta=index, timestamp_delta=timestamp_ms + index, key=key, value=value)
        for index, (key, value) in enumerate(zip(record_keys, values))
    ]
    return build_batch(
        records, producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence
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
