"""Fast paths for the commonest small requests and answers: a Produce to one partition of one topic
and its answer, and Heartbeat; and for the answer with the most entries, Metadata about every
partition of a large cluster.

A client at ``linger.ms=0`` sends one record per Produce, and every consumer heartbeats: the
generated codecs, which handle any shape a version allows, cost more than the rest of such a
request. Each function here handles one common shape with a few ``struct`` reads or writes, and
hands anything else back to the generated codec by returning None: a body of another shape, a
varint or a string longer than it reads inline, tagged fields, or anything malformed (the
generated codec then decodes it and says what is wrong, exactly as before). What a fast path
returns is what the generated codec returns for the same input: the same request object (records
as a view of the frame, trailing bytes counted, not refused) or the same answer bytes. The unit
tests hold the two to that, for every version, shape and edge they share.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any

from strom.protocol.messages.fetch import FetchRequest, FetchResponse
from strom.protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from strom.protocol.messages.metadata import MetadataResponse
from strom.protocol.messages.produce import ProduceRequest, ProduceResponse
from strom.protocol.primitives import Blob, unsigned_varint_at, unsigned_varint_bytes

Frame = bytes | bytearray | memoryview
# A decoder: (frame, where the body starts, version) -> (request, bytes left after it), or None.
Decoder = Callable[[Frame, int, int], "tuple[Any, int] | None"]
# An encoder: (response, version) -> the body, as bytes or as buffers for ``writelines``, or None.
Encoder = Callable[[Any, int], "bytes | list[Blob] | None"]

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")
_NULL_LENGTH = -1
_TopicData = ProduceRequest.TopicProduceData
_PartitionData = ProduceRequest.PartitionProduceData

_PRODUCE_FLEXIBLE_MIN_VERSION = 9
_PRODUCE_LOG_START_OFFSET_MIN_VERSION = 5
_PRODUCE_RECORD_ERRORS_MIN_VERSION = 8
# Versions whose produce answer this module writes: those the broker serves (3-11); the shapes of
# 0-2 differ in more than what is written here.
_PRODUCE_VERSION_MIN = 3
_PRODUCE_VERSION_MAX = 11


def _view(frame: Frame) -> memoryview | None:
    """The frame as the generated codec's reader sees it (bytes), or None for a view of another
    kind (the generated codec casts it; such frames take the general path)."""
    view = memoryview(frame)
    if view.format != "B" or view.ndim != 1:
        return None
    return view


# -- Produce ----------------------------------------------------------------------------------------


def decode_produce(frame: Frame, position: int, version: int) -> tuple[ProduceRequest, int] | None:
    """A Produce body (v3-11) of one topic with one partition, no tagged fields; None otherwise."""
    if not _PRODUCE_VERSION_MIN <= version <= _PRODUCE_VERSION_MAX:
        return None
    view = _view(frame)
    if view is None:
        return None
    end = len(view)
    try:
        if version >= _PRODUCE_FLEXIBLE_MIN_VERSION:
            return _decode_produce_flexible(view, position, end)
        return _decode_produce_classic(view, position, end)
    except (IndexError, struct.error, UnicodeDecodeError):
        return None


def _decode_produce_flexible(view: memoryview, position: int, end: int) -> tuple[ProduceRequest, int] | None:
    size = view[position] - 1  # transactional id, compact nullable string
    if size >= 0x7F:
        return None
    position += 1
    transactional_id: str | None = None
    if size >= 0:
        if position + size > end:
            return None
        transactional_id = str(view[position : position + size], "utf-8", "replace")
        position += size
    acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(view, position)
    position += _ACKS_TIMEOUT.size
    if view[position] != 2:  # one topic
        return None
    size = view[position + 1] - 1  # the topic's name, compact string
    if not 0 <= size < 0x7F or position + 2 + size > end:
        return None
    position += 2
    name = str(view[position : position + size], "utf-8", "replace")
    position += size
    if view[position] != 2:  # one partition
        return None
    (index,) = _INT32.unpack_from(view, position + 1)
    position += 1 + _INT32.size
    size, position = unsigned_varint_at(view, position, end)  # records, compact nullable
    if position < 0:
        return None
    size -= 1
    records: memoryview | None = None
    if size >= 0:
        if position + size > end:
            return None
        records = view[position : position + size]
        position += size
    # No tagged fields in the partition, the topic, the request.
    if position + 3 > end or view[position] or view[position + 1] or view[position + 2]:
        return None
    position += 3
    # Positional arguments, in the generated classes' field order: half the cost of keywords.
    request = ProduceRequest(
        transactional_id, acks, timeout_ms, [_TopicData(name, [_PartitionData(index, records)])]
    )
    return request, end - position


def _decode_produce_classic(view: memoryview, position: int, end: int) -> tuple[ProduceRequest, int] | None:
    (size,) = _INT16.unpack_from(view, position)  # transactional id, nullable string
    position += _INT16.size
    transactional_id: str | None = None
    if size >= 0:
        if position + size > end:
            return None
        transactional_id = str(view[position : position + size], "utf-8", "replace")
        position += size
    elif size != _NULL_LENGTH:
        return None
    acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(view, position)
    position += _ACKS_TIMEOUT.size
    (count,) = _INT32.unpack_from(view, position)
    if count != 1:
        return None
    (size,) = _INT16.unpack_from(view, position + _INT32.size)  # the topic's name
    position += _INT32.size + _INT16.size
    if size < 0 or position + size > end:
        return None
    name = str(view[position : position + size], "utf-8", "replace")
    position += size
    count, index, size = _PARTITION_CLASSIC.unpack_from(view, position)
    if count != 1:
        return None
    position += _PARTITION_CLASSIC.size
    records: memoryview | None = None
    if size >= 0:
        if position + size > end:
            return None
        records = view[position : position + size]
        position += size
    elif size != _NULL_LENGTH:
        return None
    # Positional arguments, in the generated classes' field order: half the cost of keywords.
    request = ProduceRequest(
        transactional_id, acks, timeout_ms, [_TopicData(name, [_PartitionData(index, records)])]
    )
    return request, end - position


# Partition count, partition index, records length (v3-8).
_PARTITION_CLASSIC = struct.Struct(">iii")
# A partition's answer: index, error code, base offset, log append time, log start offset.
_PARTITION_ANSWER = struct.Struct(">ihqqq")
_PARTITION_ANSWER_V3 = struct.Struct(">ihqq")  # v3-4: no log start offset
# v8: empty record errors (int32 0), null error message (int16 -1), then the throttle time.
_CLASSIC_V8_TAIL = struct.Struct(">ihi")
# v9+: after the partition fields: record errors [] (1), error message null (0), tagged fields of
# the partition (0) and of the topic (0); then throttle time and the answer's tagged fields (0).
_FLEXIBLE_PARTITION_TAIL = b"\x01\x00\x00\x00"
_FLEXIBLE_END = struct.Struct(">iB")


def _lone_topic(response: ProduceResponse | FetchResponse) -> Any:
    """The answer's one topic, when it has exactly one and no node endpoints or unknown tagged
    fields (the shape the fast encoders write); None otherwise."""
    responses = response.responses
    if (
        type(responses) is not list
        or len(responses) != 1
        or type(response.node_endpoints) is not list
        or response.node_endpoints
        or response.unknown_tagged_fields
    ):
        return None
    return responses[0]


def _lone_partition(topic: Any, partitions: object) -> Any:
    """The topic's one partition, when it has exactly one and no unknown tagged fields; else None."""
    if type(partitions) is not list or len(partitions) != 1 or topic.unknown_tagged_fields:
        return None
    return partitions[0]


