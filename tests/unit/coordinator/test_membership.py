from __future__ import annotations

import pytest

from strom.coordinator import CoordinatorConfig, GroupState, initial_delay_key
from strom.protocol.errors import ErrorCode
from tests.unit.coordinator.harness import Harness


def state(harness: Harness, group_id: str = "g") -> GroupState:
    group = harness.coordinator.group(group_id)
    assert group is not None
    return group.state


# ---------------------------------------------------------------- JoinGroup errors
def test_two_step_join_gives_member_id_then_joins() -> None:
    harness = Harness()
    first = harness.join(client_id="app")
    assert first[0].error_code == ErrorCode.MEMBER_ID_REQUIRED
    assert first[0].member_id.startswith("app-")
    second = harness.join(member_id=first[0].member_id)
    harness.advance(0)
    assert second[0].error_code == ErrorCode.NONE
    assert second[0].generation_id == 1 and second[0].leader == first[0].member_id
    assert state(harness) is GroupState.COMPLETING_REBALANCE


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_old_versions_join_without_two_step(version: int) -> None:
    harness = Harness()
    box = harness.join(version=version)
    harness.advance(0)
    assert box[0].error_code == ErrorCode.NONE and box[0].member_id


def test_join_errors() -> None:
    harness = Harness()
    assert harness.join(group_id="")[0].error_code == ErrorCode.INVALID_GROUP_ID
    assert harness.join(session_timeout_ms=10)[0].error_code == ErrorCode.INVALID_SESSION_TIMEOUT
    assert harness.join(session_timeout_ms=10**8)[0].error_code == ErrorCode.INVALID_SESSION_TIMEOUT
    assert harness.join(member_id="ghost")[0].error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert harness.join(protocol_type="")[0].error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert harness.join(protocols=[])[0].error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert harness.coordinator.group("g") is None  # refused joins leave nothing behind


def test_not_coordinator_and_loading() -> None:
    harness = Harness(partitions=())
    assert harness.join()[0].error_code == ErrorCode.NOT_COORDINATOR
    harness.coordinator.begin_loading(0)
    assert harness.join()[0].error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert harness.heartbeat("g", "m", 1) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    harness.coordinator.finish_loading(0)
    assert harness.coordinator.owns("g")
    assert harness.join()[0].error_code == ErrorCode.MEMBER_ID_REQUIRED


def test_inconsistent_protocols_with_existing_group() -> None:
    harness = Harness()
    harness.stable_group(members=1, protocols=[("range", b"x")])
    assert harness.join(protocols=[("sticky", b"x")])[0].error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert harness.join(protocol_type="connect")[0].error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_group_max_size() -> None:
    harness = Harness(
        CoordinatorConfig(
            group_initial_rebalance_delay_ms=0, offsets_topic_num_partitions=1, group_max_size=1
        )
    )
    harness.join_two_step()
    assert harness.join()[0].error_code == ErrorCode.GROUP_MAX_SIZE_REACHED


# ---------------------------------------------------------------- rebalance
def test_protocol_selection_by_votes() -> None:
    harness = Harness()
    _first, box_a = harness.join_two_step(protocols=[("roundrobin", b"a"), ("range", b"a")])
    _second, box_b = harness.join_two_step(protocols=[("range", b"b"), ("roundrobin", b"b")])
    _third, box_c = harness.join_two_step(protocols=[("range", b"c"), ("sticky", b"c")])
    harness.advance(0)
    for box in (box_a, box_b, box_c):
        assert box[0].protocol_name == "range"
    # v7+ carries protocol type; the leader alone gets the member list with range's metadata
    assert [member.metadata for member in box_a[0].members] == [b"a", b"b", b"c"]
    assert box_b[0].members == [] and box_c[0].members == []


def test_join_response_v7_carries_protocol_type() -> None:
    harness = Harness()
    _, box = harness.join_two_step(version=7)
    harness.advance(0)
    assert box[0].protocol_type == "consumer" and box[0].protocol_name == "range"


