"""Metadata answers read in one pass: an all-topics answer of a large cluster holds one entry per
partition, and the generated decoder reads each through a dozen ``Reader`` calls.

``decode_metadata_response`` reads the flexible versions (9-12) with ``struct`` straight from the
body: a partition's fixed fields in one unpack, its replica lists in one unpack each. It returns
the same ``MetadataResponse`` the generated decoder would (tests/unit/client/test_metadata_codec.py
compares them over every version and shape), or None for anything outside its usual shape (tagged
fields, an older version, bytes that do not parse), which the generated decoder then reads or
refuses.
"""

from __future__ import annotations

import struct
import uuid

from strom.protocol.messages.metadata import MetadataResponse
from strom.protocol.primitives import unsigned_varint_at

__all__ = ["decode_metadata_response"]

_FIRST_FAST_VERSION = MetadataResponse.FLEXIBLE_MIN_VERSION or 9
# A partition's error code, index, leader and leader epoch.
_PARTITION_HEAD = struct.Struct(">hiii")
_INT32 = struct.Struct(">i")
_INT16 = struct.Struct(">h")
_BROKER_PORT = struct.Struct(">i")
# A compact int32 array's reader by its one-byte length (count + 1); a null array (0) or a longer
# length (a varint of more than one byte) has none: the lookup fails and the generated decoder reads it.
_REPLICA_LISTS = {length: struct.Struct(f">{length - 1}i") for length in range(1, 0x80)}
_ZERO_UUID = uuid.UUID(int=0)
_Partition = MetadataResponse.MetadataResponsePartition
_Topic = MetadataResponse.MetadataResponseTopic
_Broker = MetadataResponse.MetadataResponseBroker


class _Shape(Exception):
    """The body leaves the usual shape: the generated decoder reads it."""


def _count(body: memoryview, pos: int) -> tuple[int, int]:
    """A compact array's length (never null in a Metadata answer), and the position after it."""
    count, pos = unsigned_varint_at(body, pos, len(body))
    if count <= 0:  # null (0), or longer than a fast path reads (-1)
        raise _Shape
    return count - 1, pos


def _string(body: memoryview, pos: int, nullable: bool) -> tuple[str | None, int]:
    size, pos = unsigned_varint_at(body, pos, len(body))
    if size < 0:
        raise _Shape
    if size == 0:
        if not nullable:
            raise _Shape
        return None, pos
    end = pos + size - 1
    if end > len(body):
        raise _Shape
    return str(body[pos:end], "utf-8"), end


def _no_tags(body: memoryview, pos: int) -> int:
    if body[pos] != 0:
        raise _Shape
    return pos + 1


def decode_metadata_response(body: bytes | bytearray | memoryview, version: int) -> MetadataResponse | None:
    """The answer in ``body`` when it has the usual shape (see the module's docstring), else None."""
    if not _FIRST_FAST_VERSION <= version <= MetadataResponse.MAX_VERSION:
        return None
    body = memoryview(body)
    try:
        return _decode(body, version)
    except (_Shape, struct.error, IndexError, KeyError, UnicodeDecodeError, ValueError):
        return None


def _decode(body: memoryview, version: int) -> MetadataResponse:
    partition_head = _PARTITION_HEAD.unpack_from
    replica_lists = _REPLICA_LISTS
    head_bytes = _PARTITION_HEAD.size
    (throttle_time_ms,) = _INT32.unpack_from(body, 0)
    pos = 4
    count, pos = _count(body, pos)
    brokers = []
    for _ in range(count):
        (node_id,) = _INT32.unpack_from(body, pos)
        host, pos = _string(body, pos + 4, nullable=False)
        (port,) = _BROKER_PORT.unpack_from(body, pos)
        rack, pos = _string(body, pos + 4, nullable=True)
        pos = _no_tags(body, pos)
        brokers.append(_Broker(node_id, host, port, rack))  # type: ignore[arg-type]
    cluster_id, pos = _string(body, pos, nullable=True)
    (controller_id,) = _INT32.unpack_from(body, pos)
    count, pos = _count(body, pos + 4)
    topics = []
    names_nullable = version >= 12
    with_ids = version >= 10
    for _ in range(count):
        (topic_error,) = _INT16.unpack_from(body, pos)
        name, pos = _string(body, pos + 2, nullable=names_nullable)
        topic_id = _ZERO_UUID
        if with_ids:
            raw_id = bytes(body[pos : pos + 16])
            pos += 16
            if len(raw_id) != 16:
                raise _Shape
            if any(raw_id):
                topic_id = uuid.UUID(bytes=raw_id)
        is_internal = body[pos] != 0
        partition_count, pos = _count(body, pos + 1)
        partitions: list[MetadataResponse.MetadataResponsePartition] = []
        append = partitions.append
        for _ in range(partition_count):
            error_code, index, leader, epoch = partition_head(body, pos)
            pos += head_bytes
            # Three compact arrays of int32 (replicas, in-sync replicas, offline replicas), each
            # read in one unpack, inline: this loop runs once per partition of the cluster.
            unpack = replica_lists[body[pos]]
            replicas = list(unpack.unpack_from(body, pos + 1))
            pos += 1 + unpack.size
            unpack = replica_lists[body[pos]]
            isr = list(unpack.unpack_from(body, pos + 1))
            pos += 1 + unpack.size
            unpack = replica_lists[body[pos]]
            offline = list(unpack.unpack_from(body, pos + 1))
            pos += 1 + unpack.size
            if body[pos] != 0:
                raise _Shape
            pos += 1
            append(_Partition(error_code, index, leader, epoch, replicas, isr, offline, {}))
        (operations,) = _INT32.unpack_from(body, pos)
        pos = _no_tags(body, pos + 4)
        topics.append(_Topic(topic_error, name, topic_id, is_internal, partitions, operations, {}))
    cluster_operations = -(2**31)
    if version <= 10:
        (cluster_operations,) = _INT32.unpack_from(body, pos)
        pos += 4
    pos = _no_tags(body, pos)
    if pos != len(body):
        raise _Shape
    return MetadataResponse(
        throttle_time_ms, brokers, cluster_id, controller_id, topics, cluster_operations, {}
    )
