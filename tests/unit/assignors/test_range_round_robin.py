"""range and roundrobin against assignments computed by hand."""

from __future__ import annotations

import pytest

from strom.assignors import RangeAssignor, RoundRobinAssignor, get_assignor
from tests.unit.assignors.helpers import member, partitions_of, spread


def test_range_equal_subscriptions_first_members_take_the_remainder() -> None:
    result = RangeAssignor().assign(
        {"t0": 3, "t1": 3}, [member("c1", ["t0", "t1"]), member("c0", ["t0", "t1"])]
    )
    assert partitions_of(result) == {
        "c0": spread("t0", 0, 1) + spread("t1", 0, 1),
        "c1": spread("t0", 2) + spread("t1", 2),
    }


def test_range_uneven_subscriptions_split_each_topic_among_its_subscribers() -> None:
    members = [member("c0", ["t0"]), member("c1", ["t0", "t1"]), member("c2", ["t1"])]
    result = RangeAssignor().assign({"t0": 3, "t1": 5}, members)
    assert partitions_of(result) == {
        "c0": spread("t0", 0, 1),
        "c1": spread("t0", 2) + spread("t1", 0, 1, 2),
        "c2": spread("t1", 3, 4),
    }


def test_range_more_members_than_partitions_leaves_the_last_empty() -> None:
    members = [member(f"c{index}", ["t"]) for index in range(4)]
    result = RangeAssignor().assign({"t": 2}, members)
    assert partitions_of(result) == {"c0": [("t", 0)], "c1": [("t", 1)], "c2": [], "c3": []}


def test_range_orders_member_ids_as_strings() -> None:
    result = RangeAssignor().assign({"t": 3}, [member("c2", ["t"]), member("c10", ["t"])])
    assert partitions_of(result) == {"c10": spread("t", 0, 1), "c2": spread("t", 2)}


def test_range_static_members_first_by_instance_id_then_dynamic_by_member_id() -> None:
    members = [
        member("m-b", ["t"], instance_id="i1"),
        member("m-a", ["t"]),
        member("m-c", ["t"], instance_id="i0"),
    ]
    result = RangeAssignor().assign({"t": 4}, members)
    assert partitions_of(result) == {"m-c": spread("t", 0, 1), "m-b": spread("t", 2), "m-a": spread("t", 3)}


def test_range_ignores_topics_missing_from_metadata_and_lists_every_member() -> None:
    result = RangeAssignor().assign({"t": 1}, [member("c0", ["t", "missing"]), member("c1", ["missing"])])
    assert partitions_of(result) == {"c0": [("t", 0)], "c1": []}


def test_round_robin_deals_across_topics_in_member_order() -> None:
    result = RoundRobinAssignor().assign(
        {"t0": 3, "t1": 3}, [member("c1", ["t0", "t1"]), member("c0", ["t1", "t0"])]
    )
    assert partitions_of(result) == {
        "c0": spread("t0", 0, 2) + spread("t1", 1),
        "c1": spread("t0", 1) + spread("t1", 0, 2),
    }


def test_round_robin_uneven_subscriptions_skip_members_not_subscribed() -> None:
    # The Java client's documented example: C0 takes t0, C1 t0 t1, C2 t0 t1 t2.
    members = [member("C0", ["t0"]), member("C1", ["t0", "t1"]), member("C2", ["t0", "t1", "t2"])]
    result = RoundRobinAssignor().assign({"t0": 1, "t1": 2, "t2": 3}, members)
    assert partitions_of(result) == {
        "C0": [("t0", 0)],
        "C1": [("t1", 0)],
        "C2": spread("t1", 1) + spread("t2", 0, 1, 2),
    }


def test_round_robin_continues_after_a_skip_from_the_member_after_the_taker() -> None:
    # t0-0 c0, t0-1 c1, t1-0: c2 is not subscribed, so c0; t1-1 then c1.
    members = [member("c0", ["t0", "t1"]), member("c1", ["t0", "t1"]), member("c2", ["t0"])]
    result = RoundRobinAssignor().assign({"t0": 2, "t1": 2}, members)
    assert partitions_of(result) == {"c0": [("t0", 0), ("t1", 0)], "c1": [("t0", 1), ("t1", 1)], "c2": []}


def test_round_robin_static_members_ordered_by_instance_id() -> None:
    members = [member("a", ["t"], instance_id="z"), member("b", ["t"], instance_id="y")]
    result = RoundRobinAssignor().assign({"t": 3}, members)
    assert partitions_of(result) == {"b": spread("t", 0, 2), "a": spread("t", 1)}


def test_registry_names_are_the_wire_names() -> None:
    assert get_assignor("range").name == "range"
    assert get_assignor("roundrobin").name == "roundrobin"
    assert get_assignor("sticky").name == "sticky"
    assert get_assignor("cooperative-sticky").name == "cooperative-sticky"


def test_registry_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(KeyError, match="cooperative-sticky, range, roundrobin, sticky"):
        get_assignor("fancy")
