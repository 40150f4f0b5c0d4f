"""The partition side of transactions over real log files: markers, the last stable offset, the
transaction index, and how restarts, recovery, truncation, retention, replication and compaction
keep them right."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from strom.protocol.records.control import parse_end_txn_marker
from strom.protocol.records.header import iter_batch_headers, validate_batches
from strom.storage.config import LogConfig
from strom.storage.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    LogFileError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from strom.storage.files import empty_trash
from strom.storage.partition_log import PartitionLog, ProducerView
from strom.storage.producer_state import SNAPSHOT_FILE_NAME
from strom.storage.segment import TXN_INDEX_ENTRY_BYTES, AbortedTxn, Segment

from .conftest import OpenLog
from .helpers import T0_MS, append, make_batch, read_all, read_committed

P1, P2, P3 = 1001, 1002, 1003


class Producer:
    """A transactional producer's batches: sequences counted per producer (one partition)."""

    def __init__(self, producer_id: int, epoch: int = 0) -> None:
        self.producer_id = producer_id
        self.epoch = epoch
        self.sequence = 0

    def batch(
        self, *values: bytes, keys: list[bytes | None] | None = None, transactional: bool = True
    ) -> bytes:
        data = make_batch(
            list(values),
            keys=keys,
            producer_id=self.producer_id,
            producer_epoch=self.epoch,
            base_sequence=self.sequence,
            transactional=transactional,
        )
        self.sequence += len(values)
        return data


def commit(log: PartitionLog, producer: Producer, coordinator_epoch: int = 0) -> int:
    return log.append_marker(producer.producer_id, producer.epoch, True, coordinator_epoch, T0_MS)


def abort(log: PartitionLog, producer: Producer, coordinator_epoch: int = 0) -> int:
    return log.append_marker(producer.producer_id, producer.epoch, False, coordinator_epoch, T0_MS)


def values(records: list[tuple[int, bytes | None, bytes | None]]) -> list[bytes | None]:
    return [value for _offset, _key, value in records]


def data_values(log: PartitionLog) -> list[bytes | None]:
    """Every data record's value as read_uncommitted returns them (control batches left out)."""
    return [value for offset, key, value in read_all(log) if not _is_marker_offset(log, offset)]


def _is_marker_offset(log: PartitionLog, offset: int) -> bool:
    data = log.read(offset, 1).records
    return next(iter(iter_batch_headers(data))).is_control


def txn_index_files(log: PartitionLog) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(log.directory.glob("*.txnindex"))}


# ---- markers -----------------------------------------------------------------------------------


def test_a_committed_transaction_becomes_readable_at_its_marker(open_log: OpenLog) -> None:
    log = open_log()
    producer = Producer(P1)
    append(log, make_batch([b"plain"]))
    append(log, producer.batch(b"t1", b"t2"))
    assert log.last_stable_offset == 1
    assert values(read_committed(log)) == [b"plain"]
    assert log.read(0, 1 << 20).last_stable_offset == 1  # read_uncommitted reports it too
    marker_offset = commit(log, producer, coordinator_epoch=4)
    assert marker_offset == 3
    assert log.log_end_offset == log.last_stable_offset == 4
    assert values(read_committed(log)) == [b"plain", b"t1", b"t2"]
    assert log.aborted_transactions(0, 4) == []
    marker = log.read(3, 1).records
    header = validate_batches(bytearray(marker))[0]
    assert header.is_control and header.is_transactional and header.base_sequence == -1
    assert (header.producer_id, header.producer_epoch, header.max_timestamp) == (P1, 0, T0_MS)
    parsed = parse_end_txn_marker(marker)
    assert parsed is not None and parsed.commit and parsed.coordinator_epoch == 4
    assert txn_index_files(log) == {}  # a commit leaves no trace in the transaction index


def test_an_aborted_transaction_is_indexed_and_hidden_from_read_committed(open_log: OpenLog) -> None:
    log = open_log()
    producer = Producer(P1)
    append(log, producer.batch(b"a1"))
    append(log, make_batch([b"plain"]))
    append(log, producer.batch(b"a2"))
    assert abort(log, producer) == 3
    assert log.aborted_transactions(0, 4) == [(P1, 0)]
    assert log.aborted_transactions(3, 4) == [(P1, 0)]  # the marker's own offset overlaps
    assert log.aborted_transactions(4, 10) == []
    assert values(read_committed(log)) == [b"plain"]
    assert data_values(log) == [b"a1", b"plain", b"a2"]  # read_uncommitted sees everything
    result = log.read(0, 1 << 20, read_committed=True)
    assert result.aborted_transactions == [(P1, 0)]
    assert result.last_stable_offset == 4
    [(name, content)] = txn_index_files(log).items()
    assert name == "00000000000000000000.txnindex"
    assert len(content) == TXN_INDEX_ENTRY_BYTES


