"""The rebalance history (strom.coordinator.history) driven through the coordinator with a manual
clock: each trigger, the phases' times, the members and the partitions that moved, the bounds, and
a reload from the log (whole or compacted)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strom.assignors.protocol import Assignment, encode_assignment
from strom.base.clock import ManualClock
from strom.coordinator import CoordinatorConfig, GroupCoordinator, ManualTimer
from strom.coordinator.history import (
    HISTORY_KEY_VERSION,
    RebalanceHistory,
    Trigger,
    decode_history_key,
    history_key_bytes,
)
from strom.coordinator.log_replay import CompactedPartition
from strom.coordinator.records import CorruptCoordinatorRecord
from strom.protocol.errors import ErrorCode
from strom.protocol.group_history import (
    PartitionMove,
    RebalanceEntry,
    StromGroupHistoryRequest,
    StromGroupHistoryResponse,
    decode_entry,
    encode_entry,
)
from strom.protocol.primitives import DecodeError
from tests.unit.coordinator.consumer_harness import (
    ConsumerHarness,
    SimulatedMember,
    assignment_of,
    test_assignors,
)
from tests.unit.coordinator.harness import FakeLog, Harness, consumer_subscription


def assignment(*partitions: tuple[str, int]) -> bytes:
    return encode_assignment(Assignment(partitions=list(partitions)))


class ClassicGroup:
    """A classic "consumer" group whose leader deals the topic's partitions round-robin."""

    def __init__(self, harness: Harness, group_id: str = "g", partitions: int = 4) -> None:
        self.harness = harness
        self.group_id = group_id
        self.partitions = partitions
        self.members: list[str] = []
        self.generation = 0

    def add(self, *, topics: tuple[str, ...] = ("t",)) -> str:
        member_id = self.harness.join_two_step(
            self.group_id, protocols=[("range", consumer_subscription(*topics))], session_timeout_ms=10_000
        )[0]
        self.members.append(member_id)
        return member_id

    def rejoin_all(self, *, topics: dict[str, tuple[str, ...]] | None = None) -> None:
        """Every member sends JoinGroup again (with ``topics`` for some), then SyncGroup."""
        topics = topics or {}
        boxes = {
            member_id: self.harness.join(
                self.group_id,
                member_id,
                protocols=[("range", consumer_subscription(*topics.get(member_id, ("t",))))],
                session_timeout_ms=10_000,
            )
            for member_id in self.members
        }
        self.harness.advance(0)
        self.complete(boxes)

    def complete(self, boxes: dict[str, list]) -> None:  # type: ignore[type-arg]
        answered = {member_id: box[0] for member_id, box in boxes.items() if box}
        assert answered, "the join completed"
        first = next(iter(answered.values()))
        self.generation = first.generation_id
        leader = first.leader
        ordered = sorted(self.members)
        plan: dict[str, list[tuple[str, int]]] = {member_id: [] for member_id in ordered}
        for partition in range(self.partitions):
            plan[ordered[partition % len(ordered)]].append(("t", partition))
        self.harness.clock.advance(7)  # the leader takes 7 ms to assign
        for member_id in ordered:
            if member_id != leader:
                self.harness.sync(self.group_id, member_id, self.generation)
        result = self.harness.sync(
            self.group_id,
            leader,
            self.generation,
            {member_id: assignment(*owned) for member_id, owned in plan.items()},
        )
        assert result and result[0].error_code == ErrorCode.NONE, result


def entries(harness: Harness, group_id: str = "g") -> list[RebalanceEntry]:
    error, found = harness.coordinator.group_history(group_id)
    assert error == ErrorCode.NONE
    return found


def stable_classic(harness: Harness, members: int) -> ClassicGroup:
    group = ClassicGroup(harness)
    boxes: dict[str, list] = {}  # type: ignore[type-arg]
    for _ in range(members):
        member_id, box = harness.join_two_step("g", protocols=[("range", consumer_subscription("t"))])
        group.members.append(member_id)
        boxes[member_id] = box
    harness.clock.advance(3)  # joins wait 3 ms
    harness.advance(0)
    group.complete(boxes)
    return group


