"""``uniform``: the default server-side assignor (Kafka 4's default too). Balanced first, then
sticky, then rack-local.

Homogeneous subscriptions (every member subscribes to the same existing topics), ``P`` partitions
over ``M`` members: every member gets ``P // M`` or one more, exactly ``P % M`` members one more.

1. Every member keeps the partitions of its current target that are still valid (the topic is
   still subscribed and the partition exists; a partition two members claim stays with the first in
   member order).
2. The ``P % M`` places with one more go first to the members that already keep more than
   ``P // M``, most kept first; every member over its share gives its surplus back (with racks:
   partitions in no rack of its own first). This is the fewest moves any balanced assignment makes:
   the sum over members of what they keep beyond ``P // M``, less one for each of the ``P % M`` places
   such a member fills.
3. The free partitions, in topic and partition order, are dealt round the members short of their
   share, in member order (a fresh group gets every topic spread round all members). With racks, a
   free partition first goes to a member in a rack holding one of its replicas while one has room
   (the partitions with the fewest such members first, the least loaded such member), the rest are
   dealt as above; then a partition in no rack of its owner moves to a member of its racks when that keeps the
   balance (its owner has the one extra, the other not).

Heterogeneous subscriptions: the members keep their valid partitions; the free ones go, topics with
the fewest subscribers first, to the least loaded subscriber (ties: one in the partition's racks, then
member order); then single moves from a member to a subscriber with at least two fewer (the most
loaded members give first, the topics with the fewest subscribers first), and then
chains of moves (a member hands a partition of topic A to a subscriber of A, which hands one of topic
B on, ... to a member with at least two fewer than the first) until there is none. An assignment
with no such chain is as balanced as the subscriptions allow: no other one has a smaller maximum, or
a smaller sum of squared loads (an optimal "semi-matching"). Only the chains' end members change
load, so members keep what balance lets them keep; the members inside a chain trade one partition
for another.

Cost: homogeneous, linear in partitions and members (with racks, times log members and replicas);
heterogeneous, the same plus the moves and a breadth-first search over members per chain.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable

from strom.assignors.server.base import GroupSpec, ServerAssignor, TargetAssignment
from strom.assignors.server.problem import UNOWNED, Problem, build_problem

# How many of a giver's partitions of a topic a move looks through for one local to the receiver and
# not to the giver (its last received first): without a bound, a member giving away thousands of
# partitions none of which suits would look through all of them for every move (quadratic).
RACK_SEARCH_PARTITIONS_MAX = 16


class UniformAssignor(ServerAssignor):
    """Balanced, sticky and rack-aware; see the module's docstring for the rules."""

    name = "uniform"

    def assign(self, group: GroupSpec) -> dict[str, TargetAssignment]:
        problem = build_problem(group)
        if not problem.members:
            return {}
        components = problem.components()
        if len(components) == 1 and len(components[0][0]) == len(problem.members):
            return problem.result(_assign_component(problem))
        # Parts of the group that share no topic are assigned each on its own: each may have the
        # same subscriptions throughout though the group does not.
        owners: list[list[int]] = [[] for _ in problem.topics]
        for members, topics in components:
            component_owners = _assign_component(problem.restricted(members, topics))
            for topic, topic_owners in zip(topics, component_owners):
                owners[topic] = [members[owner] for owner in topic_owners]
        return problem.result(owners)


def _assign_component(problem: Problem) -> list[list[int]]:
    if len(set(problem.subscriptions)) == 1:
        return _assign_homogeneous(problem)
    return _assign_heterogeneous(problem)