def test_initial_delay_extended_by_new_member_but_capped_by_rebalance_timeout() -> None:
    harness = Harness(
        CoordinatorConfig(group_initial_rebalance_delay_ms=3000, offsets_topic_num_partitions=1)
    )
    _, box_a = harness.join_two_step(rebalance_timeout_ms=5000)
    assert harness.timer.due_in_ms(initial_delay_key("g")) == 3000
    harness.advance(2000)
    _, box_b = harness.join_two_step(rebalance_timeout_ms=5000)
    harness.advance(1000)  # first delay ends; a member joined meanwhile: extended by min(3000, 2000)
    assert not box_a and not box_b
    assert harness.timer.due_in_ms(initial_delay_key("g")) == 2000
    harness.advance(1000)
    _, box_c = harness.join_two_step(rebalance_timeout_ms=5000)
    harness.advance(1000)  # 5000 ms in total: the cap, even though another member joined
    assert box_a and box_b and box_c
    assert box_a[0].generation_id == 1 and len(box_a[0].members) == 3
    assert harness.clock.monotonic_ms() == 5000


def test_rebalance_timeout_removes_member_that_did_not_rejoin_and_keeps_leader() -> None:
    harness = Harness()
    (leader, follower), generation = harness.stable_group(members=2, rebalance_timeout_ms=20_000)
    newcomer, box_new = harness.join_two_step()
    assert state(harness) is GroupState.PREPARING_REBALANCE
    assert harness.heartbeat("g", follower, generation) == ErrorCode.REBALANCE_IN_PROGRESS
    box_leader = harness.join(member_id=leader)
    harness.advance(9_000)
    assert harness.heartbeat("g", follower, generation) == ErrorCode.REBALANCE_IN_PROGRESS
    harness.advance(11_000)  # rebalance timeout: the follower never rejoined
    assert box_leader[0].generation_id == generation + 1
    assert box_leader[0].leader == leader
    assert {member.member_id for member in box_leader[0].members} == {leader, newcomer}
    assert box_new[0].members == []
    assert harness.heartbeat("g", follower, generation + 1) == ErrorCode.UNKNOWN_MEMBER_ID


def test_new_leader_when_leader_does_not_rejoin() -> None:
    harness = Harness()
    (leader, follower), generation = harness.stable_group(members=2)
    harness.leave("g", [(leader, None)])
    box = harness.join(member_id=follower)
    assert box[0].leader == follower and box[0].generation_id == generation + 1


def test_parked_followers_answered_when_leader_syncs() -> None:
    harness = Harness()
    first, box_a = harness.join_two_step()
    second, _box_b = harness.join_two_step()
    harness.advance(0)
    generation = box_a[0].generation_id
    parked = harness.sync("g", second, generation)
    assert parked == []
    assert harness.heartbeat("g", second, generation) == ErrorCode.NONE
    leader_box = harness.sync("g", first, generation, {first: b"A"})  # second missing: empty assignment
    assert leader_box[0].assignment == b"A"
    assert parked[0].error_code == ErrorCode.NONE and parked[0].assignment == b""
    assert state(harness) is GroupState.STABLE
    late = harness.sync("g", second, generation)
    assert late[0].assignment == b""


def test_sync_write_failure_sends_group_back_to_rebalance() -> None:
    harness = Harness()
    first, box_a = harness.join_two_step()
    second, _ = harness.join_two_step()
    harness.advance(0)
    generation = box_a[0].generation_id
    parked = harness.sync("g", second, generation)
    harness.log.fail_with = ErrorCode.NOT_LEADER_OR_FOLLOWER
    leader_box = harness.sync("g", first, generation, {first: b"A", second: b"B"})
    assert leader_box[0].error_code == ErrorCode.NOT_COORDINATOR
    assert parked[0].error_code == ErrorCode.NOT_COORDINATOR
    assert state(harness) is GroupState.PREPARING_REBALANCE
    harness.log.fail_with = ErrorCode.REQUEST_TIMED_OUT
    again_a = harness.join(member_id=first)
    again_b = harness.join(member_id=second)
    assert again_a[0].generation_id == generation + 1 and again_b
    failed = harness.sync("g", first, generation + 1, {first: b"A"})
    # A group record that timed out waiting for the replicas: rejoin (ZooKeeper-mode Kafka's answer).
    assert failed[0].error_code == ErrorCode.REBALANCE_IN_PROGRESS