def test_a_new_classic_group_records_its_first_rebalance_with_phases_members_and_moves() -> None:
    harness = Harness()
    start = harness.clock.wall_ms()
    group = stable_classic(harness, 2)
    [entry] = entries(harness)
    assert entry.protocol == "classic"
    assert entry.trigger == Trigger.MEMBER_JOINED
    assert entry.causes == tuple(group.members)  # the second joined while the first waited
    assert entry.generation == group.generation == 1
    assert entry.start_ms == start and entry.join_ms == 3 and entry.assignment_ms == 7
    assert entry.outcome == "completed"
    assert entry.members_before == ()
    assert entry.members_after == tuple(sorted(group.members))
    first, second = sorted(group.members)
    assert entry.moves == (
        PartitionMove("t", 0, None, first),
        PartitionMove("t", 1, None, second),
        PartitionMove("t", 2, None, first),
        PartitionMove("t", 3, None, second),
    )


def test_a_member_joining_a_stable_group_moves_partitions_from_the_others() -> None:
    harness = Harness()
    group = stable_classic(harness, 2)
    newcomer, box = harness.join_two_step("g", protocols=[("range", consumer_subscription("t"))])
    group.members.append(newcomer)
    boxes = {newcomer: box}
    for member_id in group.members[:2]:
        boxes[member_id] = harness.join("g", member_id, protocols=[("range", consumer_subscription("t"))])
    harness.advance(0)
    group.complete(boxes)
    latest = entries(harness)[-1]
    assert latest.trigger == Trigger.MEMBER_JOINED and latest.causes == (newcomer,)
    assert latest.generation == 2
    assert set(latest.members_before) == set(group.members[:2])
    assert set(latest.members_after) == set(group.members)
    ordered = sorted(group.members)
    owners_before = {p: sorted(group.members[:2])[p % 2] for p in range(4)}
    owners_after = {p: ordered[p % 3] for p in range(4)}
    assert latest.moves == tuple(
        PartitionMove("t", p, owners_before[p], owners_after[p])
        for p in range(4)
        if owners_before[p] != owners_after[p]
    )


def test_leaving_expiring_and_rejoining_are_told_apart() -> None:
    harness = Harness()
    group = stable_classic(harness, 3)
    leaver = group.members.pop()
    harness.leave("g", [(leaver, None)])
    group.rejoin_all()
    left = entries(harness)[-1]
    assert (left.trigger, left.causes) == (Trigger.MEMBER_LEFT, (leaver,))
    assert leaver in left.members_before and leaver not in left.members_after
    assert all(move.from_member == leaver for move in left.moves if move.from_member not in group.members)

    # One member stops heartbeating: its session expires.
    silent = group.members.pop()
    for _ in range(4):
        harness.clock.advance(3_000)
        for member_id in group.members:
            harness.heartbeat("g", member_id, group.generation)
        harness.advance(0)
    group.rejoin_all()
    expired = entries(harness)[-1]
    assert (expired.trigger, expired.causes) == (Trigger.SESSION_EXPIRED, (silent,))

    # A member rejoins with another subscription, then with other metadata but the same topics.
    member_id = group.members[0]
    group.rejoin_all(topics={member_id: ("t", "u")})
    changed = entries(harness)[-1]
    assert (changed.trigger, changed.causes) == (Trigger.SUBSCRIPTION_CHANGED, (member_id,))
    user_data = consumer_subscription("t", "u")[:-4] + b"\x00\x00\x00\x01x"
    boxes = {member_id: harness.join("g", member_id, protocols=[("range", user_data)])}
    harness.advance(0)
    group.complete(boxes)
    assert entries(harness)[-1].trigger == Trigger.REJOINED_NEW_METADATA