def test_the_last_stable_offset_follows_the_oldest_open_transaction(open_log: OpenLog) -> None:
    log = open_log()
    first, second, third = Producer(P1), Producer(P2), Producer(P3)
    append(log, make_batch([b"x"]))  # 0
    append(log, first.batch(b"1a"))  # 1
    append(log, second.batch(b"2a"))  # 2
    append(log, first.batch(b"1b"))  # 3
    append(log, third.batch(b"3a"))  # 4
    assert log.last_stable_offset == 1
    commit(log, first)  # 5
    assert log.last_stable_offset == 2
    abort(log, third)  # 6: second still open
    assert log.last_stable_offset == 2
    assert values(read_committed(log)) == [b"x", b"1a"]  # 1b waits behind the open 2a
    commit(log, second)  # 7
    assert log.last_stable_offset == 8
    assert values(read_committed(log)) == [b"x", b"1a", b"2a", b"1b"]
    assert log.aborted_transactions(0, 8) == [(P3, 4)]
    # The aborted transaction's entry remembers where the log was stable when it ended.
    assert log._segments[-1].aborted_txns() == [AbortedTxn(P3, 4, 6, 2)]


def test_the_last_stable_offset_is_capped_at_the_high_watermark(open_log: OpenLog) -> None:
    log = open_log()
    producer = Producer(P1)
    append(log, make_batch([b"x", b"y"]))
    append(log, producer.batch(b"t"))
    log.track_high_watermark()
    log.set_high_watermark(1)
    assert log.last_stable_offset == 1
    log.set_high_watermark(3)
    assert log.last_stable_offset == 2
    commit(log, producer)
    assert log.last_stable_offset == 3  # the marker is not replicated yet
    log.set_high_watermark(4)
    assert log.last_stable_offset == 4
    # A read_committed read stops at the last stable offset, whatever the caller allows.
    assert log.read(0, 1 << 20, read_committed=True, max_offset=2).last_stable_offset == 4
    assert values(read_committed(log)) == [b"x", b"y", b"t"]


def test_read_committed_at_the_last_stable_offset_is_empty(open_log: OpenLog) -> None:
    log = open_log()
    producer = Producer(P1)
    append(log, make_batch([b"x"]))
    append(log, producer.batch(b"t"))
    result = log.read(1, 1 << 20, read_committed=True)
    assert (result.records, result.aborted_transactions, result.last_stable_offset) == (b"", [], 1)
    assert log.read(1, 1 << 20).records != b""  # read_uncommitted goes on


def test_a_marker_without_a_transaction_is_written_all_the_same(open_log: OpenLog) -> None:
    log = open_log()
    producer = Producer(P1)
    assert abort(log, producer) == 0
    assert log.aborted_transactions(0, 1) == [(P1, 0)]
    assert commit(log, producer) == 1
    assert log.last_stable_offset == 2
    assert log.producers() == [ProducerView(P1, 0, -1, T0_MS, 0, -1)]


def test_markers_fence_old_producer_epochs_and_zombie_coordinators(open_log: OpenLog) -> None:
    log = open_log()
    producer = Producer(P1, epoch=3)
    append(log, producer.batch(b"t"))
    commit(log, producer, coordinator_epoch=5)
    with pytest.raises(InvalidProducerEpochError):
        log.append_marker(P1, 2, True, 5, T0_MS)
    with pytest.raises(TransactionCoordinatorFencedError):
        log.append_marker(P1, 3, False, 4, T0_MS)
    assert log.log_end_offset == 2
    # The same coordinator epoch, or a newer one, is fine.
    log.append_marker(P1, 3, False, 5, T0_MS)
    log.append_marker(P1, 3, False, 6, T0_MS)
    assert log.producers()[0].coordinator_epoch == 6


def test_a_marker_of_a_newer_epoch_bumps_the_producer(open_log: OpenLog) -> None:
    log = open_log()
    producer = Producer(P1, epoch=0)
    append(log, producer.batch(b"t1", b"t2"))
    # The coordinator aborts the transaction of a producer that timed out, bumping its epoch.
    log.append_marker(P1, 1, False, 0, T0_MS)
    assert log.producer_state(P1) == (1, -1)
    with pytest.raises(InvalidProducerEpochError):  # the old instance is fenced
        append(log, producer.batch(b"late"))
    producer.epoch, producer.sequence = 1, 5
    with pytest.raises(OutOfOrderSequenceError):
        append(log, producer.batch(b"x"))
    producer.sequence = 0
    append(log, producer.batch(b"fresh"))
    assert log.producer_state(P1) == (1, 0)


def test_a_non_transactional_batch_inside_a_transaction_is_refused(open_log: OpenLog) -> None:
    log = open_log()
    producer = Producer(P1)
    append(log, producer.batch(b"t"))
    with pytest.raises(InvalidTxnStateError):
        append(log, producer.batch(b"idempotent", transactional=False))
    assert log.log_end_offset == 1
    commit(log, producer)
    producer.sequence = 1
    append(log, producer.batch(b"idempotent", transactional=False))
    assert log.last_stable_offset == log.log_end_offset == 3


def test_markers_carry_the_leader_epoch_and_log_append_time(open_log: OpenLog) -> None:
    log = open_log(LogConfig(message_timestamp_type="LogAppendTime"))
    log.become_leader(7)
    offset = log.append_marker(P1, 0, True, 0, T0_MS + 5)
    header = validate_batches(bytearray(log.read(offset, 1).records))[0]
    assert header.partition_leader_epoch == 7
    assert header.timestamp_type == 1 and header.max_timestamp == T0_MS + 5


