"""sticky and cooperative-sticky: user data, ownership, balance and the cooperative rule."""

from __future__ import annotations

import struct

import pytest

from strom.assignors import Assignment, CooperativeStickyAssignor, StickyAssignor, TopicPartition
from strom.assignors.sticky import decode_sticky_user_data, encode_sticky_user_data
from strom.protocol.primitives import DecodeError
from tests.unit.assignors.helpers import member, partitions_of, spread


def int32(value: int) -> bytes:
    return struct.pack(">i", value)


def string(value: str) -> bytes:
    return struct.pack(">h", len(value)) + value.encode()


STICKY_V0 = int32(2) + string("a") + int32(2) + int32(1) + int32(0) + string("b") + int32(1) + int32(4)


def test_sticky_user_data_known_bytes_v1_and_round_trip() -> None:
    partitions = [("a", 1), ("b", 4), ("a", 0)]
    encoded = encode_sticky_user_data(partitions, 12)
    assert encoded == STICKY_V0 + int32(12)
    assert decode_sticky_user_data(encoded) == ([("a", 1), ("a", 0), ("b", 4)], 12)


def test_sticky_user_data_v0_has_no_generation() -> None:
    assert decode_sticky_user_data(STICKY_V0) == ([("a", 1), ("a", 0), ("b", 4)], -1)


