"""strom's rebalance history on the wire and in ``__consumer_offsets`` — a strom-only extension.

Kafka's protocol has no API that reads a group's past rebalances, so strom adds one:
``StromGroupHistory`` (API key ``STROM_GROUP_HISTORY_API_KEY`` = 32100, version 0, non-flexible).
The number is far above every API key Kafka has used (they are below 100), and only a strom broker
advertises it in ApiVersions; Kafka clients skip API keys they do not know (tests/compat checks
librdkafka, kafka-python and aiokafka against a broker advertising it). These classes are written
by hand, shaped like the generated ones in ``strom.protocol.messages`` (``read``/``write``,
``encode``/``decode``), and live outside that package so that the generator's ``--check`` still
owns all of it.

One rebalance (``RebalanceEntry``) has one binary layout, used twice: as the value of its
``__consumer_offsets`` record (``strom.coordinator.history``) and as an element of the response's
``entries`` (so a newer broker's entries reach an older client as bytes it may skip).

Entry layout, version 0 (big-endian, Kafka's non-flexible primitives): int16 version, int64
sequence, string protocol, int32 generation, string trigger, [string] causes, int64 start_ms,
int64 join_end_ms, int64 end_ms, string outcome, [string] members_before, [string] members_after,
[move] moves (string topic, int32 partition, nullable string from, nullable string to),
int32 moves_omitted.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar, Self

from strom.protocol.primitives import DecodeError, FieldSpec, Reader, UnsupportedVersionError, Writer

STROM_GROUP_HISTORY_API_KEY = 32100
ENTRY_VERSION = 0


@dataclass(frozen=True)
class PartitionMove:
    """A partition that changed owner: ``from_member`` None if nobody owned it before, ``to_member``
    None if nobody owns it after."""

    topic: str
    partition: int
    from_member: str | None
    to_member: str | None


@dataclass(frozen=True)
class RebalanceEntry:
    """One rebalance of one group.

    ``generation`` is the classic group's generation, or the consumer group's group epoch, that the
    rebalance produced. Times are wall-clock milliseconds: the join phase runs from ``start_ms`` to
    ``join_end_ms`` (classic: JoinGroup; consumer protocol: the target is computed at once, so it
    is ``start_ms``), the assignment phase from there to ``end_ms`` (classic: SyncGroup until the
    leader's assignment is written; consumer protocol: until every member reconciled to the target).
    ``outcome`` is "completed", or "superseded" when another rebalance began before it finished.
    """

    sequence: int
    protocol: str
    generation: int
    trigger: str
    causes: tuple[str, ...]
    start_ms: int
    join_end_ms: int
    end_ms: int
    outcome: str
    members_before: tuple[str, ...]
    members_after: tuple[str, ...]
    moves: tuple[PartitionMove, ...] = ()
    # Moves beyond the bound an entry keeps (strom.base.limits.rebalance_history_moves_max).
    moves_omitted: int = 0

    @property
    def join_ms(self) -> int:
        return max(self.join_end_ms - self.start_ms, 0)

    @property
    def assignment_ms(self) -> int:
        return max(self.end_ms - self.join_end_ms, 0)

    @property
    def duration_ms(self) -> int:
        return max(self.end_ms - self.start_ms, 0)

    def to_json(self) -> dict[str, object]:
        return {
            "sequence": self.sequence,
            "protocol": self.protocol,
            "generation": self.generation,
            "trigger": self.trigger,
            "causes": list(self.causes),
            "start_ms": self.start_ms,
            "join_end_ms": self.join_end_ms,
            "end_ms": self.end_ms,
            "join_ms": self.join_ms,
            "assignment_ms": self.assignment_ms,
            "duration_ms": self.duration_ms,
            "outcome": self.outcome,
            "members_before": list(self.members_before),
            "members_after": list(self.members_after),
            "moves": [
                {"topic": m.topic, "partition": m.partition, "from": m.from_member, "to": m.to_member}
                for m in self.moves
            ],
            "moves_omitted": self.moves_omitted,
        }


def _write_strings(writer: Writer, values: tuple[str, ...]) -> None:
    writer.array_length(len(values))
    for value in values:
        writer.string(value)


def _read_strings(reader: Reader) -> tuple[str, ...]:
    return tuple(reader.string() for _ in range(reader.array_length(2)))


def write_entry(writer: Writer, entry: RebalanceEntry) -> None:
    writer.int16(ENTRY_VERSION)
    writer.int64(entry.sequence)
    writer.string(entry.protocol)
    writer.int32(entry.generation)
    writer.string(entry.trigger)
    _write_strings(writer, entry.causes)
    writer.int64(entry.start_ms)
    writer.int64(entry.join_end_ms)
    writer.int64(entry.end_ms)
    writer.string(entry.outcome)
    _write_strings(writer, entry.members_before)
    _write_strings(writer, entry.members_after)
    writer.array_length(len(entry.moves))
    for move in entry.moves:
        writer.string(move.topic)
        writer.int32(move.partition)
        writer.nullable_string(move.from_member)
        writer.nullable_string(move.to_member)
    writer.int32(entry.moves_omitted)


def encode_entry(entry: RebalanceEntry) -> bytes:
    writer = Writer()
    try:
        write_entry(writer, entry)
    except struct.error as error:
        raise ValueError(f"RebalanceEntry: {error}") from None
    return writer.getvalue()


def decode_entry(data: bytes | bytearray | memoryview) -> RebalanceEntry:
    """Raises ``DecodeError`` for bytes that are not a whole entry of a known version."""
    reader = Reader(data)
    version = reader.int16()
    if version != ENTRY_VERSION:
        raise DecodeError(f"rebalance entry version {version} is unknown")
    sequence = reader.int64()
    protocol = reader.string()
    generation = reader.int32()
    trigger = reader.string()
    causes = _read_strings(reader)
    start_ms = reader.int64()
    join_end_ms = reader.int64()
    end_ms = reader.int64()
    outcome = reader.string()
    members_before = _read_strings(reader)
    members_after = _read_strings(reader)
    moves = tuple(
        PartitionMove(reader.string(), reader.int32(), reader.nullable_string(), reader.nullable_string())
        for _ in range(reader.array_length(10))
    )
    moves_omitted = reader.int32()
    reader.expect_end("rebalance entry")
    return RebalanceEntry(
        sequence=sequence,
        protocol=protocol,
        generation=generation,
        trigger=trigger,
        causes=causes,
        start_ms=start_ms,
        join_end_ms=join_end_ms,
        end_ms=end_ms,
        outcome=outcome,
        members_before=members_before,
        members_after=members_after,
        moves=moves,
        moves_omitted=moves_omitted,
    )


class StromGroupHistoryRequest:
    """StromGroupHistoryRequest (strom-only API key 32100, version 0): a group's rebalances."""

    API_KEY: ClassVar[int] = STROM_GROUP_HISTORY_API_KEY
    NAME: ClassVar[str] = "StromGroupHistoryRequest"
    MIN_VERSION: ClassVar[int] = 0
    MAX_VERSION: ClassVar[int] = 0
    FLEXIBLE_MIN_VERSION: ClassVar[int | None] = None
    # As the generated classes list theirs (tests and tools walk them: the fuzzers build requests
    # from them).
    FIELDS: ClassVar[tuple[FieldSpec, ...]] = (FieldSpec("group_id", "string", (0, 0), (1, 0), None, False),)

    __slots__ = ("group_id",)

    def __init__(self, group_id: str = "") -> None:
        self.group_id = group_id

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StromGroupHistoryRequest):
            return NotImplemented
        return self.group_id == other.group_id

    def __repr__(self) -> str:
        return f"StromGroupHistoryRequest(group_id={self.group_id!r})"

    def write(self, writer: Writer, version: int) -> None:
        if version != 0:
            raise UnsupportedVersionError(
                f"StromGroupHistoryRequest has no version {version} (supported: 0-0)"
            )
        writer.string(self.group_id)

    @classmethod
    def read(cls, reader: Reader, version: int) -> Self:
        if version != 0:
            raise UnsupportedVersionError(
                f"StromGroupHistoryRequest has no version {version} (supported: 0-0)"
            )
        return cls(group_id=reader.string())

    def encode(self, version: int) -> bytes:
        writer = Writer()
        self.write(writer, version)
        return writer.getvalue()

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview, version: int) -> Self:
        reader = Reader(data)
        obj = cls.read(reader, version)
        reader.expect_end(cls.NAME)
        return obj