def test_producers_describe_each_producer(open_log: OpenLog) -> None:
    log = open_log()
    transactional, idempotent = Producer(P1, epoch=2), Producer(P2)
    append(log, transactional.batch(b"a", b"b"))
    append(log, idempotent.batch(b"c", transactional=False))
    assert sorted(log.producers()) == [
        ProducerView(P1, 2, 1, T0_MS + 1, -1, 0),
        ProducerView(P2, 0, 0, T0_MS, -1, -1),
    ]
    commit(log, transactional, coordinator_epoch=9)
    assert sorted(log.producers())[0] == ProducerView(P1, 2, 1, T0_MS + 1, 9, -1)


def test_aborted_transactions_overlapping_a_range(open_log: OpenLog) -> None:
    log = open_log(LogConfig(segment_bytes=200))
    first, second = Producer(P1), Producer(P2)
    append(log, first.batch(b"1a"))  # 0
    append(log, second.batch(b"2a"))  # 1
    append(log, make_batch([b"x"]))  # 2
    abort(log, first)  # 3: aborted [0, 3]
    append(log, first.batch(b"1b"))  # 4
    abort(log, second)  # 5: aborted [1, 5]
    abort(log, first)  # 6: aborted [4, 6]
    append(log, make_batch([b"y"]))  # 7
    assert log.segment_count > 2  # entries spread over segments
    assert log.aborted_transactions(0, 8) == [(P1, 0), (P2, 1), (P1, 4)]
    assert log.aborted_transactions(2, 3) == [(P1, 0), (P2, 1)]
    assert log.aborted_transactions(4, 5) == [(P2, 1), (P1, 4)]
    assert log.aborted_transactions(6, 7) == [(P1, 4)]
    assert log.aborted_transactions(7, 8) == []
    assert log.aborted_transactions(0, 1) == [(P1, 0)]
    assert log.aborted_transactions(5, 5) == []
    assert values(read_committed(log)) == [b"x", b"y"]
    assert values(read_committed(log, max_bytes=1)) == [b"x", b"y"]  # one batch per fetch


def test_a_txn_index_write_failure_takes_the_marker_back(
    open_log: OpenLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log()
    producer = Producer(P1)
    append(log, producer.batch(b"t"))

    def fail(self: Segment, txn: AbortedTxn) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Segment, "append_aborted", fail)
    with pytest.raises(LogFileError, match="transaction index"):
        abort(log, producer)
    assert log.log_end_offset == 1
    assert log.last_stable_offset == 0  # the transaction is still open
    monkeypatch.undo()
    assert abort(log, producer) == 1
    assert log.aborted_transactions(0, 2) == [(P1, 0)]


def test_flush_makes_the_txn_index_durable(open_log: OpenLog) -> None:
    log = open_log()
    producer = Producer(P1)
    append(log, producer.batch(b"t"))
    abort(log, producer)
    segment = log._segments[-1]
    assert segment.txn_index_dirty
    log.flush()
    assert not segment.txn_index_dirty


# ---- restarts and recovery ---------------------------------------------------------------------


@pytest.mark.parametrize("recover_all", [True, False])
def test_a_restart_keeps_open_transactions_and_the_aborted_index(
    open_log: OpenLog, recover_all: bool
) -> None:
    config = LogConfig(segment_bytes=300)
    log = open_log(config)
    first, second, third = Producer(P1), Producer(P2), Producer(P3)
    append(log, first.batch(b"1a"))
    append(log, second.batch(b"2a"))
    append(log, third.batch(b"3a"))
    abort(log, first, coordinator_epoch=2)
    append(log, make_batch([b"x"]))
    commit(log, third)
    assert log.segment_count > 1
    expected = (log.last_stable_offset, log.aborted_transactions(0, 100), sorted(log.producers()))
    files = txn_index_files(log)
    log.close()
    reopened = open_log(config, recover_all=recover_all)
    assert reopened.recovery_messages == []
    assert (reopened.last_stable_offset, reopened.aborted_transactions(0, 100)) == expected[:2]
    assert sorted(reopened.producers()) == expected[2]
    assert txn_index_files(reopened) == files
    commit(reopened, second)
    assert values(read_committed(reopened)) == [b"2a", b"3a", b"x"]


def test_an_old_snapshot_without_transaction_fields_still_loads(tmp_path: Path, open_log: OpenLog) -> None:
    config = LogConfig(segment_bytes=200)
    log = open_log(config)
    producer = Producer(P1)
    for _ in range(4):
        append(log, producer.batch(b"idempotent" * 5, transactional=False))
    assert log.segment_count > 1
    log.close()
    snapshot_path = tmp_path / "topic-0" / SNAPSHOT_FILE_NAME
    document = json.loads(snapshot_path.read_bytes())
    document["version"] = 1
    for item in document["producers"]:
        del item["coordinator_epoch"], item["txn_first_offset"]
    snapshot_path.write_text(json.dumps(document))
    reopened = open_log(config)
    assert reopened.producers() == [ProducerView(P1, 0, 3, T0_MS, -1, -1)]