def test_sync_errors() -> None:
    harness = Harness()
    (leader, _follower), generation = harness.stable_group(members=2)
    assert harness.sync("g", "ghost", generation)[0].error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert harness.sync("nope", leader, generation)[0].error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert harness.sync("g", leader, generation + 5)[0].error_code == ErrorCode.ILLEGAL_GENERATION
    mismatch = harness.sync("g", leader, generation, version=5, protocol_type="connect")
    assert mismatch[0].error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    mismatch = harness.sync("g", leader, generation, version=5, protocol_name="sticky")
    assert mismatch[0].error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    ok = harness.sync("g", leader, generation, version=5, protocol_type="consumer", protocol_name="range")
    assert ok[0].error_code == ErrorCode.NONE and ok[0].protocol_name == "range"
    harness.join_two_step()  # a new member: rebalance
    assert harness.sync("g", leader, generation)[0].error_code == ErrorCode.REBALANCE_IN_PROGRESS


def test_follower_rejoin_in_stable_with_same_metadata_gets_current_generation() -> None:
    harness = Harness()
    (_leader, follower), generation = harness.stable_group(members=2)
    box = harness.join(member_id=follower)
    assert box[0].generation_id == generation and box[0].members == []
    assert state(harness) is GroupState.STABLE
    box = harness.join(member_id=follower, protocols=[("range", b"changed")])
    assert not box and state(harness) is GroupState.PREPARING_REBALANCE


def test_leader_rejoin_in_stable_triggers_rebalance() -> None:
    harness = Harness()
    (leader, _follower), _generation = harness.stable_group(members=2)
    box = harness.join(member_id=leader)
    assert not box and state(harness) is GroupState.PREPARING_REBALANCE


def test_join_in_completing_rebalance_with_same_metadata_returns_generation() -> None:
    harness = Harness()
    first, box = harness.join_two_step()
    harness.advance(0)
    again = harness.join(member_id=first)
    assert again[0].generation_id == box[0].generation_id and len(again[0].members) == 1


# ---------------------------------------------------------------- heartbeat, expiry, leave
def test_heartbeat_errors() -> None:
    harness = Harness()
    (leader, _follower), generation = harness.stable_group(members=2)
    assert harness.heartbeat("g", leader, generation) == ErrorCode.NONE
    assert harness.heartbeat("g", leader, generation - 1) == ErrorCode.ILLEGAL_GENERATION
    assert harness.heartbeat("g", "ghost", generation) == ErrorCode.UNKNOWN_MEMBER_ID
    assert harness.heartbeat("unknown", leader, generation) == ErrorCode.UNKNOWN_MEMBER_ID


def test_session_expiry_in_stable_triggers_rebalance() -> None:
    harness = Harness()
    (leader, follower), generation = harness.stable_group(members=2, session_timeout_ms=10_000)
    harness.advance(6_000)
    assert harness.heartbeat("g", leader, generation) == ErrorCode.NONE
    harness.advance(6_000)
    # the follower stopped heartbeating 12 s ago: it is gone and the leader must rejoin
    assert harness.heartbeat("g", leader, generation) == ErrorCode.REBALANCE_IN_PROGRESS
    assert state(harness) is GroupState.PREPARING_REBALANCE
    assert harness.heartbeat("g", follower, generation) == ErrorCode.UNKNOWN_MEMBER_ID
    box = harness.join(member_id=leader)
    assert box[0].generation_id == generation + 1 and len(box[0].members) == 1


def test_session_expiry_during_rebalance_lets_join_complete() -> None:
    harness = Harness()
    (leader, _follower), generation = harness.stable_group(
        members=2, session_timeout_ms=10_000, rebalance_timeout_ms=60_000
    )
    box = harness.join(member_id=leader, protocols=[("range", b"new")])
    assert not box
    harness.advance(10_000)  # follower's session ends long before the rebalance timeout
    assert box[0].generation_id == generation + 1 and len(box[0].members) == 1


