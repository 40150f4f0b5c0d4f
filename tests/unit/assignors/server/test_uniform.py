"""uniform: balance, stickiness, heterogeneous subscriptions and racks, by example."""

from __future__ import annotations

from strom.assignors.server import UniformAssignor
from tests.unit.assignors.server.helpers import by_name, counts, group, member, topic, with_current

TOPICS = [topic("t", 6), topic("u", 3)]


def test_fresh_group_spreads_every_topic_round_the_members() -> None:
    result = UniformAssignor().assign(group([member(m, ["t", "u"]) for m in ("a", "b", "c")], TOPICS))
    assert by_name(result, TOPICS) == {
        "a": {"t": [0, 3], "u": [0]},
        "b": {"t": [1, 4], "u": [1]},
        "c": {"t": [2, 5], "u": [2]},
    }


def test_a_joining_member_takes_only_the_surplus() -> None:
    old = group([member(m, ["t", "u"]) for m in ("a", "b")], TOPICS)
    before = UniformAssignor().assign(old)
    joined = group([*with_current(old, before).members.values(), member("c", ["t", "u"])], TOPICS)
    after = UniformAssignor().assign(joined)
    assert sorted(counts(after).values()) == [3, 3, 3]
    # a and b had 5 and 4 (9 partitions): 2 + 1 move to c, nothing else changes hands.
    for member_id in ("a", "b"):
        for tid, partitions in after[member_id].items():
            assert partitions <= before[member_id][tid]


def test_a_leaving_member_hands_out_only_its_own_partitions() -> None:
    members = [member(m, ["t", "u"]) for m in ("a", "b", "c")]
    before = UniformAssignor().assign(group(members, TOPICS))
    survivors = [
        m for m in with_current(group(members, TOPICS), before).members.values() if m.member_id != "c"
    ]
    after = UniformAssignor().assign(group(survivors, TOPICS))
    assert sorted(counts(after).values()) == [4, 5]
    for member_id in ("a", "b"):
        for tid, partitions in before[member_id].items():
            assert partitions <= after[member_id][tid]


def test_added_partitions_go_to_the_least_loaded_and_nothing_moves() -> None:
    spec = group(
        [member("a", ["t"], assigned={"t": [0, 1, 2]}), member("b", ["t"], assigned={"t": [3, 4, 5]})], TOPICS
    )
    grown = group(spec.members.values(), [topic("t", 9)])
    result = by_name(UniformAssignor().assign(grown), [topic("t", 9)])
    assert result["a"]["t"][:3] == [0, 1, 2] and result["b"]["t"][:3] == [3, 4, 5]
    assert sorted(len(assignment["t"]) for assignment in result.values()) == [4, 5]


def test_the_extra_partition_stays_with_a_member_that_already_holds_it() -> None:
    # 7 partitions over 3 members: 3, 2, 2. "c" holds 3 already and keeps them all.
    spec = group(
        [member("a", ["t"]), member("b", ["t"]), member("c", ["t"], assigned={"t": [0, 1, 2]})],
        [topic("t", 7)],
    )
    result = by_name(UniformAssignor().assign(spec), [topic("t", 7)])
    assert result["c"]["t"] == [0, 1, 2]
    assert sorted(len(assignment["t"]) for assignment in result.values()) == [2, 2, 3]


def test_heterogeneous_chain_of_moves_reaches_the_balance() -> None:
    # x can only take t, z only u; y takes both. From x=3, y=2 (u), z=1 the only way to 2/2/2 is a
    # chain: x gives a t partition to y, y gives a u partition to z.
    topics = [topic("t", 3), topic("u", 3)]
    spec = group(
        [
            member("x", ["t"], assigned={"t": [0, 1, 2]}),
            member("y", ["t", "u"], assigned={"u": [0, 1]}),
            member("z", ["u"], assigned={"u": [2]}),
        ],
        topics,
    )
    result = by_name(UniformAssignor().assign(spec), topics)
    assert result == {"x": {"t": [0, 1]}, "y": {"t": [2], "u": [0]}, "z": {"u": [1, 2]}}


def test_heterogeneous_members_get_what_only_they_can_take() -> None:
    topics = [topic("t", 4), topic("u", 2)]
    spec = group([member("a", ["t", "u"]), member("b", ["t"])], topics)
    result = by_name(UniformAssignor().assign(spec), topics)
    # u first (fewest subscribers): both to a; then t to the least loaded, ties in member order.
    assert result == {"a": {"t": [2], "u": [0, 1]}, "b": {"t": [0, 1, 3]}}


