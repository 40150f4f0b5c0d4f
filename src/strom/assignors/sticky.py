"""The "sticky" (eager) and "cooperative-sticky" assignors: balanced, and moving as little as possible.

Both compute the same target assignment from what members owned before:

1. Ownership claims are resolved: a claim counts if the member still subscribes to the topic and the
   partition still exists; when several members claim one partition the highest generation wins
   (ties: the lowest member id), because the others hold a stale view of the group.
2. If every member subscribes to the same topics, the target is exact: with N partitions and M
   members each member gets N // M, and N % M of them one more. Those extra places go first to
   members that already own more than N // M (most first), so the fewest partitions move; every
   member keeps as many of its own partitions as its quota allows; the rest are dealt in turn to the
   members below quota. The number of moved partitions is then the minimum possible.
3. Otherwise (subscriptions differ) members keep what they own, unowned partitions go, those with the
   fewest candidates first, to the least loaded member subscribed to them, and then single partitions
   move from a member to one subscribed with at least two fewer until none can, preferring partitions
   the giver did not own before. The result is balanced in the sense the Java client uses: no single
   move can narrow the spread.

The eager "sticky" assignor learns what members owned from their subscription user data (the
StickyAssignorUserData layout Java and librdkafka write), falling back to the subscription's owned
partitions. "cooperative-sticky" reads the owned partitions and generation of subscription v1/v2 and
then applies KIP-429's rule: a partition whose owner changes is left out of both assignments in this
rebalance — the old owner sees it missing and revokes it, and the next rebalance, which the revoking
member triggers by rejoining, assigns it to its new owner. Partitions that stay are never revoked.
Because the follow-up round only sees what members kept, cooperative-sticky uses a target that the
follow-up reproduces from that (see `cooperative_target`).
"""

from __future__ import annotations

import struct

from strom.assignors.base import Assignor, GroupMember, RebalanceProtocol
from strom.assignors.protocol import Assignment, TopicPartition, group_by_topic
from strom.base import limits
from strom.protocol.primitives import DecodeError, Reader, Writer

# The generation a member reports before it has ever been assigned anything.
GENERATION_UNKNOWN = -1

_GENERATION = struct.Struct(">i")


# -- user data ---------------------------------------------------------------------------------------


def encode_sticky_user_data(partitions: list[TopicPartition], generation: int) -> bytes:
    """StickyAssignorUserData v1 as Java and librdkafka write it (no version prefix):
    `[topic: string, partitions: [int32]]` then `generation: int32`."""
    writer = Writer()
    grouped = group_by_topic(partitions)
    writer.array_length(len(grouped))
    for topic, topic_partitions in grouped:
        writer.string(topic)
        writer.array_length(len(topic_partitions))
        for partition in topic_partitions:
            writer.int32(partition)
    writer.int32(generation)
    return writer.getvalue()


def decode_sticky_user_data(data: bytes) -> tuple[list[TopicPartition], int]:
    """Reads StickyAssignorUserData v1, or v0 (no generation: GENERATION_UNKNOWN).

    There is no version prefix; like Java, the version is told by whether a generation follows the
    partition list. Raises DecodeError if the bytes are neither.
    """
    reader = Reader(data)
    partitions: list[TopicPartition] = []
    for _ in range(reader.array_length(6)):
        topic = reader.string()
        partitions.extend((topic, reader.int32()) for _ in range(reader.array_length(4)))
    if reader.remaining == 0:
        return partitions, GENERATION_UNKNOWN
    generation = reader.int32()
    reader.expect_end("StickyAssignorUserData")
    return partitions, generation


def encode_cooperative_user_data(generation: int) -> bytes:
    """The Java cooperative-sticky user data: the generation as one int32. Subscription v2 carries the
    generation itself; the user data keeps leaders older than v2 informed."""
    return _GENERATION.pack(generation)


# -- the shared algorithm ----------------------------------------------------------------------------


class Ownership:
    """Who owned what before, resolved, plus every claim as made (for cooperative revocation)."""

    def __init__(self) -> None:
        self.owner_of: dict[TopicPartition, str] = {}
        self.claimants_of: dict[TopicPartition, set[str]] = {}


