"""Properties of the built-in server-side assignors over random groups (hypothesis).

Every assignor, any input (current targets with stale, out-of-range and doubled claims included):
every partition of a subscribed topic goes to exactly one member, a subscriber of its topic; every
member is in the result; the result is deterministic and independent of the order of the input
mappings; feeding the result back as the current target changes nothing.

uniform: homogeneous subscriptions are balanced (max - min <= 1); heterogeneous ones are as balanced
as the subscriptions allow — no *cost-reducing chain* is left (a member with L partitions that could
hand one, directly or through other members, to a member with at most L - 2), which makes the loads an
optimal semi-matching: no other assignment has a smaller maximum or a smaller sum of squares.

range: per topic, its subscribers' counts differ by at most one; topics with the same subscribers and
partition count are assigned alike; a fresh group without racks gets the classic ranges.

Stickiness, after one member joins, one leaves, or a topic gains partitions, starting from the
assignor's own previous result: with homogeneous subscriptions (uniform) and per co-partitioned set
(range), the number of partitions taken from a member that is still there is exactly the minimum any
balanced assignment needs: sum over members of max(0, kept - q), less min(r, number of members keeping
more than q), where kept is what the member still validly holds, q = N // M and r = N % M. With
heterogeneous subscriptions (uniform) the bound checked is the fixed point: a complete, valid and
optimally balanced current target, also one shuffled by swaps that keep every load, is kept as is.

Racks (fresh groups and every partition that changes hands): uniform never leaves a partition on a
member outside its replicas' racks while a member in one of those racks has fewer partitions (one move
would make it local at no cost in balance); range never leaves a partition remote while a member of
its racks has a partition that is not local to it.
"""

from __future__ import annotations

import uuid
from collections import deque
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from strom.assignors.server import (
    SERVER_ASSIGNORS,
    GroupSpec,
    MemberSpec,
    RangeAssignor,
    TargetAssignment,
    TopicSpec,
    UniformAssignor,
    get_server_assignor,
    member_order_key,
)

FAST = settings(max_examples=150, deadline=None)
RACKS = ["r1", "r2", "r3"]
MISSING_TOPIC = uuid.UUID(int=999)
Result = dict[str, TargetAssignment]


@st.composite
def groups(
    draw: st.DrawFn,
    homogeneous: bool = False,
    racks: bool = False,
    claims: bool = True,
    member_count_min: int = 0,
) -> GroupSpec:
    topic_count = draw(st.integers(0 if not homogeneous else 1, 4))
    topics: dict[uuid.UUID, TopicSpec] = {}
    for index in range(topic_count):
        topic_id = uuid.UUID(int=index + 1)
        partition_count = draw(st.integers(0, 12))
        partition_racks: tuple[frozenset[str], ...] = ()
        if racks:
            partition_racks = tuple(
                frozenset(draw(st.lists(st.sampled_from(RACKS), max_size=2))) for _ in range(partition_count)
            )
        topics[topic_id] = TopicSpec(topic_id, f"t{index}", partition_count, partition_racks)
    member_ids = draw(
        st.lists(
            st.text("abcxyz", min_size=1, max_size=3), min_size=member_count_min, max_size=7, unique=True
        )
    )
    subscribable = [*topics, MISSING_TOPIC]
    shared = frozenset(draw(st.lists(st.sampled_from(subscribable), min_size=1, unique=True)))
    members: dict[str, MemberSpec] = {}
    for position, member_id in enumerate(member_ids):
        subscribed = (
            shared if homogeneous else frozenset(draw(st.lists(st.sampled_from(subscribable), unique=True)))
        )
        assigned: dict[uuid.UUID, frozenset[int]] = {}
        if claims:
            for topic_id in draw(st.lists(st.sampled_from(subscribable), unique=True)):
                assigned[topic_id] = frozenset(draw(st.lists(st.integers(0, 14), max_size=6)))
        members[member_id] = MemberSpec(
            member_id=member_id,
            instance_id=draw(st.none() | st.just(f"instance-{position}")),
            rack_id=draw(st.sampled_from([None, *RACKS])) if racks else None,
            subscribed_topic_ids=subscribed,
            assigned=assigned,
        )
    return GroupSpec(members=members, topics=topics)


