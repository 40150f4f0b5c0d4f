from __future__ import annotations

from strom.coordinator import CoordinatorConfig, GroupCoordinator, GroupState, ManualTimer
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.delete_groups import DeleteGroupsRequest, DeleteGroupsResponse
from strom.protocol.messages.describe_groups import DescribeGroupsRequest
from strom.protocol.messages.list_groups import ListGroupsRequest
from strom.protocol.messages.offset_delete import OffsetDeleteRequest, OffsetDeleteResponse
from strom.protocol.messages.offset_fetch import OffsetFetchRequest
from tests.unit.coordinator.harness import Harness, consumer_subscription, encoded


def test_commit_and_fetch_for_member_less_group() -> None:
    harness = Harness()
    assert harness.commit("manual", {("t", 0): 10, ("t", 1): 20}) == {("t", 0): 0, ("t", 1): 0}
    assert harness.coordinator.group_states() == {"manual": "Empty"}
    assert harness.fetch("manual", {"t": [0, 1, 2]}) == {
        ("t", 0): (10, "meta"),
        ("t", 1): (20, "meta"),
        ("t", 2): (-1, ""),
    }
    assert harness.fetch("manual", None) == {("t", 0): (10, "meta"), ("t", 1): (20, "meta")}
    assert harness.fetch("nobody", {"t": [0]}) == {("t", 0): (-1, "")}


def test_commit_for_unknown_group_with_generation_is_illegal() -> None:
    harness = Harness()
    assert harness.commit("x", {("t", 0): 1}, member_id="m", generation_id=3) == {
        ("t", 0): ErrorCode.ILLEGAL_GENERATION
    }