def encode_produce_response(response: ProduceResponse, version: int) -> bytes | None:
    """The body of a Produce answer (v3-11) about one partition of one topic that carries no record
    errors, error message, current leader, node endpoints or unknown tagged fields; None otherwise."""
    if not _PRODUCE_VERSION_MIN <= version <= _PRODUCE_VERSION_MAX:
        return None
    if type(response) is not ProduceResponse:
        return None
    topic = _lone_topic(response)
    if topic is None:
        return None
    partition = _lone_partition(topic, topic.partition_responses)
    if partition is None:
        return None
    leader = partition.current_leader
    if (
        partition.record_errors
        or partition.error_message is not None
        or partition.unknown_tagged_fields
        or type(leader) is not ProduceResponse.LeaderIdAndEpoch
        or leader.leader_id != -1
        or leader.leader_epoch != -1
        or leader.unknown_tagged_fields
        or partition.record_errors is None
    ):
        return None
    name = topic.name
    if type(name) is not str:
        return None
    try:
        encoded_name = name.encode("utf-8")
        if version >= _PRODUCE_LOG_START_OFFSET_MIN_VERSION:
            fields = _PARTITION_ANSWER.pack(
                partition.index,
                partition.error_code,
                partition.base_offset,
                partition.log_append_time_ms,
                partition.log_start_offset,
            )
        else:
            fields = _PARTITION_ANSWER_V3.pack(
                partition.index, partition.error_code, partition.base_offset, partition.log_append_time_ms
            )
        if version >= _PRODUCE_FLEXIBLE_MIN_VERSION:
            if len(encoded_name) >= 0x7F:
                return None
            return b"".join(
                (
                    b"\x02",
                    bytes((len(encoded_name) + 1,)),
                    encoded_name,
                    b"\x02",
                    fields,
                    _FLEXIBLE_PARTITION_TAIL,
                    _FLEXIBLE_END.pack(response.throttle_time_ms, 0),
                )
            )
        if len(encoded_name) > 0x7FFF:
            return None
        tail = (
            _CLASSIC_V8_TAIL.pack(0, _NULL_LENGTH, response.throttle_time_ms)
            if version >= _PRODUCE_RECORD_ERRORS_MIN_VERSION
            else _INT32.pack(response.throttle_time_ms)
        )
        return b"".join(
            (_INT32.pack(1), _INT16.pack(len(encoded_name)), encoded_name, _INT32.pack(1), fields, tail)
        )
    except (struct.error, UnicodeEncodeError):
        return None  # the generated codec says what is wrong