def test_a_rebalance_cut_short_by_another_is_superseded_and_the_last_group_left_empties_it() -> None:
    harness = Harness()
    group = stable_classic(harness, 2)
    first, second = group.members
    harness.join("g", first, protocols=[("range", consumer_subscription("t"))])  # a rebalance begins
    harness.leave("g", [(second, None)])  # the join completes with the first member alone
    harness.advance(0)
    harness.leave("g", [(first, None)])  # a new rebalance while the last one awaits SyncGroup
    harness.advance(0)
    found = entries(harness)
    assert [entry.outcome for entry in found] == ["completed", "superseded", "completed"]
    assert found[1].trigger == Trigger.MEMBER_REJOINED
    last = found[-1]
    assert last.trigger == Trigger.MEMBER_LEFT and last.members_after == ()
    assert harness.coordinator.group("g").state.value == "Empty"  # type: ignore[union-attr]


def reload_classic(harness: Harness, *, compacted: bool) -> GroupCoordinator:
    """A new coordinator loads the harness's log (whole, or as compaction leaves it) and takes over."""
    timer = ManualTimer(harness.clock)
    fresh = GroupCoordinator(harness.config, harness.clock, timer, harness.log)
    fresh.begin_loading(0)
    records = [(key, value) for _, key, value in harness.log.all_records()]
    if compacted:
        partition = CompactedPartition()
        for key, value in records:
            partition.plain(key, value)
        records = partition.replay_order()
    for key, value in records:
        fresh.replay(0, key, value)
    fresh.finish_loading(0)
    harness.coordinator, harness.timer = fresh, timer
    return fresh


@pytest.mark.parametrize("compacted", [False, True])
def test_the_history_survives_a_reload_and_a_rejoin_after_it_is_the_coordinator_moving(
    compacted: bool,
) -> None:
    harness = Harness()
    group = stable_classic(harness, 3)
    harness.leave("g", [(group.members.pop(), None)])
    group.rejoin_all()
    before = entries(harness)
    assert len(before) == 2
    fresh = reload_classic(harness, compacted=compacted)
    assert entries(harness) == before
    # The members were rebalancing when their coordinator went away: they rejoin, unchanged.
    leader = fresh.group("g").leader_id  # type: ignore[union-attr]
    group.members.sort(key=lambda member_id: member_id != leader)
    group.rejoin_all()
    moved = entries(harness)[-1]
    assert moved.trigger == Trigger.COORDINATOR_MOVED and moved.causes == (leader,)
    assert moved.sequence == before[-1].sequence + 1
    assert moved.moves == ()  # the same members, the same assignment
    group.rejoin_all()
    assert entries(harness)[-1].trigger == Trigger.MEMBER_REJOINED  # only the first one after a load


def test_bounds_per_group_and_in_total_tombstone_what_they_drop() -> None:
    written: list[tuple[str, list[tuple[bytes, bytes | None]]]] = []
    history = RebalanceHistory(
        lambda group_id: 0, lambda g, r: written.append((g, r)), per_group_max=3, total_max=5
    )

    class FakeGroup:
        def __init__(self, group_id: str) -> None:
            self.group_id = group_id
            self.members: dict[str, object] = {}
            self.protocol_type = "other"
            self.generation_id = 0

    groups = {name: FakeGroup(name) for name in ("a", "b")}
    for round_ in range(4):
        for group in groups.values():
            group.generation_id = round_ + 1
            history.classic_started(group, Trigger.OTHER, (), 1000 * round_)  # type: ignore[arg-type]
            history.classic_joined(group, 1000 * round_ + 1)  # type: ignore[arg-type]  # no members: ends
    assert [entry.sequence for entry in history.entries("a")] == [2, 3]
    assert [entry.sequence for entry in history.entries("b")] == [1, 2, 3]
    assert history.total == 5
    tombstones = {
        (g, decode_history_key(key)[1]) for g, records in written for key, value in records if value is None
    }
    assert tombstones == {("a", 0), ("b", 0), ("a", 1)}
    assert sum(history.finished_by_trigger.values()) == 8
    assert history.duration_bucket_counts[0] == 8 and history.duration_sum_ms == 8


