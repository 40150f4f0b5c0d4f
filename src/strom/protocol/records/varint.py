"""Zigzag varints as the v2 record format uses them (protobuf-style base-128, least significant group
first, sign folded into bit 0 so small negative numbers stay short).

A "varint" holds a signed 32-bit value and takes at most 5 bytes; a "varlong" holds a signed 64-bit
value and takes at most 10. Decoding refuses an encoding longer than that, one that runs off the end
of the buffer, and (for varints) a value outside int32; every refusal is ``CorruptBatchError``, the
one error the record decoder raises.

The batch decoder inlines the one- and two-byte cases in its loop for speed and calls the
``read_*`` functions here for the rest.
"""

from __future__ import annotations

from strom.protocol.records.header import CorruptBatchError

VARINT_BYTES_MAX = 5
VARLONG_BYTES_MAX = 10
INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1

# Encodings of the values the builder writes most (lengths, deltas, counts), computed once: a
# dictionary lookup is several times faster than running the encoding loop per field.
SMALL_VALUE_MIN = -8192
SMALL_VALUE_MAX = 8192  # exclusive; zigzag of this range fits in two bytes


def _encode_zigzag_unbounded(value: int) -> bytes:
    unsigned = (value << 1) ^ (value >> 63) if value < 0 else value << 1
    unsigned &= (1 << 64) - 1
    out = bytearray()
    while unsigned >= 0x80:
        out.append((unsigned & 0x7F) | 0x80)
        unsigned >>= 7
    out.append(unsigned)
    return bytes(out)


SMALL_VALUE_ENCODINGS: tuple[bytes, ...] = tuple(
    _encode_zigzag_unbounded(value) for value in range(SMALL_VALUE_MIN, SMALL_VALUE_MAX)
)


def encode_varint(value: int) -> bytes:
    """Zigzag-encode a signed 32-bit value (1 to 5 bytes)."""
    if SMALL_VALUE_MIN <= value < SMALL_VALUE_MAX:
        return SMALL_VALUE_ENCODINGS[value - SMALL_VALUE_MIN]
    if not INT32_MIN <= value <= INT32_MAX:
        raise ValueError(f"{value} does not fit a varint (int32)")
    return _encode_zigzag_unbounded(value)


def encode_varlong(value: int) -> bytes:
    """Zigzag-encode a signed 64-bit value (1 to 10 bytes)."""
    if SMALL_VALUE_MIN <= value < SMALL_VALUE_MAX:
        return SMALL_VALUE_ENCODINGS[value - SMALL_VALUE_MIN]
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"{value} does not fit a varlong (int64)")
    return _encode_zigzag_unbounded(value)


def _read_unsigned(buf: bytes, pos: int, end: int, bytes_max: int) -> tuple[int, int]:
    shift = 0
    result = 0
    limit = min(end, pos + bytes_max)
    while pos < limit:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
    if shift // 7 < bytes_max:
        raise CorruptBatchError("varint runs off the end of the buffer")
    raise CorruptBatchError(f"varint longer than {bytes_max} bytes")


def read_varint(buf: bytes, pos: int, end: int | None = None) -> tuple[int, int]:
    """Decode a zigzag varint at ``pos`` not reading at or past ``end``; returns (value, next pos)."""
    unsigned, pos = _read_unsigned(buf, pos, len(buf) if end is None else end, VARINT_BYTES_MAX)
    if unsigned > 0xFFFFFFFF:
        raise CorruptBatchError("varint value does not fit in 32 bits")
    return (unsigned >> 1) ^ -(unsigned & 1), pos


def read_varlong(buf: bytes, pos: int, end: int | None = None) -> tuple[int, int]:
    """Decode a zigzag varlong at ``pos`` not reading at or past ``end``; returns (value, next pos)."""
    unsigned, pos = _read_unsigned(buf, pos, len(buf) if end is None else end, VARLONG_BYTES_MAX)
    if unsigned > 0xFFFFFFFFFFFFFFFF:
        raise CorruptBatchError("varlong value does not fit in 64 bits")
    return (unsigned >> 1) ^ -(unsigned & 1), pos


def read_unsigned_varint(buf: bytes, pos: int, end: int | None = None) -> tuple[int, int]:
    """Decode a plain (not zigzag) unsigned varint of at most 5 bytes; returns (value, next pos)."""
    unsigned, pos = _read_unsigned(buf, pos, len(buf) if end is None else end, VARINT_BYTES_MAX)
    if unsigned > 0xFFFFFFFF:
        raise CorruptBatchError("unsigned varint value does not fit in 32 bits")
    return unsigned, pos


def read_unsigned_varlong(buf: bytes, pos: int, end: int | None = None) -> tuple[int, int]:
    """Decode a plain (not zigzag) unsigned varint of at most 10 bytes; returns (value, next pos)."""
    unsigned, pos = _read_unsigned(buf, pos, len(buf) if end is None else end, VARLONG_BYTES_MAX)
    if unsigned > 0xFFFFFFFFFFFFFFFF:
        raise CorruptBatchError("unsigned varlong value does not fit in 64 bits")
    return unsigned, pos