@st.composite
def chained_groups(draw: st.DrawFn) -> GroupSpec:
    """Members subscribing to runs of neighbouring topics (t1-t2, t2-t3, ...): balancing them often
    takes a chain of moves through members in between."""
    topic_count = draw(st.integers(2, 5))
    topics = {
        uuid.UUID(int=index + 1): TopicSpec(uuid.UUID(int=index + 1), f"t{index}", draw(st.integers(1, 6)))
        for index in range(topic_count)
    }
    topic_ids = list(topics)
    members = {}
    for index in range(draw(st.integers(2, 6))):
        first = draw(st.integers(0, topic_count - 1))
        last = draw(st.integers(first, min(first + 1, topic_count - 1)))
        member_id = f"m{index}"
        members[member_id] = MemberSpec(member_id, None, None, frozenset(topic_ids[first : last + 1]))
    return GroupSpec(members=members, topics=topics)


@st.composite
def owned_groups(draw: st.DrawFn, racks: bool = False, chained: bool = False) -> GroupSpec:
    """Heterogeneous groups whose current target is valid but arbitrary: every partition held by one
    of its topic's subscribers, or by nobody — as unbalanced as it comes."""
    group = draw(chained_groups() if chained else groups(racks=racks, claims=False, member_count_min=1))
    assigned: dict[str, dict[uuid.UUID, frozenset[int]]] = {member_id: {} for member_id in group.members}
    for topic_id, topic in group.topics.items():
        subscribers = sorted(
            m for m, member in group.members.items() if topic_id in member.subscribed_topic_ids
        )
        for partition in range(topic.partition_count):
            holder = draw(st.none() | st.sampled_from(subscribers)) if subscribers else None
            if holder is not None:
                assigned[holder][topic_id] = assigned[holder].get(topic_id, frozenset()) | {partition}
    return with_current(group, assigned)


def subscribed_partitions(group: GroupSpec) -> set[tuple[uuid.UUID, int]]:
    return {
        (topic_id, partition)
        for member in group.members.values()
        for topic_id in member.subscribed_topic_ids
        if topic_id in group.topics
        for partition in range(group.topics[topic_id].partition_count)
    }


def owner_map(result: Result) -> dict[tuple[uuid.UUID, int], str]:
    return {
        (topic_id, partition): member_id
        for member_id, assignment in result.items()
        for topic_id, partitions in assignment.items()
        for partition in partitions
    }


def loads(result: Result) -> dict[str, int]:
    return {member_id: sum(map(len, assignment.values())) for member_id, assignment in result.items()}


def with_current(group: GroupSpec, result: Result) -> GroupSpec:
    return replace(
        group,
        members={
            member_id: replace(member, assigned=dict(result.get(member_id, {})))
            for member_id, member in group.members.items()
        },
    )


def check_contract(group: GroupSpec, result: Result) -> None:
    assert set(result) == set(group.members)
    seen: set[tuple[uuid.UUID, int]] = set()
    for member_id, assignment in result.items():
        for topic_id, partitions in assignment.items():
            assert partitions, "no topic with an empty partition set"
            assert topic_id in group.members[member_id].subscribed_topic_ids
            assert topic_id in group.topics
            for partition in partitions:
                assert 0 <= partition < group.topics[topic_id].partition_count
                assert (topic_id, partition) not in seen, "assigned twice"
                seen.add((topic_id, partition))
    assert seen == subscribed_partitions(group)


def effective_subscription(group: GroupSpec, member: MemberSpec) -> frozenset[uuid.UUID]:
    return frozenset(topic_id for topic_id in member.subscribed_topic_ids if topic_id in group.topics)


