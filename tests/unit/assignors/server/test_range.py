"""range: classic ranges, co-partitioning, stickiness and racks, by example."""

from __future__ import annotations

from strom.assignors.server import RangeAssignor
from tests.unit.assignors.server.helpers import by_name, group, member, topic, with_current


def test_fresh_group_gets_the_classic_ranges() -> None:
    topics = [topic("t", 7)]
    result = by_name(
        RangeAssignor().assign(group([member(m, ["t"]) for m in ("c", "a", "b")], topics)), topics
    )
    assert result == {"a": {"t": [0, 1, 2]}, "b": {"t": [3, 4]}, "c": {"t": [5, 6]}}


def test_per_topic_ranges_over_that_topics_subscribers() -> None:
    topics = [topic("t", 4), topic("u", 3)]
    spec = group([member("a", ["t", "u"]), member("b", ["t"]), member("c", ["u"])], topics)
    assert by_name(RangeAssignor().assign(spec), topics) == {
        "a": {"t": [0, 1], "u": [0, 1]},
        "b": {"t": [2, 3]},
        "c": {"u": [2]},
    }


def test_copartitioned_topics_land_together_even_when_their_current_owners_disagree() -> None:
    # "orders" and "payments" have the same subscribers and partition count: partition p of both goes
    # to one member. Their current targets disagree on 2; the majority (and then member order) decides.
    topics = [topic("orders", 4), topic("payments", 4), topic("refunds", 4)]
    names = ["orders", "payments", "refunds"]
    spec = group(
        [
            member("a", names, assigned={"orders": [0, 1], "payments": [0, 1, 2], "refunds": [0, 1, 2]}),
            member("b", names, assigned={"orders": [2, 3], "payments": [3], "refunds": [3]}),
        ],
        topics,
    )
    result = by_name(RangeAssignor().assign(spec), topics)
    assert result["a"] == {"orders": [0, 1], "payments": [0, 1], "refunds": [0, 1]}
    assert result["b"] == {"orders": [2, 3], "payments": [2, 3], "refunds": [2, 3]}


def test_a_joining_member_takes_partitions_from_the_members_over_their_share() -> None:
    topics = [topic("t", 6)]
    old = group([member("a", ["t"]), member("b", ["t"])], topics)
    before = RangeAssignor().assign(old)
    assert by_name(before, topics) == {"a": {"t": [0, 1, 2]}, "b": {"t": [3, 4, 5]}}
    joined = group([*with_current(old, before).members.values(), member("c", ["t"])], topics)
    # Each keeps its two lowest; c takes the two given back (classic range would move three).
    assert by_name(RangeAssignor().assign(joined), topics) == {
        "a": {"t": [0, 1]},
        "b": {"t": [3, 4]},
        "c": {"t": [2, 5]},
    }


def test_a_leaving_member_hands_out_only_its_own_partitions() -> None:
    topics = [topic("t", 6)]
    spec = group(
        [member("a", ["t"], assigned={"t": [0, 1]}), member("c", ["t"], assigned={"t": [4, 5]})], topics
    )
    # b (2, 3) left: its two go to the first members in order that are short.
    assert by_name(RangeAssignor().assign(spec), topics) == {"a": {"t": [0, 1, 2]}, "c": {"t": [3, 4, 5]}}


def test_the_extra_partition_stays_with_a_member_that_already_holds_it() -> None:
    topics = [topic("t", 5)]
    spec = group(
        [member("a", ["t"], assigned={"t": [0, 1]}), member("b", ["t"], assigned={"t": [2, 3, 4]})], topics
    )
    assert by_name(RangeAssignor().assign(spec), topics) == {"a": {"t": [0, 1]}, "b": {"t": [2, 3, 4]}}


def test_racks_members_take_local_partitions_first() -> None:
    topics = [topic("t", 4, racks=[["b"], ["a"], ["b"], ["a"]])]
    spec = group([member("m1", ["t"], rack="a"), member("m2", ["t"], rack="b")], topics)
    assert by_name(RangeAssignor().assign(spec), topics) == {"m1": {"t": [1, 3]}, "m2": {"t": [0, 2]}}


def test_racks_never_change_the_shares() -> None:
    topics = [topic("t", 5, racks=[["a"]] * 5)]
    spec = group([member("m1", ["t"], rack="b"), member("m2", ["t"], rack="a")], topics)
    # m1 is first in member order and keeps the extra partition though none is local to it.
    assert by_name(RangeAssignor().assign(spec), topics) == {"m1": {"t": [2, 3, 4]}, "m2": {"t": [0, 1]}}


def test_racks_of_copartitioned_topics_count_only_where_they_agree() -> None:
    # Partition 0 is local to rack a in both topics, partition 1 to b in both; the rest disagree.
    topics = [
        topic("orders", 4, racks=[["a"], ["b"], ["a"], ["b"]]),
        topic("payments", 4, racks=[["a"], ["b"], ["b"], ["a"]]),
    ]
    spec = group(
        [member("m1", ["orders", "payments"], rack="b"), member("m2", ["orders", "payments"], rack="a")],
        topics,
    )
    result = by_name(RangeAssignor().assign(spec), topics)
    assert result == {
        "m1": {"orders": [1, 2], "payments": [1, 2]},
        "m2": {"orders": [0, 3], "payments": [0, 3]},
    }
