from __future__ import annotations

from typing import Any

from strom.base.clock import ManualClock
from strom.coordinator import GroupCoordinator, ManualTimer
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.delete_groups import DeleteGroupsRequest
from strom.protocol.messages.heartbeat import HeartbeatRequest
from tests.unit.coordinator.harness import FakeLog, Harness


def snapshot(coordinator: GroupCoordinator) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for group_id in coordinator.group_states():
        group = coordinator.group(group_id)
        assert group is not None
        result[group_id] = (
            group.state,
            group.generation_id,
            group.protocol_type,
            group.protocol_name,
            group.leader_id,
            sorted(
                (m.member_id, m.group_instance_id, m.client_id, m.session_timeout_ms, m.assignment)
                for m in group.members.values()
            ),
            dict(group.offsets),
        )
    return result


def reload(harness: Harness) -> tuple[GroupCoordinator, ManualTimer]:
    clock = ManualClock()
    timer = ManualTimer(clock)
    fresh = GroupCoordinator(harness.config, clock, timer, FakeLog())
    fresh.begin_loading(0)
    for partition, key, value in harness.log.all_records():
        fresh.replay(partition, key, value)
    fresh.finish_loading(0)
    return fresh, timer


def test_replaying_the_log_rebuilds_groups_and_offsets() -> None:
    harness = Harness()
    (leader, follower), generation = harness.stable_group("consumers", members=2, session_timeout_ms=30_000)
    harness.commit("consumers", {("t", 0): 5, ("t", 1): 7}, member_id=leader, generation_id=generation)
    harness.commit("consumers", {("t", 0): 6}, member_id=follower, generation_id=generation)
    harness.commit("manual", {("u", 3): 99})
    a_box = harness.join("static", instance_id="a")
    harness.advance(0)
    harness.sync(
        "static", a_box[0].member_id, a_box[0].generation_id, {a_box[0].member_id: b"A"}, instance_id="a"
    )
    harness.join("static", instance_id="a")  # restart: new member id, recorded
    harness.stable_group("deleted", members=1)
    harness.leave("deleted", [(harness.coordinator.group("deleted").leader_id or "", None)])  # type: ignore[union-attr]
    harness.commit("gone", {("t", 0): 1})
    harness.coordinator.delete_groups(
        DeleteGroupsRequest(groups_names=["gone"]),
        2,
        lambda response: None,
    )
    fresh, timer = reload(harness)
    assert snapshot(fresh) == snapshot(harness.coordinator)
    assert "gone" not in fresh.group_states()
    # loaded members must heartbeat: each got a fresh session timer
    assert sum(1 for key in timer.pending_keys() if key.startswith("session/")) == 3


def test_loading_answers_load_in_progress_and_members_expire_after_load() -> None:
    harness = Harness()
    (leader,), generation = harness.stable_group(members=1, session_timeout_ms=10_000)
    clock = ManualClock()
    timer = ManualTimer(clock)
    fresh = GroupCoordinator(harness.config, clock, timer, FakeLog())
    fresh.begin_loading(0)
    for partition, key, value in harness.log.all_records():
        fresh.replay(partition, key, value)
    request = HeartbeatRequest(group_id="g", generation_id=generation, member_id=leader)
    assert fresh.heartbeat(request, 3).error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    fresh.finish_loading(0)
    assert fresh.heartbeat(request, 3).error_code == ErrorCode.NONE
    timer.advance(10_000)
    assert fresh.group_states() == {"g": "Empty"}
    fresh.unload(0)
    assert fresh.heartbeat(request, 3).error_code == ErrorCode.NOT_COORDINATOR