def cost_reducing_chain_exists(group: GroupSpec, result: Result) -> bool:
    """A member with L partitions reaching, through "holds a partition of a topic the next one
    subscribes to" steps, a member with at most L - 2."""
    load = loads(result)
    subscribers: dict[uuid.UUID, list[str]] = {}
    for member_id, member in group.members.items():
        for topic_id in effective_subscription(group, member):
            subscribers.setdefault(topic_id, []).append(member_id)
    for source in group.members:
        seen = {source}
        queue = deque([source])
        while queue:
            giver = queue.popleft()
            for topic_id in result[giver]:
                for receiver in subscribers[topic_id]:
                    if receiver in seen:
                        continue
                    if load[receiver] <= load[source] - 2:
                        return True
                    seen.add(receiver)
                    queue.append(receiver)
    return False


def valid_kept_counts(group: GroupSpec) -> dict[str, int]:
    """What each member still validly holds of its current target (first claim in member order)."""
    claimed: set[tuple[uuid.UUID, int]] = set()
    kept = dict.fromkeys(group.members, 0)
    for member in sorted(group.members.values(), key=member_order_key):
        subscription = effective_subscription(group, member)
        for topic_id, partitions in member.assigned.items():
            if topic_id not in subscription:
                continue
            for partition in partitions:
                if (
                    partition < group.topics[topic_id].partition_count
                    and (topic_id, partition) not in claimed
                ):
                    claimed.add((topic_id, partition))
                    kept[member.member_id] += 1
    return kept


def minimum_moves(kept: list[int], total: int) -> int:
    quota, extra = divmod(total, len(kept))
    over = [count for count in kept if count > quota]
    return sum(count - quota for count in over) - min(extra, len(over))


def taken_from_members_still_there(before: GroupSpec, after_group: GroupSpec, after: Result) -> int:
    """Partitions a member validly held in its current target and no longer gets."""
    owners = owner_map(after)
    claimed: set[tuple[uuid.UUID, int]] = set()
    taken = 0
    for member in sorted(after_group.members.values(), key=member_order_key):
        subscription = effective_subscription(after_group, member)
        for topic_id, partitions in member.assigned.items():
            if topic_id not in subscription:
                continue
            for partition in partitions:
                key = (topic_id, partition)
                if partition < after_group.topics[topic_id].partition_count and key not in claimed:
                    claimed.add(key)
                    taken += owners[key] != member.member_id
    return taken


# -- every assignor ------------------------------------------------------------------------------


@FAST
@given(
    st.sampled_from(sorted(SERVER_ASSIGNORS)),
    groups(racks=True) | groups(homogeneous=True, racks=True) | groups() | owned_groups(racks=True),
)
def test_contract_determinism_and_fixed_point(name: str, group: GroupSpec) -> None:
    result = get_server_assignor(name).assign(group)
    check_contract(group, result)
    assert get_server_assignor(name).assign(group) == result
    reordered = GroupSpec(
        members=dict(reversed(list(group.members.items()))), topics=dict(reversed(list(group.topics.items())))
    )
    assert get_server_assignor(name).assign(reordered) == result
    assert get_server_assignor(name).assign(with_current(group, result)) == result


# -- uniform ---------------------------------------------------------------------------------------


@FAST
@given(groups(homogeneous=True, racks=True) | groups(homogeneous=True))
def test_uniform_homogeneous_is_balanced(group: GroupSpec) -> None:
    result = UniformAssignor().assign(group)
    if result:
        assert max(loads(result).values()) - min(loads(result).values()) <= 1


@FAST
@given(owned_groups(chained=True) | owned_groups(racks=True) | groups(racks=True) | groups())
def test_uniform_heterogeneous_is_as_balanced_as_subscriptions_allow(group: GroupSpec) -> None:
    assert not cost_reducing_chain_exists(group, UniformAssignor().assign(group))


