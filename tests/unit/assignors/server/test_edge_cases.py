"""Edge cases every built-in server-side assignor handles alike, and the registry."""

from __future__ import annotations

import pytest

from strom.assignors.server import (
    DEFAULT_SERVER_ASSIGNOR,
    SERVER_ASSIGNORS,
    GroupSpec,
    RangeAssignor,
    ServerAssignor,
    TargetAssignment,
    UniformAssignor,
    get_server_assignor,
    register_server_assignor,
    registry,
)
from tests.unit.assignors.server.helpers import by_name, counts, group, member, topic

ASSIGNOR_NAMES = sorted(SERVER_ASSIGNORS)


def test_registry_names_on_the_wire_and_fresh_instances() -> None:
    assert dict(SERVER_ASSIGNORS) == {"uniform": UniformAssignor, "range": RangeAssignor}
    assert DEFAULT_SERVER_ASSIGNOR == "uniform"
    first = get_server_assignor("uniform")
    assert isinstance(first, UniformAssignor)
    assert isinstance(get_server_assignor("range"), RangeAssignor)
    assert get_server_assignor("uniform") is not first


def test_registry_unknown_name_names_the_known_ones() -> None:
    with pytest.raises(KeyError, match=r"'sticky'.*built-in: range, uniform"):
        get_server_assignor("sticky")


@pytest.mark.parametrize("name", ASSIGNOR_NAMES)
def test_no_members_no_assignment(name: str) -> None:
    assert get_server_assignor(name).assign(GroupSpec(members={}, topics={})) == {}
    assert get_server_assignor(name).assign(group([], [topic("t", 3)])) == {}


@pytest.mark.parametrize("name", ASSIGNOR_NAMES)
def test_no_topics_every_member_present_and_empty(name: str) -> None:
    # "gone" is subscribed but does not exist (any more): nothing to assign.
    spec = group([member("a", ["gone"], assigned={"gone": [0]}), member("b", [])], [])
    assert get_server_assignor(name).assign(spec) == {"a": {}, "b": {}}


@pytest.mark.parametrize("name", ASSIGNOR_NAMES)
def test_topic_nobody_subscribes_to_is_not_assigned(name: str) -> None:
    topics = [topic("wanted", 2), topic("unwanted", 5)]
    spec = group([member("a", ["wanted"], assigned={"unwanted": [0, 1]})], topics)
    assert by_name(get_server_assignor(name).assign(spec), topics) == {"a": {"wanted": [0, 1]}}


@pytest.mark.parametrize("name", ASSIGNOR_NAMES)
def test_topic_without_partitions(name: str) -> None:
    topics = [topic("empty", 0), topic("t", 1)]
    spec = group([member("a", ["empty", "t"]), member("b", ["empty"])], topics)
    assert by_name(get_server_assignor(name).assign(spec), topics) == {"a": {"t": [0]}, "b": {}}


@pytest.mark.parametrize("name", ASSIGNOR_NAMES)
def test_more_members_than_partitions(name: str) -> None:
    topics = [topic("t", 3)]
    spec = group([member(f"m{index}", ["t"]) for index in range(5)], topics)
    result = get_server_assignor(name).assign(spec)
    assert sorted(counts(result).values()) == [0, 0, 1, 1, 1]
    assert sorted(p for assignment in result.values() for parts in assignment.values() for p in parts) == [
        0,
        1,
        2,
    ]
    # A member with nothing is present with an empty assignment (no topic with an empty set).
    assert all(all(parts for parts in assignment.values()) for assignment in result.values())


@pytest.mark.parametrize("name", ASSIGNOR_NAMES)
def test_invalid_claims_in_the_current_target_are_ignored(name: str) -> None:
    topics = [topic("t", 2), topic("u", 2)]
    spec = group(
        [
            # Partition 7 does not exist; "u" is not subscribed by "a" any more.
            member("a", ["t"], assigned={"t": [0, 7], "u": [0, 1]}),
            member("b", ["t", "u"]),
        ],
        topics,
    )
    result = by_name(get_server_assignor(name).assign(spec), topics)
    assert result["b"]["u"] == [0, 1]
    assert 0 in result["a"]["t"]


@pytest.mark.parametrize("name", ASSIGNOR_NAMES)
def test_a_partition_claimed_twice_stays_with_the_first_member_in_member_order(name: str) -> None:
    topics = [topic("t", 2)]
    spec = group([member("b", ["t"], assigned={"t": [0]}), member("a", ["t"], assigned={"t": [0]})], topics)
    assert by_name(get_server_assignor(name).assign(spec), topics) == {"a": {"t": [0]}, "b": {"t": [1]}}