def test_snapshots_carry_open_transactions(tmp_path: Path, open_log: OpenLog) -> None:
    config = LogConfig(segment_bytes=200)
    log = open_log(config)
    producer = Producer(P1)
    append(log, producer.batch(b"t" * 40))
    append(log, make_batch([b"x" * 100]))
    append(log, make_batch([b"y" * 100]))  # rolls: the snapshot is taken with the transaction open
    assert log.segment_count > 1
    log.flush()
    log.close()
    document = json.loads((tmp_path / "topic-0" / SNAPSHOT_FILE_NAME).read_bytes())
    assert document["version"] == 2
    assert [(item["producer_id"], item["txn_first_offset"]) for item in document["producers"]] == [(P1, 0)]
    # The segment holding the transaction's start is gone from the replay: the snapshot knows it.
    reopened = open_log(config, recover_all=False)
    assert reopened.last_stable_offset == 0


def test_a_torn_marker_reopens_its_transaction(tmp_path: Path, open_log: OpenLog) -> None:
    log = open_log()
    producer = Producer(P1)
    append(log, make_batch([b"x"]))
    append(log, producer.batch(b"t1", b"t2"))
    abort(log, producer)
    log.close()
    log_file = sorted((tmp_path / "topic-0").glob("*.log"))[-1]
    os.truncate(log_file, log_file.stat().st_size - 5)  # the marker, torn by a crash
    reopened = open_log()
    assert reopened.log_end_offset == 3
    assert reopened.last_stable_offset == 1
    assert reopened.aborted_transactions(0, 10) == []
    assert txn_index_files(reopened) == {"00000000000000000000.txnindex": b""}
    assert any("cut 36 bytes" in message for message in reopened.recovery_messages)
    # The coordinator writes the marker again.
    assert abort(reopened, producer) == 3
    assert values(read_committed(reopened)) == [b"x"]


def test_a_torn_tail_inside_a_transaction_keeps_what_is_whole(tmp_path: Path, open_log: OpenLog) -> None:
    log = open_log()
    producer, other = Producer(P1), Producer(P2)
    append(log, make_batch([b"x"]))  # 0
    append(log, other.batch(b"o"))  # 1: other's transaction, whole
    append(log, producer.batch(b"t1"))  # 2
    append(log, producer.batch(b"t2"))  # 3: torn below
    log.detach()  # a crash: no snapshot, no index files
    log_file = sorted((tmp_path / "topic-0").glob("*.log"))[-1]
    os.truncate(log_file, log_file.stat().st_size - 3)
    reopened = open_log()
    assert reopened.log_end_offset == 3
    assert reopened.last_stable_offset == 1
    assert sorted(view.current_txn_start_offset for view in reopened.producers()) == [1, 2]
    assert reopened.producer_state(P1) == (0, 0)  # the torn batch's sequence is free again
    producer.sequence = 1
    append(reopened, producer.batch(b"t2 again"))
    commit(reopened, other)
    abort(reopened, producer)
    assert values(read_committed(reopened)) == [b"x", b"o"]


def test_a_torn_txn_index_entry_is_cut(tmp_path: Path, open_log: OpenLog) -> None:
    log = open_log()
    producer = Producer(P1)
    append(log, producer.batch(b"t"))
    abort(log, producer)
    log.close()
    index = tmp_path / "topic-0" / "00000000000000000000.txnindex"
    index.write_bytes(index.read_bytes() + b"\x00" * 7)
    reopened = open_log(recover_all=False)
    assert reopened.recovery_messages == ["recovered topic-0: cut 7 bytes of 00000000000000000000.txnindex"]
    assert reopened.aborted_transactions(0, 2) == [(P1, 0)]
    assert len(index.read_bytes()) == TXN_INDEX_ENTRY_BYTES


def _two_segment_log_with_an_abort_spanning_them(open_log: OpenLog) -> tuple[PartitionLog, LogConfig]:
    """A transaction that starts in the first segment and is aborted in the second, after the
    roll's producer snapshot (which then knows the transaction as open)."""
    config = LogConfig(segment_bytes=350)
    log = open_log(config)
    first, second = Producer(P1), Producer(P2)
    append(log, first.batch(b"a" * 60))  # 0
    append(log, second.batch(b"b" * 60))  # 1
    abort(log, second)  # 2
    append(log, make_batch([b"c" * 60]))  # rolls
    abort(log, first)
    assert log.segment_count == 2
    log.flush()
    return log, config


@pytest.mark.parametrize("damage", ["missing", "emptied", "flipped", "garbage"])
def test_a_lost_or_damaged_txn_index_is_rebuilt_from_the_batches(
    tmp_path: Path, open_log: OpenLog, damage: str
) -> None:
    log, config = _two_segment_log_with_an_abort_spanning_them(open_log)
    expected = log.aborted_transactions(0, 100)
    assert expected == [(P2, 1), (P1, 0)]
    files = txn_index_files(log)
    assert len(files) == 2
    log.close()
    directory = tmp_path / "topic-0"
    for name in files:
        path = directory / name
        if damage == "missing":
            path.unlink()
        elif damage == "emptied":
            path.write_bytes(b"")
        elif damage == "flipped":
            content = bytearray(path.read_bytes())
            content[9] ^= 0x01
            path.write_bytes(bytes(content))
        else:
            path.write_bytes(b"\x00" * TXN_INDEX_ENTRY_BYTES)
    reopened = open_log(config)  # after a crash: every segment recovered
    assert reopened.aborted_transactions(0, 100) == expected
    assert txn_index_files(reopened) == files
    rebuilt = [message for message in reopened.recovery_messages if "rebuilt" in message]
    assert len(rebuilt) == 2
    assert values(read_committed(reopened)) == [b"c" * 60]