@FAST
@given(groups(claims=False, member_count_min=2), st.data())
def test_uniform_keeps_any_optimal_current_target_shuffled_by_load_keeping_swaps(
    group: GroupSpec, data: st.DataObject
) -> None:
    result = UniformAssignor().assign(group)
    owners = owner_map(result)
    # Swap the owners of pairs of partitions of one topic: loads and validity stay as they were.
    for _ in range(data.draw(st.integers(0, 5))):
        if len(owners) < 2:
            break
        first, second = data.draw(
            st.lists(st.sampled_from(sorted(owners)), min_size=2, max_size=2, unique=True)
        )
        if first[0] == second[0]:
            owners[first], owners[second] = owners[second], owners[first]
    shuffled: Result = {member_id: {} for member_id in group.members}
    for (topic_id, partition), member_id in owners.items():
        shuffled[member_id][topic_id] = shuffled[member_id].get(topic_id, frozenset()) | {partition}
    assert UniformAssignor().assign(with_current(group, shuffled)) == shuffled


@st.composite
def changes(draw: st.DrawFn, homogeneous: bool, racks: bool | None = None) -> tuple[GroupSpec, GroupSpec]:
    """A group with its assignor's result as current target (the assignor is applied by the test),
    and the group after one change: a member joins, a member leaves, or a topic gains partitions."""
    with_racks = draw(st.booleans()) if racks is None else racks
    group = draw(groups(homogeneous=homogeneous, racks=with_racks, claims=False, member_count_min=1))
    kind = draw(st.sampled_from(["join", "leave", "grow"]))
    members = dict(group.members)
    topics = dict(group.topics)
    if kind == "join":
        template = next(iter(members.values()))
        members["joiner"] = MemberSpec(
            "joiner", None, draw(st.sampled_from([None, *RACKS])), template.subscribed_topic_ids
        )
    elif kind == "leave":
        del members[draw(st.sampled_from(sorted(members)))]
    elif topics:
        topic_id = draw(st.sampled_from(sorted(topics)))
        grown = topics[topic_id]
        racks = (
            grown.partition_racks + tuple(frozenset({RACKS[p % 3]}) for p in range(3))
            if grown.partition_racks
            else ()
        )
        topics[topic_id] = replace(grown, partition_count=grown.partition_count + 3, partition_racks=racks)
    return group, GroupSpec(members=members, topics=topics)


@FAST
@given(changes(homogeneous=True))
def test_uniform_homogeneous_moves_only_what_balance_requires(change: tuple[GroupSpec, GroupSpec]) -> None:
    before, after_group = change
    previous = UniformAssignor().assign(before)
    after_group = with_current(after_group, previous)
    after = UniformAssignor().assign(after_group)
    check_contract(after_group, after)
    if not after:
        return
    kept = valid_kept_counts(after_group)
    total = len(subscribed_partitions(after_group))
    assert taken_from_members_still_there(before, after_group, after) == minimum_moves(
        list(kept.values()), total
    )


# -- range -----------------------------------------------------------------------------------------


def subscribers_of(group: GroupSpec) -> dict[uuid.UUID, list[str]]:
    subscribers: dict[uuid.UUID, list[str]] = {}
    for member in sorted(group.members.values(), key=member_order_key):
        for topic_id in effective_subscription(group, member):
            subscribers.setdefault(topic_id, []).append(member.member_id)
    return subscribers


@FAST
@given(groups(racks=True) | groups())
def test_range_balanced_per_topic_and_copartitioned(group: GroupSpec) -> None:
    result = RangeAssignor().assign(group)
    owners = owner_map(result)
    subscribers = subscribers_of(group)
    for topic_id, members in subscribers.items():
        topic_counts = [len(result[member_id].get(topic_id, ())) for member_id in members]
        assert max(topic_counts) - min(topic_counts) <= 1
    for first, first_members in subscribers.items():
        for second, second_members in subscribers.items():
            count = group.topics[first].partition_count
            if first_members == second_members and count == group.topics[second].partition_count:
                assert all(owners[(first, p)] == owners[(second, p)] for p in range(count))


@FAST
@given(groups(claims=False))
def test_range_fresh_group_gets_the_classic_ranges(group: GroupSpec) -> None:
    owners = owner_map(RangeAssignor().assign(group))
    for topic_id, members in subscribers_of(group).items():
        quota, extra = divmod(group.topics[topic_id].partition_count, len(members))
        expected: list[str] = []
        for position, member_id in enumerate(members):
            expected += [member_id] * (quota + (position < extra))
        assert [owners[(topic_id, p)] for p in range(len(expected))] == expected


