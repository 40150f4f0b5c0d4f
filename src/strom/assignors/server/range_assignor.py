"""``range``: per topic, the partitions cut in ranges over the topic's subscribers; co-partitioned
topics assigned alike; sticky; rack-aware.

Topics with the same subscribers and the same partition count form one *co-partitioned set* and get
one assignment of partition numbers: partition ``p`` of each goes to the same member (a join of
``orders`` and ``payments`` keyed alike finds both sides in one member). Per set, with ``N``
partition numbers and ``K`` subscribers in member order (static members by group.instance.id first,
then dynamic members by member id — ``problem.member_order_key``):

1. The current owner of number ``p`` is the member holding ``p`` in most of the set's topics (ties:
   member order); every subscriber keeps the numbers it owns, up to its share.
2. Shares are ``N // K``, plus one for ``N % K`` members: first the members that own more than
   ``N // K``, most first, then the first members in member order (so a fresh group gets exactly the
   classic ranges: the first ``N % K`` members one more). A member over its share gives back what it
   owns beyond it (with racks: the numbers in no rack of its own first, then the highest).
3. Members short of their share take the free numbers: with racks, first the free numbers whose
   replicas are all in the member's rack (in every topic of the set; the numbers with the fewest
   members in their racks first), then, member by member in member order, the lowest free numbers —
   contiguous runs, so a fresh group without racks gets the classic range assignment.

Balanced per topic (members' counts of one topic differ by at most one) but not across topics: as
the classic range assignor, the first members get the extra partition of every topic.
"""

from __future__ import annotations

from strom.assignors.server.base import GroupSpec, ServerAssignor, TargetAssignment
from strom.assignors.server.problem import UNOWNED, Problem, build_problem


class RangeAssignor(ServerAssignor):
    """Range assignment per co-partitioned set of topics, sticky and rack-aware; see the module's
    docstring for the rules."""

    name = "range"

    def assign(self, group: GroupSpec) -> dict[str, TargetAssignment]:
        problem = build_problem(group)
        if not problem.members:
            return {}
        copartitioned: dict[tuple[tuple[int, ...], int], list[int]] = {}
        for topic, topic_owners in enumerate(problem.owners):
            key = (tuple(problem.subscribers[topic]), len(topic_owners))
            copartitioned.setdefault(key, []).append(topic)
        owners: list[list[int]] = [[] for _ in problem.topics]
        for (members, partition_count), topics in copartitioned.items():
            numbers = _assign_set(problem, list(members), partition_count, topics)
            for topic in topics:
                owners[topic] = list(numbers)
        return problem.result(owners)


def _current_owners(problem: Problem, partition_count: int, topics: list[int]) -> list[int]:
    if len(topics) == 1:
        return problem.owners[topics[0]]
    current = [UNOWNED] * partition_count
    for number in range(partition_count):
        votes: dict[int, int] = {}
        for topic in topics:
            member = problem.owners[topic][number]
            if member != UNOWNED:
                votes[member] = votes.get(member, 0) + 1
        if votes:
            current[number] = min(votes, key=lambda member: (-votes[member], member))
    return current


def _set_racks(problem: Problem, partition_count: int, topics: list[int]) -> list[frozenset[str]]:
    """Per partition number, the racks holding a replica of it in every topic of the set."""
    racks: list[frozenset[str]] = []
    for number in range(partition_count):
        common = problem.partition_racks(topics[0], number)
        for topic in topics[1:]:
            if not common:
                break
            common = common & problem.partition_racks(topic, number)
        racks.append(common)
    return racks


def _assign_set(problem: Problem, members: list[int], partition_count: int, topics: list[int]) -> list[int]:
    """The owner (a member index) of every partition number of one co-partitioned set."""
    member_count = len(members)
    quota, extra = divmod(partition_count, member_count)
    position = {member: index for index, member in enumerate(members)}
    owner = list(_current_owners(problem, partition_count, topics))

    kept: list[list[int]] = [[] for _ in members]
    for number, member in enumerate(owner):
        if member != UNOWNED:
            kept[position[member]].append(number)

    over = sorted((i for i in range(member_count) if len(kept[i]) > quota), key=lambda i: (-len(kept[i]), i))
    share = [quota] * member_count
    for i in over[:extra]:
        share[i] = quota + 1
    extra_left = extra - min(extra, len(over))
    for i in range(member_count):
        if extra_left == 0:
            break
        if share[i] == quota:
            share[i] = quota + 1
            extra_left -= 1

    racks = _set_racks(problem, partition_count, topics) if problem.rack_aware else []
    member_racks = [problem.member_racks[member] for member in members]
    for i in over:
        member_kept = kept[i]
        if len(member_kept) <= share[i]:
            continue
        if racks:
            rack = member_racks[i]
            member_kept.sort(key=lambda number: (rack not in racks[number], number))
        for number in member_kept[share[i] :]:
            owner[number] = UNOWNED
        del member_kept[share[i] :]

    load = [len(member_kept) for member_kept in kept]
    if racks:
        _take_local(members, member_racks, racks, owner, load, share)

    free = [number for number in range(partition_count) if owner[number] == UNOWNED]
    next_free = 0
    for i in range(member_count):
        wanted = share[i] - load[i]
        if wanted <= 0:
            continue
        for number in free[next_free : next_free + wanted]:
            owner[number] = members[i]
        next_free += wanted
        load[i] = share[i]
    assert next_free == len(free), "the free numbers fill every member's share exactly"
    return owner


def _take_local(
    members: list[int],
    member_racks: list[str | None],
    racks: list[frozenset[str]],
    owner: list[int],
    load: list[int],
    share: list[int],
) -> None:
    """Members short of their share, in member order, take free numbers local to their rack: the
    numbers with the fewest members in their racks first, then the lowest."""
    members_in_rack: dict[str, int] = {}
    for rack in member_racks:
        if rack is not None:
            members_in_rack[rack] = members_in_rack.get(rack, 0) + 1
    local: dict[str, list[int]] = {rack: [] for rack in members_in_rack}
    candidates = sorted(
        (sum(members_in_rack.get(rack, 0) for rack in number_racks), number)
        for number, number_racks in enumerate(racks)
        if owner[number] == UNOWNED and number_racks
    )
    for count, number in candidates:
        if count == 0:
            continue
        for rack in racks[number]:
            if rack in local:
                local[rack].append(number)
    cursor = dict.fromkeys(local, 0)
    for i, rack in enumerate(member_racks):
        if rack is None:
            continue
        numbers = local[rack]
        while load[i] < share[i] and cursor[rack] < len(numbers):
            number = numbers[cursor[rack]]
            cursor[rack] += 1
            if owner[number] == UNOWNED:
                owner[number] = members[i]
                load[i] += 1