def _resolve_ownership(
    partitions_per_topic: dict[str, int],
    members: list[GroupMember],
    previous: dict[str, tuple[list[TopicPartition], int]],
) -> Ownership:
    ownership = Ownership()
    winning_generation: dict[TopicPartition, int] = {}
    for member in sorted(members, key=lambda each: each.member_id):
        owned, generation = previous[member.member_id]
        topics = set(member.subscription.topics)
        for topic_partition in dict.fromkeys(owned):
            ownership.claimants_of.setdefault(topic_partition, set()).add(member.member_id)
            topic, partition = topic_partition
            if topic not in topics or not 0 <= partition < partitions_per_topic.get(topic, 0):
                continue
            if generation > winning_generation.get(topic_partition, GENERATION_UNKNOWN - 1):
                winning_generation[topic_partition] = generation
                ownership.owner_of[topic_partition] = member.member_id
    return ownership


def _subscribed_topics(member: GroupMember, partitions_per_topic: dict[str, int]) -> frozenset[str]:
    return frozenset(topic for topic in member.subscription.topics if topic in partitions_per_topic)


def _assign_equal_subscriptions(
    all_partitions: list[TopicPartition], member_ids: list[str], owner_of: dict[TopicPartition, str]
) -> dict[str, list[TopicPartition]]:
    """Exact quotas; see the module docstring, step 2. `member_ids` sorted."""
    owned_by: dict[str, list[TopicPartition]] = {member_id: [] for member_id in member_ids}
    for topic_partition in all_partitions:
        owner = owner_of.get(topic_partition)
        if owner is not None:
            owned_by[owner].append(topic_partition)
    quota, extra_places = divmod(len(all_partitions), len(member_ids))
    # Extra places to the members that would otherwise give up the most partitions. Among members
    # that lose nothing either way the lowest member ids take them: a rule that does not depend on
    # how much they own keeps the follow-up cooperative rebalance choosing the same members.
    over_quota = sorted(
        (member_id for member_id in member_ids if len(owned_by[member_id]) > quota),
        key=lambda member_id: (-len(owned_by[member_id]), member_id),
    )
    with_extra = set(over_quota[:extra_places])
    for member_id in member_ids:
        if len(with_extra) >= extra_places:
            break
        if len(owned_by[member_id]) <= quota:
            with_extra.add(member_id)
    target_count = {member_id: quota + (member_id in with_extra) for member_id in member_ids}
    assignment = {member_id: owned_by[member_id][: target_count[member_id]] for member_id in member_ids}
    kept = {topic_partition for partitions in assignment.values() for topic_partition in partitions}
    # Deal the rest one at a time so that each member gets a spread of topics, not one long run.
    below_quota = [
        member_id for member_id in member_ids if len(assignment[member_id]) < target_count[member_id]
    ]
    turn = 0
    for topic_partition in all_partitions:
        if topic_partition in kept:
            continue
        while len(assignment[below_quota[turn]]) >= target_count[below_quota[turn]]:
            turn = (turn + 1) % len(below_quota)
        assignment[below_quota[turn]].append(topic_partition)
        turn = (turn + 1) % len(below_quota)
    return assignment