@FAST
@given(changes(homogeneous=False) | changes(homogeneous=True))
def test_range_moves_only_what_balance_requires_per_copartitioned_set(
    change: tuple[GroupSpec, GroupSpec],
) -> None:
    before, after_group = change
    previous = RangeAssignor().assign(before)
    after_group = with_current(after_group, previous)
    after = RangeAssignor().assign(after_group)
    check_contract(after_group, after)
    owners = owner_map(after)
    previous_owners = owner_map(previous)
    sets: dict[tuple[tuple[str, ...], int], list[uuid.UUID]] = {}
    for topic_id, members in subscribers_of(after_group).items():
        sets.setdefault((tuple(members), after_group.topics[topic_id].partition_count), []).append(topic_id)
    for (members, count), topic_ids in sets.items():
        # The assignor's own previous result assigned the set's topics alike, unless the change
        # brought topics together that were apart (then the current owners disagree: not checked).
        current = []
        for p in range(count):
            holders = {previous_owners.get((topic_id, p)) for topic_id in topic_ids}
            if len(holders) != 1:
                break
            holder = holders.pop()
            current.append(holder if holder in members else None)
        else:
            kept = [current.count(member_id) for member_id in members]
            taken = sum(
                1 for p in range(count) if current[p] is not None and owners[(topic_ids[0], p)] != current[p]
            )
            assert taken == minimum_moves(kept, count)


# -- racks -----------------------------------------------------------------------------------------


@FAST
@given(groups(homogeneous=True, racks=True, claims=False), changes(homogeneous=True, racks=True))
def test_uniform_rack_preference_where_it_costs_no_balance(
    fresh: GroupSpec, change: tuple[GroupSpec, GroupSpec]
) -> None:
    before, after_group = change
    changed = with_current(after_group, UniformAssignor().assign(before))
    for group in (fresh, changed):
        result = UniformAssignor().assign(group)
        load = loads(result)
        for (topic_id, partition), member_id in owner_map(result).items():
            if partition in group.members[member_id].assigned.get(topic_id, frozenset()):
                continue  # kept: stickiness comes before locality
            racks = group.topics[topic_id].partition_racks
            replica_racks = racks[partition] if partition < len(racks) else frozenset()
            if not replica_racks or group.members[member_id].rack_id in replica_racks:
                continue
            for other in group.members.values():
                if other.rack_id in replica_racks:
                    assert load[other.member_id] >= load[member_id], (
                        topic_id,
                        partition,
                        member_id,
                        other.member_id,
                    )


@FAST
@given(groups(racks=True, claims=False))
def test_range_rack_preference_where_it_costs_no_balance(group: GroupSpec) -> None:
    result = RangeAssignor().assign(group)
    subscribers = subscribers_of(group)
    topics_by_set: dict[tuple[tuple[str, ...], int], list[uuid.UUID]] = {}
    for topic_id, members in subscribers.items():
        topics_by_set.setdefault((tuple(members), group.topics[topic_id].partition_count), []).append(
            topic_id
        )

    def local_racks(topic_ids: list[uuid.UUID], partition: int) -> frozenset[str]:
        common: frozenset[str] | None = None
        for topic_id in topic_ids:
            racks = group.topics[topic_id].partition_racks
            replica_racks = racks[partition] if partition < len(racks) else frozenset()
            common = replica_racks if common is None else common & replica_racks
        return common or frozenset()

    owners = owner_map(result)
    for (members, count), topic_ids in topics_by_set.items():
        racks = [local_racks(topic_ids, p) for p in range(count)]
        for p in range(count):
            holder = owners[(topic_ids[0], p)]
            if not racks[p] or group.members[holder].rack_id in racks[p]:
                continue
            # Remote: every member of the partition's racks holds only partitions local to it.
            for member_id in members:
                rack = group.members[member_id].rack_id
                if rack in racks[p]:
                    held = [q for q in range(count) if owners[(topic_ids[0], q)] == member_id]
                    assert all(rack in racks[q] for q in held), (p, holder, member_id)
