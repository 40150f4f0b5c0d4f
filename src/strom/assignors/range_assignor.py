"""The "range" assignor: contiguous runs of each topic's partitions, topic by topic."""

from __future__ import annotations

from strom.assignors.base import Assignor, GroupMember, RebalanceProtocol, member_sort_key
from strom.assignors.protocol import Assignment, TopicPartition


class RangeAssignor(Assignor):
    """For each topic, the members subscribed to it in `member_sort_key` order split its partitions
    into contiguous ranges; the first `partitions % members` members get one extra.

    Same result as librdkafka's and the Java client's "range" (without rack information: neither
    client's rack-aware refinement applies when the leader knows no partition racks).
    """

    name = "range"
    supported_protocols = (RebalanceProtocol.EAGER,)

    def assign(
        self, partitions_per_topic: dict[str, int], members: list[GroupMember]
    ) -> dict[str, Assignment]:
        assigned: dict[str, list[TopicPartition]] = {member.member_id: [] for member in members}
        ordered_members = sorted(members, key=member_sort_key)
        for topic in sorted(partitions_per_topic):
            subscribers = [member for member in ordered_members if topic in member.subscription.topics]
            if not subscribers:
                continue
            partition_count = partitions_per_topic[topic]
            per_member, with_extra = divmod(partition_count, len(subscribers))
            start = 0
            for index, member in enumerate(subscribers):
                length = per_member + (1 if index < with_extra else 0)
                assigned[member.member_id].extend(
                    (topic, partition) for partition in range(start, start + length)
                )
                start += length
        return {member_id: Assignment(partitions=partitions) for member_id, partitions in assigned.items()}
