"""Offsets committed in a transaction (TxnOffsetCommit): pending until the producer's marker,
committed by COMMIT, dropped by ABORT, beaten by any later write of the same partition's offset;
OffsetFetch with require_stable says UNSTABLE_OFFSET_COMMIT meanwhile; and loading a partition
(in log order, or compacted as the broker loads it) gives what live handling gave."""

from __future__ import annotations

import random
from typing import Any

import pytest

from strom.base.clock import ManualClock
from strom.coordinator import CoordinatorConfig, GroupCoordinator, GroupState, ManualTimer
from strom.coordinator.log_replay import CompactedPartition
from strom.coordinator.records import (
    CommittedOffset,
    CorruptCoordinatorRecord,
    group_key_bytes,
    group_value_bytes,
    offset_key_bytes,
    offset_value_bytes,
)
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.delete_groups import DeleteGroupsRequest, DeleteGroupsResponse
from strom.protocol.messages.offset_delete import OffsetDeleteRequest, OffsetDeleteResponse

from .harness import FakeLog, Harness, LogEntry
from .test_takeover import random_group_value

T0 = ("t", 0)
T1 = ("t", 1)
A, B, C = 1000, 2000, 3000  # producer ids


def offset_of(harness: Harness, group_id: str, key: tuple[str, int]) -> int | None:
    group = harness.coordinator.group(group_id)
    committed = None if group is None else group.offsets.get(key)
    return None if committed is None else committed.offset


# ---------------------------------------------------------------- commit, abort, fetch


def test_offsets_count_once_the_commit_marker_is_written() -> None:
    harness = Harness()
    assert harness.commit("g", {T0: 5}) == {T0: ErrorCode.NONE}
    assert harness.txn_commit("g", {T0: 10, T1: 20}, producer_id=A) == {
        T0: ErrorCode.NONE,
        T1: ErrorCode.NONE,
    }
    # Written, not committed: OffsetFetch gives the last committed offset ...
    assert harness.fetch("g", {"t": [0, 1]}) == {T0: (5, "meta"), T1: (-1, "")}
    # ... and, asked for stable offsets, tells the consumer to retry.
    assert harness.fetch_stable("g", {"t": [0, 1], "u": [0]}) == {
        T0: (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT),
        T1: (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT),
        ("u", 0): (-1, ErrorCode.NONE),
    }
    harness.complete(A, commit=True)
    assert harness.fetch("g", {"t": [0, 1]}) == {T0: (10, "meta"), T1: (20, "meta")}
    assert harness.fetch_stable("g", {"t": [0, 1]}) == {T0: (10, ErrorCode.NONE), T1: (20, ErrorCode.NONE)}
    group = harness.coordinator.group("g")
    assert group is not None and not group.pending_transactional_offsets


def test_abort_drops_the_pending_offsets() -> None:
    harness = Harness()
    harness.commit("g", {T0: 5})
    harness.txn_commit("g", {T0: 10, T1: 20}, producer_id=A)
    harness.complete(A, commit=False)
    assert harness.fetch("g", {"t": [0, 1]}) == {T0: (5, "meta"), T1: (-1, "")}
    assert harness.fetch_stable("g", {"t": [0, 1]}) == {T0: (5, ErrorCode.NONE), T1: (-1, ErrorCode.NONE)}
    # A second marker of the same producer completes nothing.
    harness.complete(A, commit=True)
    assert harness.fetch("g", {"t": [0]}) == {T0: (5, "meta")}


def test_the_written_record_is_an_offset_commit_in_one_transactional_batch() -> None:
    harness = Harness()
    harness.txn_commit("g", {T0: 10, T1: 11}, producer_id=A, producer_epoch=3, leader_epoch=7, version=2)
    entries = harness.log.entries[0]
    assert [entry.producer_id for entry in entries] == [A, A]
    assert entries[0].key == offset_key_bytes("g", "t", 0)
    assert entries[0].value == offset_value_bytes(CommittedOffset(10, 7, "meta", 1_700_000_000_000, -1))
    assert harness.log.partitions == {}  # nothing written outside the transaction
    # v0-1 carry no leader epoch; null metadata is stored as "".
    harness.txn_commit("g", {T0: 12}, producer_id=B, version=1, leader_epoch=9, metadata=None)
    assert harness.log.entries[0][2].value == offset_value_bytes(
        CommittedOffset(12, -1, "", 1_700_000_000_000, -1)
    )