def _assign_homogeneous(problem: Problem) -> list[list[int]]:
    member_count = len(problem.members)
    # Partitions as one sequence: topic by topic, in topic order.
    owner: list[int] = []
    for topic_owners in problem.owners:
        owner.extend(topic_owners)
    partition_count = len(owner)
    quota, extra = divmod(partition_count, member_count)
    member_racks = problem.member_racks

    # Per partition, the racks of its replicas (only looked at when racks matter).
    partition_racks: list[frozenset[str]] = []
    if problem.rack_aware:
        for topic in problem.topics:
            known = topic.partition_racks[: topic.partition_count]
            partition_racks.extend(known)
            partition_racks.extend([frozenset()] * (topic.partition_count - len(known)))

    kept: list[list[int]] = [[] for _ in range(member_count)]
    for index, member in enumerate(owner):
        if member != UNOWNED:
            kept[member].append(index)

    # The places with one more go to the members keeping the most beyond the quota.
    over = sorted((m for m in range(member_count) if len(kept[m]) > quota), key=lambda m: (-len(kept[m]), m))
    target = [quota] * member_count
    for member in over[:extra]:
        target[member] = quota + 1
    extra_left = extra - min(extra, len(over))
    for member in range(member_count):
        if extra_left == 0:
            break
        if target[member] == quota:
            target[member] = quota + 1
            extra_left -= 1

    for member in over:
        member_kept = kept[member]
        if len(member_kept) <= target[member]:
            continue
        if problem.rack_aware:
            rack = member_racks[member]
            member_kept.sort(key=lambda index: (rack not in partition_racks[index], index))
        for index in member_kept[target[member] :]:
            owner[index] = UNOWNED
        del member_kept[target[member] :]

    load = [len(member_kept) for member_kept in kept]
    free = [index for index in range(partition_count) if owner[index] == UNOWNED]
    if problem.rack_aware:
        free = _place_in_racks(problem, free, owner, load, target, partition_racks)

    # Deal the rest round the members still short, in member order.
    short = deque(m for m in range(member_count) if load[m] < target[m])
    for index in free:
        member = short.popleft()
        owner[index] = member
        load[member] += 1
        if load[member] < target[member]:
            short.append(member)
    assert not short, "the free partitions fill every member's share exactly"

    if problem.rack_aware and extra:
        _move_extras_into_racks(problem, free, owner, load, quota, partition_racks)

    owners: list[list[int]] = []
    start = 0
    for topic_owners in problem.owners:
        owners.append(owner[start : start + len(topic_owners)])
        start += len(topic_owners)
    return owners


def _members_by_rack(problem: Problem) -> dict[str, list[int]]:
    by_rack: dict[str, list[int]] = {}
    for member, rack in enumerate(problem.member_racks):
        if rack is not None:
            by_rack.setdefault(rack, []).append(member)
    return by_rack


def _place_in_racks(
    problem: Problem,
    free: list[int],
    owner: list[int],
    load: list[int],
    target: list[int],
    partition_racks: list[frozenset[str]],
) -> list[int]:
    """Gives free partitions to members of their replicas' racks while such a member is short of
    its share; returns the partitions left. The partitions with the fewest such members go first,
    each to the least loaded of them."""
    by_rack = _members_by_rack(problem)
    # Per distinct set of replica racks: those with members, and how many members they have.
    local_racks: dict[frozenset[str], tuple[tuple[str, ...], int]] = {}
    candidates: list[tuple[int, int, tuple[str, ...]]] = []
    left: list[int] = []
    for index in free:
        replica_racks = partition_racks[index]
        local = local_racks.get(replica_racks)
        if local is None:
            racks = tuple(sorted(rack for rack in replica_racks if rack in by_rack))
            local = local_racks[replica_racks] = (racks, sum(len(by_rack[rack]) for rack in racks))
        if local[0]:
            candidates.append((local[1], index, local[0]))
        else:
            left.append(index)
    if not candidates:
        return free
    candidates.sort()
    heaps: dict[str, list[tuple[int, int]]] = {}
    for rack, members in by_rack.items():
        heap = [(load[member], member) for member in members if load[member] < target[member]]
        heapq.heapify(heap)
        heaps[rack] = heap
    heappop = heapq.heappop
    for _, index, racks in candidates:
        best: list[tuple[int, int]] | None = None
        for rack in racks:
            heap = heaps[rack]
            while heap:
                entry_load, member = heap[0]
                if entry_load == load[member] and entry_load < target[member]:
                    if best is None or heap[0] < best[0]:
                        best = heap
                    break
                heappop(heap)
        if best is None:
            left.append(index)
            continue
        # The member's entry is the top of its rack's heap: replace it by its new load.
        member = best[0][1]
        owner[index] = member
        load[member] += 1
        if load[member] < target[member]:
            heapq.heapreplace(best, (load[member], member))
        else:
            heappop(best)
    left.sort()
    return left


