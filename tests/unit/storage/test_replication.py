"""The partition log's replication operations: leader epochs stamped and checkpointed, batches
appended as a follower, truncation, the high watermark, and a log manager holding only some
partitions of a topic (a broker in a cluster)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from strom.base.clock import ManualClock
from strom.protocol.records.header import iter_batch_headers, validate_batches
from strom.storage.config import LogConfig
from strom.storage.errors import DuplicateSequenceError, OffsetOutOfOrderError, TopicExistsError
from strom.storage.leader_epoch import (
    CHECKPOINT_FILE_NAME,
    LeaderEpochCache,
    read_checkpoint,
    write_checkpoint,
)
from strom.storage.log_manager import LogManager
from strom.storage.partition_log import PRODUCER_STATE_COPY_BATCHES, PartitionLog

from .conftest import OpenLog
from .helpers import T0_MS, append, make_batch, read_all, read_values


def _epochs_in(data: bytes) -> list[tuple[int, int]]:
    """(base offset, partitionLeaderEpoch) of every batch in ``data``."""
    return [(header.base_offset, header.partition_leader_epoch) for header in iter_batch_headers(data)]


def _copy(leader: PartitionLog, follower: PartitionLog) -> None:
    """What a replica fetcher does: the leader's bytes from the follower's end, appended as they came."""
    data = leader.read(follower.log_end_offset, 1 << 30).records
    if data:
        follower.append_as_follower(data, validate_batches(data), T0_MS)


def _follower(tmp_path: Path, name: str = "follower") -> PartitionLog:
    return PartitionLog.open(tmp_path / name / "topic-0", "topic", 0, LogConfig())


def test_a_single_node_log_stamps_nothing_and_writes_no_checkpoint(open_log: OpenLog) -> None:
    log = open_log()
    append(log, make_batch([b"a"]))
    log.flush()
    assert log.leader_epoch is None
    assert _epochs_in(log.read(0, 1 << 20).records) == [(0, -1)]
    assert not (log.directory / CHECKPOINT_FILE_NAME).exists()
    assert log.high_watermark == log.log_end_offset == 1


def test_the_leader_stamps_its_epoch_and_checkpoints_where_each_epoch_starts(open_log: OpenLog) -> None:
    log = open_log()
    log.become_leader(3)
    append(log, make_batch([b"a", b"b"]))
    log.become_leader(5)
    append(log, make_batch([b"c"]), make_batch([b"d"]))
    assert _epochs_in(log.read(0, 1 << 20).records) == [(0, 3), (2, 5), (3, 5)]
    assert log.leader_epochs.entries == ((3, 0), (5, 2))
    log.flush()
    assert read_checkpoint(log.directory / CHECKPOINT_FILE_NAME) == log.leader_epochs
    # The stamp is outside the CRC: every batch still validates.
    validate_batches(log.read(0, 1 << 20).records)
    log.become_follower()
    assert log.leader_epoch is None
    log.close()
    reopened = open_log()
    assert reopened.leader_epochs.entries == ((3, 0), (5, 2))
    assert reopened.leader_epochs.end_offset_for(3, reopened.log_end_offset) == (3, 2)
    assert reopened.leader_epochs.end_offset_for(5, reopened.log_end_offset) == (5, 4)


def test_a_follower_keeps_the_leaders_offsets_epochs_and_producer_state(
    open_log: OpenLog, tmp_path: Path
) -> None:
    leader = open_log()
    leader.become_leader(0)
    append(leader, make_batch([b"a"], producer_id=7, producer_epoch=0, base_sequence=0))
    leader.become_leader(2)
    append(leader, make_batch([b"b", b"c"], producer_id=7, producer_epoch=0, base_sequence=1))
    follower = _follower(tmp_path)
    _copy(leader, follower)
    assert follower.log_end_offset == 3
    assert follower.read(0, 1 << 20).records == leader.read(0, 1 << 20).records
    assert follower.leader_epochs.entries == ((0, 0), (2, 1))
    assert follower.producer_state(7) == leader.producer_state(7) == (0, 2)
    # The follower becomes the leader: the producer's retry of its last batch is recognised, and
    # its next batch continues the sequence.
    follower.become_leader(3)
    with pytest.raises(DuplicateSequenceError) as duplicate:
        append(follower, make_batch([b"b", b"c"], producer_id=7, producer_epoch=0, base_sequence=1))
    assert (duplicate.value.base_offset, duplicate.value.last_offset) == (1, 2)
    assert (
        append(follower, make_batch([b"d"], producer_id=7, producer_epoch=0, base_sequence=3)).base_offset
        == 3
    )
    assert follower.leader_epochs.entries == ((0, 0), (2, 1), (3, 3))
    follower.close()


def test_a_follower_refuses_batches_that_do_not_continue_its_log(open_log: OpenLog, tmp_path: Path) -> None:
    leader = open_log()
    leader.become_leader(0)
    append(leader, make_batch([b"a"]), make_batch([b"b"]))
    follower = _follower(tmp_path)
    _copy(leader, follower)
    again = leader.read(1, 1 << 20).records
    with pytest.raises(OffsetOutOfOrderError):
        follower.append_as_follower(again, validate_batches(again), T0_MS)
    assert follower.log_end_offset == 2
    # A gap is fine (a compacted leader log skips offsets).
    gap = bytearray(make_batch([b"c"]))
    gap[0:8] = (10).to_bytes(8, "big")
    follower.append_as_follower(gap, validate_batches(gap), T0_MS)
    assert follower.log_end_offset == 11
    assert [offset for offset, _, _ in read_all(follower)] == [0, 1, 10]
    follower.close()


def test_truncation_cuts_epochs_caps_the_high_watermark_and_rebuilds_producer_state(
    open_log: OpenLog,
) -> None:
    log = open_log(LogConfig(segment_bytes=400))
    log.become_leader(1)
    for sequence in range(4):
        append(log, make_batch([b"x" * 60], producer_id=9, producer_epoch=0, base_sequence=sequence))
    log.become_leader(4)
    for sequence in range(4, 8):
        append(log, make_batch([b"y" * 60], producer_id=9, producer_epoch=0, base_sequence=sequence))
    log.set_high_watermark(7)
    assert log.segment_count > 1
    assert log.leader_epochs.entries == ((1, 0), (4, 4))
    log.truncate_to(4)
    assert log.log_end_offset == 4
    assert log.high_watermark == 4
    assert log.leader_epochs.entries == ((1, 0),)
    assert read_checkpoint(log.directory / CHECKPOINT_FILE_NAME).entries == ((1, 0),)
    assert log.producer_state(9) == (0, 3)
    log.become_leader(6)
    append(log, make_batch([b"z"], producer_id=9, producer_epoch=0, base_sequence=4))
    assert [offset for offset, _, _ in read_all(log)] == [0, 1, 2, 3, 4]
    assert log.leader_epochs.entries == ((1, 0), (6, 4))


def test_truncation_rebuilds_producer_state_from_the_newest_in_memory_copy_below_the_cut(
    open_log: OpenLog,
) -> None:
    """Thousands of small batches, no snapshot on disk: the state after a cut is the one a full
    replay gives, and it is rebuilt from a copy taken every PRODUCER_STATE_COPY_BATCHES batches."""
    log = open_log()
    log.become_leader(0)
    sequences = {7: -1, 8: -1}
    history: list[dict[int, int]] = []  # the last sequence of each producer after offset i
    for index in range(2 * PRODUCER_STATE_COPY_BATCHES + 150):
        producer_id = 7 if index % 3 else 8
        sequences[producer_id] += 1
        append(
            log,
            make_batch(
                [b"v"], producer_id=producer_id, producer_epoch=0, base_sequence=sequences[producer_id]
            ),
        )
        history.append(dict(sequences))

    def copies() -> list[int]:
        return [covered for covered, _entries in log._producer_state_copies]

    def expected(cut: int) -> tuple[tuple[int, int], tuple[int, int]]:
        return (0, history[cut - 1][7]), (0, history[cut - 1][8])

    assert copies() == [PRODUCER_STATE_COPY_BATCHES, 2 * PRODUCER_STATE_COPY_BATCHES]
    cut = 2 * PRODUCER_STATE_COPY_BATCHES + 100
    log.truncate_to(cut)  # replays the 100 headers after the newest copy
    assert (log.producer_state(7), log.producer_state(8)) == expected(cut)
    assert copies() == [2 * PRODUCER_STATE_COPY_BATCHES, cut]  # the state as rebuilt is a copy too
    # A cut below every copy drops them all and replays the log from its start.
    cut = PRODUCER_STATE_COPY_BATCHES + 10
    log.truncate_to(cut)
    assert (log.producer_state(7), log.producer_state(8)) == expected(cut)
    assert copies() == [cut]
    # What a reopen finds (the headers replayed from the log's start) is the same.
    log.close()
    reopened = open_log()
    assert (reopened.producer_state(7), reopened.producer_state(8)) == expected(cut)


def test_truncation_below_the_first_segment_restarts_the_log_empty(open_log: OpenLog) -> None:
    log = open_log()
    log.become_leader(0)
    append(log, make_batch([b"a"]), make_batch([b"b"]))
    log.truncate_to(0)
    assert (log.log_start_offset, log.log_end_offset) == (0, 0)
    assert log.leader_epochs.entries == ()
    log.restart_at(50)
    assert (log.log_start_offset, log.log_end_offset) == (50, 50)
    log.become_leader(3)
    assert append(log, make_batch([b"c"])).base_offset == 50


def test_the_high_watermark_caps_what_a_consumer_reads(open_log: OpenLog) -> None:
    log = open_log()
    append(log, make_batch([b"a"]), make_batch([b"b"]), make_batch([b"c"]))
    assert log.high_watermark == 3  # never set: the log end
    log.set_high_watermark(1)
    result = log.read(0, 1 << 20, max_offset=log.high_watermark)
    assert [offset for offset, _, _ in read_values(result.records)] == [0]
    assert result.high_watermark == 1
    # A follower reads to the log end.
    assert len(read_values(log.read(0, 1 << 20).records)) == 3
    log.set_high_watermark(10)
    assert log.high_watermark == 3  # never beyond the log end


def test_a_missing_checkpoint_is_rebuilt_from_the_batch_headers(open_log: OpenLog) -> None:
    log = open_log(LogConfig(segment_bytes=300))
    for epoch in (0, 2, 7):
        log.become_leader(epoch)
        for _ in range(3):
            append(log, make_batch([b"v" * 50]))
    entries = log.leader_epochs.entries
    log.close()
    (log.directory / CHECKPOINT_FILE_NAME).unlink()
    reopened = open_log(LogConfig(segment_bytes=300))
    assert reopened.segment_count > 2
    assert reopened.leader_epochs.entries == entries == ((0, 0), (2, 3), (7, 6))
    assert read_checkpoint(reopened.directory / CHECKPOINT_FILE_NAME).entries == entries


def test_a_checkpoint_behind_the_log_or_ahead_of_it_is_put_right_on_open(open_log: OpenLog) -> None:
    log = open_log()
    log.become_leader(0)
    append(log, make_batch([b"a"]))
    log.become_leader(1)
    append(log, make_batch([b"b"]))
    log.close()
    path = log.directory / CHECKPOINT_FILE_NAME
    # Behind: a crash after the batch of epoch 1 reached the log, before its checkpoint did.
    write_checkpoint(path, LeaderEpochCache([(0, 0)]))
    assert open_log().leader_epochs.entries == ((0, 0), (1, 1))
    # Ahead: an epoch whose first batch never reached the log.
    write_checkpoint(path, LeaderEpochCache([(0, 0), (1, 1), (4, 2)]))
    assert open_log().leader_epochs.entries == ((0, 0), (1, 1))


def test_retention_moves_the_first_epoch_to_the_new_log_start(open_log: OpenLog) -> None:
    batch = make_batch([b"r" * 80])
    log = open_log(LogConfig(segment_bytes=len(batch) * 2, retention_bytes=len(batch) * 2))
    log.become_leader(0)
    for _ in range(3):
        append(log, batch)
    log.become_leader(5)
    for _ in range(3):
        append(log, batch)
    log.apply_retention(T0_MS)
    assert log.log_start_offset == 4
    assert log.leader_epochs.entries == ((5, 4),)


def test_a_cluster_broker_holds_only_its_partitions_under_zookeepers_topic_id(tmp_path: Path) -> None:
    clock = ManualClock()
    topic_id = uuid.uuid4()
    manager = LogManager(tmp_path, LogConfig(), clock)
    manager.load()
    pending = manager.begin_host_partitions("t", topic_id, [1, 3], {"retention.ms": "1000"})
    assert pending is not None
    manager.install_create(manager.build_create(pending))
    assert manager.begin_host_partitions("t", topic_id, [1]) is None
    pending = manager.begin_host_partitions("t", topic_id, [0])
    assert pending is not None and pending.new_partitions == (0,)
    manager.install_create(manager.build_create(pending))
    metadata = manager.topic("t")
    assert metadata is not None and metadata.topic_id == topic_id
    assert metadata.partition_indexes() == [0, 1, 3]
    assert metadata.config.retention_ms == 1000
    assert manager.log("t", 2) is None and manager.log("t", 3) is not None
    with pytest.raises(TopicExistsError):
        manager.begin_host_partitions("t", uuid.uuid4(), [2])
    append(manager.log("t", 3), make_batch([b"kept"]))  # type: ignore[arg-type]
    manager.close()

    reopened = LogManager(tmp_path, LogConfig(), clock)
    reopened.load()
    assert sorted(reopened.hosted_partitions()) == [
        ("t", 0, topic_id),
        ("t", 1, topic_id),
        ("t", 3, topic_id),
    ]
    assert reopened.log("t", 3).log_end_offset == 1  # type: ignore[union-attr]
    detached = reopened.begin_remove_partitions("t", [1, 2])
    assert detached is not None and detached.partitions == (1,)
    reopened.remove_topic_files(detached)
    assert not (tmp_path / "t-1").exists()
    assert reopened.topic("t").partition_indexes() == [0, 3]  # type: ignore[union-attr]
    detached = reopened.begin_remove_partitions("t", [0, 3])
    assert detached is not None and detached.remaining is None
    reopened.remove_topic_files(detached)
    assert reopened.topic("t") is None
    assert reopened.hosted_partitions() == []
    reopened.close()
    again = LogManager(tmp_path, LogConfig(), clock)
    again.load()
    assert again.topic_names() == []
    again.close()