# -- Heartbeat --------------------------------------------------------------------------------------

_HEARTBEAT_FLEXIBLE_MIN_VERSION = 4
_HEARTBEAT_INSTANCE_ID_MIN_VERSION = 3
_HEARTBEAT_VERSION_MAX = 4
_THROTTLE_AND_ERROR = struct.Struct(">ih")
_THROTTLE_ERROR_TAGS = struct.Struct(">ihB")


def decode_heartbeat(frame: Frame, position: int, version: int) -> tuple[HeartbeatRequest, int] | None:
    """A Heartbeat body (v0-4) without tagged fields whose strings are below 127 bytes (flexible
    versions); None otherwise."""
    if not 0 <= version <= _HEARTBEAT_VERSION_MAX:
        return None
    view = _view(frame)
    if view is None:
        return None
    end = len(view)
    try:
        group_instance_id: str | None = None
        if version >= _HEARTBEAT_FLEXIBLE_MIN_VERSION:
            size = view[position] - 1
            if not 0 <= size < 0x7F or position + 1 + size > end:
                return None
            group_id = str(view[position + 1 : position + 1 + size], "utf-8", "replace")
            position += 1 + size
            (generation_id,) = _INT32.unpack_from(view, position)
            position += _INT32.size
            size = view[position] - 1
            if not 0 <= size < 0x7F or position + 1 + size > end:
                return None
            member_id = str(view[position + 1 : position + 1 + size], "utf-8", "replace")
            position += 1 + size
            size = view[position] - 1
            if size >= 0x7F or position + 1 + max(size, 0) > end:
                return None
            if size >= 0:
                group_instance_id = str(view[position + 1 : position + 1 + size], "utf-8", "replace")
            position += 1 + max(size, 0)
            if position >= end or view[position]:  # tagged fields
                return None
            position += 1
        else:
            (size,) = _INT16.unpack_from(view, position)
            if size < 0 or position + 2 + size > end:
                return None
            group_id = str(view[position + 2 : position + 2 + size], "utf-8", "replace")
            position += 2 + size
            (generation_id,) = _INT32.unpack_from(view, position)
            position += _INT32.size
            (size,) = _INT16.unpack_from(view, position)
            if size < 0 or position + 2 + size > end:
                return None
            member_id = str(view[position + 2 : position + 2 + size], "utf-8", "replace")
            position += 2 + size
            if version >= _HEARTBEAT_INSTANCE_ID_MIN_VERSION:
                (size,) = _INT16.unpack_from(view, position)
                if size < _NULL_LENGTH or position + 2 + max(size, 0) > end:
                    return None
                if size >= 0:
                    group_instance_id = str(view[position + 2 : position + 2 + size], "utf-8", "replace")
                position += 2 + max(size, 0)
    except (IndexError, struct.error, UnicodeDecodeError):
        return None
    request = HeartbeatRequest(group_id, generation_id, member_id, group_instance_id)
    return request, end - position