def test_a_damaged_txn_index_is_rebuilt_after_a_clean_shutdown_too(tmp_path: Path, open_log: OpenLog) -> None:
    log, config = _two_segment_log_with_an_abort_spanning_them(open_log)
    expected = log.aborted_transactions(0, 100)
    files = txn_index_files(log)
    log.close()
    first_index = tmp_path / "topic-0" / "00000000000000000000.txnindex"
    first_index.write_bytes(b"\xff" * TXN_INDEX_ENTRY_BYTES)
    reopened = open_log(config, recover_all=False)
    assert reopened.aborted_transactions(0, 100) == expected
    assert txn_index_files(reopened) == files


def test_a_log_without_transactions_has_no_txn_index(tmp_path: Path, open_log: OpenLog) -> None:
    config = LogConfig(segment_bytes=200)
    log = open_log(config)
    for _ in range(5):
        append(log, make_batch([b"v" * 50]))
    log.close()
    reopened = open_log(config)
    assert reopened.recovery_messages == []
    assert list((tmp_path / "topic-0").glob("*.txnindex")) == []
    assert reopened.last_stable_offset == reopened.log_end_offset


# ---- truncation, retention ---------------------------------------------------------------------


def test_truncation_reopens_and_forgets_transactions(open_log: OpenLog) -> None:
    config = LogConfig(segment_bytes=300)
    log = open_log(config)
    first, second = Producer(P1), Producer(P2)
    append(log, make_batch([b"x"]))  # 0
    append(log, first.batch(b"1a"))  # 1
    append(log, second.batch(b"2a"))  # 2
    abort(log, first)  # 3
    append(log, make_batch([b"y"]))  # 4
    abort(log, second)  # 5
    log.truncate_to(5)  # the second marker goes
    assert log.aborted_transactions(0, 10) == [(P1, 1)]
    assert log.last_stable_offset == 2
    log.truncate_to(3)  # the first marker goes too
    assert log.aborted_transactions(0, 10) == []
    assert log.last_stable_offset == 1
    assert all(len(content) == 0 for content in txn_index_files(log).values())
    log.truncate_to(2)  # the second producer's transaction is gone
    assert [view.current_txn_start_offset for view in sorted(log.producers())] == [1]
    log.truncate_to(1)
    assert log.last_stable_offset == 1 == log.log_end_offset
    log.close()
    reopened = open_log(config)
    assert reopened.aborted_transactions(0, 10) == []
    assert reopened.last_stable_offset == 1


def test_restart_at_drops_transactions_and_their_index(open_log: OpenLog) -> None:
    log = open_log()
    producer, other = Producer(P1), Producer(P2)
    append(log, producer.batch(b"t"))
    abort(log, producer)
    append(log, other.batch(b"open"))
    log.restart_at(100)
    assert log.aborted_transactions(0, 200) == []
    assert log.last_stable_offset == 100
    assert log.producers() == []


def test_retention_drops_the_txn_index_with_its_segment(tmp_path: Path, open_log: OpenLog) -> None:
    config = LogConfig(segment_bytes=250, retention_ms=1000)
    log = open_log(config)
    producer = Producer(P1)
    append(log, producer.batch(b"t" * 80))
    abort(log, producer)
    append(log, make_batch([b"x" * 80], timestamp_ms=T0_MS + 10_000))  # rolls
    assert log.segment_count == 2
    assert log.aborted_transactions(0, 10) == [(P1, 0)]
    log.apply_retention(T0_MS + 5000)
    assert log.segment_count == 1
    assert log.aborted_transactions(log.log_start_offset, 10) == []
    empty_trash(log._trash.take())
    assert list((tmp_path / "topic-0").glob("*.txnindex*")) == []


# ---- replication -------------------------------------------------------------------------------


def _leader_with_transactions(directory: Path, config: LogConfig) -> PartitionLog:
    leader = PartitionLog.open(directory / "leader", "topic", 0, config)
    first, second, third = Producer(P1), Producer(P2), Producer(P3)
    append(leader, first.batch(b"1a"))
    append(leader, second.batch(b"2a"))
    append(leader, make_batch([b"x" * 100]))
    abort(leader, first, coordinator_epoch=3)
    append(leader, third.batch(b"3a" * 50))
    commit(leader, second)
    append(leader, first.batch(b"1b"))
    abort(leader, third)
    return leader