def test_fetch_of_every_offset_lists_the_committed_ones_unstable_if_pending() -> None:
    harness = Harness()
    harness.commit("g", {T0: 5, ("u", 0): 1})
    harness.txn_commit("g", {T0: 10, T1: 20}, producer_id=A)
    for version in (7, 8):
        # As Kafka: the committed partitions, T0 unstable; T1 (pending only) has none to list.
        assert harness.fetch_stable("g", None, version=version) == {
            T0: (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT),
            ("u", 0): (1, ErrorCode.NONE),
        }
        assert harness.fetch_stable("g", None, version=version, require_stable=False) == {
            T0: (5, ErrorCode.NONE),
            ("u", 0): (1, ErrorCode.NONE),
        }
        assert harness.fetch_stable("g", {"t": [0, 1]}, version=version) == {
            T0: (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT),
            T1: (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT),
        }


# ---------------------------------------------------------------- several writers of one partition


@pytest.mark.parametrize(
    ("markers", "expected"),
    [
        # A wrote 10 before B wrote 20: whatever the markers' order, the later write (B's) wins.
        ([(A, True), (B, True)], 20),
        ([(B, True), (A, True)], 20),
        ([(A, True), (B, False)], 10),
        ([(B, False), (A, True)], 10),
        ([(A, False), (B, True)], 20),
        ([(A, False), (B, False)], 5),
    ],
)
def test_interleaved_producers_the_later_write_wins(markers: list[tuple[int, bool]], expected: int) -> None:
    harness = Harness()
    harness.commit("g", {T0: 5})
    harness.txn_commit("g", {T0: 10}, producer_id=A)
    harness.txn_commit("g", {T0: 20, T1: 21}, producer_id=B)
    for producer_id, commit in markers:
        harness.complete(producer_id, commit)
    assert offset_of(harness, "g", T0) == expected
    assert offset_of(harness, "g", T1) == (21 if (B, True) in markers else None)
    assert_reload_matches(harness)


def test_a_later_plain_commit_beats_a_pending_transactional_offset() -> None:
    harness = Harness()
    harness.txn_commit("g", {T0: 10, T1: 11}, producer_id=A)
    harness.commit("g", {T0: 7})  # written after A's offset of T0: it wins
    # No longer pending: the committed offset is stable.
    assert harness.fetch_stable("g", {"t": [0, 1]}) == {
        T0: (7, ErrorCode.NONE),
        T1: (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT),
    }
    harness.complete(A, commit=True)
    assert (offset_of(harness, "g", T0), offset_of(harness, "g", T1)) == (7, 11)
    # A plain commit before the transactional write is beaten by it.
    harness.commit("g", {T0: 8})
    harness.txn_commit("g", {T0: 30}, producer_id=B)
    harness.complete(B, commit=True)
    assert offset_of(harness, "g", T0) == 30
    assert_reload_matches(harness)


def test_a_producer_writing_one_partition_twice_in_a_transaction_commits_its_last_offset() -> None:
    harness = Harness()
    harness.txn_commit("g", {T0: 10}, producer_id=A)
    harness.txn_commit("g", {T0: 12}, producer_id=A)
    harness.complete(A, commit=True)
    assert offset_of(harness, "g", T0) == 12
    assert_reload_matches(harness)


