"""The input of a server-side assignment, in the shape the built-in assignors work on.

Members become indexes in a fixed order (``member_order_key``), subscribed topics become indexes in
(name, id) order, and the current target becomes an owner per partition. Everything an assignor
iterates is then a list or an insertion-ordered dict, so the result does not depend on the order of
the caller's mappings or sets: the same group gives the same assignment on every broker.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from strom.assignors.server.base import GroupSpec, MemberSpec, TargetAssignment, TopicSpec

# The owner of a partition nobody holds.
UNOWNED = -1


def member_order_key(member: MemberSpec) -> tuple[int, str, str]:
    """The order members are dealt partitions in: static members (with a group.instance.id) first,
    by instance id, then dynamic members by member id (code point order, as the client-side
    assignors). A static member keeps its place across restarts, where it gets a new member id."""
    if member.instance_id is not None:
        return (0, member.instance_id, member.member_id)
    return (1, member.member_id, "")


@dataclass
class Problem:
    """One group's assignment input, indexed. Member ``m`` is ``members[m]``; topic ``t`` is
    ``topics[t]``; only topics that exist and that at least one member subscribes to are here."""

    members: list[MemberSpec]
    topics: list[TopicSpec]
    # Per member: the topics it subscribes to (indexes, ascending).
    subscriptions: list[tuple[int, ...]]
    # Per topic: its subscribers (member indexes, ascending).
    subscribers: list[list[int]]
    # Per topic, per partition: the member holding it in the current target, or UNOWNED. A claim
    # counts only if the member still subscribes to the topic and the partition still exists; when
    # two members claim one partition (the coordinator should not let that happen), the first in
    # member order keeps it.
    owners: list[list[int]]
    # Per member: its rack, or None. All None when no member's rack holds a replica of any
    # subscribed partition: then rack awareness cannot change anything and is skipped.
    member_racks: list[str | None]
    rack_aware: bool

    def partition_racks(self, topic: int, partition: int) -> frozenset[str]:
        """The racks of a partition's replicas (empty when unknown)."""
        racks = self.topics[topic].partition_racks
        return racks[partition] if partition < len(racks) else frozenset()

    def result(self, owners: list[list[int]]) -> dict[str, TargetAssignment]:
        """The assignment ``owners`` (per topic, per partition: a member index) as the interface
        returns it: every member present, a topic only where the member gets a partition of it."""
        per_member: list[dict[int, list[int]]] = [{} for _ in self.members]
        for topic, topic_owners in enumerate(owners):
            for partition, owner in enumerate(topic_owners):
                assert owner != UNOWNED, (self.topics[topic].name, partition)
                per_member[owner].setdefault(topic, []).append(partition)
        topic_ids = [topic.topic_id for topic in self.topics]
        return {
            member.member_id: {
                topic_ids[topic]: frozenset(partitions) for topic, partitions in assigned.items()
            }
            for member, assigned in zip(self.members, per_member)
        }

    def components(self) -> list[tuple[list[int], list[int]]]:
        """The parts of the group that share no topic: (members, topics), both ascending, in the
        order of their first topic. Members that subscribe to no existing topic are in none."""
        parent = list(range(len(self.topics)))

        def root(topic: int) -> int:
            while parent[topic] != topic:
                parent[topic] = parent[parent[topic]]
                topic = parent[topic]
            return topic

        for subscription in self.subscriptions:
            if subscription:
                first = root(subscription[0])
                for topic in subscription[1:]:
                    other = root(topic)
                    if other != first:
                        parent[other] = first
        parts: dict[int, tuple[list[int], list[int]]] = {}
        for topic in range(len(self.topics)):
            parts.setdefault(root(topic), ([], []))[1].append(topic)
        for member, subscription in enumerate(self.subscriptions):
            if subscription:
                parts[root(subscription[0])][0].append(member)
        return list(parts.values())

    def restricted(self, members: list[int], topics: list[int]) -> Problem:
        """The problem of one component: ``members`` and ``topics`` (ascending) renumbered from 0."""
        topic_position = {topic: index for index, topic in enumerate(topics)}
        member_position = {member: index for index, member in enumerate(members)}
        return Problem(
            members=[self.members[member] for member in members],
            topics=[self.topics[topic] for topic in topics],
            subscriptions=[
                tuple(topic_position[topic] for topic in self.subscriptions[member]) for member in members
            ],
            subscribers=[[member_position[member] for member in self.subscribers[topic]] for topic in topics],
            owners=[
                [UNOWNED if owner == UNOWNED else member_position[owner] for owner in self.owners[topic]]
                for topic in topics
            ],
            member_racks=[self.member_racks[member] for member in members],
            rack_aware=self.rack_aware,
        )


def build_problem(group: GroupSpec) -> Problem:
    for member_id, member in group.members.items():
        assert member_id == member.member_id, (member_id, member.member_id)
    members = sorted(group.members.values(), key=member_order_key)
    subscribed: set[uuid.UUID] = set()
    for member in members:
        subscribed.update(member.subscribed_topic_ids)
    topics = sorted(
        (group.topics[topic_id] for topic_id in subscribed if topic_id in group.topics),
        key=lambda topic: (topic.name, topic.topic_id.int),
    )
    for topic_spec in topics:
        assert topic_spec.partition_count >= 0, topic_spec
    topic_index = {topic.topic_id: index for index, topic in enumerate(topics)}

    subscriptions: list[tuple[int, ...]] = []
    subscribers: list[list[int]] = [[] for _ in topics]
    for member_index, member in enumerate(members):
        member_topics = tuple(
            sorted(
                topic_index[topic_id] for topic_id in member.subscribed_topic_ids if topic_id in topic_index
            )
        )
        subscriptions.append(member_topics)
        for index in member_topics:
            subscribers[index].append(member_index)

    owners = [[UNOWNED] * topic.partition_count for topic in topics]
    for member_index, member in enumerate(members):
        member_topics_set = set(subscriptions[member_index])
        for topic_id, partitions in member.assigned.items():
            found = topic_index.get(topic_id)
            if found is None or found not in member_topics_set:
                continue
            topic_owners = owners[found]
            count = len(topic_owners)
            for partition in partitions:
                if 0 <= partition < count and topic_owners[partition] == UNOWNED:
                    topic_owners[partition] = member_index

    member_racks = [member.rack_id for member in members]
    known_member_racks = {rack for rack in member_racks if rack is not None}
    rack_aware = bool(known_member_racks) and any(
        not known_member_racks.isdisjoint(racks) for topic in topics for racks in topic.partition_racks
    )
    if not rack_aware:
        member_racks = [None] * len(members)
    return Problem(
        members=members,
        topics=topics,
        subscriptions=subscriptions,
        subscribers=subscribers,
        owners=owners,
        member_racks=member_racks,
        rack_aware=rack_aware,
    )