def _assign_general(
    partitions_per_topic: dict[str, int],
    topics_of: dict[str, frozenset[str]],
    owner_of: dict[TopicPartition, str],
) -> dict[str, list[TopicPartition]]:
    """Greedy fill then single-partition moves; see the module docstring, step 3."""
    member_ids = sorted(topics_of)
    candidates_of: dict[TopicPartition, list[str]] = {}
    for topic in sorted(partitions_per_topic):
        subscribers = [member_id for member_id in member_ids if topic in topics_of[member_id]]
        if subscribers:
            for partition in range(partitions_per_topic[topic]):
                candidates_of[(topic, partition)] = subscribers
    assignment: dict[str, set[TopicPartition]] = {member_id: set() for member_id in member_ids}
    for topic_partition, owner in owner_of.items():
        assignment[owner].add(topic_partition)

    def least_loaded(topic_partition: TopicPartition) -> str:
        return min(
            candidates_of[topic_partition], key=lambda member_id: (len(assignment[member_id]), member_id)
        )

    unowned = sorted(
        (topic_partition for topic_partition in candidates_of if topic_partition not in owner_of),
        key=lambda topic_partition: (len(candidates_of[topic_partition]), topic_partition),
    )
    for topic_partition in unowned:
        assignment[least_loaded(topic_partition)].add(topic_partition)

    # Every move lowers the sum of squared member sizes by at least 2, so this ends.
    moved = True
    while moved:
        moved = False
        for giver in sorted(member_ids, key=lambda member_id: (-len(assignment[member_id]), member_id)):
            # Partitions the giver did not own before first: moving those costs no stickiness.
            for topic_partition in sorted(
                assignment[giver], key=lambda each: (owner_of.get(each) == giver, each)
            ):
                taker = least_loaded(topic_partition)
                if len(assignment[giver]) - len(assignment[taker]) >= 2:
                    assignment[giver].remove(topic_partition)
                    assignment[taker].add(topic_partition)
                    moved = True
                    break
            if moved:
                break
    return {member_id: sorted(partitions) for member_id, partitions in assignment.items()}


def sticky_target(
    partitions_per_topic: dict[str, int],
    members: list[GroupMember],
    previous: dict[str, tuple[list[TopicPartition], int]],
) -> tuple[dict[str, list[TopicPartition]], Ownership]:
    """The balanced, sticky assignment for `members` given what each owned before and at which
    generation (`previous[member_id] = (owned, generation)`), and the resolved ownership."""
    ownership = _resolve_ownership(partitions_per_topic, members, previous)
    if not members:
        return {}, ownership
    topics_of = {member.member_id: _subscribed_topics(member, partitions_per_topic) for member in members}
    distinct_subscriptions = set(topics_of.values())
    if len(distinct_subscriptions) == 1:
        (topics,) = distinct_subscriptions
        all_partitions = [
            (topic, partition) for topic in sorted(topics) for partition in range(partitions_per_topic[topic])
        ]
        target = _assign_equal_subscriptions(all_partitions, sorted(topics_of), ownership.owner_of)
    else:
        target = _assign_general(partitions_per_topic, topics_of, ownership.owner_of)
    return target, ownership


def _without_contested(
    target: dict[str, list[TopicPartition]], ownership: Ownership
) -> dict[str, list[TopicPartition]]:
    """`target` minus every partition another member may still be consuming: KIP-429's first round.

    A partition is held back when someone else claims it, unless this member is its rightful owner
    (it keeps it; the stale claimant revokes)."""
    kept: dict[str, list[TopicPartition]] = {}
    for member_id, partitions in target.items():
        kept[member_id] = [
            topic_partition
            for topic_partition in partitions
            if not ownership.claimants_of.get(topic_partition, set()) - {member_id}
            or ownership.owner_of.get(topic_partition) == member_id
        ]
    return kept


def _as_sets(assignment: dict[str, list[TopicPartition]]) -> dict[str, set[TopicPartition]]:
    return {member_id: set(partitions) for member_id, partitions in assignment.items()}


def cooperative_target(
    partitions_per_topic: dict[str, int],
    members: list[GroupMember],
    previous: dict[str, tuple[list[TopicPartition], int]],
) -> dict[str, list[TopicPartition]]:
    """What each member gets in this cooperative round: a sticky target minus contested partitions.

    The follow-up round sees only what members hold after this one, so it recomputes the target from
    that. The target must therefore reproduce itself from its own uncontested part, or the follow-up
    may hand a partition revoked here straight back to the member that revoked it. The greedy
    balancing for unequal subscriptions does not guarantee that (the order of its moves matters), so
    the target is recomputed from its uncontested part until it stops changing. From such a fixed
    point the follow-up round computes the same target, revokes nothing and completes it.
    """
    target, ownership = sticky_target(partitions_per_topic, members, previous)
    for _ in range(limits.cooperative_target_rounds_max):
        kept = _without_contested(target, ownership)
        # As the follow-up round will see the group: every claim uncontested, one generation.
        follow_up = {member_id: (partitions, 0) for member_id, partitions in kept.items()}
        next_target, _ = sticky_target(partitions_per_topic, members, follow_up)
        if _as_sets(next_target) == _as_sets(target):
            return kept
        target = next_target
    return _without_contested(target, ownership)


