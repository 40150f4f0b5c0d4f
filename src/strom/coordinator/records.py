"""The ``__consumer_offsets`` record encoding: int16 key version + key struct, int16 value version + value.

Key version 0/1 is an offset commit (``OffsetCommitKey``), 2 a group (``GroupMetadataKey``). Values:
offsets are written as ``OffsetCommitValue`` v1 when the commit carries an explicit expiry (OffsetCommit
v2-4 with a retention time) and v3 otherwise (leader epoch); groups as ``GroupMetadataValue`` v3.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import NamedTuple, Protocol

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
    ) -> None:
        """Append ``records`` as one batch; ``on_complete(error)`` once durable (or failed)."""

    def append_transactional(
        self,
        partition: int,
        records: list[tuple[bytes, bytes | None]],
        producer_id: int,
        producer_epoch: int,
        on_complete: Callable[[ErrorCode, int], None],
    ) -> None:
        """Append ``records`` as one transactional batch of ``producer_id`` at ``producer_epoch``;
        ``on_complete(error, base_offset)`` once durable, ``base_offset`` the log offset of the
        batch's first record (its records follow one offset each; meaningless on an error)."""


class CorruptCoordinatorRecord(ValueError):
    """A record of __consumer_offsets that is not a known key/value layout."""


# Plain named tuples: loading a partition makes one of each per record, and a tuple is made several
# times faster than a frozen dataclass.
class OffsetKey(NamedTuple):
    group_id: str
    topic: str
    partition: int


class GroupKey(NamedTuple):
    group_id: str


class CommittedOffset(NamedTuple):
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    # -1 unless the commit asked for its own retention (OffsetCommit v2-4).
    expire_timestamp_ms: int


class TransactionalOffset(NamedTuple):
    """An offset written in a transaction not completed yet, and where in the log it was written:
    of two writes of one partition's offset, the later one wins."""

    committed: CommittedOffset
    log_offset: int


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


# Loading a partition decodes every key and offset of it: the layouts strom writes (and Kafka
# writes: keys v0-2, offset values v1 and v3) are read here with struct at once; anything else, or
# anything that does not fit them exactly, goes through the generated decoders, which also say
# what is wrong with a corrupt record.
_INT16_PAIR = struct.Struct(">hh")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_OFFSET_V1_HEAD = struct.Struct(">hqh")  # version, offset, metadata length
_OFFSET_V3_HEAD = struct.Struct(">hqih")  # version, offset, leader epoch, metadata length
_INT64_PAIR = struct.Struct(">qq")
_INT64 = struct.Struct(">q")
_INT64_INT32 = struct.Struct(">qi")
_INT32_PAIR = struct.Struct(">ii")


def decode_key(data: bytes) -> OffsetKey | GroupKey:
    size = len(data)
    if size >= 4:
        version, group_length = _INT16_PAIR.unpack_from(data)
        group_end = 4 + group_length
        try:
            if version == GROUP_KEY_VERSION and group_length >= 0 and group_end == size:
                return GroupKey(data[4:group_end].decode())
            if (version == 0 or version == 1) and group_length >= 0 and group_end + 2 <= size:
                (topic_length,) = _INT16.unpack_from(data, group_end)
                topic_end = group_end + 2 + topic_length
                if topic_length >= 0 and topic_end + 4 == size:
                    return OffsetKey(
                        data[4:group_end].decode(),
                        data[group_end + 2 : topic_end].decode(),
                        _INT32.unpack_from(data, topic_end)[0],
                    )
        except UnicodeDecodeError:
            pass
    return _decode_key_generated(data)


def _decode_key_generated(data: bytes) -> OffsetKey | GroupKey:
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
    size = len(data)
    try:
        if size >= _OFFSET_V3_HEAD.size:
            (version,) = _INT16.unpack_from(data)
            if version == OFFSET_VALUE_VERSION:
                _, offset, leader_epoch, metadata_length = _OFFSET_V3_HEAD.unpack_from(data)
                metadata_end = _OFFSET_V3_HEAD.size + metadata_length
                if metadata_length >= 0 and metadata_end + 8 == size:
                    return CommittedOffset(
                        offset,
                        leader_epoch,
                        data[_OFFSET_V3_HEAD.size : metadata_end].decode(),
                        _INT64.unpack_from(data, metadata_end)[0],
                        -1,
                    )
            elif version == OFFSET_VALUE_VERSION_WITH_EXPIRY:
                _, offset, metadata_length = _OFFSET_V1_HEAD.unpack_from(data)
                metadata_end = _OFFSET_V1_HEAD.size + metadata_length
                if metadata_length >= 0 and metadata_end + 16 == size:
                    commit_timestamp_ms, expire_timestamp_ms = _INT64_PAIR.unpack_from(data, metadata_end)
                    return CommittedOffset(
                        offset,
                        -1,
                        data[_OFFSET_V1_HEAD.size : metadata_end].decode(),
                        commit_timestamp_ms,
                        expire_timestamp_ms,
                    )
    except UnicodeDecodeError:
        pass
    return _decode_offset_value_generated(data)


