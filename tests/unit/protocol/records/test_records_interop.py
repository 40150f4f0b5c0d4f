"""Interoperability with an independent codec: aiokafka's record classes (its C extension).

Batches aiokafka writes decode here, and batches written here decode there, for every
compression and for the legacy formats. No socket: only the two codecs face each other.
"""

from __future__ import annotations

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.legacy_records import LegacyRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords

from strom.protocol.records import (
    CompressionType,
    LegacyMessage,
    Record,
    build_batch,
    build_message_set,
    decode_batch,
    iter_records,
)

BATCH_BYTES_MAX = 1 << 20
ENTRIES: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]] = [
    (1_700_000_000_000, b"key", b"value" * 50, [("trace", b"1"), ("none", None)]),
    (1_700_000_000_007, None, b"", []),
    (1_699_999_999_000, b"", None, [("ключ", b"")]),
]


def _their_records(
    data: bytes,
) -> list[tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]]:
    records = []
    memory_records = MemoryRecords(data)
    while (batch := memory_records.next_batch()) is not None:
        for record in batch:
            headers = [(key, value) for key, value in getattr(record, "headers", [])]
            records.append((record.offset, record.timestamp, record.key, record.value, headers))
    return records


@pytest.mark.parametrize("compression", list(CompressionType))
def test_their_v2_batch_decodes_here(compression: CompressionType) -> None:
    builder = DefaultRecordBatchBuilder(2, int(compression), False, 7, 1, 100, BATCH_BYTES_MAX)
    for offset, (timestamp_ms, key, value, headers) in enumerate(ENTRIES):
        builder.append(offset, timestamp_ms, key, value, headers)
    decoded = decode_batch(bytes(builder.build()))
    assert decoded.header.compression == compression
    assert (decoded.header.producer_id, decoded.header.base_sequence) == (7, 100)
    assert [
        (record.timestamp, record.key, record.value, record.headers) for record in decoded.absolute_records()
    ] == [(timestamp_ms, key, value, headers) for timestamp_ms, key, value, headers in ENTRIES]


@pytest.mark.parametrize("compression", list(CompressionType))
def test_our_v2_batch_decodes_there(compression: CompressionType) -> None:
    records = [
        Record(offset_delta, timestamp_ms, key, value, headers)
        for offset_delta, (timestamp_ms, key, value, headers) in enumerate(ENTRIES)
    ]
    built = build_batch(records, base_offset=500, compression=compression)
    assert _their_records(built) == [
        (500 + offset_delta, timestamp_ms, key, value, headers)
        for offset_delta, (timestamp_ms, key, value, headers) in enumerate(ENTRIES)
    ]


LEGACY_COMPRESSIONS = [
    CompressionType.NONE,
    CompressionType.GZIP,
    CompressionType.SNAPPY,
    CompressionType.LZ4,
]


@pytest.mark.parametrize("compression", LEGACY_COMPRESSIONS)
@pytest.mark.parametrize("magic", [0, 1])
def test_their_legacy_set_decodes_here(magic: int, compression: CompressionType) -> None:
    if magic == 0 and compression is CompressionType.LZ4:
        pytest.xfail("magic 0 LZ4 uses Kafka 0.8's broken frame header checksum, not supported")
    builder = LegacyRecordBatchBuilder(magic, int(compression), BATCH_BYTES_MAX)
    for offset, (timestamp_ms, key, value, _) in enumerate(ENTRIES):
        builder.append(offset, timestamp_ms, key, value)
    data = bytes(builder.build())
    ours = [(record.key, record.value) for record in iter_records(data)]
    assert ours == [(key, value) for _, key, value, _ in ENTRIES]
    if magic == 1:
        assert [record.timestamp for record in iter_records(data)] == [entry[0] for entry in ENTRIES]


@pytest.mark.parametrize("compression", LEGACY_COMPRESSIONS)
@pytest.mark.parametrize("magic", [0, 1])
def test_our_legacy_set_decodes_there(magic: int, compression: CompressionType) -> None:
    if magic == 0 and compression is CompressionType.LZ4:
        pytest.xfail("magic 0 LZ4 uses Kafka 0.8's broken frame header checksum, not supported")
    messages = [
        LegacyMessage(40 + number, timestamp_ms if magic == 1 else -1, key, value)
        for number, (timestamp_ms, key, value, _) in enumerate(ENTRIES)
    ]
    data = build_message_set(messages, magic=magic, compression=compression)
    assert [(offset, key, value) for offset, _, key, value, _ in _their_records(data)] == [
        (message.offset, message.key, message.value) for message in messages
    ]