def encode_heartbeat_response(response: HeartbeatResponse, version: int) -> bytes | None:
    """The body of a Heartbeat answer (v1-4) without unknown tagged fields; None otherwise."""
    if not 1 <= version <= _HEARTBEAT_VERSION_MAX or type(response) is not HeartbeatResponse:
        return None
    if response.unknown_tagged_fields:
        return None
    try:
        if version >= _HEARTBEAT_FLEXIBLE_MIN_VERSION:
            return _THROTTLE_ERROR_TAGS.pack(response.throttle_time_ms, response.error_code, 0)
        return _THROTTLE_AND_ERROR.pack(response.throttle_time_ms, response.error_code)
    except struct.error:
        return None


# -- Fetch ------------------------------------------------------------------------------------------

_FETCH_VERSION_MIN = 12  # flexible versions only: what current clients send
_FETCH_VERSION_MAX = 17
_FETCH_REPLICA_ID_MAX_VERSION = 14
_FETCH_TOPIC_NAME_MAX_VERSION = 12
_FETCH_NODE_ENDPOINTS_MIN_VERSION = 16
# replica id (v12-14), max wait, min bytes, max bytes, isolation level, session id, session epoch.
_FETCH_START_WITH_REPLICA = struct.Struct(">iiiibii")
_FETCH_START = struct.Struct(">iiibii")
# partition, current leader epoch, fetch offset, last fetched epoch, log start offset, partition max bytes.
_FETCH_PARTITION = struct.Struct(">iiqiqi")
_UUID_BYTES = 16
_FetchTopic = FetchRequest.FetchTopic
_FetchPartition = FetchRequest.FetchPartition


def decode_fetch(frame: Frame, position: int, version: int) -> tuple[FetchRequest, int] | None:
    """A Fetch body (v12-17) of one topic with one partition, nothing forgotten, no tagged fields
    and a rack id below 127 bytes; None otherwise."""
    if not _FETCH_VERSION_MIN <= version <= _FETCH_VERSION_MAX:
        return None
    view = _view(frame)
    if view is None:
        return None
    end = len(view)
    try:
        if version <= _FETCH_REPLICA_ID_MAX_VERSION:
            replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level, session_id, session_epoch = (
                _FETCH_START_WITH_REPLICA.unpack_from(view, position)
            )
            position += _FETCH_START_WITH_REPLICA.size
        else:
            replica_id = -1
            max_wait_ms, min_bytes, max_bytes, isolation_level, session_id, session_epoch = (
                _FETCH_START.unpack_from(view, position)
            )
            position += _FETCH_START.size
        if view[position] != 2:  # one topic
            return None
        position += 1
        if version <= _FETCH_TOPIC_NAME_MAX_VERSION:
            size = view[position] - 1
            if not 0 <= size < 0x7F or position + 1 + size > end:
                return None
            topic = _FetchTopic(str(view[position + 1 : position + 1 + size], "utf-8", "replace"))
            position += 1 + size
        else:
            if position + _UUID_BYTES > end:
                return None
            topic = _FetchTopic("", uuid.UUID(bytes=bytes(view[position : position + _UUID_BYTES])))
            position += _UUID_BYTES
        if view[position] != 2:  # one partition
            return None
        fields = _FETCH_PARTITION.unpack_from(view, position + 1)
        position += 1 + _FETCH_PARTITION.size
        # No tagged fields in the partition and the topic, nothing forgotten.
        if position + 4 > end or view[position] or view[position + 1] or view[position + 2] != 1:
            return None
        size = view[position + 3] - 1  # the rack id, compact string
        position += 4
        if not 0 <= size < 0x7F or position + size + 1 > end:
            return None
        rack_id = str(view[position : position + size], "utf-8", "replace")
        position += size
        if view[position]:  # tagged fields (cluster id, replica state, others)
            return None
        position += 1
    except (IndexError, struct.error, ValueError):
        return None
    topic.partitions = [_FetchPartition(*fields)]
    request = FetchRequest(
        replica_id=replica_id,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=isolation_level,
        session_id=session_id,
        session_epoch=session_epoch,
        topics=[topic],
        forgotten_topics_data=[],
        rack_id=rack_id,
    )
    return request, end - position


