"""A group of the consumer group protocol (KIP-848): its data, and how each of its records sets it.

A consumer group is the group epoch, its members (metadata: subscription, rack, assignor, ...),
the subscribed topics' metadata the target was computed from, the target assignment (an epoch and
each member's partitions) and each member's current assignment (its epoch, the partitions it owns
and those it still has to revoke). Every one of these is one record of ``__consumer_offsets``
(``consumer_records.py``) and ``apply_*`` below set them: live handling applies the records it
wrote, loading applies the log's, in any order the compacted log gives them (each record sets one
key's whole value, so the order of different keys does not matter).

Derived indexes (who owns each partition, which member holds each instance id) are kept up to date
by the same ``apply_*``. Nothing here touches timers, the log or the network:
``consumer_membership.py`` drives the protocol.
"""

from __future__ import annotations

import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum, IntEnum

from strom.assignors.server import TopicSpec
from strom.protocol.errors import ErrorCode

# A member's partitions: topic id -> partition indexes (no empty sets).
Assignment = Mapping[uuid.UUID, frozenset[int]]
TopicPartition = tuple[uuid.UUID, int]

EMPTY_ASSIGNMENT: Assignment = {}


class MemberState(IntEnum):
    """Where a member is in its reconciliation (the State of its current-assignment record)."""

    # Owns exactly its target, at the target's epoch.
    STABLE = 0
    # Must give up ``pending_revocation`` before it moves on to the next epoch.
    UNREVOKED_PARTITIONS = 1
    # At the target's epoch, but part of its target is still owned by others that have to revoke it.
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


class ConsumerGroupState(Enum):
    """The state a consumer group shows (ListGroups, ConsumerGroupDescribe); derived, never stored."""

    EMPTY = "Empty"
    # The group epoch is past the target assignment's (a new target is being computed).
    ASSIGNING = "Assigning"
    # Some member has not reached the target yet.
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


# The member epoch of a static member that left for a while (heartbeat with epoch -2): it keeps
# its partitions until its session times out or its instance id joins again.
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
LEAVE_GROUP_MEMBER_EPOCH = -1
JOIN_GROUP_MEMBER_EPOCH = 0


def normalized(assignment: Mapping[uuid.UUID, Iterable[int]]) -> dict[uuid.UUID, frozenset[int]]:
    return {topic_id: frozenset(partitions) for topic_id, partitions in assignment.items() if partitions}


def partitions_of(assignment: Assignment) -> set[TopicPartition]:
    return {(topic_id, partition) for topic_id, partitions in assignment.items() for partition in partitions}


def assignment_of(partitions: Iterable[TopicPartition]) -> dict[uuid.UUID, frozenset[int]]:
    grouped: dict[uuid.UUID, set[int]] = {}
    for topic_id, partition in partitions:
        grouped.setdefault(topic_id, set()).add(partition)
    return {topic_id: frozenset(indexes) for topic_id, indexes in grouped.items()}


@dataclass(frozen=True)
class ClassicMetadata:
    """A member that speaks the classic protocol (JoinGroup/SyncGroup/Heartbeat) inside a consumer
    group: its session timeout and the protocols (assignor names, subscriptions) it offered."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True)
class MemberMetadata:
    """A member as it described itself in its heartbeats (the ConsumerGroupMemberMetadata record)."""

    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic: ClassicMetadata | None = None

    def subscription_differs(self, other: MemberMetadata) -> bool:
        """Whether the target assignment may depend on what changed between the two."""
        return (
            self.subscribed_topic_names != other.subscribed_topic_names
            or self.subscribed_topic_regex != other.subscribed_topic_regex
            or self.server_assignor != other.server_assignor
            or self.rack_id != other.rack_id
        )


@dataclass(frozen=True)
class MemberAssignment:
    """A member's current assignment (the ConsumerGroupCurrentMemberAssignment record)."""

    member_epoch: int
    previous_member_epoch: int
    state: MemberState
    assigned: Assignment
    pending_revocation: Assignment = field(default_factory=dict)

    def owned_partitions(self) -> set[TopicPartition]:
        return partitions_of(self.assigned) | partitions_of(self.pending_revocation)


# A member that just joined: nothing owned, epoch 0 (the reconciliation moves it to the target).
JOINING = MemberAssignment(
    member_epoch=JOIN_GROUP_MEMBER_EPOCH,
    previous_member_epoch=JOIN_GROUP_MEMBER_EPOCH,
    state=MemberState.STABLE,
    assigned=EMPTY_ASSIGNMENT,
)


