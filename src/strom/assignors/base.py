"""The interface every partition assignor implements, built-in or custom.

A consumer group assigns partitions on the client (seed 002): every member sends a `Subscription`
for each assignor it supports, the coordinator picks a name all members share, and the elected leader
runs that assignor's `assign` over every member's subscription. The result goes back through
SyncGroup as one `Assignment` per member.

An assignor is a plain object with no I/O: the consumer feeds it metadata and subscriptions and sends
what it returns. To write one, subclass `Assignor`, set `name` (the string on the wire — every member
of the group must use the same one), `supported_protocols`, and implement `assign`; override
`subscription_user_data` and `on_assignment` only if the assignor carries state between rebalances.
See docs/assignors.md.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from enum import Enum
from typing import ClassVar

from strom.assignors.protocol import Assignment, Subscription, TopicPartition


class RebalanceProtocol(Enum):
    """How members give up partitions during a rebalance.

    EAGER: every member revokes everything before rejoining. COOPERATIVE: members keep what they own
    and revoke only what the new assignment takes away (KIP-429), in a follow-up rebalance.
    """

    EAGER = 0
    COOPERATIVE = 1


class AssignmentError(ValueError):
    """The group's subscriptions or metadata cannot be assigned by this assignor (e.g. a
    co-partitioned join over topics with different partition counts). The leader reports it instead
    of sending a wrong assignment."""


@dataclass(frozen=True)
class GroupMember:
    """One member as the leader sees it in the JoinGroup response."""

    member_id: str
    group_instance_id: str | None
    subscription: Subscription


def member_sort_key(member: GroupMember) -> tuple[int, str]:
    """The order range and roundrobin deal partitions in: the Java client's order.

    Static members (with a group.instance.id) come first, ordered by instance id, then dynamic members
    ordered by member id. librdkafka orders two static members by instance id and any other pair by
    member id, so the two agree whenever the group is all static or all dynamic; for mixed groups this
    follows Java, whose order is total (librdkafka's comparison is not transitive there).
    """
    if member.group_instance_id is not None:
        return (0, member.group_instance_id)
    return (1, member.member_id)


def subscribed_partitions(partitions_per_topic: dict[str, int], topics: set[str]) -> list[TopicPartition]:
    """All partitions of the topics in `topics` that exist in the metadata, sorted by topic, partition."""
    return [
        (topic, partition)
        for topic in sorted(topics)
        if topic in partitions_per_topic
        for partition in range(partitions_per_topic[topic])
    ]


class Assignor(ABC):
    """A partition assignment strategy. Subclasses set the three class attributes and `assign`."""

    # The protocol name in JoinGroup ("range", "roundrobin", ...): must match the other clients'.
    name: ClassVar[str]
    supported_protocols: ClassVar[tuple[RebalanceProtocol, ...]] = (RebalanceProtocol.EAGER,)
    # A version of the assignor's own user data; informational, bumped when its encoding changes.
    version: ClassVar[int] = 0

    def subscription_user_data(
        self, topics: set[str], owned: list[TopicPartition], generation: int
    ) -> bytes | None:
        """User data this member sends in its subscription (None: nothing). Default: nothing."""
        return None

    @abstractmethod
    def assign(
        self, partitions_per_topic: dict[str, int], members: list[GroupMember]
    ) -> dict[str, Assignment]:
        """Assigns partitions to members. Run on the leader only.

        `partitions_per_topic` holds the partition count of every topic any member subscribed to that
        exists (topics missing from it are ignored). The result has an entry for every member id,
        possibly with no partitions.
        """

    def on_assignment(self, assignment: Assignment, generation: int) -> None:  # noqa: B027
        """Called on every member with its new assignment; stateful assignors remember it here."""
