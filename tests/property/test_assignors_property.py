"""Properties of every built-in assignor over random groups (hypothesis).

Invariants: every partition of a subscribed topic goes to exactly one member subscribed to it (for
cooperative-sticky: at most one, and the follow-up rebalance completes it); sticky assignors are
balanced when subscriptions are equal and move exactly the minimum number of partitions when a member
joins or leaves; cooperative two-round rebalances never hand a partition to a member while another
still holds it and never revoke a partition that ends where it was.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from strom.assignors import (
    Assignment,
    Assignor,
    CooperativeStickyAssignor,
    GroupMember,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    Subscription,
    TopicPartition,
)
from strom.assignors.sticky import encode_sticky_user_data

FAST = settings(max_examples=100, deadline=None)

Owned = dict[str, list[TopicPartition]]


@dataclass
class Group:
    partitions_per_topic: dict[str, int]
    topics_of: dict[str, list[str]]
    # A previous owner per partition (None: unowned), valid for the owner's subscription.
    owned: Owned


@st.composite
def groups(draw: st.DrawFn, equal_subscriptions: bool = False, member_count_min: int = 1) -> Group:
    topic_count = draw(st.integers(1, 4))
    partitions_per_topic = {f"t{index}": draw(st.integers(1, 8)) for index in range(topic_count)}
    member_ids = draw(
        st.lists(
            st.text("abcxyz0123", min_size=1, max_size=4), min_size=member_count_min, max_size=6, unique=True
        )
    )
    topic_names = sorted(partitions_per_topic)
    # Members may also subscribe to a topic that does not exist (yet): it must be ignored.
    subscribable = [*topic_names, "missing"]
    if equal_subscriptions:
        shared = draw(st.lists(st.sampled_from(topic_names), min_size=1, unique=True))
        topics_of = {member_id: list(shared) for member_id in member_ids}
    else:
        topics_of = {
            member_id: draw(st.lists(st.sampled_from(subscribable), min_size=1, unique=True))
            for member_id in member_ids
        }
    owned: Owned = {member_id: [] for member_id in member_ids}
    for topic in topic_names:
        subscribers = [member_id for member_id in member_ids if topic in topics_of[member_id]]
        for partition in range(partitions_per_topic[topic]):
            owner: str | None = draw(st.none() | st.sampled_from(subscribers)) if subscribers else None
            if owner is not None:
                owned[owner].append((topic, partition))
    return Group(partitions_per_topic, topics_of, owned)


def members_of(
    group: Group, owned: Owned, generation: int, sticky_user_data: bool = False
) -> list[GroupMember]:
    return [
        GroupMember(
            member_id=member_id,
            group_instance_id=None,
            subscription=Subscription(
                topics=topics,
                user_data=encode_sticky_user_data(owned[member_id], generation) if sticky_user_data else None,
                owned_partitions=[] if sticky_user_data else owned[member_id],
                generation_id=generation,
            ),
        )
        for member_id, topics in group.topics_of.items()
    ]


def expected_partitions(group: Group) -> set[TopicPartition]:
    subscribed = {topic for topics in group.topics_of.values() for topic in topics}
    return {
        (topic, partition)
        for topic, count in group.partitions_per_topic.items()
        if topic in subscribed
        for partition in range(count)
    }


def owned_after(result: dict[str, Assignment]) -> Owned:
    return {member_id: list(assignment.partitions) for member_id, assignment in result.items()}


def check_valid(group: Group, result: dict[str, Assignment], complete: bool) -> None:
    assert set(result) == set(group.topics_of)
    counts = Counter(p for assignment in result.values() for p in assignment.partitions)
    assert all(count == 1 for count in counts.values()), counts
    assert set(counts) <= expected_partitions(group)
    if complete:
        assert set(counts) == expected_partitions(group)
    for member_id, assignment in result.items():
        assert all(topic in group.topics_of[member_id] for topic, _ in assignment.partitions)


def run(assignor: Assignor, group: Group, owned: Owned, generation: int) -> dict[str, Assignment]:
    sticky_user_data = isinstance(assignor, StickyAssignor)
    return assignor.assign(group.partitions_per_topic, members_of(group, owned, generation, sticky_user_data))


@FAST
@given(group=groups())
def test_eager_assignors_assign_every_subscribed_partition_once(group: Group) -> None:
    for assignor in (RangeAssignor(), RoundRobinAssignor(), StickyAssignor()):
        check_valid(group, run(assignor, group, group.owned, 3), complete=True)


@FAST
@given(group=groups())
def test_cooperative_two_rounds_complete_without_double_ownership(group: Group) -> None:
    assignor = CooperativeStickyAssignor()
    first = run(assignor, group, group.owned, 3)
    check_valid(group, first, complete=False)
    holding = owned_after(first)
    for member_id, partitions in holding.items():
        newly_assigned = set(partitions) - set(group.owned[member_id])
        for other_id, other_owned in group.owned.items():
            if other_id != member_id:
                assert not newly_assigned & set(other_owned), (member_id, other_id)
    second = run(assignor, group, holding, 4)
    check_valid(group, second, complete=True)
    final = owned_after(second)
    for member_id, partitions in final.items():
        newly_assigned = set(partitions) - set(holding[member_id])
        for other_id, other_holding in holding.items():
            if other_id != member_id:
                assert not newly_assigned & set(other_holding), (member_id, other_id)
        # Never revoked only to come back: what ends on its original owner was kept all along.
        assert set(partitions) & set(group.owned[member_id]) <= set(holding[member_id])
        # The follow-up round revokes nothing.
        assert set(holding[member_id]) <= set(partitions)


def sizes(result: dict[str, Assignment]) -> list[int]:
    return [len(assignment.partitions) for assignment in result.values()]


@FAST
@given(group=groups(equal_subscriptions=True))
def test_sticky_assignors_balance_equal_subscriptions(group: Group) -> None:
    eager = run(StickyAssignor(), group, group.owned, 3)
    assert max(sizes(eager)) - min(sizes(eager)) <= 1
    cooperative = CooperativeStickyAssignor()
    follow_up = run(cooperative, group, owned_after(run(cooperative, group, group.owned, 3)), 4)
    assert max(sizes(follow_up)) - min(sizes(follow_up)) <= 1


def minimum_moves(partition_count: int, owned_counts: list[int]) -> int:
    """Fewest partitions of surviving owners that must move for a balanced result: the members owning
    most take the N % M places with one extra, everyone keeps up to their quota."""
    quota, extra_places = divmod(partition_count, len(owned_counts))
    ordered = sorted(owned_counts, reverse=True)
    return sum(
        max(0, count - (quota + (1 if index < extra_places else 0))) for index, count in enumerate(ordered)
    )


def moves(before: Owned, after: Owned) -> int:
    owner_after = {p: member_id for member_id, partitions in after.items() for p in partitions}
    return sum(
        1 for member_id, partitions in before.items() for p in partitions if owner_after.get(p) != member_id
    )


@FAST
@given(group=groups(equal_subscriptions=True, member_count_min=2), data=st.data())
def test_sticky_member_leaving_or_joining_moves_only_the_minimum(group: Group, data: st.DataObject) -> None:
    for assignor_class in (StickyAssignor, CooperativeStickyAssignor):
        assignor = assignor_class()
        settled = owned_after(run(assignor, group, group.owned, 3))
        if assignor_class is CooperativeStickyAssignor:
            settled = owned_after(run(assignor, group, settled, 4))
        if data.draw(st.booleans(), label="leave"):
            gone = data.draw(st.sampled_from(sorted(group.topics_of)), label="leaving member")
            topics_of = {
                member_id: topics for member_id, topics in group.topics_of.items() if member_id != gone
            }
            before = {member_id: settled[member_id] for member_id in topics_of}
        else:
            topics_of = {**group.topics_of, "newcomer!": next(iter(group.topics_of.values()))}
            before = {**settled, "newcomer!": []}
        changed = Group(group.partitions_per_topic, topics_of, before)
        after = owned_after(run(assignor, changed, before, 5))
        if assignor_class is CooperativeStickyAssignor:
            after = owned_after(run(assignor, changed, after, 6))
        check_valid(changed, {m: Assignment(partitions=p) for m, p in after.items()}, complete=True)
        partition_count = len(expected_partitions(changed))
        assert moves(before, after) == minimum_moves(partition_count, [len(p) for p in before.values()])
