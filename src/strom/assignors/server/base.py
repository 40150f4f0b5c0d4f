"""The interface of a server-side assignor (the consumer group protocol, KIP-848).

The group coordinator calls ``assign`` whenever the group's epoch moves past its target assignment's
epoch (a member joined, left or changed its subscription; a subscribed topic gained partitions or
appeared). The assignor sees every member (with its subscription, rack and the partitions of the
current target assignment it holds, for stickiness) and the metadata of every subscribed topic, and
returns the new target assignment: for every member, the partitions it should own. The coordinator
then moves each member towards its target, revoking before assigning, so an assignor never has to
care about the order of moves.

Contract (the property tests in tests/unit/assignors/server check it for every built-in assignor):
- every partition of a topic some member subscribes to is assigned to exactly one member that
  subscribes to it; no member gets a partition of a topic it does not subscribe to;
- the result names every member (with an empty assignment if it gets nothing);
- it is a pure function: the same input gives the same output, no I/O, no clock, no randomness.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

# A member's partitions: topic id -> partition indexes.
TargetAssignment = dict[uuid.UUID, frozenset[int]]


@dataclass(frozen=True)
class MemberSpec:
    """One member as the assignor sees it."""

    member_id: str
    # group.instance.id of a static member, else None.
    instance_id: str | None
    # The member's rack (client.rack), else None.
    rack_id: str | None
    # The ids of the existing topics the member subscribes to (names and a regex already resolved).
    subscribed_topic_ids: frozenset[uuid.UUID]
    # The member's partitions in the current target assignment (empty for a new member).
    assigned: Mapping[uuid.UUID, frozenset[int]] = field(default_factory=dict)


@dataclass(frozen=True)
class TopicSpec:
    """A subscribed topic's metadata."""

    topic_id: uuid.UUID
    name: str
    partition_count: int
    # Per partition (index = partition), the racks of its replicas; empty when racks are unknown.
    partition_racks: tuple[frozenset[str], ...] = ()


@dataclass(frozen=True)
class GroupSpec:
    """The input of one assignment."""

    members: Mapping[str, MemberSpec]
    topics: Mapping[uuid.UUID, TopicSpec]


class ServerAssignor(ABC):
    """A server-side assignor. ``name`` is what members ask for in ``group.remote.assignor`` and what
    ``group.consumer.assignors`` lists."""

    name: ClassVar[str]

    @abstractmethod
    def assign(self, group: GroupSpec) -> dict[str, TargetAssignment]:
        """The new target assignment: member id -> its partitions (every member present)."""
