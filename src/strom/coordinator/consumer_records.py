"""The ConsumerGroup* records of ``__consumer_offsets``: how a consumer group is written and read.

A record's key is the int16 key version (the schema's "type": 3 group metadata, 4 subscribed topic
metadata, 5 member metadata, 6 target assignment metadata, 7 a member's target assignment, 8 a
member's current assignment) and the key struct; its value the int16 value version (0) and the
value struct; a null value (tombstone) deletes the key's state.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable
from typing import NamedTuple, Protocol

from strom.assignors.server import TopicSpec
from strom.coordinator.consumer_group import (
    Assignment,
    ClassicMetadata,
    ConsumerGroup,
    MemberAssignment,
    MemberMetadata,
    MemberState,
    normalized,
)
from strom.coordinator.records import CorruptCoordinatorRecord, Record
from strom.protocol.coordinator_records.consumer_group_current_member_assignment import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
)
from strom.protocol.coordinator_records.consumer_group_member_metadata import (
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
)
from strom.protocol.coordinator_records.consumer_group_metadata import (
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
)
from strom.protocol.coordinator_records.consumer_group_partition_metadata import (
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
)
from strom.protocol.coordinator_records.consumer_group_target_assignment_member import (
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
)
from strom.protocol.coordinator_records.consumer_group_target_assignment_metadata import (
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
)

METADATA_KEY_VERSION = 3
SUBSCRIPTION_METADATA_KEY_VERSION = 4
MEMBER_METADATA_KEY_VERSION = 5
TARGET_METADATA_KEY_VERSION = 6
TARGET_MEMBER_KEY_VERSION = 7
CURRENT_ASSIGNMENT_KEY_VERSION = 8
CONSUMER_KEY_VERSIONS = frozenset(range(METADATA_KEY_VERSION, CURRENT_ASSIGNMENT_KEY_VERSION + 1))
_VALUE_VERSION = 0
_VERSION = struct.Struct(">h")


class ConsumerKey(NamedTuple):
    """A consumer group record's key: its version (which record), the group, and the member if any."""

    version: int
    group_id: str
    member_id: str | None


def decode_consumer_key(version: int, body: bytes) -> ConsumerKey:
    try:
        if version == METADATA_KEY_VERSION:
            return ConsumerKey(version, ConsumerGroupMetadataKey.decode(body, version).group_id, None)
        if version == SUBSCRIPTION_METADATA_KEY_VERSION:
            group_id = ConsumerGroupPartitionMetadataKey.decode(body, version).group_id
            return ConsumerKey(version, group_id, None)
        if version == TARGET_METADATA_KEY_VERSION:
            group_id = ConsumerGroupTargetAssignmentMetadataKey.decode(body, version).group_id
            return ConsumerKey(version, group_id, None)
        if version == MEMBER_METADATA_KEY_VERSION:
            member_key = ConsumerGroupMemberMetadataKey.decode(body, version)
            return ConsumerKey(version, member_key.group_id, member_key.member_id)
        if version == TARGET_MEMBER_KEY_VERSION:
            target_key = ConsumerGroupTargetAssignmentMemberKey.decode(body, version)
            return ConsumerKey(version, target_key.group_id, target_key.member_id)
        if version == CURRENT_ASSIGNMENT_KEY_VERSION:
            current_key = ConsumerGroupCurrentMemberAssignmentKey.decode(body, version)
            return ConsumerKey(version, current_key.group_id, current_key.member_id)
    except ValueError as error:
        raise CorruptCoordinatorRecord(f"key version {version}: {error}") from error
    raise CorruptCoordinatorRecord(f"unknown key version {version}")


def _value(version_and_body: bytes, what: str) -> bytes:
    if len(version_and_body) < _VERSION.size:
        raise CorruptCoordinatorRecord(f"{what} of {len(version_and_body)} bytes has no version")
    (version,) = _VERSION.unpack_from(version_and_body)
    if version != _VALUE_VERSION:
        raise CorruptCoordinatorRecord(f"{what}: unknown value version {version}")
    return version_and_body[_VERSION.size :]


class _Encodable(Protocol):
    def encode(self, version: int) -> bytes: ...


def _key(version: int, key: _Encodable) -> bytes:
    return _VERSION.pack(version) + key.encode(version)


def _pack_value(value: _Encodable) -> bytes:
    return _VERSION.pack(_VALUE_VERSION) + value.encode(_VALUE_VERSION)


# ==================================================================== writing
def epoch_record(group_id: str, epoch: int | None) -> Record:
    key = _key(METADATA_KEY_VERSION, ConsumerGroupMetadataKey(group_id=group_id))
    if epoch is None:
        return key, None
    return key, _pack_value(ConsumerGroupMetadataValue(epoch=epoch))