@dataclass
class ConsumerGroup:
    group_id: str
    # The group epoch; None until the group's metadata record is applied (or after its tombstone).
    epoch: int | None = None
    members: dict[str, MemberMetadata] = field(default_factory=dict)
    # The subscribed topics' metadata the current target was computed from, by topic name.
    subscription_metadata: dict[str, TopicSpec] = field(default_factory=dict)
    target_epoch: int = 0
    targets: dict[str, Assignment] = field(default_factory=dict)
    current: dict[str, MemberAssignment] = field(default_factory=dict)

    # ---- derived from the above by apply_*
    # Partition -> the member owning it (assigned or pending revocation).
    partition_owners: dict[TopicPartition, str] = field(default_factory=dict)
    # group.instance.id -> member id.
    static_members: dict[str, str] = field(default_factory=dict)

    # ---- in memory only
    # A write of this group's records is in flight: operations on the group wait in ``waiting``
    # (each computes its records from the state the previous one's records left).
    writing: bool = False
    # (operation, how to fail it if the group goes away first)
    waiting: deque[tuple[Callable[[], None], Callable[[ErrorCode], None]]] = field(default_factory=deque)
    # Subscription regex -> the topic names it matched (cleared when topics change).
    regex_matches: dict[str, frozenset[str]] = field(default_factory=dict)
    # Topics changed since the subscription metadata was resolved: resolve again.
    metadata_stale: bool = False
    # Wall-clock ms at which the group lost its last member (offsets of an empty group expire
    # counting from it), -1 while it has members.
    empty_since_ms: int = -1
    # Member id -> the member epoch whose revocation its rebalance timer bounds.
    revoking: dict[str, int] = field(default_factory=dict)
    # The group was a classic group (with a record in the log) until this consumer group took its
    # place: the first write deletes the classic record.
    replaces_classic: bool = False

    # ================================================================ reading
    @property
    def group_epoch(self) -> int:
        return self.epoch if self.epoch is not None else 0

    @property
    def exists(self) -> bool:
        return self.epoch is not None

    def state(self) -> ConsumerGroupState:
        if not self.exists:
            return ConsumerGroupState.DEAD
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.target_epoch:
            return ConsumerGroupState.ASSIGNING
        for member_id in self.members:
            current = self.current.get(member_id, JOINING)
            if current.member_epoch != self.target_epoch or current.state is not MemberState.STABLE:
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def current_of(self, member_id: str) -> MemberAssignment:
        return self.current.get(member_id, JOINING)

    def target_of(self, member_id: str) -> Assignment:
        return self.targets.get(member_id, EMPTY_ASSIGNMENT)

    def owner_of(self, partition: TopicPartition) -> str | None:
        return self.partition_owners.get(partition)

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        for spec in self.subscription_metadata.values():
            if spec.topic_id == topic_id:
                return spec.name
        return None

    def subscribed_topic_names(self) -> frozenset[str]:
        """Topics some member subscribes to (names, and regexes as last resolved)."""
        names: set[str] = set()
        for member in self.members.values():
            names.update(member.subscribed_topic_names)
            if member.subscribed_topic_regex is not None:
                names.update(self.regex_matches.get(member.subscribed_topic_regex, ()))
        return frozenset(names) | frozenset(self.subscription_metadata)

    # ================================================================ applying records
    def apply_epoch(self, epoch: int | None) -> None:
        self.epoch = epoch

    def apply_subscription_metadata(self, topics: dict[str, TopicSpec]) -> None:
        self.subscription_metadata = topics

    def apply_member(self, member_id: str, metadata: MemberMetadata | None) -> None:
        previous = self.members.pop(member_id, None)
        if (
            previous is not None
            and previous.instance_id is not None
            and self.static_members.get(previous.instance_id) == member_id
        ):
            del self.static_members[previous.instance_id]
        if metadata is None:
            return
        self.members[member_id] = metadata
        if metadata.instance_id is not None:
            self.static_members[metadata.instance_id] = member_id

    def apply_target_epoch(self, epoch: int) -> None:
        self.target_epoch = epoch

    def apply_target(self, member_id: str, assignment: Assignment | None) -> None:
        if assignment is None:
            self.targets.pop(member_id, None)
        else:
            self.targets[member_id] = assignment

    def apply_current(self, member_id: str, assignment: MemberAssignment | None) -> None:
        previous = self.current.pop(member_id, None)
        if previous is not None:
            for partition in previous.owned_partitions():
                if self.partition_owners.get(partition) == member_id:
                    del self.partition_owners[partition]
        if assignment is None:
            return
        self.current[member_id] = assignment
        for partition in assignment.owned_partitions():
            self.partition_owners[partition] = member_id

    def prune_orphans(self) -> None:
        """Loaded: a target or an assignment without its member's metadata (a log cut short) is
        dropped, so that no partition stays owned by a member that does not exist."""
        for member_id in [member_id for member_id in self.current if member_id not in self.members]:
            self.apply_current(member_id, None)
        for member_id in [member_id for member_id in self.targets if member_id not in self.members]:
            self.apply_target(member_id, None)

    def is_empty_of_state(self) -> bool:
        """Nothing left of the group: no metadata, no member, no target, no assignment."""
        return not (self.exists or self.members or self.targets or self.current or self.subscription_metadata)