# throttle time, error code, session id, then one topic (compact array of 1).
_FETCH_ANSWER_START = struct.Struct(">ihiB")
# partition index, error code, high watermark, last stable offset, log start offset.
_FETCH_ANSWER_PARTITION = struct.Struct(">ihqqq")
_NO_DIVERGING_EPOCH = FetchResponse.EpochEndOffset()
_NO_CURRENT_LEADER = FetchResponse.LeaderIdAndEpoch()
_NO_SNAPSHOT_ID = FetchResponse.SnapshotId()


def encode_fetch_response(response: FetchResponse, version: int) -> list[Blob] | None:
    """The body of a Fetch answer (v12-17) about one partition of one topic without aborted
    transactions, diverging epoch, current leader, snapshot id, node endpoints or unknown tagged
    fields, as buffers (the records by reference); None otherwise."""
    if not _FETCH_VERSION_MIN <= version <= _FETCH_VERSION_MAX or type(response) is not FetchResponse:
        return None
    topic = _lone_topic(response)
    if topic is None:
        return None
    partition = _lone_partition(topic, topic.partitions)
    if partition is None:
        return None
    aborted = partition.aborted_transactions
    records = partition.records
    if (
        (aborted is not None and (type(aborted) is not list or aborted))
        or partition.unknown_tagged_fields
        or partition.diverging_epoch != _NO_DIVERGING_EPOCH
        or partition.current_leader != _NO_CURRENT_LEADER
        or partition.snapshot_id != _NO_SNAPSHOT_ID
        or not (records is None or isinstance(records, (bytes, bytearray, memoryview)))
        or (isinstance(records, memoryview) and (records.format != "B" or records.ndim != 1))
    ):
        return None
    try:
        head = bytearray(
            _FETCH_ANSWER_START.pack(response.throttle_time_ms, response.error_code, response.session_id, 2)
        )
        if version <= _FETCH_TOPIC_NAME_MAX_VERSION:
            name = topic.topic.encode("utf-8")
            if len(name) >= 0x7F:
                return None
            head.append(len(name) + 1)
            head += name
        else:
            topic_id = topic.topic_id
            if type(topic_id) is not uuid.UUID:
                return None
            head += topic_id.bytes
        head.append(2)  # one partition
        head += _FETCH_ANSWER_PARTITION.pack(
            partition.partition_index,
            partition.error_code,
            partition.high_watermark,
            partition.last_stable_offset,
            partition.log_start_offset,
        )
        head.append(0 if aborted is None else 1)
        head += _INT32.pack(partition.preferred_read_replica)
    except (struct.error, UnicodeEncodeError, AttributeError):
        return None  # the generated codec says what is wrong
    # Tagged fields of the partition, of the topic, of the answer: none.
    if records is None:
        head += b"\x00\x00\x00\x00"
        return [head]
    size = len(records) + 1
    while size >= 0x80:
        head.append(size & 0x7F | 0x80)
        size >>= 7
    head.append(size)
    return [head, records, b"\x00\x00\x00"]


# -- Metadata -----------------------------------------------------------------------------------

_METADATA_VERSION_MIN = 9  # flexible versions: what current clients ask
_METADATA_VERSION_MAX = 12
_METADATA_NULLABLE_NAME_MIN_VERSION = 12
_METADATA_TOPIC_ID_MIN_VERSION = 10
_METADATA_CLUSTER_OPERATIONS_VERSIONS = range(8, 11)
_OPERATIONS_NOT_ASKED = -(2**31)  # the authorized-operations fields' default
# A partition in one pack, by the lengths of its replica, ISR and offline lists: error code, index,
# leader, leader epoch, the three lists (each a one-byte compact length and its int32s) and no
# tagged fields. A cluster's partitions have a handful of list shapes; more than this many shapes
# are packed without keeping their struct.
_METADATA_PARTITION_SHAPES_MAX = 512
_metadata_partition_shapes: dict[tuple[int, int, int], struct.Struct] = {}
_MetadataTopic = MetadataResponse.MetadataResponseTopic
_MetadataPartition = MetadataResponse.MetadataResponsePartition


