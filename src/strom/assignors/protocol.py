"""The consumer embedded protocol: subscriptions (JoinGroup metadata) and assignments (SyncGroup state).

On the wire each is an int16 version followed by the ConsumerProtocolSubscription or
ConsumerProtocolAssignment body of that version. The generated message classes encode and decode the
body; this module adds and strips the version prefix, converts between the generated classes and plain
`(topic, partition)` tuples, and applies Kafka's forward-compatibility rule: a version higher than we
know is read with the newest layout we know and the bytes after it are ignored (the JSON specs promise
that new versions only append fields).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from strom.protocol.messages.consumer_protocol import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)
from strom.protocol.primitives import DecodeError, Reader

TopicPartition = tuple[str, int]

# librdkafka 2.x (since KIP-881 rack support) and the Java client 3.5+ write version 3 of both
# messages; older readers parse the fields they know and skip the rest, so writing 3 is safe.
SUBSCRIPTION_VERSION_DEFAULT = 3
ASSIGNMENT_VERSION_DEFAULT = 3
SUBSCRIPTION_VERSION_MAX = ConsumerProtocolSubscription.MAX_VERSION
ASSIGNMENT_VERSION_MAX = ConsumerProtocolAssignment.MAX_VERSION

_VERSION_PREFIX = struct.Struct(">h")


@dataclass
class Subscription:
    """What one member asks for: its topics, assignor user data, and what it owns now (v1+)."""

    topics: list[str]
    user_data: bytes | None = None
    owned_partitions: list[TopicPartition] = field(default_factory=list)
    generation_id: int = -1
    rack_id: str | None = None


@dataclass
class Assignment:
    """What the leader gives one member: its partitions and assignor user data."""

    partitions: list[TopicPartition]
    user_data: bytes | None = None


def group_by_topic(partitions: list[TopicPartition]) -> list[tuple[str, list[int]]]:
    """Groups partitions by topic, topics in order of first appearance, partitions in given order."""
    grouped: dict[str, list[int]] = {}
    for topic, partition in partitions:
        grouped.setdefault(topic, []).append(partition)
    return list(grouped.items())


def _split_version(data: bytes | bytearray | memoryview, what: str) -> tuple[int, memoryview]:
    view = memoryview(data)
    if len(view) < _VERSION_PREFIX.size:
        raise DecodeError(f"{what}: {len(view)} bytes, too short for the int16 version prefix")
    (version,) = _VERSION_PREFIX.unpack_from(view)
    if version < 0:
        raise DecodeError(f"{what}: negative version {version}")
    return version, view[_VERSION_PREFIX.size :]


def encode_subscription(subscription: Subscription, version: int = SUBSCRIPTION_VERSION_DEFAULT) -> bytes:
    """The JoinGroup member metadata for `subscription`: int16 version + body of that version.

    Fields the chosen version does not have are dropped (owned partitions below v1, generation below
    v2, rack below v3), as every client does when talking to an older group.
    """
    if not 0 <= version <= SUBSCRIPTION_VERSION_MAX:
        raise ValueError(f"subscription version {version} is not one of 0-{SUBSCRIPTION_VERSION_MAX}")
    message = ConsumerProtocolSubscription(topics=list(subscription.topics), user_data=subscription.user_data)
    if version >= 1:
        message.owned_partitions = [
            ConsumerProtocolSubscription.TopicPartition(topic=topic, partitions=partitions)
            for topic, partitions in group_by_topic(subscription.owned_partitions)
        ]
    if version >= 2:
        message.generation_id = subscription.generation_id
    if version >= 3:
        message.rack_id = subscription.rack_id
    return _VERSION_PREFIX.pack(version) + message.encode(version)


def decode_subscription(data: bytes | bytearray | memoryview) -> Subscription:
    """Parses JoinGroup member metadata of any version; raises DecodeError if malformed.

    A version above the newest we know is read as the newest and the rest ignored (Kafka's rule for
    this message). For versions we know, bytes left over are an error.
    """
    version, body = _split_version(data, "ConsumerProtocolSubscription")
    known_version = min(version, SUBSCRIPTION_VERSION_MAX)
    reader = Reader(body)
    message = ConsumerProtocolSubscription.read(reader, known_version)
    if version <= SUBSCRIPTION_VERSION_MAX:
        reader.expect_end(ConsumerProtocolSubscription.NAME)
    return Subscription(
        topics=message.topics,
        user_data=message.user_data,
        owned_partitions=[
            (owned.topic, partition) for owned in message.owned_partitions for partition in owned.partitions
        ],
        generation_id=message.generation_id,
        rack_id=message.rack_id,
    )


def encode_assignment(assignment: Assignment, version: int = ASSIGNMENT_VERSION_DEFAULT) -> bytes:
    """The SyncGroup member state for `assignment`: int16 version + body (the same layout in 0-3)."""
    if not 0 <= version <= ASSIGNMENT_VERSION_MAX:
        raise ValueError(f"assignment version {version} is not one of 0-{ASSIGNMENT_VERSION_MAX}")
    message = ConsumerProtocolAssignment(
        assigned_partitions=[
            ConsumerProtocolAssignment.TopicPartition(topic=topic, partitions=partitions)
            for topic, partitions in group_by_topic(assignment.partitions)
        ],
        user_data=assignment.user_data,
    )
    return _VERSION_PREFIX.pack(version) + message.encode(version)


def decode_assignment(data: bytes | bytearray | memoryview) -> Assignment:
    """Parses SyncGroup member state of any version; empty bytes mean an empty assignment.

    The coordinator hands an empty state to members the leader left out, and clients treat that as
    "no partitions", so this does too.
    """
    if len(data) == 0:
        return Assignment(partitions=[], user_data=None)
    version, body = _split_version(data, "ConsumerProtocolAssignment")
    known_version = min(version, ASSIGNMENT_VERSION_MAX)
    reader = Reader(body)
    message = ConsumerProtocolAssignment.read(reader, known_version)
    if version <= ASSIGNMENT_VERSION_MAX:
        reader.expect_end(ConsumerProtocolAssignment.NAME)
    return Assignment(
        partitions=[
            (assigned.topic, partition)
            for assigned in message.assigned_partitions
            for partition in assigned.partitions
        ],
        user_data=message.user_data,
    )
