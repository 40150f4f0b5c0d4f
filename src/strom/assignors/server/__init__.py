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
from strom.assignors.server.problem import member_order_key
from strom.assignors.server.range_assignor import RangeAssignor
from strom.assignors.server.registry import (
    DEFAULT_SERVER_ASSIGNOR,
    SERVER_ASSIGNORS,
    get_server_assignor,
    register_server_assignor,
)
from strom.assignors.server.uniform import UniformAssignor

__all__ = [
    "DEFAULT_SERVER_ASSIGNOR",
    "SERVER_ASSIGNORS",
    "GroupSpec",
    "MemberSpec",
    "RangeAssignor",
    "ServerAssignor",
    "TargetAssignment",
    "TopicSpec",
    "UniformAssignor",
    "get_server_assignor",
    "member_order_key",
    "register_server_assignor",
]
