"""Bounds-checked readers and writers for the Kafka wire primitives.

Every message codec in `strom.protocol.messages` is straight-line code calling these methods. The
reader trusts nothing: each read checks the bytes left first, negative lengths are refused (Python
slices would silently accept them), array counts larger than the bytes left are refused before
anything is allocated. Every such failure raises the one error type `DecodeError`, so the broker
has a single boundary where peer mistakes become a closed connection. Strings that are not valid
UTF-8 are no such mistake: Kafka reads them as Java does (``new String(bytes, UTF_8)``: what is not
UTF-8 becomes U+FFFD) and answers the request (a topic name so read is then refused as a name),
and so does strom.

Encodings (big-endian throughout):

- ``string``: int16 length then UTF-8 (-1 = null); ``compact_string``: unsigned varint length + 1
  (0 = null).
- ``bytes``: int32 length (-1 = null); compact: unsigned varint length + 1.
- arrays: int32 count (-1 = null); compact: unsigned varint count + 1.
- tagged fields (flexible versions): unsigned varint count, then per field unsigned varint tag,
  unsigned varint size, the field's bytes; sorted by tag.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any, NamedTuple

__all__ = [
    "MISSING",
    "DecodeError",
    "FieldSpec",
    "Reader",
    "UnsupportedVersionError",
    "Writer",
    "absent_field_error",
    "null_field_error",
]

_INT8 = struct.Struct(">b")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_UINT16 = struct.Struct(">H")
_UINT32 = struct.Struct(">I")
_FLOAT64 = struct.Struct(">d")

_int8_unpack = _INT8.unpack_from
_int16_unpack = _INT16.unpack_from
_int32_unpack = _INT32.unpack_from
_int64_unpack = _INT64.unpack_from
_uint16_unpack = _UINT16.unpack_from
_uint32_unpack = _UINT32.unpack_from
_float64_unpack = _FLOAT64.unpack_from

_int8_pack = _INT8.pack
_int16_pack = _INT16.pack
_int32_pack = _INT32.pack
_int64_pack = _INT64.pack
_uint16_pack = _UINT16.pack
_uint32_pack = _UINT32.pack
_float64_pack = _FLOAT64.pack

# An unsigned varint carrying a 32-bit value takes at most 5 bytes, a 64-bit one at most 10. Longer
# encodings are malformed (and would otherwise let a peer make us loop over a huge run of 0x80).
_VARINT32_BYTES_MAX = 5
_VARINT64_BYTES_MAX = 10

# Blobs at least this big are kept by reference in a Writer instead of copied into its buffer, so a
# fetch response carrying megabytes of record batches can go to the socket without a copy.
_BLOB_BY_REFERENCE_BYTES_MIN = 16 * 1024

_NULL_LENGTH = -1

Blob = bytes | bytearray | memoryview


class DecodeError(ValueError):
    """The bytes received are not a valid encoding (truncated, bad length, bad UTF-8, ...)."""


# Default of generated constructor arguments whose default is mutable (a list, a struct): each
# instance gets its own. Typed Any so it is accepted wherever such an argument is declared.
MISSING: Any = object()


class UnsupportedVersionError(ValueError):
    """A message was asked to encode or decode a version outside its MIN_VERSION..MAX_VERSION."""


def absent_field_error(message: str, field: str, version: int) -> ValueError:
    """Encoding would silently drop a field the chosen version does not carry."""
    return ValueError(
        f"{message}.{field} holds a non-default value but version {version} of {message} has no such field"
    )


def null_field_error(message: str, field: str, version: int) -> ValueError:
    return ValueError(f"{message}.{field} is None but is not nullable in version {version}")


# An open-ended version range ("3+") ends here: versions are int16 on the wire.
VERSION_MAX = 0x7FFF


class FieldSpec(NamedTuple):
    """What the specification says about one field; generated classes list theirs in FIELDS.

    The codecs never look at this at run time (they are straight-line code); tests and tools do.
    `type` is the JSON type ("int32", "string", "[]int32", "[]TopicData", "Cursor"); struct types
    are attributes of the top-level message class. Version ranges are inclusive (low, high); an
    empty range is (1, 0).
    """

    name: str
    type: str
    versions: tuple[int, int]
    nullable_versions: tuple[int, int]
    tag: int | None
    ignorable: bool


class Reader:
    """Reads Kafka primitives from a buffer, starting at `pos`, never past its end."""

    __slots__ = ("_buffer", "end", "pos")

    def __init__(self, data: bytes | bytearray | memoryview, pos: int = 0) -> None:
        view = memoryview(data)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        self._buffer = view
        self.end = len(view)
        if pos < 0 or pos > self.end:
            raise DecodeError(f"start position {pos} outside a buffer of {self.end} bytes")
        self.pos = pos

    @property
    def remaining(self) -> int:
        """Bytes not read yet."""
        return self.end - self.pos

    def _advance(self, size: int) -> int:
        """Reserves `size` bytes and returns where they start."""
        pos = self.pos
        if size < 0:
            raise DecodeError(f"negative length {size} at byte {pos}")
        if pos + size > self.end:
            raise DecodeError(f"need {size} bytes at byte {pos}, only {self.end - pos} left")
        self.pos = pos + size
        return pos

    # -- fixed-size numbers ------------------------------------------------------------------------

    def int8(self) -> int:
        pos = self.pos
        if pos + 1 > self.end:
            raise DecodeError(f"need 1 byte at byte {pos}, only {self.end - pos} left")
        self.pos = pos + 1
        value: int = _int8_unpack(self._buffer, pos)[0]
        return value

    def int16(self) -> int:
        pos = self.pos
        if pos + 2 > self.end:
            raise DecodeError(f"need 2 bytes at byte {pos}, only {self.end - pos} left")
        self.pos = pos + 2
        value: int = _int16_unpack(self._buffer, pos)[0]
        return value

    def int32(self) -> int:
        pos = self.pos
        if pos + 4 > self.end:
            raise DecodeError(f"need 4 bytes at byte {pos}, only {self.end - pos} left")
        self.pos = pos + 4
        value: int = _int32_unpack(self._buffer, pos)[0]
        return value

    def int64(self) -> int:
        pos = self.pos
        if pos + 8 > self.end:
            raise DecodeError(f"need 8 bytes at byte {pos}, only {self.end - pos} left")
        self.pos = pos + 8
        value: int = _int64_unpack(self._buffer, pos)[0]
        return value

    def uint16(self) -> int:
        value: int = _uint16_unpack(self._buffer, self._advance(2))[0]
        return value

    def uint32(self) -> int:
        value: int = _uint32_unpack(self._buffer, self._advance(4))[0]
        return value

    def float64(self) -> float:
        value: float = _float64_unpack(self._buffer, self._advance(8))[0]
        return value

    def boolean(self) -> bool:
        return self.int8() != 0

    def uuid(self) -> uuid.UUID:
        pos = self._advance(16)
        return uuid.UUID(bytes=bytes(self._buffer[pos : pos + 16]))

    # -- variable-length numbers -------------------------------------------------------------------

    def _unsigned_varint(self, bytes_max: int) -> int:
        buffer = self._buffer
        pos = self.pos
        end = self.end
        value = 0
        shift = 0
        for _ in range(bytes_max):
            if pos >= end:
                raise DecodeError(f"varint runs past the end of the buffer at byte {pos}")
            byte = buffer[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                self.pos = pos
                return value
            shift += 7
        raise DecodeError(f"varint longer than {bytes_max} bytes at byte {self.pos}")

    def unsigned_varint(self) -> int:
        """An unsigned 32-bit varint (lengths, counts, tags)."""
        buffer = self._buffer
        pos = self.pos
        # Fast path: almost every length and count fits in one byte.
        if pos < self.end and buffer[pos] < 0x80:
            self.pos = pos + 1
            return buffer[pos]
        value = self._unsigned_varint(_VARINT32_BYTES_MAX)
        if value > 0xFFFFFFFF:
            raise DecodeError(f"unsigned varint {value} does not fit in 32 bits")
        return value

    def varint(self) -> int:
        """A zigzag-encoded signed 32-bit varint."""
        raw = self._unsigned_varint(_VARINT32_BYTES_MAX)
        if raw > 0xFFFFFFFF:
            raise DecodeError(f"varint {raw} does not fit in 32 bits")
        return (raw >> 1) ^ -(raw & 1)

    def varlong(self) -> int:
        """A zigzag-encoded signed 64-bit varint."""
        raw = self._unsigned_varint(_VARINT64_BYTES_MAX)
        if raw > 0xFFFFFFFFFFFFFFFF:
            raise DecodeError(f"varlong {raw} does not fit in 64 bits")
        return (raw >> 1) ^ -(raw & 1)

    # -- strings -----------------------------------------------------------------------------------

    def _utf8(self, size: int) -> str:
        pos = self._advance(size)
        return str(self._buffer[pos : pos + size], "utf-8", "replace")

    def _utf8_at(self, pos: int, size: int) -> str:
        """The string of ``size`` bytes at ``pos`` (``size`` not negative), read past."""
        end = pos + size
        if end > self.end:
            raise DecodeError(f"need {size} bytes at byte {pos}, only {self.end - pos} left")
        self.pos = end
        # Kafka reads strings with Java's lenient UTF-8: bad bytes become U+FFFD, the request is answered.
        return str(self._buffer[pos:end], "utf-8", "replace")

    # The string readers are on every request's path: the length is read in place, not by a call.

    def string(self) -> str:
        pos = self.pos
        if pos + 2 > self.end:
            raise DecodeError(f"need 2 bytes at byte {pos}, only {self.end - pos} left")
        size: int = _int16_unpack(self._buffer, pos)[0]
        if size < 0:
            self.pos = pos + 2
            raise DecodeError(f"null or negative string length {size} where a string is required")
        return self._utf8_at(pos + 2, size)

    def nullable_string(self) -> str | None:
        pos = self.pos
        if pos + 2 > self.end:
            raise DecodeError(f"need 2 bytes at byte {pos}, only {self.end - pos} left")
        size: int = _int16_unpack(self._buffer, pos)[0]
        if size < 0:
            self.pos = pos + 2
            if size == _NULL_LENGTH:
                return None
            raise DecodeError(f"negative string length {size}")
        return self._utf8_at(pos + 2, size)

    def compact_string(self) -> str:
        pos = self.pos
        if pos < self.end and (first := self._buffer[pos]) < 0x80:
            if first == 0:
                self.pos = pos + 1
                raise DecodeError("null compact string where a string is required")
            return self._utf8_at(pos + 1, first - 1)
        size = self.unsigned_varint() - 1
        if size < 0:
            raise DecodeError("null compact string where a string is required")
        return self._utf8(size)

    def compact_nullable_string(self) -> str | None:
        pos = self.pos
        if pos < self.end and (first := self._buffer[pos]) < 0x80:
            if first == 0:
                self.pos = pos + 1
                return None
            return self._utf8_at(pos + 1, first - 1)
        size = self.unsigned_varint() - 1
        if size < 0:
            return None
        return self._utf8(size)

    # -- bytes and records -------------------------------------------------------------------------

    def _view(self, size: int) -> memoryview:
        pos = self._advance(size)
        return self._buffer[pos : pos + size]

    def raw(self, size: int) -> memoryview:
        """`size` bytes as a view of the input (no copy)."""
        return self._view(size)

    def bytes_(self) -> bytes:
        size = self.int32()
        if size < 0:
            raise DecodeError(f"null or negative bytes length {size} where bytes are required")
        return bytes(self._view(size))

    def nullable_bytes(self) -> bytes | None:
        size = self.int32()
        if size == _NULL_LENGTH:
            return None
        if size < 0:
            raise DecodeError(f"negative bytes length {size}")
        return bytes(self._view(size))

    def compact_bytes(self) -> bytes:
        size = self.unsigned_varint() - 1
        if size < 0:
            raise DecodeError("null compact bytes where bytes are required")
        return bytes(self._view(size))

    def compact_nullable_bytes(self) -> bytes | None:
        size = self.unsigned_varint() - 1
        if size < 0:
            return None
        return bytes(self._view(size))

    def records(self) -> memoryview:
        """Record batches as a view of the input: the hot path never copies them."""
        size = self.int32()
        if size < 0:
            raise DecodeError(f"null or negative records length {size} where records are required")
        return self._view(size)

    def nullable_records(self) -> memoryview | None:
        size = self.int32()
        if size == _NULL_LENGTH:
            return None
        if size < 0:
            raise DecodeError(f"negative records length {size}")
        return self._view(size)

    def compact_records(self) -> memoryview:
        size = self.unsigned_varint() - 1
        if size < 0:
            raise DecodeError("null compact records where records are required")
        return self._view(size)

    def compact_nullable_records(self) -> memoryview | None:
        size = self.unsigned_varint() - 1
        if size < 0:
            return None
        return self._view(size)

    # -- arrays, structs, tagged fields ------------------------------------------------------------

    def _check_count(self, count: int, element_bytes_min: int) -> int:
        if count * element_bytes_min > self.end - self.pos or count > self.end - self.pos:
            raise DecodeError(f"array of {count} elements cannot fit in the {self.end - self.pos} bytes left")
        return count

    def array_length(self, element_bytes_min: int = 1) -> int:
        """A non-null int32 array count, refused if the elements cannot fit in the bytes left."""
        count = self.int32()
        if count < 0:
            raise DecodeError(f"null or negative array length {count} where an array is required")
        if count and element_bytes_min:
            self._check_count(count, element_bytes_min)
        return count

    def nullable_array_length(self, element_bytes_min: int = 1) -> int:
        """An int32 array count; -1 means null."""
        count = self.int32()
        if count == _NULL_LENGTH:
            return count
        if count < 0:
            raise DecodeError(f"negative array length {count}")
        if count and element_bytes_min:
            self._check_count(count, element_bytes_min)
        return count

    def compact_array_length(self, element_bytes_min: int = 1) -> int:
        count = self.unsigned_varint() - 1
        if count < 0:
            raise DecodeError("null compact array where an array is required")
        if count and element_bytes_min:
            self._check_count(count, element_bytes_min)
        return count

    def compact_nullable_array_length(self, element_bytes_min: int = 1) -> int:
        """A compact array count; -1 means null."""
        count = self.unsigned_varint() - 1
        if count > 0 and element_bytes_min:
            self._check_count(count, element_bytes_min)
        return count

    def struct_marker(self) -> bool:
        """The int8 in front of a nullable struct: negative = null (False), else present (True)."""
        return self.int8() >= 0

    def tagged_field_count(self) -> int:
        count = self.unsigned_varint()
        # Each tagged field takes at least two bytes (tag and size).
        if count * 2 > self.end - self.pos:
            raise DecodeError(f"{count} tagged fields cannot fit in the {self.end - self.pos} bytes left")
        return count

    def tagged_fields(self) -> dict[int, bytes]:
        """Reads a whole tagged-field section, keeping every field as raw bytes by tag."""
        pos = self.pos
        if pos < self.end and self._buffer[pos] == 0:  # almost always: none
            self.pos = pos + 1
            return {}
        fields: dict[int, bytes] = {}
        for _ in range(self.tagged_field_count()):
            tag = self.unsigned_varint()
            size = self.unsigned_varint()
            fields[tag] = bytes(self._view(size))
        return fields

    def tagged_field_end(self, size: int) -> int:
        """Checks a known tagged field of `size` bytes fits; returns where it must end."""
        if size > self.end - self.pos:
            raise DecodeError(f"tagged field of {size} bytes cannot fit in the {self.end - self.pos} left")
        return self.pos + size

    def expect_position(self, position: int, what: str) -> None:
        """Raises unless exactly the bytes of a sized section were consumed."""
        if self.pos != position:
            raise DecodeError(f"{what}: section ended at byte {self.pos}, declared end {position}")

    def expect_end(self, what: str) -> None:
        if self.pos != self.end:
            raise DecodeError(f"{what}: {self.end - self.pos} bytes left over after decoding")


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# Pre-encoded unsigned varints for the small values that lengths and counts almost always are.
_SMALL_VARINTS = tuple(_varint_bytes(value) for value in range(128))


def unsigned_varint_at(view: memoryview, position: int, end: int) -> tuple[int, int]:
    """An unsigned varint of at most 4 bytes (values below 2**28: every length and count a fast
    path reads) at ``position``; (value, next position), or (-1, -1) when it is longer or runs past
    ``end`` (the caller leaves such input to the generated codec)."""
    value = 0
    shift = 0
    while position < end and shift < 28:
        byte = view[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7
    return -1, -1


def unsigned_varint_bytes(value: int) -> bytes:
    """``value`` (0..2**32-1) as an unsigned varint: compact lengths and counts."""
    if 0 <= value < 128:
        return _SMALL_VARINTS[value]
    if value < 0 or value > 0xFFFFFFFF:
        raise ValueError(f"unsigned varint {value} outside 0..2**32-1")
    return _varint_bytes(value)


class Writer:
    """Accumulates Kafka primitives. `getvalue()` returns the bytes; `getbuffers()` the pieces.

    Blobs of at least 16 KiB (record batches, mostly) are kept by reference instead of copied, so
    the caller must not mutate a buffer it passed until the writer's output has been consumed.
    """

    __slots__ = ("_buffer", "_chunks", "_chunks_bytes")

    def __init__(self, start: bytes = b"") -> None:
        """``start``: bytes already written (a pre-encoded header)."""
        self._buffer = bytearray(start)
        self._chunks: list[Blob] = []
        self._chunks_bytes = 0

    def __len__(self) -> int:
        return self._chunks_bytes + len(self._buffer)

    def getvalue(self) -> bytes:
        if not self._chunks:
            return bytes(self._buffer)
        return b"".join([*self._chunks, self._buffer])

    def getbuffers(self) -> list[Blob]:
        """The output as a list of buffers, for a zero-copy `writelines`."""
        if self._buffer:
            return [*self._chunks, self._buffer]
        return list(self._chunks)

    def raw(self, data: Blob) -> None:
        if len(data) >= _BLOB_BY_REFERENCE_BYTES_MIN:
            if self._buffer:
                self._chunks.append(self._buffer)
                self._chunks_bytes += len(self._buffer)
                self._buffer = bytearray()
            self._chunks.append(data)
            self._chunks_bytes += len(data)
        else:
            self._buffer += data

    # -- numbers -----------------------------------------------------------------------------------

    def int8(self, value: int) -> None:
        self._buffer += _int8_pack(value)

    def int16(self, value: int) -> None:
        self._buffer += _int16_pack(value)

    def int32(self, value: int) -> None:
        self._buffer += _int32_pack(value)

    def int64(self, value: int) -> None:
        self._buffer += _int64_pack(value)

    def uint16(self, value: int) -> None:
        self._buffer += _uint16_pack(value)

    def uint32(self, value: int) -> None:
        self._buffer += _uint32_pack(value)

    def float64(self, value: float) -> None:
        self._buffer += _float64_pack(value)

    def boolean(self, value: bool) -> None:
        self._buffer.append(1 if value else 0)

    def uuid(self, value: uuid.UUID) -> None:
        self._buffer += value.bytes

    def unsigned_varint(self, value: int) -> None:
        if 0 <= value < 128:  # inline: every compact length and count passes here
            self._buffer += _SMALL_VARINTS[value]
            return
        self._buffer += unsigned_varint_bytes(value)

    def varint(self, value: int) -> None:
        if not -(2**31) <= value < 2**31:
            raise ValueError(f"varint {value} outside the int32 range")
        self._buffer += _varint_bytes(((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)

    def varlong(self, value: int) -> None:
        if not -(2**63) <= value < 2**63:
            raise ValueError(f"varlong {value} outside the int64 range")
        self._buffer += _varint_bytes(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)

    # -- strings -----------------------------------------------------------------------------------

    def string(self, value: str) -> None:
        encoded = value.encode("utf-8")
        if len(encoded) > 0x7FFF:
            raise ValueError(f"string of {len(encoded)} bytes is longer than an int16 length allows")
        self._buffer += _int16_pack(len(encoded))
        self._buffer += encoded

    def nullable_string(self, value: str | None) -> None:
        if value is None:
            self._buffer += _int16_pack(_NULL_LENGTH)
        else:
            self.string(value)

    def compact_string(self, value: str) -> None:
        encoded = value.encode("utf-8")
        self.unsigned_varint(len(encoded) + 1)
        self._buffer += encoded

    def compact_nullable_string(self, value: str | None) -> None:
        if value is None:
            self._buffer.append(0)
        else:
            self.compact_string(value)

    # -- bytes and records -------------------------------------------------------------------------

    def bytes_(self, value: Blob) -> None:
        self._buffer += _int32_pack(len(value))
        self.raw(value)

    def nullable_bytes(self, value: Blob | None) -> None:
        if value is None:
            self._buffer += _int32_pack(_NULL_LENGTH)
        else:
            self.bytes_(value)

    def compact_bytes(self, value: Blob) -> None:
        self.unsigned_varint(len(value) + 1)
        self.raw(value)

    def compact_nullable_bytes(self, value: Blob | None) -> None:
        if value is None:
            self._buffer.append(0)
        else:
            self.compact_bytes(value)

    def _blob_length(self, value: Blob) -> int:
        # len() of a multi-dimensional or non-byte memoryview is not its size in bytes.
        return value.nbytes if isinstance(value, memoryview) else len(value)

    def records(self, value: Blob) -> None:
        self._buffer += _int32_pack(self._blob_length(value))
        self.raw(value)

    def nullable_records(self, value: Blob | None) -> None:
        if value is None:
            self._buffer += _int32_pack(_NULL_LENGTH)
        else:
            self.records(value)

    def compact_records(self, value: Blob) -> None:
        self.unsigned_varint(self._blob_length(value) + 1)
        self.raw(value)

    def compact_nullable_records(self, value: Blob | None) -> None:
        if value is None:
            self._buffer.append(0)
        else:
            self.compact_records(value)

    # -- arrays, structs, tagged fields ------------------------------------------------------------

    def array_length(self, count: int) -> None:
        """An int32 array count; pass -1 for null."""
        self._buffer += _int32_pack(count)

    def compact_array_length(self, count: int) -> None:
        """A compact array count; pass -1 for null."""
        self.unsigned_varint(count + 1)

    def struct_marker(self, present: bool) -> None:
        self._buffer += _int8_pack(1 if present else -1)

    def tagged_fields(self, known: list[tuple[int, bytes]], unknown: dict[int, bytes]) -> None:
        """Writes the tagged-field section: known fields (already encoded) and preserved unknown ones,
        sorted by tag. A known field wins over an unknown one with the same tag."""
        if not unknown:
            fields = known
        else:
            merged = dict(unknown)
            merged.update(known)
            fields = sorted(merged.items())
        if not fields:
            self._buffer.append(0)
            return
        self.unsigned_varint(len(fields))
        for tag, data in fields:
            self.unsigned_varint(tag)
            self.unsigned_varint(len(data))
            self._buffer += data

    def unknown_tagged_fields(self, unknown: dict[int, bytes]) -> None:
        """The tagged-field section of a struct with no known tagged fields in this version."""
        if not unknown:
            self._buffer.append(0)
            return
        self.unsigned_varint(len(unknown))
        for tag in sorted(unknown):
            data = unknown[tag]
            self.unsigned_varint(tag)
            self.unsigned_varint(len(data))
            self._buffer += data
