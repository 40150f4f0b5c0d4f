"""The consumer's fast fetch decoder agrees with the general record decoder, and refuses what it refuses."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.client.cluster import TopicPartition
from strom.client.consumer.decode import decode_partition_records
from strom.client.consumer.positions import ConsumerRecord, FetchedRecords
from strom.protocol.records import (
    CREATE_TIME,
    LOG_APPEND_TIME,
    CompressionType,
    CorruptBatchError,
    Record,
    build_batch,
    iter_batches,
)
from strom.protocol.records.header import rewrite_crc
from strom.protocol.records.legacy import LegacyMessage, build_message_set

TP = TopicPartition("orders", 3)

optional_bytes = st.one_of(st.none(), st.binary(max_size=40))
records_strategy = st.lists(
    st.builds(
        Record,
        offset_delta=st.just(0),
        timestamp_delta=st.integers(min_value=0, max_value=1 << 20),
        key=optional_bytes,
        value=optional_bytes,
        headers=st.lists(st.tuples(st.text(max_size=5), optional_bytes), max_size=2),
    ),
    min_size=1,
    max_size=12,
)
batch_strategy = st.tuples(
    records_strategy,
    st.sampled_from([CompressionType.NONE, CompressionType.GZIP, CompressionType.ZSTD]),
    st.sampled_from([CREATE_TIME, LOG_APPEND_TIME]),
    st.booleans(),  # control
)


def reference(fetch_offset: int, data: bytes) -> FetchedRecords:
    """What the consumer decoded before the fast path: the general decoder, record by record."""
    decoded = []
    next_offset = fetch_offset
    for batch in iter_batches(data):
        header = batch.header
        next_offset = max(next_offset, header.base_offset + header.last_offset_delta + 1)
        if header.is_control:
            continue
        for record in batch.absolute_records():
            if record.offset >= fetch_offset:
                decoded.append(
                    ConsumerRecord(
                        TP.topic,
                        TP.partition,
                        record.offset,
                        record.timestamp,
                        header.timestamp_type,
                        record.key,
                        record.value,
                        tuple(record.headers),
                    )
                )
    return FetchedRecords(fetch_offset, decoded, next_offset)


def fetch_payload(batches: list[tuple[list[Record], int, int, bool]], base_offset: int = 100) -> bytes:
    parts = []
    for records, compression, timestamp_type, is_control in batches:
        numbered = [
            Record(index, record.timestamp_delta, record.key, record.value, record.headers)
            for index, record in enumerate(records)
        ]
        parts.append(
            build_batch(
                numbered,
                base_offset=base_offset,
                base_timestamp=1_700_000_000_000,
                compression=compression,
                timestamp_type=timestamp_type,
                is_control=is_control,
                max_timestamp=1_700_000_999_999,
            )
        )
        base_offset += len(records)
    return b"".join(parts)


@settings(max_examples=80, deadline=None)
@given(
    batches=st.lists(batch_strategy, min_size=1, max_size=4), skip=st.integers(0, 30), cut=st.integers(0, 80)
)
def test_same_records_as_the_general_decoder(
    batches: list[tuple[list[Record], int, int, bool]], skip: int, cut: int
) -> None:
    data = fetch_payload(batches)
    data = data[: len(data) - cut]  # a fetch may end inside the last batch
    fetch_offset = 100 + skip
    assert decode_partition_records(TP, fetch_offset, data) == reference(fetch_offset, data)
    assert decode_partition_records(TP, fetch_offset, memoryview(bytearray(data))) == reference(
        fetch_offset, data
    )


def test_empty_and_missing_records() -> None:
    assert decode_partition_records(TP, 7, None) == FetchedRecords(7, [], 7)
    assert decode_partition_records(TP, 7, b"") == FetchedRecords(7, [], 7)


def test_batches_before_the_position_are_skipped_but_move_next_offset() -> None:
    data = fetch_payload(
        [([Record(0, 0, None, b"a"), Record(0, 0, None, b"b")], CompressionType.NONE, 0, False)]
    )
    assert decode_partition_records(TP, 102, data) == FetchedRecords(102, [], 102)


def test_large_offset_and_timestamp_deltas() -> None:
    records = [Record(0, index * 5, None, b"%d" % index, []) for index in range(9_000)]
    data = fetch_payload([(records, CompressionType.NONE, CREATE_TIME, False)])
    fetched = decode_partition_records(TP, 8_000, data)
    assert fetched == reference(8_000, data)
    assert fetched.records[-1].offset == 100 + 8_999 and fetched.next_offset == 100 + 9_000


def test_legacy_message_sets_are_decoded_too() -> None:
    data = build_message_set(
        [LegacyMessage(5, 1_000, b"k", b"v"), LegacyMessage(6, 1_001, None, b"w")], magic=1
    )
    fetched = decode_partition_records(TP, 6, data)
    assert fetched == reference(6, data)
    assert [record.value for record in fetched.records] == [b"w"]


@pytest.mark.parametrize("position", [30, 61, 70, -3])
def test_corrupt_bytes_are_refused(position: int) -> None:
    data = bytearray(fetch_payload([([Record(0, 0, b"key", b"value" * 4)], CompressionType.NONE, 0, False)]))
    data[position] ^= 0x40
    with pytest.raises(CorruptBatchError):
        decode_partition_records(TP, 0, bytes(data))


def test_record_count_that_does_not_match_is_refused() -> None:
    good = fetch_payload(
        [([Record(0, 0, None, b"a"), Record(0, 0, None, b"b")], CompressionType.NONE, 0, False)]
    )
    # Claim one record fewer (bytes 57..61) and fix the CRC: the leftover bytes are refused.
    data = bytearray(good)
    data[60] = 1
    rewrite_crc(data)
    with pytest.raises(CorruptBatchError, match="left over"):
        decode_partition_records(TP, 0, bytes(data))


def test_unknown_magic_is_refused() -> None:
    data = bytearray(fetch_payload([([Record(0, 0, None, b"a")], CompressionType.NONE, 0, False)]))
    data[16] = 7
    with pytest.raises(CorruptBatchError, match="magic"):
        decode_partition_records(TP, 0, bytes(data))


@pytest.mark.parametrize("timestamp_type", [CREATE_TIME, LOG_APPEND_TIME])
@pytest.mark.parametrize("key", [None, b"key-1"])
@pytest.mark.parametrize("fetch_offset", [0, 100, 5_131])
def test_runs_of_alike_records_decode_as_the_general_decoder(
    timestamp_type: int, key: bytes | None, fetch_offset: int
) -> None:
    # One shape of record throughout; offset deltas cross the one-, two- and three-byte widths,
    # timestamp deltas the one- and two-byte widths, and a record with headers breaks the run.
    records = [Record(0, index // 70, key, bytes([index % 256]) * 100, []) for index in range(9_000)]
    records[4_000] = Record(0, 4_000 // 70, key, b"x" * 100, [("h", b"v")])
    data = fetch_payload([(records, CompressionType.NONE, timestamp_type, False)])
    fetched = decode_partition_records(TP, fetch_offset, data)
    assert fetched == reference(fetch_offset, data)
    assert len(fetched.records) == 9_100 - max(fetch_offset, 100)
    with_headers = [record for record in fetched.records if record.headers]
    assert with_headers == ([] if fetch_offset > 4_100 else [fetched.records[4_100 - max(fetch_offset, 100)]])


def test_a_corrupt_length_inside_a_run_is_refused() -> None:
    records = [Record(0, 0, None, b"v" * 100, []) for _ in range(500)]
    data = bytearray(fetch_payload([(records, CompressionType.NONE, CREATE_TIME, False)]))
    # The value length (null key 0x01, then 100 as the varint c8 01) of record 300 claims one
    # byte fewer: that record's fields end before its length says.
    value_length_at = -1
    for _ in range(301):
        value_length_at = data.index(b"\x01\xc8\x01", value_length_at + 1)
    data[value_length_at + 1] -= 2
    rewrite_crc(data)
    with pytest.raises(CorruptBatchError):
        decode_partition_records(TP, 0, bytes(data))