def test_pending_member_expires() -> None:
    harness = Harness()
    (_leader, _), _generation = harness.stable_group(members=2, session_timeout_ms=10_000)
    pending = harness.join(session_timeout_ms=10_000)[0].member_id
    harness.advance(10_001)
    assert harness.join(member_id=pending)[0].error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_pending_member_blocks_join_completion_until_it_expires() -> None:
    harness = Harness()
    (leader,), generation = harness.stable_group(members=1, session_timeout_ms=10_000)
    harness.join(session_timeout_ms=7_000)  # pending, never comes back
    box = harness.join(member_id=leader, protocols=[("range", b"new")])
    assert not box
    harness.advance(7_000)
    assert box[0].generation_id == generation + 1


@pytest.mark.parametrize("version", [0, 1, 2])
def test_leave_old_versions(version: int) -> None:
    harness = Harness()
    (_leader, follower), _generation = harness.stable_group(members=2)
    assert harness.leave("g", [(follower, None)], version=version).error_code == ErrorCode.NONE
    assert harness.leave("g", [(follower, None)], version=version).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert state(harness) is GroupState.PREPARING_REBALANCE


def test_leave_batch_and_last_member_makes_group_empty() -> None:
    harness = Harness()
    (leader, follower), generation = harness.stable_group(members=2)
    response = harness.leave("g", [(leader, None), (follower, None), ("ghost", None)], version=4)
    assert response.error_code == ErrorCode.NONE
    assert [member.error_code for member in response.members] == [0, 0, ErrorCode.UNKNOWN_MEMBER_ID]
    assert state(harness) is GroupState.EMPTY
    assert harness.coordinator.group("g").generation_id == generation + 1  # type: ignore[union-attr]
    assert harness.leave("unknown", [(leader, None)]).members[0].error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_leave_pending_member() -> None:
    harness = Harness()
    pending = harness.join()[0].member_id
    assert harness.leave("g", [(pending, None)]).members[0].error_code == ErrorCode.NONE
    assert harness.join(member_id=pending)[0].error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_sync_timeout_removes_members_that_never_sync() -> None:
    harness = Harness()
    first, box_a = harness.join_two_step(rebalance_timeout_ms=20_000)
    second, _ = harness.join_two_step(rebalance_timeout_ms=20_000)
    harness.advance(0)
    generation = box_a[0].generation_id
    parked = harness.sync("g", second, generation)
    harness.advance(20_000)  # the leader never sent its assignment
    assert parked[0].error_code == ErrorCode.REBALANCE_IN_PROGRESS
    assert first not in harness.coordinator.group("g").members  # type: ignore[union-attr]


# ---------------------------------------------------------------- static membership
def test_static_member_restart_without_rebalance_and_fencing() -> None:
    harness = Harness()
    a_box = harness.join(instance_id="a")
    b_box = harness.join(instance_id="b")
    harness.advance(0)
    generation = a_box[0].generation_id
    leader, follower = a_box[0].member_id, b_box[0].member_id
    harness.sync("g", follower, generation, instance_id="b")
    harness.sync("g", leader, generation, {leader: b"A", follower: b"B"}, instance_id="a")
    restarted = harness.join(instance_id="b")
    assert restarted[0].error_code == ErrorCode.NONE
    new_id = restarted[0].member_id
    assert new_id != follower and restarted[0].generation_id == generation and restarted[0].leader == leader
    assert state(harness) is GroupState.STABLE
    assert harness.sync("g", new_id, generation, instance_id="b")[0].assignment == b"B"
    assert harness.heartbeat("g", follower, generation, instance_id="b") == ErrorCode.FENCED_INSTANCE_ID
    assert (
        harness.sync("g", follower, generation, instance_id="b")[0].error_code == ErrorCode.FENCED_INSTANCE_ID
    )
    assert harness.join(member_id=follower, instance_id="b")[0].error_code == ErrorCode.FENCED_INSTANCE_ID
    assert harness.commit(
        "g", {("t", 0): 1}, member_id=follower, generation_id=generation, instance_id="b"
    ) == {("t", 0): ErrorCode.FENCED_INSTANCE_ID}


