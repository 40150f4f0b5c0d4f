"""Offsets (v9 member epochs), ListGroups (v5 types) and DescribeGroups of consumer groups."""

from __future__ import annotations

from strom.protocol.errors import ErrorCode
from strom.protocol.messages.describe_groups import DescribeGroupsRequest
from strom.protocol.messages.list_groups import ListGroupsRequest, ListGroupsResponse
from strom.protocol.messages.offset_fetch import OffsetFetchRequest, OffsetFetchResponse
from strom.protocol.messages.txn_offset_commit import TxnOffsetCommitRequest
from tests.unit.coordinator.consumer_harness import ConsumerHarness, SimulatedMember
from tests.unit.coordinator.harness import encoded


def fetch_v9(
    harness: ConsumerHarness, member_id: str | None, epoch: int
) -> OffsetFetchResponse.OffsetFetchResponseGroup:
    request = OffsetFetchRequest(
        groups=[
            OffsetFetchRequest.OffsetFetchRequestGroup(
                group_id="g",
                member_id=member_id,
                member_epoch=epoch,
                topics=[OffsetFetchRequest.OffsetFetchRequestTopics(name="t", partition_indexes=[0])],
            )
        ]
    )
    response: OffsetFetchResponse = encoded(harness.coordinator.fetch_offsets(encoded(request, 9), 9), 9)
    (group,) = response.groups
    return group