@pytest.mark.parametrize("batches_per_fetch", [1, 100])
def test_a_follower_copying_the_leader_gets_the_same_transaction_state(
    tmp_path: Path, batches_per_fetch: int
) -> None:
    config = LogConfig(segment_bytes=300)
    leader = _leader_with_transactions(tmp_path, config)
    follower = PartitionLog.open(leader.directory.parent / "follower", "topic", 0, config)
    try:
        while follower.log_end_offset < leader.log_end_offset:
            data = leader.read(follower.log_end_offset, batches_per_fetch * 100, min_one_batch=True).records
            follower.append_as_follower(data, validate_batches(bytearray(data)), T0_MS)
        assert follower.last_stable_offset == leader.last_stable_offset == 6  # 1b is open
        assert follower.aborted_transactions(0, 100) == leader.aborted_transactions(0, 100)
        assert sorted(follower.producers()) == sorted(leader.producers())
        assert read_committed(follower) == read_committed(leader)
        assert txn_index_files(follower) == txn_index_files(leader)
        follower.close()
        follower = PartitionLog.open(leader.directory.parent / "follower", "topic", 0, config)
        assert follower.aborted_transactions(0, 100) == leader.aborted_transactions(0, 100)
        assert follower.last_stable_offset == 6
    finally:
        follower.close()
        leader.close()


def test_a_follower_whose_txn_index_cannot_be_written_cuts_the_batches_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = LogConfig()
    leader = _leader_with_transactions(tmp_path, config)
    follower = PartitionLog.open(leader.directory.parent / "follower", "topic", 0, config)
    try:
        data = leader.read(0, 1 << 20).records

        def fail(self: Segment, txn: AbortedTxn) -> None:
            raise OSError(5, "Input/output error")

        monkeypatch.setattr(Segment, "append_aborted", fail)
        with pytest.raises(LogFileError):
            follower.append_as_follower(data, validate_batches(bytearray(data)), T0_MS)
        assert follower.log_end_offset == 0
        assert follower.producers() == []
        monkeypatch.undo()
        follower.append_as_follower(data, validate_batches(bytearray(data)), T0_MS)
        assert follower.aborted_transactions(0, 100) == leader.aborted_transactions(0, 100)
    finally:
        follower.close()
        leader.close()


# ---- compaction --------------------------------------------------------------------------------


def test_compaction_removes_aborted_records_and_keeps_markers(tmp_path: Path, open_log: OpenLog) -> None:
    config = LogConfig(cleanup_policy="compact", segment_bytes=100_000)
    log = open_log(config)
    committer, aborter, late_aborter = Producer(P1), Producer(P2), Producer(P3)
    append(log, make_batch([b"k-old"], keys=[b"k"]))  # 0
    append(log, make_batch([b"j-old"], keys=[b"j"]))  # 1
    append(log, aborter.batch(b"k-aborted", b"m-aborted", keys=[b"k", b"m"]))  # 2, 3
    append(log, committer.batch(b"j-committed", keys=[b"j"]))  # 4
    append(log, late_aborter.batch(b"j-aborted", keys=[b"j"]))  # 5
    abort(log, aborter)  # 6
    commit(log, committer)  # 7
    log.roll()
    abort(log, late_aborter)  # 8: its marker is in the active segment, its records are not
    log.compact(T0_MS)
    data = values(read_all(log))
    # The aborted batch is gone: k keeps its old value, m never existed.
    assert b"k-aborted" not in data and b"m-aborted" not in data
    assert b"k-old" in data
    # The committed transactional record compacts like any other: j's old value is gone.
    assert b"j-old" not in data and b"j-committed" in data
    # Its abort is known, though its marker is beyond the compacted segments: gone too.
    assert b"j-aborted" not in data
    offsets = {offset for offset, _key, _value in read_all(log)}
    assert {6, 7, 8} <= offsets  # markers stay
    assert values(read_committed(log)) == [b"k-old", b"j-committed"]
    assert log.aborted_transactions(0, 100) == [(P2, 2), (P3, 5)]


def test_compaction_stops_at_the_last_stable_offset(open_log: OpenLog) -> None:
    config = LogConfig(cleanup_policy="compact")
    log = open_log(config)
    producer = Producer(P1)
    append(log, make_batch([b"k-old"], keys=[b"k"]))  # 0
    append(log, make_batch([b"j-old"], keys=[b"j"]))  # 1
    log.roll()
    append(log, producer.batch(b"k-open", keys=[b"k"]))  # 2: open
    append(log, make_batch([b"j-new"], keys=[b"j"]))  # 3: committed, but past the stable offset
    log.roll()
    log.compact(T0_MS)
    # Nothing at or past the open transaction is cleaned, nor does it shadow anything before it:
    # a read_committed consumer reading to the stable offset sees each key's value as of there.
    assert data_values(log) == [b"k-old", b"j-old", b"k-open", b"j-new"]
    assert values(read_committed(log)) == [b"k-old", b"j-old"]
    abort(log, producer)
    log.roll()
    log.compact(T0_MS)
    assert data_values(log) == [b"k-old", b"j-new"]
    assert values(read_committed(log)) == [b"k-old", b"j-new"]


def test_compaction_stops_at_the_high_watermark(open_log: OpenLog) -> None:
    log = open_log(LogConfig(cleanup_policy="compact"))
    append(log, make_batch([b"old"], keys=[b"k"]))
    log.roll()
    append(log, make_batch([b"new"], keys=[b"k"]))  # not replicated yet: a new leader may cut it
    log.roll()
    log.track_high_watermark()
    log.set_high_watermark(1)
    log.compact(T0_MS)
    assert data_values(log) == [b"old", b"new"]
    log.set_high_watermark(2)
    log.compact(T0_MS)
    assert data_values(log) == [b"new"]


