"""A Produce request that encodes itself in one pass: the producer's per-request encoding.

``ProduceRequest`` (generated) writes field by field through a ``Writer``, about a hundred Python
calls for a one-partition request; the body of a Produce request the producer sends has a fixed
shape (no tagged fields of its own), so here it is a list of byte pieces the connection joins once
with the frame's size and header: the batch's bytes are copied once, into the frame. The bytes are
the generated encoder's, byte for byte (tests/unit/client/test_produce_request.py); anything
outside that shape (versions before 3, unknown tagged fields) falls back to the generated encoder.
"""

from __future__ import annotations

import struct

from strom.protocol.messages.produce import ProduceRequest

__all__ = ["FastProduceRequest"]

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")
_NULL_STRING = b"\xff\xff"
_NULL_BYTES = b"\xff\xff\xff\xff"
_FIRST_FAST_VERSION = 3  # transactional_id from v3; v0-v2 go through the generated encoder
_FLEXIBLE_VERSION = ProduceRequest.FLEXIBLE_MIN_VERSION or 9


def _unsigned_varint(value: int) -> bytes:
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


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
            append(_unsigned_varint(len(encoded) + 1) if flexible else _INT16.pack(len(encoded)))
            append(encoded)
        append(_ACKS_TIMEOUT.pack(self.acks, self.timeout_ms))
        topics = self.topic_data
        append(_unsigned_varint(len(topics) + 1) if flexible else _INT32.pack(len(topics)))
        for topic in topics:
            name = topic.name.encode("utf-8")
            if topic.unknown_tagged_fields or (not flexible and len(name) > 0x7FFF):
                return [self.encode(version)]  # the generated encoder's tagged fields, or its error
            append(_unsigned_varint(len(name) + 1) if flexible else _INT16.pack(len(name)))
            append(name)
            partitions = topic.partition_data
            append(_unsigned_varint(len(partitions) + 1) if flexible else _INT32.pack(len(partitions)))
            for partition in partitions:
                if partition.unknown_tagged_fields:
                    return [self.encode(version)]
                append(_INT32.pack(partition.index))
                records = partition.records
                if records is None:
                    append(b"\x00" if flexible else _NULL_BYTES)
                else:
                    append(_unsigned_varint(len(records) + 1) if flexible else _INT32.pack(len(records)))
                    append(records)
                if flexible:
                    append(b"\x00")  # the partition's tagged fields: none
            if flexible:
                append(b"\x00")  # the topic's tagged fields: none
        if flexible:
            append(b"\x00")  # the request's tagged fields: none
        return parts