def test_history_keys_and_entries_refuse_garbage() -> None:
    key = history_key_bytes("g", 7)
    assert decode_history_key(key) == ("g", 7)
    assert key[:2] == HISTORY_KEY_VERSION.to_bytes(2, "big")
    for bad in (key[:-1], key + b"x", key[:2] + b"\xff\xff" + key[4:]):
        with pytest.raises(CorruptCoordinatorRecord):
            decode_history_key(bad)
    harness = Harness()
    harness.coordinator.begin_loading(0)
    with pytest.raises(CorruptCoordinatorRecord):
        harness.coordinator.replay(0, key, b"\x00\x01garbage")
    with pytest.raises(CorruptCoordinatorRecord):
        harness.coordinator.replay(0, b"\x7d\x00" + key[2:], b"")  # another strom-only-looking version
    entry = RebalanceEntry(
        7,
        "classic",
        3,
        "member-left",
        ("m",),
        1,
        2,
        3,
        "completed",
        ("m", "n"),
        ("n",),
        (PartitionMove("t", 0, "m", "n"),),
        2,
    )
    assert decode_entry(encode_entry(entry)) == entry
    with pytest.raises(DecodeError):
        decode_entry(encode_entry(entry)[:-1])
    response = StromGroupHistoryResponse(entries=[encode_entry(entry)])
    assert StromGroupHistoryResponse.decode(response.encode(0), 0) == response
    assert StromGroupHistoryRequest.decode(StromGroupHistoryRequest("g").encode(0), 0).group_id == "g"


def test_unknown_groups_and_partitions_not_owned_get_errors() -> None:
    harness = Harness()
    assert harness.coordinator.group_history("nope") == (ErrorCode.GROUP_ID_NOT_FOUND, [])
    assert harness.coordinator.group_history("")[0] == ErrorCode.INVALID_GROUP_ID
    harness.coordinator.unload(0)
    assert harness.coordinator.group_history("g")[0] == ErrorCode.NOT_COORDINATOR


# ==================================================================== consumer-protocol groups
def test_consumer_groups_record_joins_subscription_changes_leaves_and_expiry() -> None:
    harness = ConsumerHarness()
    topic_id = harness.topics.create("t", 4)
    first = SimulatedMember(harness, ["t"])
    first.beat()
    harness.clock.advance(5)
    first.beat()
    [joined] = entries(harness)
    assert joined.protocol == "consumer" and joined.trigger == Trigger.MEMBER_JOINED
    assert joined.causes == (first.member_id,) and joined.generation == 1
    assert joined.join_ms == 0 and joined.outcome == "completed"
    assert {move.partition for move in joined.moves} == {0, 1, 2, 3}
    assert all(move.to_member == first.member_id and move.topic == "t" for move in joined.moves)

    second = SimulatedMember(harness, ["t"])
    second.beat()
    assert harness.coordinator.history.in_progress("g") is not None  # the first has to revoke
    harness.clock.advance(20)
    for _ in range(3):
        first.beat()
        second.beat()
    arrived = entries(harness)[-1]
    assert arrived.trigger == Trigger.MEMBER_JOINED and arrived.causes == (second.member_id,)
    assert arrived.assignment_ms == 20 and arrived.generation == 2
    assert {(m.from_member, m.to_member) for m in arrived.moves} == {(first.member_id, second.member_id)}
    assert len(arrived.moves) == 2
    assert set(arrived.members_after) == {first.member_id, second.member_id}

    harness.topics.create("u", 2)
    response = harness.heartbeat("g", second.member_id, second.epoch, names=["t", "u"], owned=second.owned)
    second.names, second.epoch = ["t", "u"], response.member_epoch
    second.owned = assignment_of(response) or second.owned
    for _ in range(3):
        first.beat()
        second.beat()
    changed = entries(harness)[-1]
    assert (changed.trigger, changed.causes) == (Trigger.SUBSCRIPTION_CHANGED, (second.member_id,))
    assert {move.topic for move in changed.moves} == {"u"}

    second.leave()
    for _ in range(2):
        first.beat()
    left = entries(harness)[-1]
    assert (left.trigger, left.causes) == (Trigger.MEMBER_LEFT, (second.member_id,))

    harness.advance(10_001)  # nobody heartbeats: the first member's session expires
    expired = entries(harness)[-1]
    assert (expired.trigger, expired.causes) == (Trigger.SESSION_EXPIRED, (first.member_id,))
    assert expired.members_after == ()
    assert all(move.to_member is None for move in expired.moves)
    assert topic_id