def test_markers_complete_only_their_own_partitions_groups() -> None:
    config = CoordinatorConfig(group_initial_rebalance_delay_ms=0, offsets_topic_num_partitions=4)
    harness = Harness(config)
    partition_of = harness.coordinator._runtime.partition_of
    groups = [f"group-{index}" for index in range(40)]
    first = next(g for g in groups if partition_of(g) == 0)
    second = next(g for g in groups if partition_of(g) == 1)
    harness.txn_commit(first, {T0: 1}, producer_id=A)
    harness.txn_commit(second, {T0: 2}, producer_id=A)
    harness.complete(A, commit=True, partition=1)
    assert offset_of(harness, first, T0) is None and offset_of(harness, second, T0) == 2
    harness.complete(A, commit=False, partition=0)
    group = harness.coordinator.group(first)
    assert group is not None and not group.pending_transactional_offsets and not group.offsets


# ---------------------------------------------------------------- validation


def test_validation_of_the_group_member_and_generation() -> None:
    harness = Harness()
    (leader, follower), generation = harness.stable_group("g", members=2)
    ok = {T0: ErrorCode.NONE}
    assert harness.txn_commit("g", {T0: 1}, member_id=leader, generation_id=generation) == ok
    assert harness.txn_commit("g", {T0: 1}, member_id=leader, generation_id=generation + 1) == {
        T0: ErrorCode.ILLEGAL_GENERATION
    }
    assert harness.txn_commit("g", {T0: 1}, member_id="stranger", generation_id=generation) == {
        T0: ErrorCode.UNKNOWN_MEMBER_ID
    }
    # Without a generation (v0-2 cannot send one; a producer whose consumer has no group
    # management): accepted, even by a group with members.
    assert harness.txn_commit("g", {T0: 1}, version=2) == ok
    assert harness.txn_commit("g", {T0: 1}, version=3) == ok
    # A v0-2 request's missing fields are not read as a member.
    assert harness.txn_commit("g", {T0: 1}, version=0) == ok
    # A rebalance in progress is no error for a transaction (OffsetCommit says REBALANCE_IN_PROGRESS).
    rejoined = harness.join("g", leader)  # the leader rejoining starts a rebalance
    harness.join("g", follower)
    harness.advance(0)
    assert rejoined and rejoined[0].generation_id == generation + 1
    group = harness.coordinator.group("g")
    assert group is not None and group.state is GroupState.COMPLETING_REBALANCE
    assert harness.txn_commit("g", {T0: 1}, member_id=leader, generation_id=generation + 1) == ok
    assert harness.commit("g", {T0: 1}, member_id=leader, generation_id=generation + 1) == {
        T0: ErrorCode.REBALANCE_IN_PROGRESS
    }


def test_a_static_member_replaced_by_a_new_instance_is_fenced() -> None:
    harness = Harness()
    joined = harness.join(instance_id="instance-1")
    harness.advance(0)
    old_id, generation = joined[0].member_id, joined[0].generation_id
    harness.sync("g", old_id, generation, {old_id: b"A"}, instance_id="instance-1")
    restarted = harness.join(instance_id="instance-1")  # a new instance takes its place
    new_id = restarted[0].member_id
    assert harness.txn_commit(
        "g", {T0: 1}, member_id=new_id, generation_id=generation, instance_id="instance-1"
    ) == {T0: ErrorCode.NONE}
    assert harness.txn_commit(
        "g", {T0: 1}, member_id=old_id, generation_id=generation, instance_id="instance-1"
    ) == {T0: ErrorCode.FENCED_INSTANCE_ID}


def test_a_group_that_does_not_exist_commits_without_a_generation() -> None:
    harness = Harness()
    assert harness.txn_commit("new", {T0: 1}) == {T0: ErrorCode.NONE}
    group = harness.coordinator.group("new")
    assert group is not None and group.state is GroupState.EMPTY and not group.members
    assert harness.txn_commit("other", {T0: 1}, member_id="m", generation_id=3) == {
        T0: ErrorCode.ILLEGAL_GENERATION
    }
    assert harness.txn_commit("other", {T0: 1}, member_id="m") == {T0: ErrorCode.UNKNOWN_MEMBER_ID}
    assert harness.coordinator.group("other") is None