@pytest.mark.parametrize(("version", "members_listed"), [(5, 0), (9, 2)])
def test_static_leader_restart_keeps_leadership(version: int, members_listed: int) -> None:
    harness = Harness()
    a_box = harness.join(instance_id="a")
    harness.join(instance_id="b")
    harness.advance(0)
    generation, leader = a_box[0].generation_id, a_box[0].member_id
    harness.sync("g", leader, generation, {leader: b"A"}, instance_id="a")
    restarted = harness.join(instance_id="a", version=version)
    new_id = restarted[0].member_id
    assert new_id != leader
    assert len(restarted[0].members) == members_listed
    assert restarted[0].skip_assignment is (version >= 9)
    if version >= 9:
        assert restarted[0].leader == new_id
    else:
        # Told the old id as leader, the client acts as a follower (Kafka's rule before KIP-814)...
        assert restarted[0].leader == leader
    # ...and either way it gets its stored assignment back, with no rebalance.
    [synced] = harness.sync("g", new_id, generation, {}, instance_id="a")
    assert synced.error_code == ErrorCode.NONE and synced.assignment == b"A"
    assert state(harness) is GroupState.STABLE
    assert harness.coordinator.group("g").leader_id == new_id


def test_static_leave_removes_at_once_and_close_waits_for_session() -> None:
    harness = Harness()
    a_box = harness.join(instance_id="a", session_timeout_ms=10_000)
    b_box = harness.join(instance_id="b", session_timeout_ms=10_000)
    harness.advance(0)
    generation, leader = a_box[0].generation_id, a_box[0].member_id
    harness.sync("g", leader, generation, {}, instance_id="a")
    response = harness.leave("g", [("", "b")])
    assert response.members[0].error_code == ErrorCode.NONE
    assert state(harness) is GroupState.PREPARING_REBALANCE
    rejoined = harness.join(member_id=leader, instance_id="a")
    assert rejoined[0].generation_id == generation + 1
    harness.sync("g", leader, generation + 1, {}, instance_id="a")
    harness.advance(9_999)  # a static member that just stops is kept until its session ends
    assert state(harness) is GroupState.STABLE
    harness.advance(1)  # the only member expired: the rebalance completes at once with nobody
    assert state(harness) is GroupState.EMPTY
    assert b_box  # answered long ago


def test_static_member_with_changed_metadata_keeps_the_generation() -> None:
    """Kafka's rule: a restarted static member's subscription bytes may differ (no owned
    partitions, a new generation in them); only a change of the selected protocol rebalances."""
    harness = Harness()
    a_box = harness.join(instance_id="a")
    harness.advance(0)
    harness.sync("g", a_box[0].member_id, a_box[0].generation_id, {}, instance_id="a")
    box = harness.join(instance_id="a", protocols=[("range", b"other")])
    assert box[0].error_code == ErrorCode.NONE
    assert box[0].generation_id == a_box[0].generation_id


def test_static_member_changing_the_selected_protocol_triggers_rebalance() -> None:
    harness = Harness()
    a_box = harness.join(instance_id="a", protocols=[("range", b""), ("roundrobin", b"")])
    harness.advance(0)
    assert a_box[0].protocol_name == "range"
    harness.sync("g", a_box[0].member_id, a_box[0].generation_id, {}, instance_id="a")
    box = harness.join(instance_id="a", protocols=[("roundrobin", b""), ("range", b"")])
    harness.advance(0)
    assert box[0].generation_id == a_box[0].generation_id + 1
    assert box[0].protocol_name == "roundrobin"


def test_static_replacement_write_failure_reverts() -> None:
    harness = Harness()
    a_box = harness.join(instance_id="a")
    harness.advance(0)
    old = a_box[0].member_id
    harness.sync("g", old, a_box[0].generation_id, {old: b"A"}, instance_id="a")
    harness.log.fail_with = ErrorCode.NOT_ENOUGH_REPLICAS
    box = harness.join(instance_id="a")
    assert box[0].error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert harness.heartbeat("g", old, a_box[0].generation_id, instance_id="a") == ErrorCode.NONE


def test_shutdown_answers_parked_requests() -> None:
    harness = Harness()
    box = harness.join(version=3)
    harness.coordinator.shutdown()
    assert box[0].error_code == ErrorCode.NOT_COORDINATOR
    assert harness.timer.pending_keys() == []
    assert not harness.coordinator.owns("g")