def _move_extras_into_racks(
    problem: Problem,
    placed: list[int],
    owner: list[int],
    load: list[int],
    quota: int,
    partition_racks: list[frozenset[str]],
) -> None:
    """A placed partition in no rack of its owner, whose owner holds one more than the quota, moves
    to a member of one of its racks that holds the quota: the balance is the same, one more partition
    is local. Repeated until no such move is left (each makes one more partition local)."""
    by_rack = _members_by_rack(problem)
    member_racks = problem.member_racks
    remote = [
        index
        for index in placed
        if member_racks[owner[index]] not in partition_racks[index]
        and any(rack in by_rack for rack in partition_racks[index])
    ]
    if not remote:
        return
    heaps: dict[str, list[tuple[int, int]]] = {}
    for rack, members in by_rack.items():
        heap = [(load[member], member) for member in members]
        heapq.heapify(heap)
        heaps[rack] = heap

    def push(member: int) -> None:
        rack = member_racks[member]
        if rack is not None:
            heapq.heappush(heaps[rack], (load[member], member))

    moved = True
    while moved:
        moved = False
        for index in remote:
            member = owner[index]
            racks = partition_racks[index]
            if member_racks[member] in racks or load[member] != quota + 1:
                continue
            best: tuple[int, int] | None = None
            for rack in sorted(racks):
                rack_heap = heaps.get(rack)
                if rack_heap is None:
                    continue
                while rack_heap and rack_heap[0][0] != load[rack_heap[0][1]]:
                    heapq.heappop(rack_heap)
                if rack_heap and rack_heap[0][0] == quota and (best is None or rack_heap[0] < best):
                    best = rack_heap[0]
            if best is None:
                continue
            receiver = best[1]
            owner[index] = receiver
            load[member] -= 1
            load[receiver] += 1
            push(member)
            push(receiver)
            moved = True


def _assign_heterogeneous(problem: Problem) -> list[list[int]]:
    member_count = len(problem.members)
    owners = [list(topic_owners) for topic_owners in problem.owners]
    subscribers = problem.subscribers
    member_racks = problem.member_racks
    # Per member: topic -> its partitions of it (an insertion-ordered dict used as an ordered set:
    # the kept partitions first, ascending, then those it received).
    held: list[dict[int, dict[int, None]]] = [{} for _ in range(member_count)]
    load = [0] * member_count
    for topic, topic_owners in enumerate(owners):
        for partition, member in enumerate(topic_owners):
            if member != UNOWNED:
                held[member].setdefault(topic, {})[partition] = None
                load[member] += 1

    def give(topic: int, partition: int, member: int) -> None:
        owners[topic][partition] = member
        held[member].setdefault(topic, {})[partition] = None
        load[member] += 1

    # Free partitions: topics with the fewest subscribers first, each partition to the least loaded.
    for topic in sorted(range(len(owners)), key=lambda topic: (len(subscribers[topic]), topic)):
        free = [partition for partition, member in enumerate(owners[topic]) if member == UNOWNED]
        if not free:
            continue
        heap = [(load[member], member) for member in subscribers[topic]]
        heapq.heapify(heap)
        rack_heaps: dict[str, list[tuple[int, int]]] = {}
        if problem.rack_aware:
            for member in subscribers[topic]:
                rack = member_racks[member]
                if rack is not None:
                    rack_heaps.setdefault(rack, []).append((load[member], member))
            for rack_heap in rack_heaps.values():
                heapq.heapify(rack_heap)
        for partition in free:
            while heap[0][0] != load[heap[0][1]]:
                heapq.heappop(heap)
            best = heap[0]
            racks = problem.partition_racks(topic, partition) if rack_heaps else frozenset()
            if racks and member_racks[best[1]] not in racks:
                # Among the least loaded, one in a rack of the partition's replicas.
                local: tuple[int, int] | None = None
                for rack in sorted(racks):
                    rack_heap = rack_heaps.get(rack, [])
                    while rack_heap and rack_heap[0][0] != load[rack_heap[0][1]]:
                        heapq.heappop(rack_heap)
                    if rack_heap and rack_heap[0][0] == best[0] and (local is None or rack_heap[0] < local):
                        local = rack_heap[0]
                if local is not None:
                    best = local
            member = best[1]
            give(topic, partition, member)
            heapq.heappush(heap, (load[member], member))
            rack = member_racks[member]
            if rack is not None and rack in rack_heaps:
                heapq.heappush(rack_heaps[rack], (load[member], member))

    def take(topic: int, giver: int, receiver: int) -> int:
        """Removes and returns one of ``giver``'s partitions of ``topic`` for ``receiver``: the last
        it received (kept partitions leave last); with racks, one local to the receiver and not to
        the giver if it has one."""
        partitions = held[giver][topic]
        chosen: int | None = None
        receiver_rack = member_racks[receiver]
        if receiver_rack is not None and receiver_rack != member_racks[giver]:
            giver_rack = member_racks[giver]
            topic_racks = problem.topics[topic].partition_racks
            for _, partition in zip(range(RACK_SEARCH_PARTITIONS_MAX), reversed(partitions)):
                racks = topic_racks[partition] if partition < len(topic_racks) else frozenset()
                if receiver_rack in racks and giver_rack not in racks:
                    chosen = partition
                    break
        if chosen is None:
            chosen, _ = partitions.popitem()
        else:
            del partitions[chosen]
        if not partitions:
            del held[giver][topic]
        load[giver] -= 1
        return chosen

    _single_moves(problem, held, load, take, give)
    _chains(problem, held, load, take, give)
    return owners