def test_racks_partitions_go_to_a_member_in_a_replica_rack() -> None:
    # Partition p has its replicas in rack "r<p mod 3>" and its neighbour's.
    topics = [topic("t", 6, racks=[[f"r{p % 3}", f"r{(p + 1) % 3}"] for p in range(6)])]
    spec = group([member(f"m{index}", ["t"], rack=f"r{index}") for index in range(3)], topics)
    result = UniformAssignor().assign(spec)
    assert set(counts(result).values()) == {2}
    for member_id, assignment in result.items():
        for partition in next(iter(assignment.values())):
            assert f"r{int(member_id[1])}" in topics[0].partition_racks[partition]


def test_racks_never_cost_balance() -> None:
    # Every replica is in rack "east"; only one member is there. It gets its share, no more.
    topics = [topic("t", 6, racks=[["east"]] * 6)]
    spec = group(
        [member("e", ["t"], rack="east"), member("w1", ["t"], rack="west"), member("w2", ["t"], rack="west")],
        topics,
    )
    assert set(counts(UniformAssignor().assign(spec)).values()) == {2}


def test_racks_the_extra_partition_goes_to_the_member_that_is_local() -> None:
    # 3 partitions over 2 members: the one extra goes where the partition left over is local.
    topics = [topic("t", 3, racks=[["b"], ["a"], ["b"]])]
    spec = group([member("m1", ["t"], rack="a"), member("m2", ["t"], rack="b")], topics)
    assert by_name(UniformAssignor().assign(spec), topics) == {"m1": {"t": [1]}, "m2": {"t": [0, 2]}}


def test_racks_do_not_take_kept_partitions_away() -> None:
    # Stickiness comes before locality: a partition kept within balance stays, though remote.
    topics = [topic("t", 2, racks=[["a"], ["a"]])]
    spec = group(
        [
            member("m1", ["t"], rack="a", assigned={"t": [0]}),
            member("m2", ["t"], rack="b", assigned={"t": [1]}),
        ],
        topics,
    )
    assert by_name(UniformAssignor().assign(spec), topics) == {"m1": {"t": [0]}, "m2": {"t": [1]}}


def test_racks_heterogeneous_ties_go_to_the_local_member() -> None:
    topics = [topic("t", 2, racks=[["b"], ["a"]]), topic("u", 1)]
    spec = group(
        [member("m1", ["t", "u"], rack="a"), member("m2", ["t"], rack="b"), member("m3", ["u"], rack="a")],
        topics,
    )
    assert by_name(UniformAssignor().assign(spec), topics) == {
        "m1": {"t": [1]},
        "m2": {"t": [0]},
        "m3": {"u": [0]},
    }


def test_racks_fresh_group_all_local_where_dealing_round_would_be_remote() -> None:
    # Dealt round in member order, m0 would get 0 and 2 (in rack b): rack placement makes all local.
    topics = [topic("t", 4, racks=[["b"], ["a"], ["b"], ["a"]])]
    spec = group([member("m0", ["t"], rack="a"), member("m1", ["t"], rack="b")], topics)
    assert by_name(UniformAssignor().assign(spec), topics) == {"m0": {"t": [1, 3]}, "m1": {"t": [0, 2]}}


def test_racks_most_constrained_partitions_placed_first() -> None:
    # Partition 0 is local to both racks, partition 1 only to a: 1 must go to the member in a.
    topics = [topic("t", 2, racks=[["a", "b"], ["a"]])]
    spec = group([member("m0", ["t"], rack="a"), member("m1", ["t"], rack="b")], topics)
    assert by_name(UniformAssignor().assign(spec), topics) == {"m0": {"t": [1]}, "m1": {"t": [0]}}


def test_members_subscribing_to_nothing_that_exists_do_not_cost_stickiness() -> None:
    # "idle" subscribes to no existing topic and "new" also to one that does not exist: the others
    # are still assigned as a homogeneous group, so only the surplus moves (one from each).
    topics = [topic("t", 8)]
    spec = group(
        [
            member("a", ["t"], assigned={"t": [0, 2, 4, 6]}),
            member("b", ["t"], assigned={"t": [1, 3, 5, 7]}),
            member("idle", ["gone"]),
            member("new", ["t", "gone"]),
        ],
        topics,
    )
    result = by_name(UniformAssignor().assign(spec), topics)
    assert result["idle"] == {}
    assert len(result["new"]["t"]) == 2
    assert len(set(result["a"]["t"]) & {0, 2, 4, 6}) == 3
    assert len(set(result["b"]["t"]) & {1, 3, 5, 7}) == 3


def test_parts_of_the_group_sharing_no_topic_are_balanced_each_on_its_own() -> None:
    topics = [topic("t", 4), topic("u", 6)]
    spec = group([member("a", ["t"]), member("b", ["t"]), member("c", ["u"]), member("d", ["u"])], topics)
    assert counts(UniformAssignor().assign(spec)) == {"a": 2, "b": 2, "c": 3, "d": 3}