def test_refusals_of_the_whole_request() -> None:
    harness = Harness(partitions=())
    assert harness.txn_commit("", {T0: 1, T1: 1}) == {
        T0: ErrorCode.INVALID_GROUP_ID,
        T1: ErrorCode.INVALID_GROUP_ID,
    }
    assert harness.txn_commit("g", {T0: 1}) == {T0: ErrorCode.NOT_COORDINATOR}
    harness.coordinator.begin_loading(0)
    assert harness.txn_commit("g", {T0: 1}) == {T0: ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}
    harness.coordinator.finish_loading(0)
    # A group being removed.
    harness.commit("g", {T0: 1})
    harness.log.defer = True
    deleted: list[DeleteGroupsResponse] = []
    harness.coordinator.delete_groups(DeleteGroupsRequest(groups_names=["g"]), 2, deleted.append)
    assert harness.txn_commit("g", {T0: 2}) == {T0: ErrorCode.COORDINATOR_NOT_AVAILABLE}
    harness.log.complete_deferred()
    assert deleted and deleted[0].results[0].error_code == ErrorCode.NONE


def test_metadata_too_large_and_failed_writes() -> None:
    config = CoordinatorConfig(
        group_initial_rebalance_delay_ms=0, offsets_topic_num_partitions=1, offset_metadata_max_bytes=4
    )
    harness = Harness(config)
    assert harness.txn_commit("g", {T0: 1}, metadata="12345") == {T0: ErrorCode.OFFSET_METADATA_TOO_LARGE}
    assert harness.log.entries == {}
    harness.log.fail_with = ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert harness.txn_commit("g", {T0: 1}, metadata="1234") == {T0: ErrorCode.NOT_COORDINATOR}
    harness.log.fail_with = ErrorCode.REQUEST_TIMED_OUT
    assert harness.txn_commit("g", {T0: 1}) == {T0: ErrorCode.REQUEST_TIMED_OUT}
    group = harness.coordinator.group("g")
    assert group is None or not group.pending_transactional_offsets  # a failed write is not pending


def test_the_answer_waits_for_the_write_and_a_write_from_before_a_move_is_not_applied() -> None:
    harness = Harness()
    harness.log.defer = harness.log.append_before_answer = True
    assert harness.txn_commit("g", {T0: 1}, producer_id=A) == {}
    assert harness.fetch_stable("g", {"t": [0]}) == {T0: (-1, ErrorCode.NONE)}  # not written yet
    harness.coordinator.unload(0)
    harness.coordinator.begin_loading(0)
    harness.coordinator.finish_loading(0)  # loaded afresh (empty here)
    harness.log.complete_deferred()
    assert harness.coordinator.group("g") is None


# ---------------------------------------------------------------- deletion, expiry, loading, moves


def test_deleting_a_group_beats_its_pending_offsets() -> None:
    harness = Harness()
    harness.commit("g", {T0: 5})
    harness.txn_commit("g", {T0: 10, T1: 11}, producer_id=A)
    deleted: list[DeleteGroupsResponse] = []
    harness.coordinator.delete_groups(DeleteGroupsRequest(groups_names=["g"]), 2, deleted.append)
    assert deleted[0].results[0].error_code == ErrorCode.NONE
    # Tombstones for the committed and the pending partitions alike, then the group's.
    tombstones = [(entry.key, entry.value) for entry in harness.log.entries[0][-3:]]
    assert tombstones == [
        (offset_key_bytes("g", "t", 0), None),
        (offset_key_bytes("g", "t", 1), None),
        (group_key_bytes("g"), None),
    ]
    harness.complete(A, commit=True)  # the transaction commits after the deletion
    assert harness.coordinator.group("g") is None
    assert_reload_matches(harness)


