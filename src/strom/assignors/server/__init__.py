"""Server-side assignors for the consumer group protocol (KIP-848): the coordinator computes each
member's target assignment itself, with the assignor the members chose (``group.remote.assignor``)
among those the broker offers (``group.consumer.assignors``).

Pure functions of the group's members and the subscribed topics' metadata; see ``base.py`` for the
interface and docs/assignors.md for how to add one.
"""

from strom.assignors.server.base import (
    GroupSpec,
    MemberSpec,
    ServerAssignor,
    TargetAssignment,
    TopicSpec,
)

__all__ = ["GroupSpec", "MemberSpec", "ServerAssignor", "TargetAssignment", "TopicSpec"]
