"""The "roundrobin" assignor: all partitions dealt one at a time around the members."""

from __future__ import annotations

from strom.assignors.base import Assignor, GroupMember, RebalanceProtocol, member_sort_key
from strom.assignors.protocol import Assignment, TopicPartition


class RoundRobinAssignor(Assignor):
    """Every subscribed partition, sorted by topic then partition, goes to the next member (in
    `member_sort_key` order, wrapping around) that subscribes to its topic; the deal continues from
    the member after the one that took it.

    Same result as librdkafka's and the Java client's "roundrobin".
    """

    name = "roundrobin"
    supported_protocols = (RebalanceProtocol.EAGER,)

    def assign(
        self, partitions_per_topic: dict[str, int], members: list[GroupMember]
    ) -> dict[str, Assignment]:
        assigned: dict[str, list[TopicPartition]] = {member.member_id: [] for member in members}
        ordered_members = sorted(members, key=member_sort_key)
        topics_of = [set(member.subscription.topics) for member in ordered_members]
        subscribed_topics = {topic for topics in topics_of for topic in topics}
        next_index = 0
        for topic in sorted(subscribed_topics & partitions_per_topic.keys()):
            for partition in range(partitions_per_topic[topic]):
                # Some member subscribes to this topic, so the search ends within one lap.
                while topic not in topics_of[next_index]:
                    next_index = (next_index + 1) % len(ordered_members)
                assigned[ordered_members[next_index].member_id].append((topic, partition))
                next_index = (next_index + 1) % len(ordered_members)
        return {member_id: Assignment(partitions=partitions) for member_id, partitions in assigned.items()}