def test_compaction_merges_txn_indexes_of_merged_segments(tmp_path: Path, open_log: OpenLog) -> None:
    config = LogConfig(cleanup_policy="compact", segment_bytes=400)
    log = open_log(config)
    first, second = Producer(P1), Producer(P2)
    append(log, first.batch(b"a" * 100, keys=[b"a"]))  # 0
    abort(log, first)  # 1
    append(log, make_batch([b"b" * 100], keys=[b"b"]))
    append(log, make_batch([b"b2" * 60], keys=[b"b"]))
    append(log, second.batch(b"c" * 100, keys=[b"c"]))
    abort(log, second)
    append(log, make_batch([b"d" * 100], keys=[b"d"]))
    log.roll()
    append(log, make_batch([b"e"], keys=[b"e"]))
    segments_before = log.segment_count
    expected = log.aborted_transactions(0, 100)
    assert expected == [(P1, 0), (P2, 4)]
    assert len(txn_index_files(log)) == 2
    log.compact(T0_MS)
    assert log.segment_count < segments_before
    empty_trash(log._trash.take())
    assert log.aborted_transactions(0, 100) == expected
    assert list(txn_index_files(log)) == ["00000000000000000000.txnindex"]
    log.close()
    reopened = open_log(config, recover_all=False)
    assert reopened.aborted_transactions(0, 100) == expected
    reopened.close()
    recovered = open_log(config, recover_all=True)
    assert recovered.aborted_transactions(0, 100) == expected
    assert [message for message in recovered.recovery_messages if "rebuilt" in message] == []


# ---- compaction: markers past the delete horizon --------------------------------------------------

COMPACTED = LogConfig(cleanup_policy="compact", segment_bytes=100_000)
HORIZON_MS = T0_MS + COMPACTED.delete_retention_ms  # the markers (at T0_MS) are just old enough


def offsets_of(log: PartitionLog) -> set[int]:
    """The offsets of every record in the log, markers included."""
    return {offset for offset, _key, _value in read_all(log)}


def test_an_aborted_transaction_loses_its_records_at_once_and_its_marker_after_the_horizon(
    open_log: OpenLog,
) -> None:
    log = open_log(COMPACTED)
    producer = Producer(P1)
    append(log, make_batch([b"k-old"], keys=[b"k"]))  # 0
    append(log, producer.batch(b"k-aborted", keys=[b"k"]))  # 1
    abort(log, producer)  # 2
    log.roll()
    append(log, make_batch([b"after"], keys=[b"a"]))  # 3, active
    log.compact(HORIZON_MS - 1)
    assert offsets_of(log) == {0, 2, 3}  # the records at once, the marker not yet
    assert log.aborted_transactions(0, 100) == [(P1, 1)]
    assert list(txn_index_files(log)) == ["00000000000000000000.txnindex"]
    log.compact(HORIZON_MS)
    assert offsets_of(log) == {0, 3}
    assert log.aborted_transactions(0, 100) == []
    empty_trash(log._trash.take())
    assert txn_index_files(log) == {}  # its only entry went with the marker
    assert log.last_stable_offset == log.high_watermark == 4
    assert values(read_committed(log)) == [b"k-old", b"after"]


def test_a_committed_transaction_whose_records_were_all_superseded_loses_its_marker_after_the_horizon(
    open_log: OpenLog,
) -> None:
    log = open_log(COMPACTED)
    producer = Producer(P1)
    append(log, producer.batch(b"k-txn", b"j-txn", keys=[b"k", b"j"]))  # 0, 1
    commit(log, producer)  # 2
    append(log, make_batch([b"k-new", b"j-new"], keys=[b"k", b"j"]))  # 3, 4
    log.roll()
    log.compact(HORIZON_MS - 1)
    assert offsets_of(log) == {2, 3, 4}  # superseded at once, the marker stays until the horizon
    log.compact(HORIZON_MS)
    assert offsets_of(log) == {3, 4}
    assert log.last_stable_offset == log.high_watermark == 5
    assert values(read_committed(log)) == [b"k-new", b"j-new"]


def test_a_committed_transaction_with_a_record_left_keeps_its_marker(open_log: OpenLog) -> None:
    log = open_log(COMPACTED)
    producer, other = Producer(P1), Producer(P2)
    append(log, producer.batch(b"k-txn", keys=[b"k"]))  # 0: superseded
    append(log, other.batch(b"other", keys=[b"o"]))  # 1: another producer's, superseded too
    append(log, producer.batch(b"j-txn", keys=[b"j"]))  # 2: stays
    commit(log, other)  # 3
    commit(log, producer)  # 4
    append(log, make_batch([b"k-new", b"o-new"], keys=[b"k", b"o"]))  # 5, 6
    log.roll()
    log.compact(HORIZON_MS + 1_000_000)
    assert offsets_of(log) == {2, 4, 5, 6}  # the other producer's marker went, not this one
    log.close()
    reopened = open_log(COMPACTED)
    assert reopened.last_stable_offset == reopened.high_watermark == 7
    assert values(read_committed(reopened)) == [b"j-txn", b"k-new", b"o-new"]