def test_commit_generation_checks() -> None:
    harness = Harness()
    (leader, follower), generation = harness.stable_group(members=2)
    ok = harness.commit("g", {("t", 0): 5}, member_id=leader, generation_id=generation)
    assert ok == {("t", 0): ErrorCode.NONE}
    assert harness.commit("g", {("t", 0): 6}, member_id=leader, generation_id=generation + 1) == {
        ("t", 0): ErrorCode.ILLEGAL_GENERATION
    }
    assert harness.commit("g", {("t", 0): 6}, member_id="ghost", generation_id=generation) == {
        ("t", 0): ErrorCode.UNKNOWN_MEMBER_ID
    }
    assert harness.commit("g", {("t", 0): 6}) == {("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}
    harness.join(member_id=follower, protocols=[("range", b"new")])  # PreparingRebalance: allowed
    assert harness.commit("g", {("t", 0): 7}, member_id=leader, generation_id=generation) == {("t", 0): 0}
    harness.join(member_id=leader)
    # CompletingRebalance now: commits wait for the new assignment
    assert harness.commit("g", {("t", 0): 8}, member_id=leader, generation_id=generation + 1) == {
        ("t", 0): ErrorCode.REBALANCE_IN_PROGRESS
    }
    assert harness.fetch("g", {"t": [0]}) == {("t", 0): (7, "meta")}


def test_metadata_too_large_and_write_failure() -> None:
    harness = Harness(CoordinatorConfig(offsets_topic_num_partitions=1, offset_metadata_max_bytes=4))
    result = harness.commit("m", {("t", 0): 1, ("t", 1): 2}, metadata="12345")
    assert result == {
        ("t", 0): ErrorCode.OFFSET_METADATA_TOO_LARGE,
        ("t", 1): ErrorCode.OFFSET_METADATA_TOO_LARGE,
    }
    harness.log.fail_with = ErrorCode.MESSAGE_TOO_LARGE
    assert harness.commit("m", {("t", 0): 1}, metadata="") == {("t", 0): ErrorCode.INVALID_COMMIT_OFFSET_SIZE}
    harness.log.fail_with = ErrorCode.NONE
    assert harness.fetch("m", {"t": [0]}) == {("t", 0): (-1, "")}


def test_offsets_visible_only_once_written() -> None:
    harness = Harness()
    harness.log.defer = True
    assert harness.commit("m", {("t", 0): 3}) == {}  # not answered yet
    assert harness.fetch("m", {"t": [0]}) == {("t", 0): (-1, "")}
    harness.log.complete_deferred()
    assert harness.fetch("m", {"t": [0]}) == {("t", 0): (3, "meta")}


def test_commit_versions_write_their_timestamps() -> None:
    harness = Harness()
    for version in range(0, 9):
        assert harness.commit("v", {("t", version): version}, version=version, retention_time_ms=1000) == {
            ("t", version): 0
        }
    for version in range(0, 8):
        fetched = harness.fetch("v", {"t": [0, 4, 5]}, version=version)
        assert fetched[("t", 4)] == (4, "meta")
    committed = harness.coordinator.group("v").offsets  # type: ignore[union-attr]
    assert committed[("t", 3)].expire_timestamp_ms == committed[("t", 3)].commit_timestamp_ms + 1000
    assert committed[("t", 5)].expire_timestamp_ms == -1


def test_offset_fetch_v8_several_groups() -> None:
    harness = Harness()
    harness.commit("a", {("t", 0): 1})
    harness.commit("b", {("u", 1): 2})
    request = OffsetFetchRequest(
        groups=[
            OffsetFetchRequest.OffsetFetchRequestGroup(
                group_id="a",
                topics=[OffsetFetchRequest.OffsetFetchRequestTopics(name="t", partition_indexes=[0, 1])],
            ),
            OffsetFetchRequest.OffsetFetchRequestGroup(group_id="b", topics=None),
            OffsetFetchRequest.OffsetFetchRequestGroup(group_id="c", topics=None),
        ]
    )
    response = encoded(harness.coordinator.fetch_offsets(encoded(request, 8), 8), 8)
    summary = {
        group.group_id: [
            (t.name, p.partition_index, p.committed_offset) for t in group.topics for p in t.partitions
        ]
        for group in response.groups
    }
    assert summary == {"a": [("t", 0, 1), ("t", 1, -1)], "b": [("u", 1, 2)], "c": []}


def test_describe_and_list_groups() -> None:
    harness = Harness()
    (leader, follower), _ = harness.stable_group(members=2)
    harness.commit("manual", {("t", 0): 1})
    for version in range(0, 6):
        response = encoded(
            harness.coordinator.describe_groups(DescribeGroupsRequest(groups=["g", "missing"]), version),
            version,
        )
        described, missing = response.groups
        assert described.group_state == "Stable" and described.protocol_data == "range"
        assert {member.member_id for member in described.members} == {leader, follower}
        assert {member.member_assignment for member in described.members} == {
            f"assignment-{leader}".encode(),
            f"assignment-{follower}".encode(),
        }
        assert missing.group_state == "Dead" and missing.error_code == 0
    for version in range(0, 5):
        listed = encoded(harness.coordinator.list_groups(ListGroupsRequest(), version), version)
        assert [(g.group_id, g.protocol_type) for g in listed.groups] == [("g", "consumer"), ("manual", "")]
    filtered = harness.coordinator.list_groups(ListGroupsRequest(states_filter=["empty"]), 4)
    assert [(g.group_id, g.group_state) for g in filtered.groups] == [("manual", "Empty")]


def test_delete_groups() -> None:
    harness = Harness()
    harness.stable_group(members=1)
    harness.commit("manual", {("t", 0): 1, ("t", 1): 2})
    responses: list[DeleteGroupsResponse] = []
    request = DeleteGroupsRequest(groups_names=["g", "manual", "missing"])
    harness.coordinator.delete_groups(request, 2, lambda response: responses.append(encoded(response, 2)))
    assert {r.group_id: r.error_code for r in responses[0].results} == {
        "g": ErrorCode.NON_EMPTY_GROUP,
        "manual": ErrorCode.NONE,
        "missing": ErrorCode.GROUP_ID_NOT_FOUND,
    }
    assert harness.coordinator.group("manual") is None
    tombstones = [key for _, key, value in harness.log.all_records() if value is None]
    assert len(tombstones) == 3  # two offsets and the group
    assert harness.fetch("manual", {"t": [0]}) == {("t", 0): (-1, "")}


def test_offset_delete() -> None:
    harness = Harness()
    (leader,), generation = harness.stable_group(members=1, protocols=[("range", consumer_subscription("t"))])
    harness.commit("g", {("t", 0): 1, ("old", 0): 2}, member_id=leader, generation_id=generation)
    request = OffsetDeleteRequest(
        group_id="g",
        topics=[
            OffsetDeleteRequest.OffsetDeleteRequestTopic(
                name=name, partitions=[OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=0)]
            )
            for name in ("t", "old")
        ],
    )
    responses: list[OffsetDeleteResponse] = []
    harness.coordinator.delete_offsets(request, 0, lambda response: responses.append(encoded(response, 0)))
    errors = {t.name: t.partitions[0].error_code for t in responses[0].topics}
    assert errors == {"t": ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC, "old": ErrorCode.NONE}
    assert harness.fetch("g", None) == {("t", 0): (1, "meta")}
    missing: list[OffsetDeleteResponse] = []
    harness.coordinator.delete_offsets(OffsetDeleteRequest(group_id="nope"), 0, missing.append)
    assert missing[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND


def test_offset_expiry_for_empty_groups() -> None:
    config = CoordinatorConfig(
        group_initial_rebalance_delay_ms=0,
        offsets_topic_num_partitions=1,
        offsets_retention_minutes=1,
        offsets_retention_check_interval_ms=10_000,
    )
    harness = Harness(config)
    harness.commit("manual", {("t", 0): 1})
    (leader,), generation = harness.stable_group("consumers", members=1, session_timeout_ms=100_000)
    harness.commit("consumers", {("t", 0): 5}, member_id=leader, generation_id=generation)
    harness.advance(50_000)
    harness.leave("consumers", [(leader, None)])  # Empty from now: its offsets count from here
    harness.advance(20_000)  # manual group's commit is 70 s old: expired, and the group with it
    assert harness.coordinator.group("manual") is None
    assert harness.coordinator.group_states() == {"consumers": "Empty"}
    harness.advance(40_000)
    assert harness.coordinator.group("consumers") is None
    keys_with_tombstones = sum(1 for _, _, value in harness.log.all_records() if value is None)
    assert keys_with_tombstones == 4


def test_group_for_other_partition_is_not_ours() -> None:
    clock_harness = Harness(CoordinatorConfig(offsets_topic_num_partitions=50), partitions=(0,))
    coordinator: GroupCoordinator = clock_harness.coordinator
    ours = next(name for name in (f"g{i}" for i in range(200)) if coordinator.owns(name))
    theirs = next(name for name in (f"g{i}" for i in range(200)) if not coordinator.owns(name))
    assert clock_harness.commit(theirs, {("t", 0): 1}) == {("t", 0): ErrorCode.NOT_COORDINATOR}
    assert clock_harness.commit(ours, {("t", 0): 1}) == {("t", 0): ErrorCode.NONE}
    assert isinstance(clock_harness.timer, ManualTimer)
    assert GroupState.EMPTY.value == coordinator.group_states()[ours]
