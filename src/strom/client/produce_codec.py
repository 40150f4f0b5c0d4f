"""Produce requests and answers in one pass: the producer's per-request encoding and decoding.

``ProduceRequest`` (generated) writes field by field through a ``Writer``, about a hundred Python
calls for a one-partition request; the body of a Produce request the producer sends has a fixed
shape (no tagged fields of its own), so here it is a list of byte pieces the connection joins once
with the frame's size and header: the batch's bytes are copied once, into the frame. The bytes are
the generated encoder's, byte for byte (tests/unit/client/test_produce_request.py); anything
outside that shape (versions before 3, unknown tagged fields) falls back to the generated encoder.

``decode_produce_response`` reads the answer the same way for its usual shape (versions 3-11, no
tagged fields, no per-record errors, no error message) and returns None for anything else, which
the generated decoder then reads (or refuses): the same ``ProduceResponse`` either way.
"""

from __future__ import annotations

import struct

from strom.protocol.messages.produce import ProduceRequest, ProduceResponse
from strom.protocol.primitives import unsigned_varint_bytes

__all__ = ["FastProduceRequest", "decode_produce_response"]

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
# A partition's answer up to its per-record errors: index, error code, base offset, log append
# time (v2+), log start offset (v5+).
_PARTITION_ANSWER_V3 = struct.Struct(">ihqq")
_PARTITION_ANSWER_V5 = struct.Struct(">ihqqq")
_ACKS_TIMEOUT = struct.Struct(">hi")
_NULL_STRING = b"\xff\xff"
_NULL_BYTES = b"\xff\xff\xff\xff"
_FIRST_FAST_VERSION = 3  # transactional_id from v3; v0-v2 go through the generated encoder
_FLEXIBLE_VERSION = ProduceRequest.FLEXIBLE_MIN_VERSION or 9


class FastProduceRequest(ProduceRequest):
    """A ``ProduceRequest`` with ``encode_parts()``: the body as byte pieces, in one pass."""

    __slots__ = ()

    def encode_parts(self, version: int) -> list[bytes | bytearray | memoryview]:
        """The body of this request in ``version`` as pieces to join (the generated encoder's bytes)."""
        if (
            version < _FIRST_FAST_VERSION
            or version > ProduceRequest.MAX_VERSION
            or self.unknown_tagged_fields
        ):
            return [self.encode(version)]
        flexible = version >= _FLEXIBLE_VERSION
        parts: list[bytes | bytearray | memoryview] = []
        append = parts.append
        transactional_id = self.transactional_id
        if transactional_id is None:
            append(b"\x00" if flexible else _NULL_STRING)
        else:
            encoded = transactional_id.encode("utf-8")
            append(unsigned_varint_bytes(len(encoded) + 1) if flexible else _INT16.pack(len(encoded)))
            append(encoded)
        append(_ACKS_TIMEOUT.pack(self.acks, self.timeout_ms))
        topics = self.topic_data
        append(unsigned_varint_bytes(len(topics) + 1) if flexible else _INT32.pack(len(topics)))
        for topic in topics:
            name = topic.name.encode("utf-8")
            if topic.unknown_tagged_fields or (not flexible and len(name) > 0x7FFF):
                return [self.encode(version)]  # the generated encoder's tagged fields, or its error
            append(unsigned_varint_bytes(len(name) + 1) if flexible else _INT16.pack(len(name)))
            append(name)
            partitions = topic.partition_data
            append(unsigned_varint_bytes(len(partitions) + 1) if flexible else _INT32.pack(len(partitions)))
            for partition in partitions:
                if partition.unknown_tagged_fields:
                    return [self.encode(version)]
                append(_INT32.pack(partition.index))
                records = partition.records
                if records is None:
                    append(b"\x00" if flexible else _NULL_BYTES)
                else:
                    append(unsigned_varint_bytes(len(records) + 1) if flexible else _INT32.pack(len(records)))
                    append(records)
                if flexible:
                    append(b"\x00")  # the partition's tagged fields: none
            if flexible:
                append(b"\x00")  # the topic's tagged fields: none
        if flexible:
            append(b"\x00")  # the request's tagged fields: none
        return parts


def decode_produce_response(body: bytes | bytearray | memoryview, version: int) -> ProduceResponse | None:
    """The answer in ``body`` when it has the usual shape (see the module's docstring), else None."""
    if not _FIRST_FAST_VERSION <= version <= ProduceRequest.MAX_VERSION:
        return None
    flexible = version >= _FLEXIBLE_VERSION
    fixed = _PARTITION_ANSWER_V5 if version >= 5 else _PARTITION_ANSWER_V3
    fixed_bytes = fixed.size
    end = len(body)
    partition_class = ProduceResponse.PartitionProduceResponse
    try:
        # Lengths and counts: one-byte compact forms only (a longer one goes the general way).
        if flexible:
            topic_count = body[0] - 1
            pos = 1
            if topic_count < 0 or topic_count >= 0x7F:
                return None
        else:
            (topic_count,) = _INT32.unpack_from(body, 0)
            pos = 4
        topics = []
        for _ in range(topic_count):
            if flexible:
                name_bytes = body[pos] - 1
                pos += 1
                if name_bytes < 0 or name_bytes >= 0x7F:
                    return None
            else:
                (name_bytes,) = _INT16.unpack_from(body, pos)
                pos += 2
            if name_bytes < 0 or pos + name_bytes > end:
                return None
            name = str(body[pos : pos + name_bytes], "utf-8")
            pos += name_bytes
            if flexible:
                partition_count = body[pos] - 1
                pos += 1
                if partition_count < 0 or partition_count >= 0x7F:
                    return None
            else:
                (partition_count,) = _INT32.unpack_from(body, pos)
                pos += 4
            partitions = []
            for _ in range(partition_count):
                fields = fixed.unpack_from(body, pos)
                pos += fixed_bytes
                if version >= 8:
                    # No per-record errors and a null error message, or the general way.
                    if flexible:
                        if body[pos] != 1 or body[pos + 1] != 0 or body[pos + 2] != 0:  # + no tagged fields
                            return None
                        pos += 3
                    else:
                        if (
                            _INT32.unpack_from(body, pos)[0] != 0
                            or _INT16.unpack_from(body, pos + 4)[0] != -1
                        ):
                            return None
                        pos += 6
                partitions.append(partition_class(*fields))
            if flexible:
                if body[pos] != 0:
                    return None
                pos += 1
            topics.append(ProduceResponse.TopicProduceResponse(name=name, partition_responses=partitions))
        (throttle_time_ms,) = _INT32.unpack_from(body, pos)
        pos += 4
        if flexible:
            if body[pos] != 0:
                return None
            pos += 1
    except (struct.error, IndexError, UnicodeDecodeError):
        return None
    if pos != end:
        return None
    return ProduceResponse(responses=topics, throttle_time_ms=throttle_time_ms)