@pytest.mark.parametrize("shutdown", ["clean", "crash", "crash-without-txn-indexes"])
def test_a_log_whose_markers_went_reopens_with_every_transaction_decided(
    open_log: OpenLog, shutdown: str
) -> None:
    log = open_log(COMPACTED)
    committer, aborter, kept = Producer(P1), Producer(P2), Producer(P3)
    append(log, committer.batch(b"k-committed", keys=[b"k"]))  # 0
    append(log, aborter.batch(b"k-aborted", keys=[b"k"]))  # 1
    append(log, kept.batch(b"m-aborted", keys=[b"m"]))  # 2
    commit(log, committer)  # 3
    abort(log, aborter)  # 4
    append(log, make_batch([b"k-new"], keys=[b"k"]))  # 5
    log.roll()
    abort(log, kept)  # 6: in the active segment, stays (and so does its entry)
    append(log, make_batch([b"j"], keys=[b"j"]))  # 7
    log.compact(HORIZON_MS)
    assert offsets_of(log) == {5, 6, 7}
    assert log.aborted_transactions(0, 100) == [(P3, 2)]
    if shutdown == "clean":
        log.close()
    else:
        log.detach()  # no snapshot, no index files
        if shutdown == "crash-without-txn-indexes":
            for path in log.directory.glob("*.txnindex"):
                path.unlink()
    reopened = open_log(COMPACTED, recover_all=shutdown != "clean")
    assert reopened.last_stable_offset == reopened.high_watermark == reopened.log_end_offset == 8
    assert values(read_committed(reopened)) == [b"k-new", b"j"]
    # Only the abort whose marker stays is named (from its marker's offset when the index was
    # rebuilt: its records are gone).
    first = 6 if shutdown == "crash-without-txn-indexes" else 2
    assert reopened.read(0, 1 << 20, read_committed=True).aborted_transactions == [(P3, first)]
    assert [message for message in reopened.recovery_messages if "rebuilt" in message] == (
        ["recovered topic-0: rebuilt the transaction index of segment 6 (1 aborted transactions)"]
        if shutdown == "crash-without-txn-indexes"
        else []
    )


def test_a_snapshot_taken_inside_a_transaction_keeps_its_marker_until_a_later_one_is_written(
    open_log: OpenLog,
) -> None:
    # A producer snapshot on disk that has the transaction in progress is where a restart replays
    # from: the marker must still be there to end it, or the last stable offset would stay stuck.
    log = open_log(COMPACTED)
    producer = Producer(P1)
    append(log, producer.batch(b"k-txn", keys=[b"k"]))  # 0
    log.roll()
    log.flush()  # producer_state.json covers offset 1: P1's transaction is in progress there
    append(log, make_batch([b"k-new"], keys=[b"k"]))  # 1
    commit(log, producer)  # 2
    log.roll()
    append(log, make_batch([b"j"], keys=[b"j"]))  # 3, active
    log.compact(HORIZON_MS)
    assert offsets_of(log) == {1, 2, 3}  # the record went, the marker stays
    log.detach()  # a crash: the snapshot on disk is still the one inside the transaction
    reopened = open_log(COMPACTED)
    assert reopened.last_stable_offset == reopened.log_end_offset == 4
    reopened.roll()
    reopened.flush()  # a snapshot after the marker
    reopened.compact(HORIZON_MS)
    assert offsets_of(reopened) == {1, 3}
    reopened.detach()
    again = open_log(COMPACTED)
    assert again.last_stable_offset == again.log_end_offset == 4
    assert values(read_committed(again)) == [b"k-new", b"j"]


def test_a_group_thrown_away_keeps_the_markers_of_later_groups(open_log: OpenLog) -> None:
    # Retention took the first segment of the first group while compaction ran: that group is
    # thrown away with the aborted records of its second segment still in it, so the later group
    # that would drop their ABORT marker (and its entry in the transaction index) must be too.
    from strom.storage.compaction import run_compaction

    log = open_log(LogConfig(cleanup_policy="compact", segment_bytes=250))
    producer = Producer(P1)
    append(log, make_batch([b"x" * 100], keys=[b"x"]))  # 0
    log.roll()
    append(log, producer.batch(b"a" * 100, keys=[b"a"]))  # 1
    log.roll()
    abort(log, producer)  # 2
    append(log, make_batch([b"y" * 100], keys=[b"y"]))  # 3
    log.roll()
    append(log, make_batch([b"z"], keys=[b"z"]))  # 4, active
    job = log.plan_compaction(HORIZON_MS)
    assert job is not None
    result = run_compaction(job)
    assert [len(group.old_segments) for group in result.groups] == [2, 1]
    assert [group.drops_markers for group in result.groups] == [False, True]
    log.delete_records_before(1)  # the first segment goes
    log.finish_compaction(result)
    assert offsets_of(log) == {1, 2, 3, 4}
    assert log.aborted_transactions(0, 100) == [(P1, 1)]
    assert values(read_committed(log)) == [b"y" * 100, b"z"]
    log.compact(HORIZON_MS)  # the next pass gets there
    assert offsets_of(log) == {3, 4}
    assert log.aborted_transactions(0, 100) == []
    assert log.last_stable_offset == log.log_end_offset == 5
