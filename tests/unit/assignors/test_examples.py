"""The seed 002 example assignors."""

from __future__ import annotations

from collections import Counter

import pytest

from strom.assignors import AssignmentError
from strom.assignors.examples import CoPartitionedAssignor, RackAwareAssignor, RedundantAssignor
from tests.unit.assignors.helpers import member, partitions_of, spread


def test_copartitioned_puts_partition_p_of_every_topic_on_one_member() -> None:
    members = [member("c1", ["orders", "payments"]), member("c0", ["payments", "orders"])]
    result = partitions_of(CoPartitionedAssignor().assign({"orders": 3, "payments": 3}, members))
    assert result == {
        "c0": sorted(spread("orders", 0, 1) + spread("payments", 0, 1)),
        "c1": sorted(spread("orders", 2) + spread("payments", 2)),
    }


def test_copartitioned_refuses_unequal_partition_counts() -> None:
    members = [member("c0", ["orders", "payments"])]
    with pytest.raises(AssignmentError, match="different partition counts"):
        CoPartitionedAssignor().assign({"orders": 3, "payments": 4}, members)


def test_copartitioned_refuses_different_subscriptions() -> None:
    members = [member("c0", ["orders", "payments"]), member("c1", ["orders"])]
    with pytest.raises(AssignmentError, match="different topics"):
        CoPartitionedAssignor().assign({"orders": 3, "payments": 3}, members)


def test_redundant_gives_each_partition_to_n_distinct_members_evenly() -> None:
    members = [member(f"c{index}", ["t"]) for index in range(3)]
    result = partitions_of(RedundantAssignor(copies=2).assign({"t": 3}, members))
    holders = Counter(p for partitions in result.values() for p in partitions)
    assert holders == {("t", 0): 2, ("t", 1): 2, ("t", 2): 2}
    assert sorted(len(partitions) for partitions in result.values()) == [2, 2, 2]
    assert all(len(set(partitions)) == len(partitions) for partitions in result.values())


def test_redundant_with_fewer_subscribers_than_copies_gives_it_to_all() -> None:
    members = [member("c0", ["t"]), member("c1", ["u"])]
    result = partitions_of(RedundantAssignor(copies=3).assign({"t": 1, "u": 1}, members))
    assert result == {"c0": [("t", 0)], "c1": [("u", 0)]}


def test_redundant_refuses_zero_copies() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        RedundantAssignor(copies=0)


def test_rack_aware_prefers_members_in_a_replica_rack() -> None:
    racks = {("t", 0): {"east"}, ("t", 1): {"west"}, ("t", 2): {"east"}, ("t", 3): {"west"}}
    members = [member("a", ["t"], rack_id="west"), member("b", ["t"], rack_id="east")]
    result = partitions_of(RackAwareAssignor(racks).assign({"t": 4}, members))
    assert result == {"a": spread("t", 1, 3), "b": spread("t", 0, 2)}


def test_rack_aware_falls_back_to_balance_when_racks_do_not_allow() -> None:
    # Every replica is in "east" but only one member is: it takes its fair share, the rest spreads.
    racks = {("t", partition): {"east"} for partition in range(4)}
    members = [member("a", ["t"], rack_id="east"), member("b", ["t"], rack_id="west"), member("c", ["t"])]
    result = partitions_of(RackAwareAssignor(racks).assign({"t": 4}, members))
    assert len(result["a"]) == 2
    assert sorted(len(partitions) for partitions in result.values()) == [1, 1, 2]
    assert sorted(p for partitions in result.values() for p in partitions) == spread("t", 0, 1, 2, 3)