def _decode_offset_value_generated(data: bytes) -> CommittedOffset:
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


def is_offset_key(key: bytes) -> bool:
    """Whether a record key is an offset commit's (versions 0 and 1) — read from its version alone."""
    return len(key) >= 2 and key[0] == 0 and key[1] <= 1


def compacted_replay_order(latest: dict[bytes, bytes | None]) -> list[Record]:
    """The records to replay for a partition given the latest value of each key (what compaction
    leaves): offsets first, then groups. Replaying them gives the state a replay of the whole log
    in order gives — an offset's state depends only on its last record, and a group's last record
    either rebuilds it around the offsets it has (metadata) or keeps only those offsets
    (tombstone), so applying every surviving offset before any group record changes nothing —
    while decoding each key once however often it was written (tests/unit/coordinator prove it
    on random logs)."""
    offsets: list[Record] = []
    groups: list[Record] = []
    for key, value in latest.items():
        (offsets if is_offset_key(key) else groups).append((key, value))
    offsets.extend(groups)
    return offsets


def decode_group_value(data: bytes) -> GroupMetadataValue:
    if len(data) >= 2 and _INT16.unpack_from(data)[0] == GROUP_VALUE_VERSION:
        try:
            value = _decode_group_value_v3(data)
        except (struct.error, UnicodeDecodeError, _NotTheFastLayout):
            value = None
        if value is not None:
            return value
    return _decode_group_value_generated(data)


def _decode_group_value_generated(data: bytes) -> GroupMetadataValue:
    version, body = _split_version(data, "group value")
    try:
        return GroupMetadataValue.decode(body, version)
    except ValueError as error:
        raise CorruptCoordinatorRecord(f"group value version {version}: {error}") from error


class _NotTheFastLayout(Exception):
    """The record is not exactly a GroupMetadataValue v3: the generated decoder reads it."""


def _decode_group_value_v3(data: bytes) -> GroupMetadataValue | None:
    """GroupMetadataValue v3 (what strom writes), read with struct; None if it has bytes left over."""
    size = len(data)
    position = 2

    def nullable_string() -> str | None:
        nonlocal position
        (length,) = _INT16.unpack_from(data, position)
        position += 2
        if length == -1:
            return None
        end = position + length
        if length < 0 or end > size:
            raise _NotTheFastLayout
        text = data[position:end].decode()
        position = end
        return text

    def string() -> str:
        text = nullable_string()
        if text is None:
            raise _NotTheFastLayout
        return text

    def raw_bytes() -> bytes:
        nonlocal position
        (length,) = _INT32.unpack_from(data, position)
        position += 4
        end = position + length
        if length < 0 or end > size:
            raise _NotTheFastLayout
        chunk = data[position:end]
        position = end
        return chunk

    protocol_type = string()
    (generation,) = _INT32.unpack_from(data, position)
    position += 4
    protocol = nullable_string()
    leader = nullable_string()
    current_state_timestamp, count = _INT64_INT32.unpack_from(data, position)
    position += 12
    if count < 0 or count > size - position:
        raise _NotTheFastLayout
    members = []
    for _ in range(count):
        member_id = string()
        group_instance_id = nullable_string()
        client_id = string()
        client_host = string()
        rebalance_timeout, session_timeout = _INT32_PAIR.unpack_from(data, position)
        position += 8
        members.append(
            GroupMetadataValue.MemberMetadata(
                member_id=member_id,
                group_instance_id=group_instance_id,
                client_id=client_id,
                client_host=client_host,
                rebalance_timeout=rebalance_timeout,
                session_timeout=session_timeout,
                subscription=raw_bytes(),
                assignment=raw_bytes(),
            )
        )
    if position != size:
        return None
    return GroupMetadataValue(
        protocol_type=protocol_type,
        generation=generation,
        protocol=protocol,
        leader=leader,
        current_state_timestamp=current_state_timestamp,
        members=members,
    )


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


# Kafka's mapping of a failed __consumer_offsets append to what the client is told: that of the
# group coordinator of a ZooKeeper-mode Kafka (up to 3.9, the Kafka strom's cluster is), whose
# writes wait for the in-sync replicas as strom's do. The cases differ only in a write that timed
# out waiting for them: a commit says REQUEST_TIMED_OUT (the client retries it), a group record
# REBALANCE_IN_PROGRESS (the members rejoin, and the rebalance writes the group again).
_COORDINATOR_MOVED_OR_UNAVAILABLE: dict[ErrorCode, ErrorCode] = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
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
    if error == ErrorCode.REQUEST_TIMED_OUT:
        return ErrorCode.REBALANCE_IN_PROGRESS
    return _COORDINATOR_MOVED_OR_UNAVAILABLE.get(error, error)


def offset_write_error(error: ErrorCode) -> ErrorCode:
    """What an OffsetCommit partition is told when writing its offset failed (REQUEST_TIMED_OUT
    stays itself)."""
    if error in _TOO_LARGE:
        return ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    return _COORDINATOR_MOVED_OR_UNAVAILABLE.get(error, error)