@pytest.mark.parametrize("data", [b"\x00", STICKY_V0 + b"\x00\x01", STICKY_V0[:-1]])
def test_sticky_user_data_malformed(data: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_sticky_user_data(data)


def test_sticky_subscription_user_data_none_until_assigned_then_the_assignment() -> None:
    assignor = StickyAssignor()
    assert assignor.subscription_user_data({"a"}, [], -1) is None
    assignor.on_assignment(Assignment(partitions=[("a", 1), ("b", 4), ("a", 0)]), 12)
    assert assignor.subscription_user_data({"a", "b"}, [], -1) == STICKY_V0 + int32(12)
    assert assignor.subscription_user_data({"a"}, [("a", 3)], 13) == (
        int32(1) + string("a") + int32(1) + int32(3) + int32(13)
    )


def test_sticky_fresh_group_is_balanced() -> None:
    members = [member(f"c{index}", ["t0", "t1"]) for index in range(3)]
    result = partitions_of(StickyAssignor().assign({"t0": 4, "t1": 2}, members))
    assert sorted(len(partitions) for partitions in result.values()) == [2, 2, 2]
    assert sorted(p for partitions in result.values() for p in partitions) == spread(
        "t0", 0, 1, 2, 3
    ) + spread("t1", 0, 1)


def test_sticky_new_member_takes_only_the_surplus_of_the_old_one() -> None:
    old = member("c0", ["t"], user_data=encode_sticky_user_data(spread("t", 0, 1, 2, 3), 3))
    result = StickyAssignor().assign({"t": 4}, [old, member("c1", ["t"])])
    assert partitions_of(result) == {"c0": spread("t", 0, 1), "c1": spread("t", 2, 3)}


def test_sticky_member_leaving_hands_only_its_partitions_out() -> None:
    survivors = [
        member("c0", ["t"], user_data=encode_sticky_user_data(spread("t", 0, 3), 5)),
        member("c2", ["t"], user_data=encode_sticky_user_data(spread("t", 2, 5), 5)),
    ]
    # c1 owned 1 and 4 and left.
    result = partitions_of(StickyAssignor().assign({"t": 6}, survivors))
    assert set(spread("t", 0, 3)) <= set(result["c0"])
    assert set(spread("t", 2, 5)) <= set(result["c2"])
    assert sorted(len(partitions) for partitions in result.values()) == [3, 3]


def test_sticky_falls_back_to_owned_partitions_without_user_data() -> None:
    result = StickyAssignor().assign(
        {"t": 2}, [member("c0", ["t"], owned=[("t", 1)], generation=2), member("c1", ["t"])]
    )
    assert partitions_of(result) == {"c0": [("t", 1)], "c1": [("t", 0)]}


def test_sticky_higher_generation_wins_a_conflicting_claim() -> None:
    members = [
        member("c0", ["t"], user_data=encode_sticky_user_data([("t", 0)], 2)),
        member("c1", ["t"], user_data=encode_sticky_user_data([("t", 0)], 3)),
    ]
    assert partitions_of(StickyAssignor().assign({"t": 2}, members)) == {"c0": [("t", 1)], "c1": [("t", 0)]}


def test_sticky_ignores_claims_on_unsubscribed_topics_and_vanished_partitions() -> None:
    members = [
        member("c0", ["t"], user_data=encode_sticky_user_data([("gone", 0), ("t", 7), ("t", 1)], 2)),
        member("c1", ["t", "u"]),
    ]
    result = partitions_of(StickyAssignor().assign({"t": 2, "u": 2}, members))
    assert ("t", 1) in result["c0"]
    assert sorted(p for partitions in result.values() for p in partitions) == spread("t", 0, 1) + spread(
        "u", 0, 1
    )
    assert all(topic == "t" for topic, _ in result["c0"])


def test_sticky_unequal_subscriptions_balance_where_allowed() -> None:
    # c0 alone can take u; t is shared: the balanced result gives c1 all of t.
    members = [member("c0", ["t", "u"]), member("c1", ["t"])]
    result = partitions_of(StickyAssignor().assign({"t": 2, "u": 2}, members))
    assert result == {"c0": spread("u", 0, 1), "c1": spread("t", 0, 1)}


def test_cooperative_user_data_is_the_java_int32_generation() -> None:
    assignor = CooperativeStickyAssignor()
    assert assignor.subscription_user_data({"t"}, [], -1) == int32(-1)
    assignor.on_assignment(Assignment(partitions=[("t", 0)]), 8)
    assert assignor.subscription_user_data({"t"}, [("t", 0)], -1) == int32(8)


def test_cooperative_moving_partitions_are_revoked_first_then_assigned() -> None:
    assignor = CooperativeStickyAssignor()
    first = partitions_of(
        assignor.assign(
            {"t": 4}, [member("c0", ["t"], owned=spread("t", 0, 1, 2, 3), generation=1), member("c1", ["t"])]
        )
    )
    # c0 keeps two and revokes two; c1 gets nothing yet because c0 still consumes them.
    assert first == {"c0": spread("t", 0, 1), "c1": []}
    second = partitions_of(
        assignor.assign(
            {"t": 4},
            [member("c0", ["t"], owned=first["c0"], generation=2), member("c1", ["t"], generation=2)],
        )
    )
    assert second == {"c0": spread("t", 0, 1), "c1": spread("t", 2, 3)}


def test_cooperative_higher_generation_keeps_a_conflicting_partition() -> None:
    members = [
        member("c0", ["t"], owned=spread("t", 0, 1), generation=4),
        member("c1", ["t"], owned=spread("t", 0), generation=5),
    ]
    result = partitions_of(CooperativeStickyAssignor().assign({"t": 2}, members))
    assert result == {"c0": [("t", 1)], "c1": [("t", 0)]}


def test_cooperative_reads_generation_from_old_style_user_data() -> None:
    # A leader that only sees v1 subscriptions learns generations from the Java int32 user data.
    members = [
        member("c0", ["t"], owned=[("t", 0)], user_data=int32(9)),
        member("c1", ["t"], owned=[("t", 0)], user_data=int32(10)),
    ]
    result = partitions_of(CooperativeStickyAssignor().assign({"t": 2}, members))
    assert result == {"c0": [("t", 1)], "c1": [("t", 0)]}


def test_cooperative_follow_up_never_returns_a_revoked_partition_to_its_owner() -> None:
    # Found by hypothesis. The greedy balancing first moved ("t1", 3) from "0" to "1" and only then
    # ("t2", 0) to "00", after which the first move was no longer needed: the follow-up round, seeing
    # ("t1", 3) unowned, handed it straight back to "0", which had revoked it for nothing.
    partitions_per_topic = {"t0": 1, "t1": 7, "t2": 1}
    topics_of = {"1": ["t0", "t1", "t2"], "00": ["t2"], "000": ["t2", "t0"], "0": ["t0", "t1", "t2"]}
    owned: dict[str, list[TopicPartition]] = {member_id: [] for member_id in topics_of}
    owned["0"] = [*spread("t1", 3, 4, 5, 6), ("t2", 0)]
    assignor = CooperativeStickyAssignor()
    first = partitions_of(
        assignor.assign(
            partitions_per_topic,
            [member(member_id, topics, owned[member_id], 3) for member_id, topics in topics_of.items()],
        )
    )
    assert first == {"0": spread("t1", 3, 4, 5, 6), "1": spread("t1", 0, 1, 2), "00": [], "000": [("t0", 0)]}
    second = partitions_of(
        assignor.assign(
            partitions_per_topic,
            [member(member_id, topics, first[member_id], 4) for member_id, topics in topics_of.items()],
        )
    )
    assert second == {**first, "00": [("t2", 0)]}
