"""Co-partitioning: partition p of every subscribed topic goes to the same member.

A join of two topics keyed the same way (seed 002, KIP-28) needs orders-3 and payments-3 in one
process, so that matching keys meet. This works only when every topic has the same number of
partitions and every member subscribes to the same topics; otherwise it refuses rather than split a
join across members.
"""

from __future__ import annotations

from strom.assignors.base import AssignmentError, Assignor, GroupMember, RebalanceProtocol, member_sort_key
from strom.assignors.protocol import Assignment, TopicPartition


class CoPartitionedAssignor(Assignor):
    """ "copartitioned": contiguous runs of partition numbers, each run with all its topics."""

    name = "copartitioned"
    supported_protocols = (RebalanceProtocol.EAGER,)

    def assign(
        self, partitions_per_topic: dict[str, int], members: list[GroupMember]
    ) -> dict[str, Assignment]:
        if not members:
            return {}
        subscriptions = {
            frozenset(topic for topic in member.subscription.topics if topic in partitions_per_topic)
            for member in members
        }
        if len(subscriptions) != 1:
            raise AssignmentError(
                "copartitioned: members subscribe to different topics, so partition p of every topic "
                "cannot go to one member"
            )
        (topics,) = subscriptions
        counts = {topic: partitions_per_topic[topic] for topic in sorted(topics)}
        if len(set(counts.values())) > 1:
            raise AssignmentError(f"copartitioned: topics have different partition counts {counts}")
        partition_count = next(iter(counts.values()), 0)
        assigned: dict[str, list[TopicPartition]] = {member.member_id: [] for member in members}
        ordered = sorted(members, key=member_sort_key)
        per_member, with_extra = divmod(partition_count, len(ordered))
        start = 0
        for index, member in enumerate(ordered):
            end = start + per_member + (1 if index < with_extra else 0)
            assigned[member.member_id] = [
                (topic, partition) for partition in range(start, end) for topic in sorted(topics)
            ]
            start = end
        return {member_id: Assignment(partitions=partitions) for member_id, partitions in assigned.items()}
