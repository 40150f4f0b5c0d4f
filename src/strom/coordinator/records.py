"""The ``__consumer_offsets`` record encoding: int16 key version + key struct, int16 value version + value.

Key version 0/1 is an offset commit (``OffsetCommitKey``), 2 a group (``GroupMetadataKey``). Values:
offsets are written as ``OffsetCommitValue`` v1 when the commit carries an explicit expiry (OffsetCommit
v2-4 with a retention time) and v3 otherwise (leader epoch); groups as ``GroupMetadataValue`` v3.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from strom.protocol.coordinator_records.group_metadata import GroupMetadataKey, GroupMetadataValue
from strom.protocol.coordinator_records.offset_commit import OffsetCommitKey, OffsetCommitValue
from strom.protocol.errors import ErrorCode

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
GROUP_VALUE_VERSION = 3
OFFSET_VALUE_VERSION_WITH_EXPIRY = 1
OFFSET_VALUE_VERSION = 3

_VERSION = struct.Struct(">h")

Record = tuple[bytes, bytes | None]


class CoordinatorLogWriter(Protocol):
    def append(
        self,
        partition: int,
        records: list[tuple[bytes, bytes | None]],
        on_complete: Callable[[ErrorCode], None],
    ) -> None: ...


class CorruptCoordinatorRecord(ValueError):
    """A record of __consumer_offsets that is not a known key/value layout."""


@dataclass(frozen=True)
class OffsetKey:
    group_id: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupKey:
    group_id: str


@dataclass(frozen=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    # -1 unless the commit asked for its own retention (OffsetCommit v2-4).
    expire_timestamp_ms: int


def offset_key_bytes(group_id: str, topic: str, partition: int) -> bytes:
    key = OffsetCommitKey(group=group_id, topic=topic, partition=partition)
    return _VERSION.pack(OFFSET_KEY_VERSION) + key.encode(OFFSET_KEY_VERSION)


def offset_value_bytes(committed: CommittedOffset) -> bytes:
    if committed.expire_timestamp_ms >= 0:
        value = OffsetCommitValue(
            offset=committed.offset,
            metadata=committed.metadata,
            commit_timestamp=committed.commit_timestamp_ms,
            expire_timestamp=committed.expire_timestamp_ms,
        )
        return _VERSION.pack(OFFSET_VALUE_VERSION_WITH_EXPIRY) + value.encode(
            OFFSET_VALUE_VERSION_WITH_EXPIRY
        )
    value = OffsetCommitValue(
        offset=committed.offset,
        leader_epoch=committed.leader_epoch,
        metadata=committed.metadata,
        commit_timestamp=committed.commit_timestamp_ms,
    )
    return _VERSION.pack(OFFSET_VALUE_VERSION) + value.encode(OFFSET_VALUE_VERSION)


def group_key_bytes(group_id: str) -> bytes:
    return _VERSION.pack(GROUP_KEY_VERSION) + GroupMetadataKey(group=group_id).encode(GROUP_KEY_VERSION)


def group_value_bytes(value: GroupMetadataValue) -> bytes:
    return _VERSION.pack(GROUP_VALUE_VERSION) + value.encode(GROUP_VALUE_VERSION)


def _split_version(data: bytes, what: str) -> tuple[int, bytes]:
    if len(data) < _VERSION.size:
        raise CorruptCoordinatorRecord(f"{what} of {len(data)} bytes has no version")
    (version,) = _VERSION.unpack_from(data)
    return version, data[_VERSION.size :]


def decode_key(data: bytes) -> OffsetKey | GroupKey:
    version, body = _split_version(data, "key")
    try:
        if version in (0, 1):
            offset_key = OffsetCommitKey.decode(body, version)
            return OffsetKey(offset_key.group, offset_key.topic, offset_key.partition)
        if version == GROUP_KEY_VERSION:
            return GroupKey(GroupMetadataKey.decode(body, version).group)
    except ValueError as error:
        raise CorruptCoordinatorRecord(f"key version {version}: {error}") from error
    raise CorruptCoordinatorRecord(f"unknown key version {version}")


def decode_offset_value(data: bytes) -> CommittedOffset:
    version, body = _split_version(data, "offset value")
    try:
        value = OffsetCommitValue.decode(body, version)
    except ValueError as error:
        raise CorruptCoordinatorRecord(f"offset value version {version}: {error}") from error
    return CommittedOffset(
        offset=value.offset,
        leader_epoch=value.leader_epoch if version >= 3 else -1,
        metadata=value.metadata,
        commit_timestamp_ms=value.commit_timestamp,
        expire_timestamp_ms=value.expire_timestamp if version == 1 else -1,
    )


def decode_group_value(data: bytes) -> GroupMetadataValue:
    version, body = _split_version(data, "group value")
    try:
        return GroupMetadataValue.decode(body, version)
    except ValueError as error:
        raise CorruptCoordinatorRecord(f"group value version {version}: {error}") from error


def consumer_subscribed_topics(subscription: bytes) -> frozenset[str] | None:
    """The topics of a "consumer" protocol subscription, or None if the bytes are not one.

    Layout (every version): int16 version, int32 topic count, that many int16-length strings, then
    fields this function does not need (user data, owned partitions, rack).
    """
    try:
        position = 2
        (count,) = struct.unpack_from(">i", subscription, position)
        position += 4
        if count < 0 or count > len(subscription):
            return None
        topics: set[str] = set()
        for _ in range(count):
            (length,) = struct.unpack_from(">h", subscription, position)
            position += 2
            if length < 0 or position + length > len(subscription):
                return None
            topics.add(subscription[position : position + length].decode("utf-8"))
            position += length
        return frozenset(topics)
    except (struct.error, UnicodeDecodeError):
        return None


# Kafka's mapping of a failed __consumer_offsets append to what the client is told.
_COORDINATOR_MOVED_OR_UNAVAILABLE: dict[ErrorCode, ErrorCode] = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
}
_TOO_LARGE = frozenset(
    {ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE}
)


def group_write_error(error: ErrorCode) -> ErrorCode:
    """What a JoinGroup/SyncGroup member is told when writing its group's record failed."""
    if error in _TOO_LARGE:
        return ErrorCode.UNKNOWN_SERVER_ERROR
    return _COORDINATOR_MOVED_OR_UNAVAILABLE.get(error, error)


def offset_write_error(error: ErrorCode) -> ErrorCode:
    """What an OffsetCommit partition is told when writing its offset failed."""
    if error in _TOO_LARGE:
        return ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    return _COORDINATOR_MOVED_OR_UNAVAILABLE.get(error, error)
