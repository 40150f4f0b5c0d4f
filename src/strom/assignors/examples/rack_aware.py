"""Rack awareness: consume each partition from a member in a rack that holds a replica of it.

Reading from a replica in the same rack (or availability zone) saves cross-rack traffic. Members say
their rack in the subscription's `rack_id` (version 3; librdkafka's and Java's `client.rack`); the
leader needs to know where each partition's replicas live, which the consumer takes from Metadata
and passes in as `partition_racks`.
"""

from __future__ import annotations

import math

from strom.assignors.base import Assignor, GroupMember, RebalanceProtocol, member_sort_key
from strom.assignors.protocol import Assignment, TopicPartition


class RackAwareAssignor(Assignor):
    """ "rack-aware": partitions go to a subscribed member in one of their replica racks while that
    member holds fewer than its fair share (ceil(partitions / members)); the rest, and partitions no
    member shares a rack with, go to the least loaded subscribed member."""

    name = "rack-aware"
    supported_protocols = (RebalanceProtocol.EAGER,)

    def __init__(self, partition_racks: dict[TopicPartition, set[str]]) -> None:
        self.partition_racks = partition_racks

    def assign(
        self, partitions_per_topic: dict[str, int], members: list[GroupMember]
    ) -> dict[str, Assignment]:
        assigned: dict[str, list[TopicPartition]] = {member.member_id: [] for member in members}
        ordered = sorted(members, key=member_sort_key)
        order_of = {member.member_id: index for index, member in enumerate(ordered)}
        subscribers_of = {
            topic: [member for member in ordered if topic in member.subscription.topics]
            for topic in sorted(partitions_per_topic)
        }
        all_partitions = [
            (topic, partition)
            for topic, subscribers in subscribers_of.items()
            if subscribers
            for partition in range(partitions_per_topic[topic])
        ]
        if not all_partitions:
            return {member_id: Assignment(partitions=[]) for member_id in assigned}
        fair_share = math.ceil(len(all_partitions) / len(members))

        def least_loaded(candidates: list[GroupMember]) -> str:
            return min(
                (member.member_id for member in candidates),
                key=lambda member_id: (len(assigned[member_id]), order_of[member_id]),
            )

        def same_rack(topic_partition: TopicPartition) -> list[GroupMember]:
            racks = self.partition_racks.get(topic_partition, set())
            return [
                member
                for member in subscribers_of[topic_partition[0]]
                if member.subscription.rack_id in racks
            ]

        # Partitions with the fewest same-rack candidates first, so that scarce matches are not used
        # up by partitions that had other choices.
        left_over: list[TopicPartition] = []
        for topic_partition in sorted(all_partitions, key=lambda each: (len(same_rack(each)), each)):
            candidates = [
                member
                for member in same_rack(topic_partition)
                if len(assigned[member.member_id]) < fair_share
            ]
            if candidates:
                assigned[least_loaded(candidates)].append(topic_partition)
            else:
                left_over.append(topic_partition)
        for topic_partition in left_over:
            assigned[least_loaded(subscribers_of[topic_partition[0]])].append(topic_partition)
        return {
            member_id: Assignment(partitions=sorted(partitions)) for member_id, partitions in assigned.items()
        }