def subscription_metadata_record(group_id: str, topics: dict[str, TopicSpec] | None) -> Record:
    key = _key(SUBSCRIPTION_METADATA_KEY_VERSION, ConsumerGroupPartitionMetadataKey(group_id=group_id))
    if topics is None:
        return key, None
    value = ConsumerGroupPartitionMetadataValue(
        topics=[
            ConsumerGroupPartitionMetadataValue.TopicMetadata(
                topic_id=spec.topic_id,
                topic_name=spec.name,
                num_partitions=spec.partition_count,
                partition_metadata=[
                    ConsumerGroupPartitionMetadataValue.PartitionMetadata(
                        partition=partition, racks=sorted(racks)
                    )
                    for partition, racks in enumerate(spec.partition_racks)
                ],
            )
            for _, spec in sorted(topics.items())
        ]
    )
    return key, _pack_value(value)


def member_record(group_id: str, member_id: str, metadata: MemberMetadata | None) -> Record:
    key = _key(
        MEMBER_METADATA_KEY_VERSION, ConsumerGroupMemberMetadataKey(group_id=group_id, member_id=member_id)
    )
    if metadata is None:
        return key, None
    value = ConsumerGroupMemberMetadataValue(
        instance_id=metadata.instance_id,
        rack_id=metadata.rack_id,
        client_id=metadata.client_id,
        client_host=metadata.client_host,
        subscribed_topic_names=list(metadata.subscribed_topic_names),
        subscribed_topic_regex=metadata.subscribed_topic_regex,
        rebalance_timeout_ms=metadata.rebalance_timeout_ms,
        server_assignor=metadata.server_assignor,
        classic_member_metadata=None
        if metadata.classic is None
        else ConsumerGroupMemberMetadataValue.ClassicMemberMetadata(
            session_timeout_ms=metadata.classic.session_timeout_ms,
            supported_protocols=[
                ConsumerGroupMemberMetadataValue.ClassicProtocol(name=name, metadata=data)
                for name, data in metadata.classic.protocols
            ],
        ),
    )
    return key, _pack_value(value)


def target_epoch_record(group_id: str, epoch: int | None) -> Record:
    key = _key(TARGET_METADATA_KEY_VERSION, ConsumerGroupTargetAssignmentMetadataKey(group_id=group_id))
    if epoch is None:
        return key, None
    return key, _pack_value(ConsumerGroupTargetAssignmentMetadataValue(assignment_epoch=epoch))


def target_record(group_id: str, member_id: str, assignment: Assignment | None) -> Record:
    key = _key(
        TARGET_MEMBER_KEY_VERSION,
        ConsumerGroupTargetAssignmentMemberKey(group_id=group_id, member_id=member_id),
    )
    if assignment is None:
        return key, None
    value = ConsumerGroupTargetAssignmentMemberValue(
        topic_partitions=[
            ConsumerGroupTargetAssignmentMemberValue.TopicPartition(
                topic_id=topic_id, partitions=sorted(partitions)
            )
            for topic_id, partitions in sorted(assignment.items())
        ]
    )
    return key, _pack_value(value)


def current_record(group_id: str, member_id: str, current: MemberAssignment | None) -> Record:
    key = _key(
        CURRENT_ASSIGNMENT_KEY_VERSION,
        ConsumerGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=member_id),
    )
    if current is None:
        return key, None

    def topic_partitions(
        assignment: Assignment,
    ) -> list[ConsumerGroupCurrentMemberAssignmentValue.TopicPartitions]:
        return [
            ConsumerGroupCurrentMemberAssignmentValue.TopicPartitions(
                topic_id=topic_id, partitions=sorted(partitions)
            )
            for topic_id, partitions in sorted(assignment.items())
        ]

    value = ConsumerGroupCurrentMemberAssignmentValue(
        member_epoch=current.member_epoch,
        previous_member_epoch=current.previous_member_epoch,
        state=int(current.state),
        assigned_partitions=topic_partitions(current.assigned),
        partitions_pending_revocation=topic_partitions(current.pending_revocation),
    )
    return key, _pack_value(value)


def member_tombstones(group_id: str, member_id: str) -> list[Record]:
    """A member leaving: its current assignment, its target and its metadata, in that order."""
    return [
        current_record(group_id, member_id, None),
        target_record(group_id, member_id, None),
        member_record(group_id, member_id, None),
    ]


def group_tombstones(group: ConsumerGroup) -> list[Record]:
    """Every record of the group deleted (members first, then the group's own)."""
    records: list[Record] = []
    member_ids = set(group.members) | set(group.targets) | set(group.current)
    for member_id in sorted(member_ids):
        records.extend(member_tombstones(group.group_id, member_id))
    records.append(target_epoch_record(group.group_id, None))
    records.append(subscription_metadata_record(group.group_id, None))
    records.append(epoch_record(group.group_id, None))
    return records


