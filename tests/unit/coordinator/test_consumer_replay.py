"""A consumer group's records written, loaded into a fresh coordinator: the same group."""

from __future__ import annotations

from typing import Any

from strom.base.clock import ManualClock
from strom.coordinator import GroupCoordinator, ManualTimer
from strom.coordinator.log_replay import CompactedPartition
from strom.coordinator.timers import consumer_session_key
from strom.protocol.errors import ErrorCode
from tests.unit.coordinator.consumer_harness import ConsumerHarness, SimulatedMember, test_assignors
from tests.unit.coordinator.harness import FakeLog


def consumer_snapshot(coordinator: GroupCoordinator, group_id: str = "g") -> dict[str, Any]:
    group = coordinator.group(group_id)
    assert group is not None and group.consumer is not None
    consumer = group.consumer
    return {
        "epoch": consumer.epoch,
        "members": dict(consumer.members),
        "metadata": dict(consumer.subscription_metadata),
        "target_epoch": consumer.target_epoch,
        "targets": dict(consumer.targets),
        "current": dict(consumer.current),
        "owners": dict(consumer.partition_owners),
        "static": dict(consumer.static_members),
        "offsets": dict(group.offsets),
        "state": consumer.state(),
    }


def reload(harness: ConsumerHarness, *, compacted: bool) -> tuple[GroupCoordinator, ManualTimer]:
    clock = ManualClock()
    timer = ManualTimer(clock)
    fresh = GroupCoordinator(
        harness.config, clock, timer, FakeLog(), harness.topics, assignors=test_assignors()
    )
    fresh.begin_loading(0)
    if compacted:
        partition = CompactedPartition()
        for _, key, value in harness.log.all_records():
            partition.plain(key, value)
        for key, value in partition.replay_order():
            fresh.replay(0, key, value)
    else:
        for partition_index, key, value in harness.log.all_records():
            fresh.replay(partition_index, key, value)
    fresh.finish_loading(0)
    return fresh, timer


def busy_group() -> tuple[ConsumerHarness, list[SimulatedMember]]:
    harness = ConsumerHarness()
    harness.topics.create("t", 6)
    harness.topics.create("u", 2)
    members = [
        SimulatedMember(harness, ["t"]),
        SimulatedMember(harness, ["t", "u"], instance_id="static-1"),
        SimulatedMember(harness, regex="u|t"),
    ]
    for _ in range(2):
        for member in members:
            member.beat()
    leaving = SimulatedMember(harness, ["t"])
    leaving.beat()
    leaving.leave()
    members[0].beat()  # mid-reconciliation: some member may be revoking
    harness.commit(
        "g", {("t", 0): 42}, member_id=members[0].member_id, generation_id=members[0].epoch, version=9
    )
    return harness, members


def test_a_reloaded_consumer_group_has_the_same_state_from_the_whole_log_or_the_compacted_one() -> None:
    harness, _ = busy_group()
    expected = consumer_snapshot(harness.coordinator)
    assert expected["offsets"][("t", 0)].offset == 42
    for compacted in (False, True):
        fresh, _ = reload(harness, compacted=compacted)
        assert consumer_snapshot(fresh) == expected


def test_reloaded_members_go_on_heartbeating_and_expire_if_they_do_not() -> None:
    harness, members = busy_group()
    fresh, timer = reload(harness, compacted=True)
    for member in members:
        assert timer.due_in_ms(consumer_session_key("g", member.member_id)) == 10_000
    harness.coordinator = fresh
    harness.timer = timer
    members[1].beat()
    assert members[1].last is not None and members[1].last.error_code == ErrorCode.NONE
    for _ in range(11):
        timer.advance(1000)
        members[1].beat()
    group = fresh.group("g")
    assert group is not None and group.consumer is not None
    assert list(group.consumer.members) == [members[1].member_id]
    total = sum(len(parts) for parts in group.consumer.target_of(members[1].member_id).values())
    assert total == 8


def test_a_deleted_consumer_group_stays_deleted_after_a_reload() -> None:
    harness = ConsumerHarness()
    harness.topics.create("t", 1)
    member = SimulatedMember(harness, ["t"])
    member.beat()
    member.leave()
    from strom.protocol.messages.delete_groups import DeleteGroupsRequest

    box: list[Any] = []
    harness.coordinator.delete_groups(DeleteGroupsRequest(groups_names=["g"]), 2, box.append)
    assert box[0].results[0].error_code == ErrorCode.NONE
    assert harness.coordinator.group("g") is None
    for compacted in (False, True):
        fresh, _ = reload(harness, compacted=compacted)
        assert fresh.group("g") is None


def test_topics_that_changed_while_the_group_was_not_loaded_are_noticed() -> None:
    harness = ConsumerHarness()
    topic = harness.topics.create("t", 2)
    member = SimulatedMember(harness, ["t"])
    member.beat()
    harness.topics.create("t", 3)  # grew while the coordinator was away (no topics_changed)
    fresh, timer = reload(harness, compacted=True)
    harness.coordinator, harness.timer = fresh, timer
    member.beat()
    assert member.owned == {topic: frozenset({0, 1, 2})}
