"""Partition assignors for consumer groups: pure functions shared by strom's client and its tests.

Names and encodings are those of librdkafka and the Java client, so strom members can share a group
with either, whichever is the leader.
"""

from strom.assignors.base import (
    AssignmentError,
    Assignor,
    GroupMember,
    RebalanceProtocol,
    member_sort_key,
    subscribed_partitions,
)
from strom.assignors.protocol import (
    Assignment,
    Subscription,
    TopicPartition,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from strom.assignors.range_assignor import RangeAssignor
from strom.assignors.registry import ASSIGNORS, get_assignor
from strom.assignors.round_robin import RoundRobinAssignor
from strom.assignors.sticky import CooperativeStickyAssignor, StickyAssignor

__all__ = [
    "ASSIGNORS",
    "Assignment",
    "AssignmentError",
    "Assignor",
    "CooperativeStickyAssignor",
    "GroupMember",
    "RangeAssignor",
    "RebalanceProtocol",
    "RoundRobinAssignor",
    "StickyAssignor",
    "Subscription",
    "TopicPartition",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
    "get_assignor",
    "member_sort_key",
    "subscribed_partitions",
]