class StromGroupHistoryResponse:
    """StromGroupHistoryResponse (version 0): int32 throttle_time_ms, int16 error_code, nullable
    string error_message, [bytes] entries (each an encoded ``RebalanceEntry``, oldest first)."""

    API_KEY: ClassVar[int] = STROM_GROUP_HISTORY_API_KEY
    NAME: ClassVar[str] = "StromGroupHistoryResponse"
    MIN_VERSION: ClassVar[int] = 0
    MAX_VERSION: ClassVar[int] = 0
    FLEXIBLE_MIN_VERSION: ClassVar[int | None] = None

    __slots__ = ("entries", "error_code", "error_message", "throttle_time_ms")

    def __init__(
        self,
        throttle_time_ms: int = 0,
        error_code: int = 0,
        error_message: str | None = None,
        entries: list[bytes] | None = None,
    ) -> None:
        self.throttle_time_ms = throttle_time_ms
        self.error_code = error_code
        self.error_message = error_message
        self.entries = [] if entries is None else entries

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StromGroupHistoryResponse):
            return NotImplemented
        return (self.throttle_time_ms, self.error_code, self.error_message, self.entries) == (
            other.throttle_time_ms,
            other.error_code,
            other.error_message,
            other.entries,
        )

    def __repr__(self) -> str:
        return (
            f"StromGroupHistoryResponse(throttle_time_ms={self.throttle_time_ms!r}, "
            f"error_code={self.error_code!r}, error_message={self.error_message!r}, "
            f"entries=<{len(self.entries)} entries>)"
        )

    def write(self, writer: Writer, version: int) -> None:
        if version != 0:
            raise UnsupportedVersionError(
                f"StromGroupHistoryResponse has no version {version} (supported: 0-0)"
            )
        writer.int32(self.throttle_time_ms)
        writer.int16(self.error_code)
        writer.nullable_string(self.error_message)
        writer.array_length(len(self.entries))
        for entry in self.entries:
            writer.bytes_(entry)

    @classmethod
    def read(cls, reader: Reader, version: int) -> Self:
        if version != 0:
            raise UnsupportedVersionError(
                f"StromGroupHistoryResponse has no version {version} (supported: 0-0)"
            )
        throttle_time_ms = reader.int32()
        error_code = reader.int16()
        error_message = reader.nullable_string()
        entries = [reader.bytes_() for _ in range(reader.array_length(4))]
        return cls(throttle_time_ms, error_code, error_message, entries)

    def encode(self, version: int) -> bytes:
        writer = Writer()
        self.write(writer, version)
        return writer.getvalue()

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview, version: int) -> Self:
        reader = Reader(data)
        obj = cls.read(reader, version)
        reader.expect_end(cls.NAME)
        return obj