def _single_moves(
    problem: Problem,
    held: list[dict[int, dict[int, None]]],
    load: list[int],
    take: Callable[[int, int, int], int],
    give: Callable[[int, int, int], None],
) -> None:
    """Moves single partitions from a member to a subscriber of the partition's topic with at least
    two fewer, the most loaded members giving first, until no such move is left."""
    subscribers = problem.subscribers
    # Each member's topics, the fewest subscribers first (as when placing free partitions).
    topic_order = [
        sorted(subscription, key=lambda topic: (len(subscribers[topic]), topic))
        for subscription in problem.subscriptions
    ]
    heaps: list[list[tuple[int, int]]] = []

    # Topic heaps of (load, member) are corrected lazily, when an outdated entry comes to the top: a
    # member that gave may then be found late, so a sweep ends with the heaps rebuilt and repeats
    # until one makes no move (then none is possible).
    def lightest(topic: int) -> tuple[int, int] | None:
        heap = heaps[topic]
        while heap:
            entry_load, member = heap[0]
            current = load[member]
            if entry_load == current:
                return heap[0]
            heapq.heapreplace(heap, (current, member))
        return None

    moved = True
    while moved:
        moved = False
        heaps = [
            [(load[member], member) for member in topic_subscribers] for topic_subscribers in subscribers
        ]
        for heap in heaps:
            heapq.heapify(heap)
        # The most loaded member that can give gives first: the maximum only falls, so a member
        # that gave is not given to afterwards (no partition is moved to make room for another).
        givers = [(-load[member], member) for member in range(len(load)) if held[member]]
        heapq.heapify(givers)
        while givers:
            negative_load, giver = heapq.heappop(givers)
            if -negative_load != load[giver]:
                continue
            for topic in topic_order[giver]:
                if topic not in held[giver]:
                    continue
                entry = lightest(topic)
                if entry is None or load[giver] < entry[0] + 2:
                    continue
                receiver = entry[1]
                give(topic, take(topic, giver, receiver), receiver)
                heapq.heappush(givers, (-load[giver], giver))
                heapq.heappush(givers, (-load[receiver], receiver))
                moved = True
                break


def _chains(
    problem: Problem,
    held: list[dict[int, dict[int, None]]],
    load: list[int],
    take: Callable[[int, int, int], int],
    give: Callable[[int, int, int], None],
) -> None:
    """Applies chains of moves that lower a member by one and raise one with at least two fewer,
    until none is left (then the assignment is as balanced as the subscriptions allow)."""
    subscribers = problem.subscribers

    def find_chain(level: int) -> list[tuple[int, int, int]] | None:
        """A chain from a member with ``level`` partitions to one with ``level - 2`` or fewer, as
        (giver, topic, receiver) steps, breadth first; None if there is none."""
        sources = [member for member in range(len(load)) if load[member] == level]
        reached_from: dict[int, tuple[int, int]] = {}
        seen = set(sources)
        expanded: set[int] = set()
        queue = deque(sources)
        while queue:
            giver = queue.popleft()
            for topic in held[giver]:
                if topic in expanded:
                    continue
                expanded.add(topic)
                for receiver in subscribers[topic]:
                    if receiver in seen:
                        continue
                    seen.add(receiver)
                    reached_from[receiver] = (giver, topic)
                    if load[receiver] <= level - 2:
                        steps: list[tuple[int, int, int]] = []
                        member = receiver
                        while member in reached_from:
                            previous, via = reached_from[member]
                            steps.append((previous, via, member))
                            member = previous
                        return steps
                    queue.append(receiver)
        return None

    while True:
        levels = sorted(set(load), reverse=True)
        lowest = levels[-1]
        chain = None
        for level in levels:
            if level < lowest + 2:
                break
            chain = find_chain(level)
            if chain is not None:
                break
        if chain is None:
            return
        # Every giver of a chain gives a partition it held before the chain (a topic is expanded
        # once, so no member passes on what it receives); the order of the steps does not matter.
        for giver, topic, receiver in chain:
            partition = take(topic, giver, receiver)
            give(topic, partition, receiver)
