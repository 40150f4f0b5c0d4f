"""Record batches with a valid CRC that must not be stored, each built by hand from the format
description, and the answer a broker owes the producer of each (shared by the unit tests of
``strom.protocol.records.validate`` and the compat tests against a real broker).

A batch here is whatever bytes the tests want inside a correct v2 header (length, magic, CRC over
attributes .. end): the CRC check passes, so only a validator that reads the records refuses it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import crc32c

from strom.protocol.errors import ErrorCode
from strom.protocol.records import CompressionType, compress
from strom.protocol.records.header import CONTROL_BIT, TRANSACTIONAL_BIT
from strom.protocol.records.varint import encode_varint, encode_varlong

BASE_TIMESTAMP_MS = 1_700_000_000_000
INT32_MAX = (1 << 31) - 1
INT64_MAX = (1 << 63) - 1


def assemble(
    payload: bytes,
    *,
    count: int,
    last_offset_delta: int | None = None,
    attributes: int = 0,
    base_timestamp: int = BASE_TIMESTAMP_MS,
    max_timestamp: int | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    base_offset: int = 0,
) -> bytes:
    """A v2 batch around ``payload`` (taken as is: compress it first for a compressed batch)."""
    covered = (
        struct.pack(
            ">hiqqqhii",
            attributes,
            count - 1 if last_offset_delta is None else last_offset_delta,
            base_timestamp,
            base_timestamp if max_timestamp is None else max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        )
        + payload
    )
    return (
        struct.pack(">qiib", base_offset, 4 + 1 + 4 + len(covered), -1, 2)
        + struct.pack(">I", crc32c.crc32c(covered))
        + covered
    )


def field(data: bytes | None) -> bytes:
    """A length-prefixed byte field (key, value, header value); None is length -1."""
    return b"\x01" if data is None else encode_varint(len(data)) + data


def record(
    offset_delta: int,
    *,
    timestamp_delta: int = 0,
    key: bytes | None = None,
    value: bytes | None = b"value",
    headers: Sequence[tuple[bytes, bytes | None]] = (),
    attributes: int = 0,
) -> bytes:
    """One well-formed record (header keys given as bytes so that bad UTF-8 can be written)."""
    header_bytes = encode_varint(len(headers)) + b"".join(
        encode_varint(len(name)) + name + field(header_value) for name, header_value in headers
    )
    body = (
        bytes([attributes])
        + encode_varlong(timestamp_delta)
        + encode_varint(offset_delta)
        + field(key)
        + field(value)
        + header_bytes
    )
    return encode_varint(len(body)) + body


def raw_record(body: bytes) -> bytes:
    """A record whose body is given byte for byte, its length prefix computed."""
    return encode_varint(len(body)) + body


def records(count: int, **fields: object) -> bytes:
    return b"".join(record(index, **fields) for index in range(count))  # type: ignore[arg-type]


GOOD_PAYLOAD = records(3)


@dataclass(frozen=True)
class Poison:
    name: str
    build: Callable[[], bytes]
    error: ErrorCode
    codec: int = 0  # the compression its attributes declare

    @property
    def batch(self) -> bytes:
        return self.build()


def _compressed(codec: CompressionType, payload: bytes, count: int) -> bytes:
    return assemble(compress(codec, payload), count=count, attributes=int(codec))


CODECS = (CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4, CompressionType.ZSTD)

INVALID = ErrorCode.INVALID_RECORD
CORRUPT = ErrorCode.CORRUPT_MESSAGE

POISONS: tuple[Poison, ...] = (
    # Records that do not parse.
    Poison("garbage-records", lambda: assemble(b"\xff" * 40, count=3), INVALID),
    Poison("zero-bytes-as-records", lambda: assemble(bytes(40), count=3), INVALID),
    Poison("record-cut-short", lambda: assemble(GOOD_PAYLOAD[:-2], count=3), INVALID),
    Poison("bytes-after-the-last-record", lambda: assemble(GOOD_PAYLOAD + b"\x00\x00", count=3), INVALID),
    Poison("fewer-records-than-declared", lambda: assemble(records(2), count=3), INVALID),
    Poison("more-records-than-declared", lambda: assemble(records(4), count=3), INVALID),
    Poison(
        "record-length-negative",
        lambda: assemble(records(2) + encode_varint(-7) + b"\x00" * 6, count=3),
        INVALID,
    ),
    Poison(
        "record-length-below-the-smallest-record",
        lambda: assemble(records(2) + raw_record(b"\x00\x00\x04\x01\x01"), count=3),
        INVALID,
    ),
    Poison(
        "record-length-past-its-fields",
        lambda: assemble(records(2) + raw_record(record(2)[1:] + b"\x00"), count=3),
        INVALID,
    ),
    Poison(
        "key-length-below-minus-one",
        lambda: assemble(records(2) + raw_record(b"\x00\x00\x04" + encode_varint(-2) + b"\x01\x00"), count=3),
        INVALID,
    ),
    Poison(
        "value-length-below-minus-one",
        lambda: assemble(records(2) + raw_record(b"\x00\x00\x04\x01" + encode_varint(-5) + b"\x00"), count=3),
        INVALID,
    ),
    Poison(
        "key-longer-than-the-record",
        lambda: assemble(
            records(2) + raw_record(b"\x00\x00\x04" + encode_varint(50) + b"ab\x01\x00"), count=3
        ),
        INVALID,
    ),
    Poison(
        "header-count-negative",
        lambda: assemble(records(2) + raw_record(b"\x00\x00\x04\x01\x01" + encode_varint(-1)), count=3),
        INVALID,
    ),
    Poison(
        "header-key-length-negative",
        lambda: assemble(
            records(2) + raw_record(b"\x00\x00\x04\x01\x01\x02" + encode_varint(-1) + b"\x01"), count=3
        ),
        INVALID,
    ),
    Poison(
        "header-value-longer-than-the-record",
        lambda: assemble(
            records(2) + raw_record(b"\x00\x00\x04\x01\x01\x02\x02h" + encode_varint(40) + b"v"), count=3
        ),
        INVALID,
    ),
    Poison(
        "varint-longer-than-five-bytes",
        lambda: assemble(records(2) + raw_record(b"\x00\x00\x04\x80\x80\x80\x80\x80\x00\x01\x00"), count=3),
        INVALID,
    ),
    Poison(
        "varint-beyond-32-bits",
        lambda: assemble(records(2) + raw_record(b"\x00\x00\x04\x80\x80\x80\x80\x10\x01\x00"), count=3),
        INVALID,
    ),
    Poison(
        "timestamp-varlong-longer-than-ten-bytes",
        lambda: assemble(records(2) + raw_record(b"\x00" + b"\x80" * 10 + b"\x00\x04\x01\x01\x00"), count=3),
        INVALID,
    ),
    # Counts and offsets that disagree.
    Poison(
        "count-disagrees-with-last-offset-delta",
        lambda: assemble(GOOD_PAYLOAD, count=3, last_offset_delta=5),
        INVALID,
    ),
    Poison(
        "forged-last-offset-delta",
        lambda: assemble(records(1), count=1, last_offset_delta=INT32_MAX),
        INVALID,
    ),
    Poison(
        "forged-count-and-last-offset-delta",
        lambda: assemble(records(1), count=INT32_MAX, last_offset_delta=INT32_MAX - 1),
        INVALID,
    ),
    Poison("no-records", lambda: assemble(b"", count=0, last_offset_delta=0), INVALID),
    Poison(
        "offset-deltas-with-a-gap",
        lambda: assemble(record(0) + record(2) + record(3), count=3, last_offset_delta=2),
        INVALID,
    ),
    Poison("offset-deltas-from-one", lambda: assemble(record(1) + record(2) + record(3), count=3), INVALID),
    Poison("offset-deltas-repeated", lambda: assemble(record(0) + record(0) + record(1), count=3), INVALID),
    Poison("offset-deltas-reversed", lambda: assemble(record(2) + record(1) + record(0), count=3), INVALID),
    Poison(
        "timestamp-beyond-int64",
        lambda: assemble(records(3, timestamp_delta=10), count=3, base_timestamp=INT64_MAX - 5),
        INVALID,
    ),
    # Header fields a producer may not set so.
    Poison("control-batch", lambda: assemble(GOOD_PAYLOAD, count=3, attributes=CONTROL_BIT), INVALID),
    Poison(
        # A well-formed COMMIT marker (key: version 0, type 1; value: version 0, coordinator
        # epoch 0), as a broker writes it: a producer may not.
        "transaction-marker",
        lambda: assemble(
            raw_record(b"\x00\x00\x00\x08\x00\x00\x00\x01\x0c\x00\x00\x00\x00\x00\x00\x00"),
            count=1,
            attributes=CONTROL_BIT | TRANSACTIONAL_BIT,
            producer_id=7,
            producer_epoch=0,
        ),
        INVALID,
    ),
    Poison(
        "transactional-without-a-producer-id",
        lambda: assemble(GOOD_PAYLOAD, count=3, attributes=TRANSACTIONAL_BIT),
        INVALID,
    ),
    Poison(
        "producer-id-without-a-sequence",
        lambda: assemble(GOOD_PAYLOAD, count=3, producer_id=7, producer_epoch=0, base_sequence=-1),
        INVALID,
    ),
    # Codecs.
    *(
        Poison(
            f"unknown-codec-{codec}",
            lambda codec=codec: assemble(GOOD_PAYLOAD, count=3, attributes=codec),
            CORRUPT,
        )  # type: ignore[misc]
        for codec in (5, 6, 7)
    ),
    *(
        Poison(
            f"{codec.name.lower()}-garbage",
            lambda codec=codec: assemble(b"\x11" * 64, count=3, attributes=int(codec)),  # type: ignore[misc]
            CORRUPT,
            codec,
        )
        for codec in CODECS
    ),
    *(
        Poison(
            f"{codec.name.lower()}-of-bad-records",
            lambda codec=codec: _compressed(codec, records(2) + b"\xff" * 9, 3),  # type: ignore[misc]
            INVALID,
            codec,
        )
        for codec in CODECS
    ),
    *(
        Poison(
            f"{codec.name.lower()}-of-a-gap-in-offset-deltas",
            lambda codec=codec: _compressed(codec, record(0) + record(5), 2),  # type: ignore[misc]
            INVALID,
            codec,
        )
        for codec in CODECS
    ),
)
