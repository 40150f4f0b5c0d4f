"""Produced record batches checked completely before a byte of them is stored.

Kafka's log validator reads every record of a batch when it enters the log, so that nothing
downstream (fetch, replication, compaction, any client) meets a batch it cannot read: a batch
stored with a valid CRC but records that do not parse stops librdkafka at that offset for good and
spins kafka-python, and a forged lastOffsetDelta moves the log end by two billion offsets. strom
checks the same, per batch, once, on produce (``header.validate_batches`` has checked length,
magic and CRC before):

- the header: a record count of at least one that equals lastOffsetDelta + 1; no control batch
  from a client (transaction markers are the broker's to write); a producer id comes with a base
  sequence of 0 or more, and a transactional batch with a producer id; a known codec (bits 0-2 of
  the attributes are 0-4);
- the payload: a compressed one decompresses within ``decompressed_bytes_max``; then exactly
  recordCount records fill it to its last byte, each ending where its length says: varints of at
  most 5 bytes holding an int32 (10 bytes and an int64 for the timestamp delta), key and value
  lengths -1 or more and within the record, a header count of 0 or more, header keys of 0 or more
  bytes (any bytes: Kafka does not check that they are UTF-8 when it appends, and its readers
  decode them leniently, as strom's do), header values of -1 or more bytes, offset deltas 0, 1,
  2, ... in order, and every timestamp (baseTimestamp + delta) an int64;
- keys present on a compacted topic (the keyless records are listed, as Kafka lists them);
- a CreateTime batch whose maxTimestamp is not its largest record timestamp gets it set (and its
  CRC recomputed), as Kafka's validator does: the time index and time-based retention trust it.

Anything wrong raises ``CorruptBatchError`` (answered CORRUPT_MESSAGE: an unknown codec, data the
codec cannot read, too much of it) or its subclass ``InvalidRecordError`` (answered INVALID_RECORD:
what Kafka's validator throws for everything else).

A check costs about the decompressed bytes and the records of the batches. Given a ``WorkBound``,
``validate_produced_batches`` takes on no more than it allows: it raises ``ValidationTooCostly``
(having decided nothing) for batches that would take more, which the broker then checks in a
worker thread rather than on its event loop (``strom.broker.produce_validation``). A compressed
batch's decompressed size is known only by decompressing it: it is decompressed up to the bound,
and found too costly if there is more.

How it stays fast (the broker is a per-batch machine; see DESIGN.md):

- Runs. A producer's batch is mostly runs of records laid out alike: same size, same key and
  value lengths, same headers, timestamp and offset deltas of one varint width (the offset
  delta's grows at 64 and 8192). One record of a run is parsed in Python (the template); the next
  records are rows of a 2-D numpy view of ``count x size`` bytes, checked a machine word at a
  time: the bytes that fix the layout equal the template's, the offset delta bytes encode
  ``i, i+1, ...``, the timestamp delta has the template's varint width. A row that passes is laid
  out exactly like the template and so parses as it does; the run ends at the first that does not.
  Short windows of rows are checked the same way with bytes operations (strided slices counted
  and compared), which cost less per call than numpy. The plan for a layout is remembered, and
  found again for the next batch by the template's first and last bytes.
- Varied records. Where runs keep failing (after each failure the next attempt waits twice as
  long), the record boundaries are found by one Python hop per record along the length prefixes,
  and every field of the records found is then checked for all of them at once with numpy.
- Few records (small batches, short tails) are parsed one by one, the reference every other path
  must agree with; a vectorised check that finds a fault re-parses its records one by one so that
  the answer names the first bad record precisely.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import crc32c as _crc32c
import numpy as np
import numpy.typing as npt

from strom.base import limits
from strom.protocol.records.compression import (
    CompressionType,
    DecompressedTooLargeError,
    MappedOutput,
    decompress,
    decompress_mapped,
)
from strom.protocol.records.header import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_BIT,
    CRC_OFFSET,
    HEADER_BYTES,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
    CorruptBatchError,
    validate_batches,
)

__all__ = [
    "DEFAULT_TUNING",
    "InvalidRecordError",
    "RecordsSummary",
    "Tuning",
    "ValidationTooCostly",
    "WorkBound",
    "validate_produced_batches",
    "validate_records",
]

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
_CODEC_MAX = max(CompressionType)

# The smallest record: a one-byte length, then attributes, timestampDelta, offsetDelta,
# keyLength, valueLength and headerCount of one byte each.
RECORD_BODY_BYTES_MIN = 6
RECORD_BYTES_MIN = 1 + RECORD_BODY_BYTES_MIN

_MAX_TIMESTAMP = struct.Struct(">q")
_MAX_TIMESTAMP_OFFSET = 35
_CRC = struct.Struct(">I")

UInt8Array = npt.NDArray[np.uint8]
BoolArray = npt.NDArray[np.bool_]
Int64Array = npt.NDArray[np.int64]
UInt64Array = npt.NDArray[np.uint64]
Payload = bytes | bytearray | memoryview


@dataclass(frozen=True, slots=True)
class Tuning:
    """When each path is taken. The defaults were measured (BENCHMARKS.md); tests shrink them to
    drive every path with small batches. None of them changes what is accepted."""

    # A run is tried when at least this many records follow the template, and counts as a
    # success when it covers at least this many.
    run_records_min: int = 16
    # Rows checked by a run's first window; each next window is ``run_window_growth`` times
    # larger, up to ``run_window_records_max``.
    run_window_records_first: int = 128
    run_window_growth: int = 8
    run_window_records_max: int = 32_768
    # After a failed run attempt, records checked as varied before the next attempt: doubling on
    # each failure up to this, back to none after a success.
    run_backoff_records_max: int = 4_096
    # Fewer records than this are parsed one by one rather than checked as vectors.
    vector_records_min: int = 32
    # Runs windows of at most this many rows are checked with bytes operations (a call costs
    # less than a numpy call; numpy touches less memory per row).
    run_bytes_records_max: int = 512


DEFAULT_TUNING = Tuning()


class InvalidRecordError(CorruptBatchError):
    """A batch with a good CRC whose content Kafka's validator refuses (INVALID_RECORD).

    ``record_errors`` lists (index of the record among the partition's records, why) where Kafka
    lists culprit records (keyless records on a compacted topic); it is empty otherwise."""

    def __init__(self, message: str, record_errors: Sequence[tuple[int, str]] = ()) -> None:
        super().__init__(message)
        self.record_errors = tuple(record_errors)


@dataclass(frozen=True, slots=True)
class WorkBound:
    """The most checking one call may take on: decompressed (or uncompressed) bytes of records, and
    records, over all its batches."""

    bytes_max: int
    records_max: int


class ValidationTooCostly(Exception):
    """The batches would take more checking than the ``WorkBound`` allows; nothing was decided
    about them (a batch found wrong before is reported as such instead)."""


class RecordsSummary(NamedTuple):
    """What the records of one batch told: the range of their timestamp deltas, how many have no
    key and the indexes of the first of those (at most the ``keyless_listed_max`` asked for). A
    NamedTuple: one is made for every produced batch, at a third of a frozen dataclass's cost."""

    timestamp_delta_min: int
    timestamp_delta_max: int
    keyless_count: int
    keyless_indexes: tuple[int, ...]


# ---------------------------------------------------------------------------------------------
# A produce request's records for one partition


def validate_produced_batches(
    records: bytearray | memoryview,
    headers: Sequence[BatchHeader] | None = None,
    *,
    keys_required: bool = False,
    decompressed_bytes_max: int = limits.decompressed_batch_bytes_max,
    record_errors_max: int = limits.produce_record_errors_max,
    tuning: Tuning = DEFAULT_TUNING,
    work_bound: WorkBound | None = None,
    on_decompressed: Callable[[int], None] | None = None,
    mapped: bool = False,
) -> list[BatchHeader]:
    """Check every batch in ``records`` completely (see the module docs); return their headers.

    ``headers`` are those ``validate_batches(records)`` returned, if the caller has already
    checked lengths, magic and CRC (to refuse cheaper faults, like a batch too large, first).
    ``records`` must be writable: a CreateTime batch whose maxTimestamp is wrong is corrected in
    place. Raises ``InvalidRecordError`` or ``CorruptBatchError`` for the first batch that fails,
    and then nothing of ``records`` may be stored. ``keys_required`` (a compacted topic) refuses
    keyless records, listing at most ``record_errors_max`` of them.

    With ``work_bound``, raises ``ValidationTooCostly`` rather than take on more records or bytes
    than it allows (a call that returns has checked everything). ``on_decompressed`` is told the
    size of each batch's records once decompressed (before they are checked). ``mapped``: records
    are decompressed into memory mappings (``decompress_mapped``), for large batches checked in a
    worker thread.
    """
    if headers is None:
        headers = validate_batches(records)
    if work_bound is not None:
        _check_work(headers, len(records), work_bound)
        if work_bound.bytes_max < decompressed_bytes_max:
            decompressed_bytes_max = work_bound.bytes_max
        else:
            work_bound = None  # the bytes bound is the cap itself: nothing can be too costly
    view = memoryview(records)
    checked: list[BatchHeader] = []
    position = 0
    first_record_index = 0
    for header in headers:
        _check_header(header)
        start = position + HEADER_BYTES
        end = position + header.size_bytes
        compression = header.attributes & COMPRESSION_MASK
        payload: Payload
        output: MappedOutput | None = None
        if compression == CompressionType.NONE:
            payload = view[start:end]
        else:
            try:
                if mapped:
                    output = decompress_mapped(compression, view[start:end], decompressed_bytes_max)
                    payload = output.view()
                else:
                    payload = decompress(compression, view[start:end], decompressed_bytes_max)
            except DecompressedTooLargeError:
                if work_bound is None:
                    raise
                raise ValidationTooCostly(
                    f"a batch decompresses to more than {work_bound.bytes_max} bytes"
                ) from None
            if on_decompressed is not None:
                on_decompressed(len(payload))
        try:
            summary = validate_records(
                payload,
                header.record_count,
                keyless_listed_max=record_errors_max if keys_required else 0,
                tuning=tuning,
            )
        except InvalidRecordError as error:
            if output is not None:
                # Its traceback (and that of what it was raised from) holds views of the payload,
                # which would keep the mapping from closing.
                error.__traceback__ = error.__context__ = error.__cause__ = None
            raise
        finally:
            if output is not None:
                del payload
                output.close()
        if keys_required and summary.keyless_count:
            raise _keyless_records_error(summary, first_record_index)
        header = _check_timestamps(records, position, header, summary)
        checked.append(header)
        position = end
        first_record_index += header.record_count
    return checked


def _check_work(headers: Sequence[BatchHeader], records_bytes: int, bound: WorkBound) -> None:
    """Raise ``ValidationTooCostly`` for batches that are too many records or bytes for ``bound``
    already by their headers (a compressed batch may still be found too costly once decompressed:
    it holds at least as many bytes as it takes compressed, and usually more)."""
    records = headers[0].record_count if len(headers) == 1 else sum(header.record_count for header in headers)
    if records > bound.records_max:
        raise ValidationTooCostly(f"{records} records, more than {bound.records_max}")
    if records_bytes > bound.bytes_max:
        raise ValidationTooCostly(f"{records_bytes} bytes, more than {bound.bytes_max}")


def _check_header(header: BatchHeader) -> None:
    if header.attributes & COMPRESSION_MASK > _CODEC_MAX:
        raise CorruptBatchError(f"unknown compression codec {header.attributes & COMPRESSION_MASK}")
    if header.record_count <= 0:
        raise InvalidRecordError(
            f"a produced batch must hold records, this one declares {header.record_count}"
        )
    if header.last_offset_delta + 1 != header.record_count:
        raise InvalidRecordError(
            f"inconsistent batch: lastOffsetDelta {header.last_offset_delta} "
            f"with {header.record_count} records declared"
        )
    if header.attributes & CONTROL_BIT:
        raise InvalidRecordError(
            "clients may not write control batches: transaction markers are written by the broker"
        )
    if header.attributes & TRANSACTIONAL_BIT and header.producer_id < 0:
        raise InvalidRecordError("a transactional batch needs a producer id")
    if header.producer_id >= 0 and header.base_sequence < 0:
        raise InvalidRecordError(
            f"invalid base sequence {header.base_sequence} for producer id {header.producer_id}"
        )


KEYLESS_REASON = "a compacted topic refuses records without a key"


def _keyless_records_error(summary: RecordsSummary, first_record_index: int) -> InvalidRecordError:
    return InvalidRecordError(
        f"{summary.keyless_count} record(s) without a key: {KEYLESS_REASON}",
        record_errors=[(first_record_index + index, KEYLESS_REASON) for index in summary.keyless_indexes],
    )


def _check_timestamps(
    records: bytearray | memoryview, position: int, header: BatchHeader, summary: RecordsSummary
) -> BatchHeader:
    lowest = header.base_timestamp + summary.timestamp_delta_min
    highest = header.base_timestamp + summary.timestamp_delta_max
    if lowest < INT64_MIN or highest > INT64_MAX:
        raise InvalidRecordError(
            f"record timestamps run out of int64: base {header.base_timestamp}, deltas "
            f"{summary.timestamp_delta_min} .. {summary.timestamp_delta_max}"
        )
    if header.attributes & TIMESTAMP_TYPE_BIT or header.max_timestamp == highest:
        return header
    # The producer's maxTimestamp is not its records' largest: the log would index and expire the
    # batch by a time none of its records has. Kafka's validator sets it; so does strom.
    _MAX_TIMESTAMP.pack_into(records, position + _MAX_TIMESTAMP_OFFSET, highest)
    covered = memoryview(records)[position + ATTRIBUTES_OFFSET : position + header.size_bytes]
    crc = int(_crc32c.crc32c(covered))
    _CRC.pack_into(records, position + CRC_OFFSET, crc)
    return header._replace(max_timestamp=highest, crc=crc)


# ---------------------------------------------------------------------------------------------
# The records of one batch


def validate_records(
    payload: Payload,
    count: int,
    *,
    keyless_listed_max: int = 0,
    tuning: Tuning = DEFAULT_TUNING,
) -> RecordsSummary:
    """Check that exactly ``count`` records fill ``payload`` (a batch's records, uncompressed) to
    its last byte, each one well formed, the offset delta of each equal to its index.

    Raises ``InvalidRecordError`` naming the first record that fails.
    """
    size = len(payload)
    if count < 0 or count > size // RECORD_BYTES_MIN:
        raise InvalidRecordError(f"{count} records cannot fit in {size} bytes")
    if count == 1:
        # One record (what a producer at linger.ms=0 sends): parsed as the walker would, without it.
        try:
            record_end, timestamp_delta, key_is_null = _parse_record(payload, 0, size, 0)
        except IndexError:
            raise InvalidRecordError("record 0 runs off the end of the batch") from None
        except _VarintError as error:
            raise InvalidRecordError(f"record 0 has {error}") from None
        if record_end != size:
            raise InvalidRecordError(f"{size - record_end} bytes left over after the batch's last record")
        if key_is_null:
            listed = (0,) if keyless_listed_max > 0 else ()
            return RecordsSummary(timestamp_delta, timestamp_delta, 1, listed)
        return RecordsSummary(timestamp_delta, timestamp_delta, 0, ())
    walker = _Walker(payload, count, keyless_listed_max, tuning)
    walker.walk()
    return RecordsSummary(
        walker.timestamp_delta_min if count else 0,
        walker.timestamp_delta_max if count else 0,
        walker.keyless_count,
        tuple(walker.keyless_indexes),
    )


class _Walker:
    """One pass over the records of a payload, choosing a path per stretch of records."""

    def __init__(self, payload: Payload, count: int, keyless_listed_max: int, tuning: Tuning) -> None:
        self.data = payload
        self.size = len(payload)
        self.count = count
        self.tuning = tuning
        self.keyless_listed_max = keyless_listed_max
        self.timestamp_delta_min = INT64_MAX
        self.timestamp_delta_max = INT64_MIN
        self.keyless_count = 0
        self.keyless_indexes: list[int] = []
        self._array: UInt8Array | None = None
        self._uniform = False  # the last run ended only where its offset delta width did

    @property
    def array(self) -> UInt8Array:
        if self._array is None:
            self._array = np.frombuffer(self.data, np.uint8)
        return self._array

    def walk(self) -> None:
        tuning = self.tuning
        data = self.data
        size = self.size
        count = self.count
        position = 0
        index = 0
        backoff = 0
        varied = 0  # records to check as varied before the next run attempt
        try:
            while index < count:
                remaining = count - index
                if remaining < tuning.vector_records_min:
                    position = self._parse_each(position, index, remaining)
                    index = count
                    break
                if varied:
                    stretch = min(varied, remaining)
                    position = self._check_varied(position, index, stretch)
                    index += stretch
                    varied = 0
                    continue
                # A template record, and the run of records laid out like it.
                record_end, timestamp_delta, key_is_null = _parse_record(data, position, size, index)
                self._note(index, 1, timestamp_delta, timestamp_delta, key_is_null)
                taken = 0
                if (
                    remaining > tuning.run_records_min
                    and record_end < size
                    and data[record_end] == data[position]
                ):
                    taken, lowest, highest, run_keyless = self._extend_run(position, record_end, index)
                    if taken:
                        self._note(index + 1, taken, lowest, highest, run_keyless)
                index += 1 + taken
                position = record_end + taken * (record_end - position)
                if taken < tuning.run_records_min:
                    backoff = min(max(backoff * 2, tuning.run_records_min), tuning.run_backoff_records_max)
                    varied = backoff
                else:
                    backoff = 0
        except IndexError:
            raise InvalidRecordError(f"record {index} runs off the end of the batch") from None
        except _VarintError as error:
            raise InvalidRecordError(f"record {index} has {error}") from None
        if position != size:
            raise InvalidRecordError(f"{size - position} bytes left over after the batch's last record")

    def _note(self, first: int, count: int, lowest: int, highest: int, keyless: bool) -> None:
        """Account for ``count`` records from ``first`` with timestamp deltas in [lowest, highest]."""
        if lowest < self.timestamp_delta_min:
            self.timestamp_delta_min = lowest
        if highest > self.timestamp_delta_max:
            self.timestamp_delta_max = highest
        if keyless:
            self._note_keyless(range(first, first + count))

    def _note_keyless(self, indexes: Sequence[int] | Int64Array) -> None:
        self.keyless_count += len(indexes)
        room = self.keyless_listed_max - len(self.keyless_indexes)
        if room > 0:
            self.keyless_indexes.extend(int(index) for index in indexes[:room])

    # -- one by one --------------------------------------------------------------------------

    def _parse_each(self, position: int, first: int, count: int) -> int:
        """Parse ``count`` records from ``position`` one by one; returns where they end."""
        data = self.data
        size = self.size
        parse = _parse_record
        note = self._note
        index = first
        try:
            for index in range(first, first + count):
                record_end, timestamp_delta, key_is_null = parse(data, position, size, index)
                note(index, 1, timestamp_delta, timestamp_delta, key_is_null)
                position = record_end
        except IndexError:
            raise InvalidRecordError(f"record {index} runs off the end of the batch") from None
        except _VarintError as error:
            raise InvalidRecordError(f"record {index} has {error}") from None
        return position

    # -- runs --------------------------------------------------------------------------------

    def _extend_run(
        self, template: int, template_end: int, template_index: int
    ) -> tuple[int, int, int, bool]:
        """How many records after the (valid) template at ``template`` are laid out exactly like
        it, and so are valid too; the range of their timestamp deltas; whether their keys are null.

        The plan is first guessed from the template's first and last bytes (the plan of an earlier
        batch); if the guess takes no record, the template's own plan decides."""
        guess = _plan_guess(self.data, template, template_end)
        plan = _plans_by_guess.get(guess)
        if plan is not None:
            taken, lowest, highest = self._run(plan, template_end, template_index)
            if taken:
                return taken, lowest, highest, plan.key_is_null
        plan = _run_plan(_record_shape(self.data, template, template_end))
        if len(_plans_by_guess) >= _RUN_PLANS_CACHED_MAX:
            _plans_by_guess.clear()
        _plans_by_guess[guess] = plan
        taken, lowest, highest = self._run(plan, template_end, template_index)
        return taken, lowest, highest, plan.key_is_null

    def _run(self, plan: _RunPlan, position: int, template_index: int) -> tuple[int, int, int]:
        """The records from ``position`` (after the template, record ``template_index``) that
        ``plan`` accepts, window by window: how many, and the range of their timestamp deltas."""
        tuning = self.tuning
        record_bytes = plan.record_bytes
        first = template_index + 1
        limit = min(
            self.count - first, (self.size - position) // record_bytes, plan.offset_delta_limit - first
        )
        # After a run that went as far as its offset delta width allows, the batch is most likely
        # one layout throughout: the next run starts with the largest window.
        window = tuning.run_window_records_max if self._uniform else tuning.run_window_records_first
        taken = 0
        lowest = INT64_MAX
        highest = INT64_MIN
        while taken < limit:
            rows_count = min(window, limit - taken)
            bounds = None
            if rows_count <= tuning.run_bytes_records_max and plan.few_rows_checkable:
                bounds = plan.check_few_rows(self.data, position, rows_count, first)
            if bounds is not None:
                run = rows_count
                run_lowest, run_highest = bounds
            else:
                run, run_lowest, run_highest = plan.check_rows(self.data, position, rows_count, first)
            if run:
                lowest = min(lowest, run_lowest)
                highest = max(highest, run_highest)
            taken += run
            position += run * record_bytes
            first += run
            if run < rows_count:
                break
            window = min(window * tuning.run_window_growth, tuning.run_window_records_max)
        self._uniform = taken == plan.offset_delta_limit - template_index - 1
        return taken, lowest, highest

    # -- varied records ----------------------------------------------------------------------

    def _check_varied(self, position: int, first: int, count: int) -> int:
        """Check ``count`` records of any layouts from ``position``; returns where they end."""
        if count < self.tuning.vector_records_min:
            return self._parse_each(position, first, count)
        try:
            heads, end = _hop(self.data, position, count)
            checked = _check_heads(self.data, self.array, heads, end, first)
        except (IndexError, InvalidRecordError):
            checked = None  # a length points outside the payload, or is no varint: found below
        if checked is None:
            # Something is wrong with these records: parse them one by one for the precise
            # answer (this raises).
            self._parse_each(position, first, count)
            raise AssertionError("the vectorised check refused records the parser accepts")
        lowest, highest, keyless = checked
        if lowest < self.timestamp_delta_min:
            self.timestamp_delta_min = lowest
        if highest > self.timestamp_delta_max:
            self.timestamp_delta_max = highest
        if len(keyless):
            self._note_keyless(keyless + first)
        return end


# ---------------------------------------------------------------------------------------------
# Runs of records laid out alike

# Offset deltas whose expected encodings are tabulated per varint width (those of larger batches
# are computed per window).
_OFFSET_DELTA_TABLE_SIZE_MAX = 1 << 17
_RUN_PLANS_CACHED_MAX = limits.record_layouts_cached_max
# A plan keeps its offset delta table shifted into place when the table is this small (widths 1
# and 2: 64 KiB at most); larger ones are shifted per window.
_SHIFTED_OFFSET_TABLE_SIZE_MAX = 1 << 13


@dataclass(frozen=True, slots=True)
class _Shape:
    """Where the fields of a valid record are, relative to its start, and the bytes that fix its
    layout: records with the same shape are laid out alike."""

    record_bytes: int
    # The columns that fix the layout (length prefix, key/value/header lengths, header keys) and
    # the bytes there.
    layout_columns: tuple[int, ...]
    layout_bytes: bytes
    timestamp_at: int
    timestamp_bytes: int
    offset_delta_at: int
    offset_delta_bytes: int
    key_is_null: bool


class _RunPlan:
    """How to check, a machine word at a time, that records are laid out like a template record.

    Every byte of a record that must equal the template's (the layout), or whose continuation
    bit must (the timestamp delta's), or that must encode the record's offset delta lies in one
    of a few machine words at fixed places in the record. The words of all rows of a window are
    read at once through a strided view (each row one record), masked, and compared with what
    they must be; only the offset delta's word differs from row to row.
    """

    def __init__(self, shape: _Shape) -> None:
        record_bytes = shape.record_bytes
        word_bytes = 8 if record_bytes >= 8 else 4  # a record has at least 7 bytes
        self.record_bytes = record_bytes
        self.word_bytes = word_bytes
        self.word_type = np.uint64 if word_bytes == 8 else np.uint32
        masks: dict[int, int] = {}
        expected: dict[int, int] = {}
        for column, byte in zip(shape.layout_columns, shape.layout_bytes):
            masks[column] = 0xFF
            expected[column] = byte
        timestamp_end = shape.timestamp_at + shape.timestamp_bytes
        for column in range(shape.timestamp_at, timestamp_end):
            masks[column] = 0x80
            expected[column] = 0x80
        expected[timestamp_end - 1] = 0
        if shape.timestamp_bytes == 10:  # the tenth byte holds bit 63 only
            masks[timestamp_end - 1] = 0xFE
        offset_at = shape.offset_delta_at
        offset_end = offset_at + shape.offset_delta_bytes
        # The first word holds the whole offset delta (placed to cover as many other checked bytes
        # as it can); further words cover the rest.
        candidates = range(max(0, offset_end - word_bytes), min(offset_at, record_bytes - word_bytes) + 1)
        assert candidates, "an offset delta fits in a word"
        first_start = max(candidates, key=lambda start: sum(start <= c < start + word_bytes for c in masks))
        starts = [first_start]
        for column in sorted(masks):
            if not any(start <= column < start + word_bytes for start in starts):
                starts.append(min(column, record_bytes - word_bytes))
        self.starts = np.array(starts, np.intp)
        # Only the first word tests the offset delta: its bytes are in its mask, not in the others'.
        offset_mask = self._word(dict.fromkeys(range(offset_at, offset_end), 0xFF), first_start)
        self.word_checks = [
            (
                start,
                self._word(masks, start) | (offset_mask if index == 0 else 0),
                self._word(expected, start),
            )
            for index, start in enumerate(starts)
        ]
        self.masks = np.array([mask for _, mask, _ in self.word_checks], self.word_type)
        self.expected = np.array([value for _, _, value in self.word_checks], self.word_type)
        self.offset_shift = 8 * (offset_at - first_start)
        self.offset_delta_bytes = shape.offset_delta_bytes
        # Offset deltas a varint of this width holds: zigzag (twice the delta) below 2 ** (7 w).
        self.offset_delta_limit = 1 << (7 * shape.offset_delta_bytes - 1)
        self.timestamp_at = shape.timestamp_at
        self.timestamp_bytes = shape.timestamp_bytes
        # Where each byte of the timestamp delta is in the gathered words: (word, byte in it).
        self.timestamp_places = [
            next(
                (index, column - start)
                for index, start in enumerate(starts)
                if start <= column < start + word_bytes
            )
            for column in range(shape.timestamp_at, timestamp_end)
        ]
        self.offset_delta_at = offset_at
        self.key_is_null = shape.key_is_null
        self._offset_table: UInt64Array | None = None  # built on first use
        # For ``check_few_rows``: the layout as (column, byte) and the layouts it takes.
        self.layout_pairs = tuple(zip(shape.layout_columns, shape.layout_bytes))
        self.few_rows_checkable = shape.timestamp_bytes == 1 and shape.offset_delta_bytes <= 2

    def _offset_words(self, first: int, count: int) -> UInt64Array:
        """The offset deltas ``first`` .. ``first + count - 1`` as their bytes in the first word."""
        table = self._offset_table
        if table is None:
            table = _offset_delta_table(self.offset_delta_bytes)
            if self.offset_shift and len(table) <= _SHIFTED_OFFSET_TABLE_SIZE_MAX:
                table = table << np.uint64(self.offset_shift)
            self._offset_table = table
        if first + count <= len(table) and (
            self.offset_shift == 0 or len(table) <= _SHIFTED_OFFSET_TABLE_SIZE_MAX
        ):
            return table[first : first + count]
        offsets = _offset_delta_words(self.offset_delta_bytes, first, count)
        return offsets << np.uint64(self.offset_shift) if self.offset_shift else offsets

    def check_few_rows(
        self, data: Payload, position: int, rows: int, first_offset_delta: int
    ) -> tuple[int, int] | None:
        """``bad_rows`` for a few rows, with bytes operations, all or nothing: the lowest and
        highest timestamp delta of the rows if every one is laid out like the template, else None
        (``bad_rows`` then finds which). Only for one-byte timestamp deltas and offset deltas of
        one or two bytes (``few_rows_checkable``)."""
        record_bytes = self.record_bytes
        stop = position + rows * record_bytes
        for column, byte in self.layout_pairs:
            if bytes(data[position + column : stop : record_bytes]).count(byte) != rows:
                return None
        offset_at = self.offset_delta_at
        for step, expected in enumerate(_offset_delta_columns(self.offset_delta_bytes)):
            found = bytes(data[position + offset_at + step : stop : record_bytes])
            if found != expected[first_offset_delta : first_offset_delta + rows]:
                return None
        timestamps = bytes(data[position + self.timestamp_at : stop : record_bytes])
        if not timestamps.isascii():  # a continuation bit: not a one-byte varint
            return None
        order = timestamps.translate(_ONE_BYTE_ZIGZAG_ORDER)
        return min(order) - _ONE_BYTE_ZIGZAG_BIAS, max(order) - _ONE_BYTE_ZIGZAG_BIAS

    def _word(self, bytes_at: dict[int, int], start: int) -> int:
        """The little-endian word of ``word_bytes`` bytes from ``start`` (absent bytes are 0)."""
        return sum(bytes_at.get(start + step, 0) << (8 * step) for step in range(self.word_bytes))

    def check_rows(
        self, data: Payload, position: int, rows: int, first_offset_delta: int
    ) -> tuple[int, int, int]:
        """How many of ``rows`` records from ``position`` are laid out like the template, counted
        up to the first that is not (the first to have offset delta ``first_offset_delta``, each
        next one more); and the lowest and highest timestamp delta among those."""
        record_bytes = self.record_bytes
        every_word = np.ndarray(
            (rows, record_bytes - self.word_bytes + 1),
            self.word_type,
            buffer=data,
            offset=position,
            strides=(record_bytes, 1),
        )
        words = every_word[:, self.starts]  # one pass over the rows; the rest works on this copy
        deltas = self._timestamp_deltas(words)
        words &= self.masks
        # (word & mask) == expected | offset written as a subtraction: the offset's bytes are zero
        # in ``expected``, so the two tests are the same, and this one is done in place.
        words -= self.expected
        offsets = self._offset_words(first_offset_delta, rows)
        words[:, 0] -= offsets.astype(self.word_type, copy=False)
        run = int(np.argmax(words.any(axis=1))) if words.any() else rows
        if not run:
            return 0, 0, 0
        if run < rows:
            deltas = deltas[:run]
        return run, int(deltas.min()), int(deltas.max())

    def _timestamp_deltas(self, words: npt.NDArray[np.unsignedinteger[npt.NBitBase]]) -> Int64Array:
        """Each row's timestamp delta (meaningful for the rows laid out like the template), read
        from the gathered words (little-endian: byte ``b`` of a word is byte ``start + b`` of the
        record)."""
        columns: list[UInt8Array] = []
        for word_index, byte_index in self.timestamp_places:
            whole = np.ascontiguousarray(words[:, word_index])
            columns.append(whole.view(np.uint8)[byte_index :: self.word_bytes])
        if len(columns) == 1:
            return _ONE_BYTE_ZIGZAG[columns[0]]
        if len(columns) == 2:
            low = columns[0] & np.uint8(0x7F)
            both = low.astype(np.uint16) | ((columns[1] & np.uint8(0x7F)).astype(np.uint16) << np.uint16(7))
            return _two_byte_zigzag()[both]
        unsigned = np.zeros(len(words), np.uint64)
        for step, column in enumerate(columns):
            unsigned |= (column & np.uint8(0x7F)).astype(np.uint64) << np.uint64(7 * step)
        return _zigzag(unsigned)


@functools.lru_cache(maxsize=_RUN_PLANS_CACHED_MAX)
def _run_plan(shape: _Shape) -> _RunPlan:
    """Plans by shape: a producer's batches come in few shapes, each built once."""
    return _RunPlan(shape)


# Plans by the first and last bytes of the template they were made for (and its size): a guess
# that spares parsing the template's shape, which costs as much as checking a short run. A wrong
# guess cannot let a bad record through: a plan made from any valid record of a size accepts only
# records laid out exactly like that one (so what it says of them, keyless or not, holds), and a
# guess that takes no record is replaced by the template's own plan.
_PLAN_GUESS_BYTES = 8
_plans_by_guess: dict[tuple[int, bytes, bytes], _RunPlan] = {}


def _plan_guess(data: Payload, template: int, template_end: int) -> tuple[int, bytes, bytes]:
    return (
        template_end - template,
        bytes(data[template : template + _PLAN_GUESS_BYTES]),
        bytes(data[template_end - _PLAN_GUESS_BYTES : template_end]),
    )


# A one-byte zigzag varint (below 0x80) translated to its value + 64, so that bytes compare as the
# values do (for min and max over a column of them).
_ONE_BYTE_ZIGZAG_BIAS = 64
_ONE_BYTE_ZIGZAG_ORDER = bytes(
    ((unsigned >> 1) ^ -(unsigned & 1)) + _ONE_BYTE_ZIGZAG_BIAS if unsigned < 0x80 else 0
    for unsigned in range(256)
)


@functools.cache
def _offset_delta_columns(width: int) -> tuple[bytes, ...]:
    """Byte ``j`` of the ``width``-byte varint of zigzag(d), for every offset delta d of that width
    (widths 1 and 2): column ``j`` of a run's rows must read as a slice of it."""
    count = 1 << (7 * width - 1)
    packed = [_pack_offset_delta(width, delta) for delta in range(count)]
    return tuple(bytes((word >> (8 * step)) & 0xFF for word in packed) for step in range(width))


_ONE_BYTE_ZIGZAG: Int64Array = np.array(
    [(unsigned >> 1) ^ -(unsigned & 1) for unsigned in range(256)], np.int64
)


@functools.cache
def _two_byte_zigzag() -> Int64Array:
    """The signed value of every 14-bit zigzag number (a two-byte varint without its continuation
    bit); built on first use."""
    unsigned = np.arange(1 << 14, dtype=np.int64)
    return (unsigned >> 1) ^ -(unsigned & 1)


def _zigzag(unsigned: UInt64Array) -> Int64Array:
    return (unsigned >> np.uint64(1)).astype(np.int64) ^ -(unsigned & np.uint64(1)).astype(np.int64)


@functools.cache
def _offset_delta_table(width: int) -> UInt64Array:
    """The varint of zigzag(d) in exactly ``width`` bytes, read as a little-endian integer, for
    every offset delta d that width holds (at most the first ``_OFFSET_DELTA_TABLE_SIZE_MAX``)."""
    count = min(1 << (7 * width - 1), _OFFSET_DELTA_TABLE_SIZE_MAX)
    return _pack_offset_deltas(width, 0, count)


def _pack_offset_delta(width: int, offset_delta: int) -> int:
    """``_pack_offset_deltas`` for one offset delta, in Python."""
    unsigned = 2 * offset_delta
    packed = 0
    for step in range(width):
        group = (unsigned >> (7 * step)) & 0x7F
        if step < width - 1:
            group |= 0x80
        packed |= group << (8 * step)
    return packed


def _pack_offset_deltas(width: int, first: int, count: int) -> UInt64Array:
    unsigned = np.arange(2 * first, 2 * (first + count), 2, dtype=np.uint64)
    if width == 1:
        return unsigned
    packed = np.zeros(count, np.uint64)
    for step in range(width):
        group = (unsigned >> np.uint64(7 * step)) & np.uint64(0x7F)
        if step < width - 1:
            group |= np.uint64(0x80)
        packed |= group << np.uint64(8 * step)
    return packed


def _offset_delta_words(width: int, first: int, count: int) -> UInt64Array:
    table = _offset_delta_table(width)
    if first + count <= len(table):
        return table[first : first + count]
    return _pack_offset_deltas(width, first, count)


# ---------------------------------------------------------------------------------------------
# Varied records: boundaries by a hop per record, fields for all records at once


def _hop(data: Payload, position: int, count: int) -> tuple[Int64Array, int]:
    """Where each of ``count`` records from ``position`` starts, by their length prefixes alone,
    and where the last one ends. Lengths are not checked here (``_check_heads`` does); one that
    points outside the payload raises IndexError."""
    heads: list[int] = []
    append = heads.append
    for _ in range(count):
        append(position)
        byte = data[position]
        if byte < 0x80:
            position += 1 + ((byte >> 1) ^ -(byte & 1))
            continue
        second = data[position + 1]
        if second < 0x80:
            byte = (byte & 0x7F) | (second << 7)
            position += 2 + ((byte >> 1) ^ -(byte & 1))
            continue
        byte, after = _read_varint(data, position, 5)
        position = after + ((byte >> 1) ^ -(byte & 1))
    return np.array(heads, np.int64), position


def _check_heads(
    data: Payload, array: UInt8Array, heads: Int64Array, end: int, first: int
) -> tuple[int, int, Int64Array] | None:
    """Check the records starting at ``heads`` (found by ``_hop``; the last one ends at ``end``),
    whose offset deltas must be ``first``, ``first + 1``, ...: every field of all of them at once.

    Returns (lowest timestamp delta, highest, indexes of the keyless records relative to
    ``first``), or None if any record is wrong. May raise IndexError for a record that reaches
    outside the payload.
    """
    count = len(heads)
    ends = np.empty(count, np.int64)
    ends[:-1] = heads[1:]
    ends[-1] = end
    decoded = _varints(array, heads, 5)
    if decoded is None:
        return None
    unsigned, positions = decoded
    lengths = _zigzag(unsigned)
    # The hop put each next record where this one's length says it ends; a length below the
    # smallest record (a negative one too) is the only way it can be wrong.
    if (lengths < RECORD_BODY_BYTES_MIN).any() or end > len(array):
        return None
    decoded = _varints(array, positions + 1, 10)  # after the attributes byte
    if decoded is None:
        return None
    timestamps, positions = decoded
    decoded = _varints(array, positions, 5)
    if decoded is None:
        return None
    offsets, positions = decoded
    if (offsets != np.arange(2 * first, 2 * (first + count), 2, dtype=np.uint64)).any():
        return None
    keyless: BoolArray | None = None
    for field in ("key", "value"):
        decoded = _varints(array, positions, 5)
        if decoded is None:
            return None
        lengths_unsigned, positions = decoded
        null = lengths_unsigned == 1
        if ((lengths_unsigned & np.uint64(1)).astype(bool) & ~null).any():
            return None  # a negative length other than -1
        positions = positions + np.where(null, np.uint64(0), lengths_unsigned >> np.uint64(1)).astype(
            np.int64
        )
        if (positions >= ends).any():
            return None  # the field runs to or past the end: no room for what follows
        if field == "key":
            keyless = null
    header_first_bytes = array[positions]
    with_headers = header_first_bytes != 0
    if with_headers.any():
        for slot in np.flatnonzero(with_headers):
            try:
                after = _skip_headers(data, int(positions[slot]), int(ends[slot]), first + int(slot), None)
            except InvalidRecordError:
                return None
            positions[slot] = after - 1  # as if it were the one-byte count of no headers
    if (positions + 1 != ends).any():
        return None
    deltas = _zigzag(timestamps)
    assert keyless is not None
    return int(deltas.min()), int(deltas.max()), np.flatnonzero(keyless).astype(np.int64)


def _varints(
    array: UInt8Array, positions: Int64Array, bytes_max: int
) -> tuple[UInt64Array, Int64Array] | None:
    """The unsigned varints at ``positions`` (at most ``bytes_max`` bytes, holding 32 bits for 5
    and 64 for 10) and the positions after them; None if any is longer or holds more."""
    first = array[positions]
    if not (first & np.uint8(0x80)).any():
        return first.astype(np.uint64), positions + 1
    value = (first & np.uint8(0x7F)).astype(np.uint64)
    done = first < 0x80
    width = np.ones(len(positions), np.int64)
    last_byte_max = 0x0F if bytes_max == 5 else 0x01
    for step in range(1, bytes_max):
        pending = ~done
        byte = array[np.where(pending, positions + step, positions)]
        if step == bytes_max - 1 and (pending & (byte > last_byte_max)).any():
            return None
        value |= np.where(pending, (byte & np.uint8(0x7F)).astype(np.uint64), np.uint64(0)) << np.uint64(
            7 * step
        )
        width += pending
        done |= byte < 0x80
        if done.all():
            return value, positions + width
    return None


# ---------------------------------------------------------------------------------------------
# One record at a time: the reference every other path agrees with


class _VarintError(InvalidRecordError):
    """A varint too long or too large; the caller names the record it is in."""


def _read_varint(data: Payload, position: int, bytes_max: int) -> tuple[int, int]:
    """An unsigned varint of at most ``bytes_max`` bytes (7 bits each, low group first) holding at
    most 32 bits (``bytes_max`` 5) or 64 bits (10); returns (value, next position)."""
    result = 0
    shift = 0
    for step in range(bytes_max):
        byte = data[position + step]
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            bits = 32 if bytes_max == 5 else 64
            if result >> bits:
                raise _VarintError(f"a varint of more than {bits} bits at byte {position}")
            return result, position + step + 1
        shift += 7
    raise _VarintError(f"a varint longer than {bytes_max} bytes at byte {position}")


def _parse_record(data: Payload, position: int, size: int, index: int) -> tuple[int, int, bool]:
    """Parse the record at ``position``, whose offset delta must be ``index``; returns (where it
    ends, its timestamp delta, whether its key is null). Reading past the payload raises
    IndexError (the caller's to report).

    Varints of one and two bytes (nearly all of them) are read inline; ``byte`` holds the
    unsigned (zigzag) value u, the signed value being (u >> 1) ^ -(u & 1).
    """
    byte = data[position]
    if byte < 0x80:
        at = position + 1
    else:
        second = data[position + 1]
        if second < 0x80:
            byte = (byte & 0x7F) | (second << 7)
            at = position + 2
        else:
            byte, at = _read_varint(data, position, 5)
    length = (byte >> 1) ^ -(byte & 1)
    record_end = at + length
    if length < RECORD_BODY_BYTES_MIN or record_end > size:
        raise InvalidRecordError(f"record {index} has length {length}, out of bounds")
    # attributes at ``at``: unused, any value (Kafka reads and ignores them); then timestampDelta
    byte = data[at + 1]
    if byte < 0x80:
        at += 2
    else:
        second = data[at + 2]
        if second < 0x80:
            byte = (byte & 0x7F) | (second << 7)
            at += 3
        else:
            byte, at = _read_varint(data, at + 1, 10)
    timestamp_delta = (byte >> 1) ^ -(byte & 1)
    # offsetDelta: the zigzag of index is 2 * index
    byte = data[at]
    if byte < 0x80:
        at += 1
    else:
        second = data[at + 1]
        if second < 0x80:
            byte = (byte & 0x7F) | (second << 7)
            at += 2
        else:
            byte, at = _read_varint(data, at, 5)
    if byte != 2 * index:
        raise InvalidRecordError(
            f"record {index} has offset delta {(byte >> 1) ^ -(byte & 1)}, expected {index}"
        )
    # keyLength and key
    byte = data[at]
    if byte < 0x80:
        at += 1
    else:
        second = data[at + 1]
        if second < 0x80:
            byte = (byte & 0x7F) | (second << 7)
            at += 2
        else:
            byte, at = _read_varint(data, at, 5)
    key_is_null = byte == 1
    if not key_is_null:
        if byte & 1:
            raise InvalidRecordError(f"record {index} has a negative key length")
        at += byte >> 1
        if at > record_end:
            raise InvalidRecordError(f"record {index} has a key longer than the record")
    # valueLength and value
    byte = data[at]
    if byte < 0x80:
        at += 1
    else:
        second = data[at + 1]
        if second < 0x80:
            byte = (byte & 0x7F) | (second << 7)
            at += 2
        else:
            byte, at = _read_varint(data, at, 5)
    if byte != 1:
        if byte & 1:
            raise InvalidRecordError(f"record {index} has a negative value length")
        at += byte >> 1
        if at > record_end:
            raise InvalidRecordError(f"record {index} has a value longer than the record")
    # headers
    if at >= record_end:
        raise InvalidRecordError(f"record {index} ends before its header count")
    if data[at] == 0:
        at += 1
    else:
        at = _skip_headers(data, at, record_end, index, None)
    if at != record_end:
        raise InvalidRecordError(
            f"record {index} has fields of {at - record_end + length} bytes, its length says {length}"
        )
    return record_end, timestamp_delta, key_is_null


def _skip_headers(data: Payload, at: int, record_end: int, index: int, layout: list[int] | None) -> int:
    """Walk the header count and the headers of record ``index`` from ``at``; returns the position
    after them. With ``layout``, the positions of the bytes that fix the layout (count, lengths,
    keys) are appended to it."""
    start = at
    unsigned, at = _read_varint(data, at, 5)
    if layout is not None:
        layout.extend(range(start, at))
    if unsigned & 1:
        raise InvalidRecordError(f"record {index} has a negative header count")
    header_count = unsigned >> 1
    if header_count > (record_end - at) // 2:  # a header takes at least two bytes
        raise InvalidRecordError(f"record {index} declares {header_count} headers, more than fit")
    for _ in range(header_count):
        start = at
        unsigned, at = _read_varint(data, at, 5)
        if unsigned & 1:
            raise InvalidRecordError(f"record {index} has a header key of negative length")
        key_end = at + (unsigned >> 1)
        if key_end > record_end:
            raise InvalidRecordError(f"record {index} has a header key longer than the record")
        at = key_end
        unsigned, at = _read_varint(data, at, 5)
        if layout is not None:
            layout.extend(range(start, at))
        if unsigned != 1:
            if unsigned & 1:
                raise InvalidRecordError(f"record {index} has a header value of negative length")
            at += unsigned >> 1
            if at > record_end:
                raise InvalidRecordError(f"record {index} has a header value longer than the record")
    return at


def _varint_bytes(data: Payload, at: int) -> int:
    width = 1
    while data[at + width - 1] >= 0x80:
        width += 1
    return width


def _record_shape(data: Payload, record: int, record_end: int) -> _Shape:
    """The shape of the record at ``record``, which ``_parse_record`` has accepted."""
    body = bytes(data[record:record_end])
    prefix = _varint_bytes(body, 0)
    timestamp_at = prefix + 1  # after the attributes byte
    timestamp_bytes = _varint_bytes(body, timestamp_at)
    offset_delta_at = timestamp_at + timestamp_bytes
    offset_delta_bytes = _varint_bytes(body, offset_delta_at)
    at = offset_delta_at + offset_delta_bytes
    layout = list(range(prefix))
    nulls = []
    for _field in ("key", "value"):
        unsigned, after = _read_varint(body, at, 5)
        layout.extend(range(at, after))
        nulls.append(unsigned == 1)
        at = after if unsigned == 1 else after + (unsigned >> 1)
    key_is_null = nulls[0]
    if body[at] == 0:
        layout.append(at)
    else:
        _skip_headers(body, at, len(body), 0, layout)
    return _Shape(
        len(body),
        tuple(layout),
        bytes(body[column] for column in layout),
        timestamp_at,
        timestamp_bytes,
        offset_delta_at,
        offset_delta_bytes,
        key_is_null,
    )