@pytest.mark.parametrize("name", ASSIGNOR_NAMES)
def test_static_members_come_first_in_member_order(name: str) -> None:
    # The static member's member id sorts last, but its instance id puts it first: it gets the
    # first partition (range: the extra one) whatever member id it had.
    topics = [topic("t", 3)]
    spec = group([member("a", ["t"]), member("zzz", ["t"], instance_id="consumer-1")], topics)
    result = by_name(get_server_assignor(name).assign(spec), topics)
    assert result["zzz"]["t"][0] == 0
    assert len(result["zzz"]["t"]) == 2


@pytest.mark.parametrize("name", ASSIGNOR_NAMES)
def test_a_restarted_static_member_keeps_its_partitions_under_its_new_member_id(name: str) -> None:
    # The coordinator hands a static member's current target over to its new member id; the
    # assignor sees only that, and the member keeps everything.
    topics = [topic("t", 5)]
    before = get_server_assignor(name).assign(
        group([member("old-id", ["t"], instance_id="consumer-1"), member("b", ["t"])], topics)
    )
    restarted = group(
        [
            member(
                "new-id",
                ["t"],
                instance_id="consumer-1",
                assigned={"t": before["old-id"][topic("t", 5).topic_id]},
            ),
            member("b", ["t"], assigned={"t": before["b"][topic("t", 5).topic_id]}),
        ],
        topics,
    )
    after = get_server_assignor(name).assign(restarted)
    assert after == {"new-id": before["old-id"], "b": before["b"]}


@pytest.mark.parametrize("name", ASSIGNOR_NAMES)
def test_the_result_does_not_depend_on_the_order_of_the_input_mappings(name: str) -> None:
    topics = [topic("t", 7), topic("u", 5, racks=[["r1"], ["r2"], ["r1", "r2"], [], ["r3"]])]
    members = [
        member("c", ["t", "u"], rack="r1", assigned={"t": [6, 5]}),
        member("a", ["u"], rack="r2"),
        member("b", ["t", "u"], instance_id="s", assigned={"u": [4]}),
    ]
    forward = get_server_assignor(name).assign(group(members, topics))
    backward = get_server_assignor(name).assign(group(reversed(members), reversed(topics)))
    assert forward == backward


@pytest.mark.parametrize("name", ASSIGNOR_NAMES)
def test_large_group_is_complete_and_balanced(name: str) -> None:
    # 1,000 members x 10,000 partitions (the size the speed figures are measured at).
    topics = [topic(f"t{index}", 1000) for index in range(10)]
    names = [spec.name for spec in topics]
    result = get_server_assignor(name).assign(
        group([member(f"m{index:04d}", names) for index in range(1000)], topics)
    )
    assert sum(counts(result).values()) == 10_000
    assert set(counts(result).values()) == {10}


class EverythingToTheFirst(ServerAssignor):
    """A custom assignor as docs/assignors.md shows one: every partition to the first member."""

    name = "first"

    def assign(self, group: GroupSpec) -> dict[str, TargetAssignment]:
        first = min(group.members, default=None)
        everything = {
            topic_id: frozenset(range(spec.partition_count))
            for topic_id, spec in group.topics.items()
            if spec.partition_count
            and any(topic_id in m.subscribed_topic_ids for m in group.members.values())
        }
        return {member_id: everything if member_id == first else {} for member_id in group.members}


def test_custom_assignor_registered_and_found_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    # A copy of the registry for this test: the registration does not outlive it.
    monkeypatch.setattr(registry, "SERVER_ASSIGNORS", dict(registry.SERVER_ASSIGNORS))
    register_server_assignor(EverythingToTheFirst)
    assignor = get_server_assignor("first")
    topics = [topic("t", 2)]
    assert by_name(assignor.assign(group([member("b", ["t"]), member("a", ["t"])], topics)), topics) == {
        "a": {"t": [0, 1]},
        "b": {},
    }
    with pytest.raises(ValueError, match="already registered"):
        register_server_assignor(EverythingToTheFirst)

    class Nameless(UniformAssignor):
        name = ""

    with pytest.raises(ValueError, match="has no name"):
        register_server_assignor(Nameless)
    assert "first" in registry.SERVER_ASSIGNORS


def test_registration_did_not_outlive_its_test() -> None:
    assert sorted(registry.SERVER_ASSIGNORS) == ["range", "uniform"]