def test_offset_delete_beats_a_pending_offset() -> None:
    harness = Harness()
    harness.txn_commit("g", {T0: 10}, producer_id=A)
    request = OffsetDeleteRequest(
        group_id="g",
        topics=[
            OffsetDeleteRequest.OffsetDeleteRequestTopic(
                name="t", partitions=[OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=0)]
            )
        ],
    )
    answered: list[OffsetDeleteResponse] = []
    harness.coordinator.delete_offsets(request, 0, answered.append)
    assert answered[0].error_code == ErrorCode.NONE
    assert harness.log.entries[0][-1] == LogEntry(offset_key_bytes("g", "t", 0), None)
    harness.complete(A, commit=True)
    assert offset_of(harness, "g", T0) is None
    assert_reload_matches(harness)


def test_expiry_keeps_offsets_with_a_pending_one_and_their_group() -> None:
    config = CoordinatorConfig(
        group_initial_rebalance_delay_ms=0, offsets_topic_num_partitions=1, offsets_retention_minutes=1
    )
    harness = Harness(config)
    harness.commit("g", {T0: 5, T1: 6})
    harness.clock.advance(120_000)
    harness.txn_commit("g", {T0: 10}, producer_id=A)
    harness.coordinator.expire_offsets()
    # T1 expired; T0 stays (its tombstone would beat the pending 10, then committed).
    group = harness.coordinator.group("g")
    assert group is not None and set(group.offsets) == {T0}
    harness.clock.advance(120_000)
    harness.complete(A, commit=False)  # aborted: T0's own offset is old ...
    harness.coordinator.expire_offsets()  # ... and expires now, and the group with it
    assert harness.coordinator.group("g") is None
    # A group holding only a pending offset is not removed either.
    harness.txn_commit("h", {T0: 1}, producer_id=B)
    harness.clock.advance(120_000)
    harness.coordinator.expire_offsets()
    assert harness.coordinator.group("h") is not None
    harness.complete(B, commit=True)
    assert offset_of(harness, "h", T0) == 1


def test_a_marker_written_while_loading_is_applied_once_loaded() -> None:
    harness = Harness()
    harness.txn_commit("g", {T0: 10}, producer_id=A)
    harness.txn_commit("g", {T1: 11}, producer_id=B)
    clock = ManualClock()
    fresh = GroupCoordinator(harness.config, clock, ManualTimer(clock), FakeLog())
    fresh.begin_loading(0)
    # The load read the log up to here; B's marker is written (and read by the load too) ...
    replay_entries(fresh, 0, harness.log.entries[0])
    fresh.complete_transaction(0, B, True)
    fresh.replay_marker(0, B, True)
    fresh.complete_transaction(0, A, True)  # ... A's only after the load read the log
    group = fresh.group("g")
    assert group is not None and set(group.pending_transactional_offsets) == {A}
    fresh.finish_loading(0)
    assert {key: committed.offset for key, committed in group.offsets.items()} == {T0: 10, T1: 11}
    assert not group.pending_transactional_offsets
    # A partition this coordinator does not own: the marker is not its concern.
    fresh.complete_transaction(7, A, True)


def test_unloading_forgets_pending_offsets() -> None:
    harness = Harness()
    harness.txn_commit("g", {T0: 10}, producer_id=A)
    harness.coordinator.unload(0)
    assert harness.coordinator._runtime.open_transactions == {}
    harness.coordinator.complete_transaction(0, A, True)
    assert harness.coordinator.group("g") is None


def test_only_offset_commits_replay_as_transactional_records() -> None:
    clock = ManualClock()
    coordinator = GroupCoordinator(Harness().config, clock, ManualTimer(clock), FakeLog())
    coordinator.begin_loading(0)
    with pytest.raises(CorruptCoordinatorRecord):
        coordinator.replay_transactional(0, A, group_key_bytes("g"), b"\x00\x03", 0)
    with pytest.raises(CorruptCoordinatorRecord):
        coordinator.replay_transactional(0, A, offset_key_bytes("g", "t", 0), None, 1)


# ---------------------------------------------------------------- replay equals live