def _metadata_partition_shape(replicas: int, isr: int, offline: int) -> struct.Struct:
    shape = (replicas, isr, offline)
    packer = _metadata_partition_shapes.get(shape)
    if packer is None:
        packer = struct.Struct(f">hiiiB{replicas}iB{isr}iB{offline}iB")
        if len(_metadata_partition_shapes) < _METADATA_PARTITION_SHAPES_MAX:
            _metadata_partition_shapes[shape] = packer
    return packer


def _compact_string(value: str) -> bytes:
    encoded = value.encode("utf-8")
    return unsigned_varint_bytes(len(encoded) + 1) + encoded


def encode_metadata_response(response: MetadataResponse, version: int) -> bytes | None:
    """The body of a Metadata answer (v9-12) without unknown tagged fields and with fewer than 127
    entries in each partition's replica lists; None otherwise. An answer about every topic of a
    large cluster holds an entry per partition: here each is one ``struct`` pack."""
    if (
        not _METADATA_VERSION_MIN <= version <= _METADATA_VERSION_MAX
        or type(response) is not MetadataResponse
    ):
        return None
    if response.unknown_tagged_fields:
        return None
    parts: list[bytes] = []
    append = parts.append
    shapes = _metadata_partition_shapes
    names_nullable = version >= _METADATA_NULLABLE_NAME_MIN_VERSION
    with_ids = version >= _METADATA_TOPIC_ID_MIN_VERSION
    try:
        append(_INT32.pack(response.throttle_time_ms))
        append(unsigned_varint_bytes(len(response.brokers) + 1))
        for broker in response.brokers:
            if broker.unknown_tagged_fields:
                return None
            append(_INT32.pack(broker.node_id))
            append(_compact_string(broker.host))
            append(_INT32.pack(broker.port))
            append(b"\x00" if broker.rack is None else _compact_string(broker.rack))
            append(b"\x00")
        cluster_id = response.cluster_id
        append(b"\x00" if cluster_id is None else _compact_string(cluster_id))
        append(_INT32.pack(response.controller_id))
        append(unsigned_varint_bytes(len(response.topics) + 1))
        for topic in response.topics:
            if type(topic) is not _MetadataTopic or topic.unknown_tagged_fields:
                return None
            name = topic.name
            if name is None and not names_nullable:
                return None
            append(_INT16.pack(topic.error_code))
            append(b"\x00" if name is None else _compact_string(name))
            if with_ids:
                topic_id = topic.topic_id
                if type(topic_id) is not uuid.UUID:
                    return None
                append(topic_id.bytes)
            append(b"\x01" if topic.is_internal else b"\x00")
            partitions = topic.partitions
            append(unsigned_varint_bytes(len(partitions) + 1))
            for partition in partitions:
                if type(partition) is not _MetadataPartition or partition.unknown_tagged_fields:
                    return None
                replicas = partition.replica_nodes
                isr = partition.isr_nodes
                offline = partition.offline_replicas
                shape = (len(replicas), len(isr), len(offline))
                packer = shapes.get(shape)
                if packer is None:
                    if max(shape) >= 0x7F:
                        return None
                    packer = _metadata_partition_shape(*shape)
                append(
                    packer.pack(
                        partition.error_code,
                        partition.partition_index,
                        partition.leader_id,
                        partition.leader_epoch,
                        shape[0] + 1,
                        *replicas,
                        shape[1] + 1,
                        *isr,
                        shape[2] + 1,
                        *offline,
                        0,
                    )
                )
            append(_INT32.pack(topic.topic_authorized_operations))
            append(b"\x00")
        if version in _METADATA_CLUSTER_OPERATIONS_VERSIONS:
            append(_INT32.pack(response.cluster_authorized_operations))
        elif response.cluster_authorized_operations != _OPERATIONS_NOT_ASKED:
            return None  # a field this version does not have: the generated codec refuses it
        append(b"\x00")
    except (struct.error, UnicodeEncodeError, AttributeError, TypeError, ValueError):
        return None  # the generated codec says what is wrong
    return b"".join(parts)


# By request and response type: what ``protocol.headers`` tries before the generated codec.
DECODERS: dict[type, Decoder] = {
    ProduceRequest: decode_produce,
    FetchRequest: decode_fetch,
    HeartbeatRequest: decode_heartbeat,
}
ENCODERS: dict[type, Encoder] = {
    ProduceResponse: encode_produce_response,
    FetchResponse: encode_fetch_response,
    HeartbeatResponse: encode_heartbeat_response,
    MetadataResponse: encode_metadata_response,
}