def test_offset_commit_v9_checks_the_member_epoch() -> None:
    harness = ConsumerHarness()
    harness.topics.create("t", 2)
    member = SimulatedMember(harness, ["t"])
    member.beat()
    commit = harness.commit
    assert commit("g", {("t", 0): 5}, member_id=member.member_id, generation_id=1, version=9) == {
        ("t", 0): ErrorCode.NONE
    }
    assert commit("g", {("t", 0): 6}, member_id=member.member_id, generation_id=0, version=9) == {
        ("t", 0): ErrorCode.STALE_MEMBER_EPOCH
    }
    assert commit("g", {("t", 0): 6}, member_id="stranger", generation_id=1, version=9) == {
        ("t", 0): ErrorCode.UNKNOWN_MEMBER_ID
    }
    # Without a member epoch, only while the group has no members.
    assert commit("g", {("t", 0): 6}, version=9) == {("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}
    # A member of the consumer protocol must use v9.
    assert commit("g", {("t", 0): 6}, member_id=member.member_id, generation_id=1, version=8) == {
        ("t", 0): ErrorCode.UNSUPPORTED_VERSION
    }
    assert harness.fetch("g", {"t": [0]}) == {("t", 0): (5, "meta")}
    member.leave()
    assert commit("g", {("t", 0): 7}, version=9) == {("t", 0): ErrorCode.NONE}
    assert harness.fetch("g", {"t": [0]}) == {("t", 0): (7, "meta")}


def test_offset_fetch_v9_checks_the_member_epoch() -> None:
    harness = ConsumerHarness()
    harness.topics.create("t", 1)
    member = SimulatedMember(harness, ["t"])
    member.beat()
    harness.commit("g", {("t", 0): 5}, member_id=member.member_id, generation_id=1, version=9)
    ok = fetch_v9(harness, member.member_id, 1)
    assert ok.error_code == ErrorCode.NONE and ok.topics[0].partitions[0].committed_offset == 5
    assert fetch_v9(harness, member.member_id, 3).error_code == ErrorCode.STALE_MEMBER_EPOCH
    assert fetch_v9(harness, "stranger", 1).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    # An admin's fetch (no member) is not checked.
    assert fetch_v9(harness, None, -1).topics[0].partitions[0].committed_offset == 5


def test_classic_groups_offsets_are_unchanged_at_v9() -> None:
    harness = ConsumerHarness()
    (leader, _), generation = harness.stable_group("g", members=2)
    assert harness.commit("g", {("t", 0): 1}, member_id=leader, generation_id=generation, version=9) == {
        ("t", 0): ErrorCode.NONE
    }
    assert harness.commit("g", {("t", 0): 1}, member_id=leader, generation_id=generation + 1, version=9) == {
        ("t", 0): ErrorCode.ILLEGAL_GENERATION
    }
    assert fetch_v9(harness, "whoever", 12).error_code == ErrorCode.NONE


def test_transactional_commit_of_a_consumer_group_member() -> None:
    harness = ConsumerHarness()
    harness.topics.create("t", 1)
    member = SimulatedMember(harness, ["t"])
    member.beat()
    ok = harness.txn_commit("g", {("t", 0): 3}, member_id=member.member_id, generation_id=1)
    assert ok == {("t", 0): ErrorCode.NONE}
    stale = harness.txn_commit("g", {("t", 0): 3}, member_id=member.member_id, generation_id=2)
    assert stale == {("t", 0): ErrorCode.ILLEGAL_GENERATION}
    assert TxnOffsetCommitRequest  # the harness builds it


def list_groups(
    harness: ConsumerHarness, version: int = 5, **filters: list[str]
) -> list[tuple[str, str, str, str]]:
    request = ListGroupsRequest(**filters)
    response: ListGroupsResponse = encoded(
        harness.coordinator.list_groups(encoded(request, version), version), version
    )
    return [(g.group_id, g.protocol_type, g.group_state, g.group_type) for g in response.groups]


def test_list_groups_shows_and_filters_the_group_type() -> None:
    harness = ConsumerHarness()
    harness.topics.create("t", 1)
    SimulatedMember(harness, ["t"], group_id="new").beat()
    harness.stable_group("old", members=1)
    assert list_groups(harness) == [
        ("new", "consumer", "Stable", "consumer"),
        ("old", "consumer", "Stable", "classic"),
    ]
    assert list_groups(harness, types_filter=["CONSUMER"]) == [("new", "consumer", "Stable", "consumer")]
    assert list_groups(harness, types_filter=["classic"]) == [("old", "consumer", "Stable", "classic")]
    assert list_groups(harness, states_filter=["stable"], types_filter=["consumer", "classic"]) == [
        ("new", "consumer", "Stable", "consumer"),
        ("old", "consumer", "Stable", "classic"),
    ]
    assert list_groups(harness, states_filter=["Empty"]) == []
    assert [g[:3] for g in list_groups(harness, version=4)] == [
        ("new", "consumer", "Stable"),
        ("old", "consumer", "Stable"),
    ]


def test_describe_groups_of_a_consumer_group_and_consumer_group_describe_of_a_classic_one() -> None:
    harness = ConsumerHarness()
    harness.topics.create("t", 1)
    SimulatedMember(harness, ["t"], group_id="new").beat()
    harness.stable_group("old", members=1)
    response = harness.coordinator.describe_groups(DescribeGroupsRequest(groups=["new", "old"]), 5)
    new, old = response.groups
    assert new.error_code == ErrorCode.GROUP_ID_NOT_FOUND and new.group_state == "Dead"
    assert old.error_code == ErrorCode.NONE and old.group_state == "Stable"
    described = harness.describe("old", "new", "missing", "")
    assert [(d.group_id, ErrorCode(d.error_code)) for d in described] == [
        ("old", ErrorCode.GROUP_ID_NOT_FOUND),
        ("new", ErrorCode.NONE),
        ("missing", ErrorCode.GROUP_ID_NOT_FOUND),
        ("", ErrorCode.INVALID_GROUP_ID),
    ]
    assert described[0].error_message == "Group old is not a consumer group."
    harness.coordinator.unload(0)
    assert harness.describe("new")[0].error_code == ErrorCode.NOT_COORDINATOR


def test_describe_shows_target_against_current_while_reconciling() -> None:
    harness = ConsumerHarness()
    topic = harness.topics.create("t", 2)
    first = SimulatedMember(harness, ["t"])
    first.beat()
    second = SimulatedMember(harness, ["t"])
    second.beat()
    (described,) = harness.describe("g")
    assert described.group_state == "Reconciling"
    assert described.group_epoch == 2 and described.assignment_epoch == 2
    by_id = {member.member_id: member for member in described.members}
    first_described = by_id[first.member_id]
    assert first_described.member_epoch == 1
    assert [tp.partitions for tp in first_described.assignment.topic_partitions] == [[0, 1]]
    assert len(first_described.target_assignment.topic_partitions[0].partitions) == 1
    assert first_described.target_assignment.topic_partitions[0].topic_id == topic


def test_an_empty_consumer_group_is_deleted_with_its_offsets_and_a_busy_one_is_not() -> None:
    harness = ConsumerHarness()
    harness.topics.create("t", 1)
    member = SimulatedMember(harness, ["t"])
    member.beat()
    from strom.protocol.messages.delete_groups import DeleteGroupsRequest

    box: list[object] = []
    harness.coordinator.delete_groups(DeleteGroupsRequest(groups_names=["g"]), 2, box.append)
    assert box[0].results[0].error_code == ErrorCode.NON_EMPTY_GROUP  # type: ignore[attr-defined]
    harness.commit("g", {("t", 0): 4}, member_id=member.member_id, generation_id=1, version=9)
    member.leave()
    assert list_groups(harness) == [("g", "consumer", "Empty", "consumer")]
    box.clear()
    harness.coordinator.delete_groups(DeleteGroupsRequest(groups_names=["g"]), 2, box.append)
    assert box[0].results[0].error_code == ErrorCode.NONE  # type: ignore[attr-defined]
    assert harness.coordinator.group("g") is None
    assert harness.fetch("g", {"t": [0]}) == {("t", 0): (-1, "")}


def test_offsets_of_an_empty_consumer_group_expire_and_the_group_goes() -> None:
    harness = ConsumerHarness(offsets_retention_minutes=1, offsets_retention_check_interval_ms=10_000)
    harness.topics.create("t", 1)
    member = SimulatedMember(harness, ["t"])
    member.beat()
    harness.commit("g", {("t", 0): 4}, member_id=member.member_id, generation_id=1, version=9)
    for _ in range(20):
        harness.advance(5_000)
        member.beat()
    assert harness.fetch("g", {"t": [0]}) == {("t", 0): (4, "meta")}  # in use: kept
    member.leave()
    harness.advance(70_000)
    assert harness.coordinator.group("g") is None


def test_offset_delete_refuses_the_topics_a_consumer_group_subscribes_to() -> None:
    from strom.protocol.messages.offset_delete import OffsetDeleteRequest

    harness = ConsumerHarness()
    harness.topics.create("t", 1)
    harness.topics.create("u", 1)
    member = SimulatedMember(harness, ["t"])
    member.beat()
    harness.commit("g", {("t", 0): 1, ("u", 0): 2}, member_id=member.member_id, generation_id=1, version=9)
    request = OffsetDeleteRequest(
        group_id="g",
        topics=[
            OffsetDeleteRequest.OffsetDeleteRequestTopic(
                name=name, partitions=[OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=0)]
            )
            for name in ("t", "u")
        ],
    )
    box: list[object] = []
    harness.coordinator.delete_offsets(request, 0, box.append)
    errors = {topic.name: topic.partitions[0].error_code for topic in box[0].topics}  # type: ignore[attr-defined]
    assert errors == {"t": ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC, "u": ErrorCode.NONE}
    assert harness.coordinator.group_states() == {"g": "Stable"}