# ==================================================================== reading
def apply_consumer_record(group: ConsumerGroup, key: ConsumerKey, value: bytes | None) -> None:
    """Set the state ``key`` names to ``value`` (None: delete it)."""
    version = key.version
    try:
        if version == METADATA_KEY_VERSION:
            epoch = None
            if value is not None:
                epoch = ConsumerGroupMetadataValue.decode(_value(value, "group metadata"), 0).epoch
            group.apply_epoch(epoch)
        elif version == SUBSCRIPTION_METADATA_KEY_VERSION:
            topics: dict[str, TopicSpec] = {}
            if value is not None:
                decoded = ConsumerGroupPartitionMetadataValue.decode(_value(value, "topic metadata"), 0)
                for topic in decoded.topics:
                    racks: list[frozenset[str]] = [frozenset()] * topic.num_partitions
                    for partition in topic.partition_metadata:
                        if 0 <= partition.partition < topic.num_partitions:
                            racks[partition.partition] = frozenset(partition.racks)
                    topics[topic.topic_name] = TopicSpec(
                        topic_id=topic.topic_id,
                        name=topic.topic_name,
                        partition_count=topic.num_partitions,
                        partition_racks=tuple(racks) if topic.partition_metadata else (),
                    )
            group.apply_subscription_metadata(topics)
        elif version == TARGET_METADATA_KEY_VERSION:
            target_epoch = 0
            if value is not None:
                target_epoch = ConsumerGroupTargetAssignmentMetadataValue.decode(
                    _value(value, "target metadata"), 0
                ).assignment_epoch
            group.apply_target_epoch(target_epoch)
        else:
            assert key.member_id is not None, f"member record without a member: {key}"
            _apply_member_record(group, key.version, key.member_id, value)
    except ValueError as error:
        if isinstance(error, CorruptCoordinatorRecord):
            raise
        raise CorruptCoordinatorRecord(f"record of key version {version}: {error}") from error


def _apply_member_record(group: ConsumerGroup, version: int, member_id: str, value: bytes | None) -> None:
    if version == MEMBER_METADATA_KEY_VERSION:
        metadata = None
        if value is not None:
            decoded = ConsumerGroupMemberMetadataValue.decode(_value(value, "member metadata"), 0)
            metadata = MemberMetadata(
                member_id=member_id,
                instance_id=decoded.instance_id,
                rack_id=decoded.rack_id,
                client_id=decoded.client_id,
                client_host=decoded.client_host,
                subscribed_topic_names=tuple(decoded.subscribed_topic_names),
                subscribed_topic_regex=decoded.subscribed_topic_regex,
                rebalance_timeout_ms=decoded.rebalance_timeout_ms,
                server_assignor=decoded.server_assignor,
                classic=None
                if decoded.classic_member_metadata is None
                else ClassicMetadata(
                    session_timeout_ms=decoded.classic_member_metadata.session_timeout_ms,
                    protocols=tuple(
                        (protocol.name, protocol.metadata)
                        for protocol in decoded.classic_member_metadata.supported_protocols
                    ),
                ),
            )
        group.apply_member(member_id, metadata)
    elif version == TARGET_MEMBER_KEY_VERSION:
        target = None
        if value is not None:
            decoded_target = ConsumerGroupTargetAssignmentMemberValue.decode(
                _value(value, "target assignment"), 0
            )
            target = _assignment((tp.topic_id, tp.partitions) for tp in decoded_target.topic_partitions)
        group.apply_target(member_id, target)
    elif version == CURRENT_ASSIGNMENT_KEY_VERSION:
        current = None
        if value is not None:
            decoded_current = ConsumerGroupCurrentMemberAssignmentValue.decode(
                _value(value, "current assignment"), 0
            )
            try:
                state = MemberState(decoded_current.state)
            except ValueError:
                state = MemberState.UNKNOWN
            current = MemberAssignment(
                member_epoch=decoded_current.member_epoch,
                previous_member_epoch=decoded_current.previous_member_epoch,
                state=state,
                assigned=_assignment(
                    (tp.topic_id, tp.partitions) for tp in decoded_current.assigned_partitions
                ),
                pending_revocation=_assignment(
                    (tp.topic_id, tp.partitions) for tp in decoded_current.partitions_pending_revocation
                ),
            )
        group.apply_current(member_id, current)
    else:
        raise CorruptCoordinatorRecord(f"unknown key version {version}")


def _assignment(pairs: Iterable[tuple[uuid.UUID, list[int]]]) -> Assignment:
    merged: dict[uuid.UUID, set[int]] = {}
    for topic_id, partitions in pairs:
        merged.setdefault(topic_id, set()).update(partitions)
    return normalized(merged)