def test_a_topic_growing_rebalances_a_consumer_group_for_its_metadata() -> None:
    harness = ConsumerHarness()
    harness.topics.create("t", 2)
    member = SimulatedMember(harness, ["t"])
    member.beat()
    member.beat()
    harness.topics.create("t", 3)
    harness.coordinator.topics_changed(["t"])
    member.beat()
    member.beat()
    grown = entries(harness)[-1]
    assert grown.trigger == Trigger.TOPIC_METADATA_CHANGED and grown.causes == ()
    assert grown.moves == (PartitionMove("t", 2, None, member.member_id),)


def test_a_consumer_groups_history_survives_a_compacted_reload() -> None:
    harness = ConsumerHarness()
    harness.topics.create("t", 4)
    members = [SimulatedMember(harness, ["t"]) for _ in range(2)]
    for _ in range(3):
        for member in members:
            member.beat()
    before = entries(harness)
    clock = ManualClock()
    fresh = GroupCoordinator(
        harness.config, clock, ManualTimer(clock), FakeLog(), harness.topics, assignors=test_assignors()
    )
    fresh.begin_loading(0)
    partition = CompactedPartition()
    for _, key, value in harness.log.all_records():
        partition.plain(key, value)
    for key, value in partition.replay_order():
        fresh.replay(0, key, value)
    fresh.finish_loading(0)
    assert fresh.group_history("g") == (ErrorCode.NONE, before)


# ==================================================================== cost
def test_recording_costs_little_beside_a_100_member_rebalance() -> None:
    """A micro-benchmark of the hooks' share in a 100-member classic rebalance (JoinGroup, SyncGroup
    with a 1,000-partition assignment) through the coordinator: the time spent inside the history's
    hooks beside the whole. The figures are printed (pytest -s; docs/coordinator.md quotes them);
    what is asserted is what was recorded, not how fast (the machine's load decides that)."""
    harness = Harness(CoordinatorConfig(group_initial_rebalance_delay_ms=0, offsets_topic_num_partitions=1))
    history = harness.coordinator.history
    spent_s = [0.0]
    for name in ("classic_started", "classic_joined", "classic_synced", "classic_trigger"):
        original = getattr(history, name)

        def timed(*arguments: Any, original: Any = original) -> Any:
            started = time.perf_counter()
            try:
                return original(*arguments)
            finally:
                spent_s[0] += time.perf_counter() - started

        setattr(history, name, timed)
    group = ClassicGroup(harness, partitions=1000)
    boxes = {}
    for _ in range(100):
        member_id, box = harness.join_two_step("g", protocols=[("range", consumer_subscription("t"))])
        group.members.append(member_id)
        boxes[member_id] = box
    harness.advance(0)
    group.complete(boxes)
    spent_s[0] = 0.0
    started = time.perf_counter()
    rounds = 10
    for _ in range(rounds):
        group.rejoin_all()
    total_ms = (time.perf_counter() - started) * 1000 / rounds
    hooks_ms = spent_s[0] * 1000 / rounds
    print(
        f"100-member classic rebalance through the coordinator: {total_ms:.2f} ms, {hooks_ms:.2f} ms of it recording"
    )
    recorded = history.entries("g")
    assert [entry.trigger for entry in recorded] == ["member-joined"] + ["member-rejoined"] * rounds
    assert len(recorded[0].moves) == 1000 and all(entry.moves == () for entry in recorded[1:])


@given(st.binary(max_size=200))
def test_any_bytes_decode_as_an_entry_or_raise_the_decode_error(data: bytes) -> None:
    """The decoder trusts nothing: bytes are an entry (which encodes back to them) or DecodeError."""
    try:
        entry = decode_entry(data)
    except DecodeError:
        return
    assert encode_entry(entry) == data


@given(st.binary(max_size=60))
def test_any_history_key_decodes_or_is_a_corrupt_record(data: bytes) -> None:
    key = b"\x7dd" + data
    try:
        decoded = decode_history_key(key)
    except CorruptCoordinatorRecord:
        return
    assert history_key_bytes(*decoded) == key