def snapshot(coordinator: GroupCoordinator) -> dict[str, Any]:
    """Groups, offsets and pending offsets, leaving out groups holding nothing at all (live keeps
    such a group, emptied by tombstones or an abort, until expiry; a load never makes it)."""
    result: dict[str, Any] = {}
    for group_id in coordinator.group_states():
        group = coordinator.group(group_id)
        assert group is not None
        if (
            group.state is GroupState.EMPTY
            and group.protocol_type is None
            and not group.offsets
            and not group.pending_transactional_offsets
        ):
            continue
        result[group_id] = (
            group.state,
            group.generation_id,
            group.protocol_type,
            sorted(group.members),
            dict(group.offsets),
            {
                producer_id: dict(written)
                for producer_id, written in group.pending_transactional_offsets.items()
            },
        )
    return result


def replay_entries(coordinator: GroupCoordinator, partition: int, entries: list[LogEntry]) -> None:
    """Replay a partition's records in log order: every record, every marker."""
    for log_offset, entry in enumerate(entries):
        if entry.marker is not None:
            coordinator.replay_marker(partition, entry.producer_id, entry.marker)
        elif entry.producer_id >= 0:
            assert entry.key is not None
            coordinator.replay_transactional(partition, entry.producer_id, entry.key, entry.value, log_offset)
        else:
            assert entry.key is not None
            coordinator.replay(partition, entry.key, entry.value)


def replay_compacted(coordinator: GroupCoordinator, partition: int, entries: list[LogEntry]) -> None:
    """Replay a partition as the broker loads it: through ``CompactedPartition``."""
    compacted = CompactedPartition()
    for log_offset, entry in enumerate(entries):
        if entry.marker is not None:
            compacted.marker(entry.producer_id, entry.marker)
        elif entry.producer_id >= 0:
            assert entry.key is not None
            compacted.transactional(entry.producer_id, entry.key, entry.value, log_offset)
        else:
            assert entry.key is not None
            compacted.plain(entry.key, entry.value)
    for key, value in compacted.replay_order():
        coordinator.replay(partition, key, value)
    for producer_id, key, value, log_offset in compacted.open_records():
        coordinator.replay_transactional(partition, producer_id, key, value, log_offset)


def loaded(config: CoordinatorConfig, entries: list[LogEntry], *, compacted: bool) -> GroupCoordinator:
    clock = ManualClock()
    coordinator = GroupCoordinator(config, clock, ManualTimer(clock), FakeLog())
    coordinator.begin_loading(0)
    (replay_compacted if compacted else replay_entries)(coordinator, 0, entries)
    coordinator.finish_loading(0)
    return coordinator


def assert_reload_matches(harness: Harness) -> None:
    entries = harness.log.entries.get(0, [])
    live = snapshot(harness.coordinator)
    assert snapshot(loaded(harness.config, entries, compacted=False)) == live, entries
    assert snapshot(loaded(harness.config, entries, compacted=True)) == live, entries


def test_replay_equals_live_across_random_transactions() -> None:
    config = CoordinatorConfig(
        group_initial_rebalance_delay_ms=0, offsets_topic_num_partitions=1, offsets_retention_minutes=1
    )
    rng = random.Random(447)
    groups = ["g", "h"]
    keys = [T0, T1, ("u", 0)]
    for _ in range(150):
        harness = Harness(config)
        for _ in range(rng.randrange(1, 30)):
            group_id = rng.choice(groups)
            chosen = {key: rng.randrange(1000) for key in rng.sample(keys, rng.randrange(1, 3))}
            action = rng.randrange(10)
            if action < 3:
                harness.commit(group_id, chosen)
            elif action < 6:
                harness.txn_commit(group_id, chosen, producer_id=rng.choice([A, B, C]))
            elif action < 8:
                harness.complete(rng.choice([A, B, C]), commit=rng.random() < 0.6)
            elif action == 8:
                request = OffsetDeleteRequest(
                    group_id=group_id,
                    topics=[
                        OffsetDeleteRequest.OffsetDeleteRequestTopic(
                            name=topic,
                            partitions=[
                                OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=partition)
                            ],
                        )
                        for topic, partition in chosen
                    ],
                )
                harness.coordinator.delete_offsets(request, 0, lambda response: None)
            elif rng.random() < 0.5:
                harness.coordinator.delete_groups(
                    DeleteGroupsRequest(groups_names=[group_id]), 2, lambda r: None
                )
            else:
                harness.clock.advance(rng.choice([0, 90_000]))
                harness.coordinator.expire_offsets()
        assert_reload_matches(harness)


