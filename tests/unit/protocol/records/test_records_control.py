"""Control batches: a transaction marker assembled byte by byte from KIP-98's layout, round trips
through the codec, and the ways a control record can be malformed."""

from __future__ import annotations

import struct

import crc32c
import pytest

from strom.protocol.records import CorruptBatchError, Record, build_batch, parse_batch_header
from strom.protocol.records.batch import LOG_APPEND_TIME
from strom.protocol.records.control import (
    ControlRecord,
    ControlType,
    EndTxnMarker,
    build_end_txn_marker,
    parse_control_record,
    parse_end_txn_marker,
)

T_MS = 1_700_000_000_123


def _hand_assembled_abort(producer_id: int, producer_epoch: int, coordinator_epoch: int) -> bytes:
    key = struct.pack(">hh", 0, 0)  # version 0, ABORT
    value = struct.pack(">hi", 0, coordinator_epoch)  # version 0, coordinator epoch
    body = (
        b"\x00"  # attributes
        + b"\x00"  # timestamp delta 0
        + b"\x00"  # offset delta 0
        + bytes([len(key) * 2])  # zigzag key length
        + key
        + bytes([len(value) * 2])
        + value
        + b"\x00"  # no headers
    )
    record = bytes([len(body) * 2]) + body
    covered = struct.pack(">hiqqqhii", 0x30, 0, T_MS, T_MS, producer_id, producer_epoch, -1, 1) + record
    crc = crc32c.crc32c(covered)
    batch_length = 4 + 1 + 4 + len(covered)
    return struct.pack(">qiibI", 0, batch_length, -1, 2, crc) + covered


def test_built_marker_is_byte_for_byte_the_layout_of_kip_98() -> None:
    built = build_end_txn_marker(
        producer_id=4242, producer_epoch=3, commit=False, coordinator_epoch=7, timestamp_ms=T_MS
    )
    assert built == _hand_assembled_abort(4242, 3, 7)
    header = parse_batch_header(built)
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (4242, 3, -1)
    assert header.record_count == 1 and header.last_offset_delta == 0


@pytest.mark.parametrize("commit", [True, False])
def test_markers_round_trip(commit: bool) -> None:
    built = build_end_txn_marker(
        producer_id=1,
        producer_epoch=0,
        commit=commit,
        coordinator_epoch=2**31 - 1,
        timestamp_ms=T_MS,
        base_offset=500,
        partition_leader_epoch=9,
        timestamp_type=LOG_APPEND_TIME,
    )
    assert parse_end_txn_marker(built) == EndTxnMarker(commit, 2**31 - 1)
    control = parse_control_record(built)
    assert control.type == (ControlType.COMMIT if commit else ControlType.ABORT)
    header = parse_batch_header(built)
    assert (header.base_offset, header.partition_leader_epoch, header.timestamp_type) == (500, 9, 1)
    assert header.max_timestamp == T_MS


def test_a_marker_is_found_at_its_position_in_a_buffer() -> None:
    data = build_batch([Record(0, 0, b"k", b"v")]) + build_end_txn_marker(
        producer_id=5, producer_epoch=1, commit=True, coordinator_epoch=0, timestamp_ms=T_MS
    )
    position = parse_batch_header(data).size_bytes
    assert parse_end_txn_marker(data, position) == EndTxnMarker(True, 0)


def _control_batch(key: bytes | None, value: bytes | None) -> bytes:
    return build_batch(
        [Record(0, 0, key, value)], producer_id=1, producer_epoch=0, is_transactional=True, is_control=True
    )


def test_other_control_types_are_no_transaction_marker() -> None:
    leader_change = _control_batch(struct.pack(">hh", 0, 2), b"anything")
    assert parse_control_record(leader_change) == ControlRecord(2, b"anything")
    assert parse_end_txn_marker(leader_change) is None


def test_newer_versions_are_read_by_their_leading_fields() -> None:
    newer = _control_batch(struct.pack(">hh", 1, 1) + b"more", struct.pack(">hi", 3, 11) + b"more")
    assert parse_end_txn_marker(newer) == EndTxnMarker(True, 11)


@pytest.mark.parametrize(
    ("key", "value", "complaint"),
    [
        (None, struct.pack(">hi", 0, 1), "key of no bytes"),
        (b"\x00\x00\x00", struct.pack(">hi", 0, 1), "key of 3 bytes"),
        (struct.pack(">hh", -1, 0), struct.pack(">hi", 0, 1), "key version -1"),
        (struct.pack(">hh", 0, 1), None, "value of no bytes"),
        (struct.pack(">hh", 0, 0), b"\x00\x00\x00", "value of 3 bytes"),
        (struct.pack(">hh", 0, 0), struct.pack(">hi", -2, 1), "marker version -2"),
    ],
)
def test_malformed_control_records_are_corrupt(
    key: bytes | None, value: bytes | None, complaint: str
) -> None:
    with pytest.raises(CorruptBatchError, match=complaint):
        parse_end_txn_marker(_control_batch(key, value))


def test_a_data_batch_or_an_empty_control_batch_is_no_marker() -> None:
    with pytest.raises(CorruptBatchError, match="not a control batch"):
        parse_end_txn_marker(build_batch([Record(0, 0, b"k", b"v")]))
    with pytest.raises(CorruptBatchError, match="has no record"):
        parse_end_txn_marker(build_batch([], is_control=True))
    damaged = bytearray(_control_batch(struct.pack(">hh", 0, 0), struct.pack(">hi", 0, 0)))
    damaged[-1] ^= 0xFF
    with pytest.raises(CorruptBatchError, match="CRC"):
        parse_end_txn_marker(bytes(damaged))


def test_a_marker_needs_a_producer_id() -> None:
    with pytest.raises(ValueError, match="producer id"):
        build_end_txn_marker(
            producer_id=-1, producer_epoch=0, commit=True, coordinator_epoch=0, timestamp_ms=0
        )
