"""Redundant partitioning: every partition goes to `copies` distinct members.

Seed 002's search indexers each want a full replica of some partitions. Each member consumes (and
commits offsets for) the partitions it is given, so every record is processed `copies` times by
design; the members must not share committed offsets for one partition unless that is what they want
— typically each replica set runs in its own group or keeps its own positions.
"""

from __future__ import annotations

from strom.assignors.base import Assignor, GroupMember, RebalanceProtocol, member_sort_key
from strom.assignors.protocol import Assignment, TopicPartition


class RedundantAssignor(Assignor):
    """ "redundant": each partition to the `copies` least loaded members subscribed to its topic (all
    of them if fewer subscribe)."""

    name = "redundant"
    supported_protocols = (RebalanceProtocol.EAGER,)

    def __init__(self, copies: int = 2) -> None:
        if copies < 1:
            raise ValueError(f"redundant: copies must be at least 1, not {copies}")
        self.copies = copies

    def assign(
        self, partitions_per_topic: dict[str, int], members: list[GroupMember]
    ) -> dict[str, Assignment]:
        assigned: dict[str, list[TopicPartition]] = {member.member_id: [] for member in members}
        ordered = sorted(members, key=member_sort_key)
        order_of = {member.member_id: index for index, member in enumerate(ordered)}
        for topic in sorted(partitions_per_topic):
            subscribers = [member.member_id for member in ordered if topic in member.subscription.topics]
            for partition in range(partitions_per_topic[topic]):
                least_loaded = sorted(
                    subscribers, key=lambda member_id: (len(assigned[member_id]), order_of[member_id])
                )
                for member_id in least_loaded[: self.copies]:
                    assigned[member_id].append((topic, partition))
        return {member_id: Assignment(partitions=partitions) for member_id, partitions in assigned.items()}