def random_transactional_log(rng: random.Random) -> list[LogEntry]:
    """Records as any writer could have left them: plain offsets and tombstones, group records,
    transactional offsets of three producers, their markers (some for nothing open)."""
    entries: list[LogEntry] = []
    groups = ["g", "h"]
    for _ in range(rng.randrange(1, 50)):
        group_id = rng.choice(groups)
        key = offset_key_bytes(group_id, rng.choice(["t", "u"]), rng.randrange(2))
        value = offset_value_bytes(CommittedOffset(rng.randrange(1000), -1, "", rng.randrange(10**6), -1))
        kind = rng.randrange(10)
        if kind < 3:
            entries.append(LogEntry(key, value))
        elif kind == 3:
            entries.append(LogEntry(key, None))
        elif kind == 4:
            group_value = None if rng.random() < 0.3 else group_value_bytes(random_group_value(rng))
            entries.append(LogEntry(group_key_bytes(group_id), group_value))
        elif kind < 8:
            entries.append(LogEntry(key, value, rng.choice([A, B, C])))
        else:
            entries.append(LogEntry(None, None, rng.choice([A, B, C]), rng.random() < 0.6))
    return entries


def test_the_compacted_load_gives_the_state_of_replaying_the_whole_log() -> None:
    rng = random.Random(98)
    config = Harness().config
    for _ in range(500):
        entries = random_transactional_log(rng)
        whole = snapshot(loaded(config, entries, compacted=False))
        assert snapshot(loaded(config, entries, compacted=True)) == whole, entries


def test_an_aborted_or_open_transactional_record_never_wins_over_a_committed_one() -> None:
    """What compaction keeps must not let the latest record of a key win when it is transactional
    and aborted, or open: the committed one before it stays the offset."""
    key = offset_key_bytes("g", "t", 0)

    def value(offset: int) -> bytes:
        return offset_value_bytes(CommittedOffset(offset, -1, "", 0, -1))

    for entries, committed, pending in [
        # plain 5, A's 10 aborted
        ([LogEntry(key, value(5)), LogEntry(key, value(10), A), LogEntry(None, None, A, False)], 5, {}),
        # plain 5, A's 10 open: 5 committed, 10 pending
        ([LogEntry(key, value(5)), LogEntry(key, value(10), A)], 5, {A: 10}),
        # A's 10, then plain 7, then A commits: 7 is later
        ([LogEntry(key, value(10), A), LogEntry(key, value(7)), LogEntry(None, None, A, True)], 7, {}),
        # A's 10, B's 20, B commits, A commits: 20 is later
        (
            [
                LogEntry(key, value(10), A),
                LogEntry(key, value(20), B),
                LogEntry(None, None, B, True),
                LogEntry(None, None, A, True),
            ],
            20,
            {},
        ),
        # A's 10, B's 20, B aborts, A commits: 10
        (
            [
                LogEntry(key, value(10), A),
                LogEntry(key, value(20), B),
                LogEntry(None, None, B, False),
                LogEntry(None, None, A, True),
            ],
            10,
            {},
        ),
    ]:
        for compacted in (False, True):
            group = loaded(Harness().config, entries, compacted=compacted).group("g")
            assert group is not None
            assert group.offsets[T0].offset == committed, (entries, compacted)
            assert {
                producer_id: written[T0].committed.offset
                for producer_id, written in group.pending_transactional_offsets.items()
            } == pending