# -- the assignors -----------------------------------------------------------------------------------


class StickyAssignor(Assignor):
    """ "sticky": eager rebalancing; previous ownership travels in the subscription user data."""

    name = "sticky"
    supported_protocols = (RebalanceProtocol.EAGER,)
    version = 1

    def __init__(self) -> None:
        self.last_partitions: list[TopicPartition] | None = None
        self.last_generation = GENERATION_UNKNOWN

    def subscription_user_data(
        self, topics: set[str], owned: list[TopicPartition], generation: int
    ) -> bytes | None:
        """StickyAssignorUserData v1 of `owned` (or, if empty, the last assignment remembered by
        `on_assignment`) and `generation` (or the remembered one). None before any assignment, as
        Java sends."""
        partitions = owned or self.last_partitions
        if partitions is None:
            return None
        if generation == GENERATION_UNKNOWN:
            generation = self.last_generation
        return encode_sticky_user_data(partitions, generation)

    def on_assignment(self, assignment: Assignment, generation: int) -> None:
        self.last_partitions = list(assignment.partitions)
        self.last_generation = generation

    @staticmethod
    def previous_ownership(member: GroupMember) -> tuple[list[TopicPartition], int]:
        """What `member` owned and at which generation: its user data if it sent any, otherwise its
        subscription's owned partitions. Undecodable user data counts as owning nothing, so that one
        odd member cannot stop the group from being assigned."""
        subscription = member.subscription
        if subscription.user_data:
            try:
                return decode_sticky_user_data(subscription.user_data)
            except DecodeError:
                return [], GENERATION_UNKNOWN
        return list(subscription.owned_partitions), subscription.generation_id

    def assign(
        self, partitions_per_topic: dict[str, int], members: list[GroupMember]
    ) -> dict[str, Assignment]:
        previous = {member.member_id: self.previous_ownership(member) for member in members}
        target, _ = sticky_target(partitions_per_topic, members, previous)
        return {member.member_id: Assignment(partitions=target[member.member_id]) for member in members}


class CooperativeStickyAssignor(Assignor):
    """ "cooperative-sticky": the sticky target, minus partitions still owned by someone else.

    Supports COOPERATIVE and, like the Java client, EAGER too, so a consumer configured with it next
    to an eager assignor can still join a group that has not upgraded yet.
    """

    name = "cooperative-sticky"
    supported_protocols = (RebalanceProtocol.COOPERATIVE, RebalanceProtocol.EAGER)
    version = 0

    def __init__(self) -> None:
        self.last_generation = GENERATION_UNKNOWN

    def subscription_user_data(
        self, topics: set[str], owned: list[TopicPartition], generation: int
    ) -> bytes | None:
        if generation == GENERATION_UNKNOWN:
            generation = self.last_generation
        return encode_cooperative_user_data(generation)

    def on_assignment(self, assignment: Assignment, generation: int) -> None:
        self.last_generation = generation

    @staticmethod
    def previous_ownership(member: GroupMember) -> tuple[list[TopicPartition], int]:
        """The subscription's owned partitions, and its generation: the v2 field if set, else the
        generation in the user data (Java's int32, or a StickyAssignorUserData's)."""
        subscription = member.subscription
        generation = subscription.generation_id
        user_data = subscription.user_data
        if generation == GENERATION_UNKNOWN and user_data:
            if len(user_data) == _GENERATION.size:
                (generation,) = _GENERATION.unpack(user_data)
            else:
                try:
                    _, generation = decode_sticky_user_data(user_data)
                except DecodeError:
                    generation = GENERATION_UNKNOWN
        return list(subscription.owned_partitions), generation

    def assign(
        self, partitions_per_topic: dict[str, int], members: list[GroupMember]
    ) -> dict[str, Assignment]:
        previous = {member.member_id: self.previous_ownership(member) for member in members}
        target = cooperative_target(partitions_per_topic, members, previous)
        return {member_id: Assignment(partitions=partitions) for member_id, partitions in target.items()}
