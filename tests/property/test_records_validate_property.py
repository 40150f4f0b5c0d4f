"""Property tests of the produce-side validator.

INVARIANTS:
1. Every batch strom's own codec builds (any records, headers, timestamps, compression) passes,
   and what the validator reports (timestamp range, keyless records) is what the decoder reads.
2. For ANY payload (valid, mutated or random), every path agrees with the one-by-one reference:
   the same summary, or the same ``InvalidRecordError`` message; nothing else is ever raised.
3. What the validator accepts, strom's decoder reads: the declared count of records, offset deltas
   0, 1, 2, ...
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from strom.protocol.records import CompressionType, Record, build_batch, decode_batch, iter_records
from strom.protocol.records.batch import RecordRow, build_batch_from_rows
from strom.protocol.records.validate import (
    DEFAULT_TUNING,
    RECORD_BYTES_MIN,
    InvalidRecordError,
    RecordsSummary,
    Tuning,
    validate_produced_batches,
    validate_records,
)

PROPERTY_SETTINGS = settings(max_examples=150, deadline=None)

EAGER = Tuning(
    run_records_min=1,
    run_window_records_first=1,
    run_window_growth=2,
    run_window_records_max=8,
    run_backoff_records_max=4,
    vector_records_min=1,
    run_bytes_records_max=2,
)
SMALL_WINDOWS = Tuning(
    run_records_min=3,
    run_window_records_first=4,
    run_window_growth=3,
    run_window_records_max=50,
    run_backoff_records_max=16,
    vector_records_min=4,
    run_bytes_records_max=0,
)
ONE_BY_ONE = Tuning(run_records_min=1 << 40, vector_records_min=1 << 40)
TUNINGS = (DEFAULT_TUNING, EAGER, SMALL_WINDOWS)

optional_bytes = st.none() | st.binary(max_size=150)
header_lists = st.lists(st.tuples(st.text(max_size=12), optional_bytes), max_size=3)


@st.composite
def alike_runs(draw: st.DrawFn) -> list[RecordRow]:
    """Records as producers send them: runs of one layout (same key, value size and headers),
    timestamps creeping forward, now and then a record unlike its neighbours."""
    rows: list[RecordRow] = []
    timestamp = draw(st.integers(min_value=0, max_value=1 << 45))
    for _ in range(draw(st.integers(min_value=1, max_value=6))):
        key = draw(optional_bytes)
        value_bytes = draw(st.none() | st.integers(min_value=0, max_value=300))
        headers = draw(header_lists)
        step = draw(st.sampled_from([0, 1, 3, 200]))
        for _ in range(draw(st.integers(min_value=1, max_value=150))):
            timestamp += step
            value = None if value_bytes is None else bytes(value_bytes)
            rows.append((timestamp, key, value, headers))
    return rows


@st.composite
def varied_records(draw: st.DrawFn) -> list[Record]:
    count = draw(st.integers(min_value=1, max_value=60))
    return [
        Record(
            index,
            draw(st.integers(min_value=-(1 << 50), max_value=1 << 50)),
            draw(optional_bytes),
            draw(optional_bytes),
            draw(header_lists),
        )
        for index in range(count)
    ]


def _summary_or_error(payload: bytes, count: int, tuning: Tuning) -> RecordsSummary | str:
    try:
        return validate_records(payload, count, keyless_listed_max=1 << 20, tuning=tuning)
    except InvalidRecordError as error:
        return f"refused: {error}"


def _check_agreement(payload: bytes, count: int) -> RecordsSummary | str:
    reference = _summary_or_error(payload, count, ONE_BY_ONE)
    for tuning in TUNINGS:
        assert _summary_or_error(payload, count, tuning) == reference, tuning
    return reference


@PROPERTY_SETTINGS
@given(rows=alike_runs(), compression=st.sampled_from(list(CompressionType)))
def test_a_producers_batches_pass_and_report_what_the_decoder_reads(
    rows: list[RecordRow], compression: CompressionType
) -> None:
    batch = build_batch_from_rows(rows, compression=compression)
    decoded = decode_batch(batch)
    for tuning in TUNINGS:
        [header] = validate_produced_batches(bytearray(batch), tuning=tuning)
        assert header == decoded.header
    summary = _check_agreement(batch_payload(batch, compression), len(rows))
    assert isinstance(summary, RecordsSummary)
    deltas = [record.timestamp_delta for record in decoded.records]
    assert (summary.timestamp_delta_min, summary.timestamp_delta_max) == (min(deltas), max(deltas))
    assert summary.keyless_indexes == tuple(
        index for index, record in enumerate(decoded.records) if record.key is None
    )


@PROPERTY_SETTINGS
@given(records=varied_records(), compression=st.sampled_from(list(CompressionType)))
def test_varied_batches_pass(records: list[Record], compression: CompressionType) -> None:
    batch = build_batch(records, compression=compression)
    for tuning in TUNINGS:
        [header] = validate_produced_batches(bytearray(batch), tuning=tuning)
        assert header.max_timestamp == max(record.timestamp_delta for record in records)
    assert isinstance(_check_agreement(batch_payload(batch, compression), len(records)), RecordsSummary)


def batch_payload(batch: bytes, compression: CompressionType) -> bytes:
    from strom.protocol.records import decompress

    return decompress(compression, batch[61:]) if compression else batch[61:]


@settings(max_examples=400, deadline=None)
@given(
    rows=alike_runs(),
    edits=st.lists(
        st.tuples(
            st.integers(min_value=0), st.sampled_from(["set", "insert", "delete"]), st.integers(0, 255)
        ),
        min_size=1,
        max_size=4,
    ),
    count_change=st.sampled_from([0, 0, 0, -1, 1]),
)
def test_every_path_agrees_on_mutated_payloads(
    rows: list[RecordRow], edits: list[tuple[int, str, int]], count_change: int
) -> None:
    payload = bytearray(build_batch_from_rows(rows)[61:])
    for position, kind, byte in edits:
        position %= len(payload) + 1
        if kind == "insert":
            payload[position:position] = bytes([byte])
        elif position < len(payload):
            if kind == "set":
                payload[position] = byte
            else:
                del payload[position]
    count = max(0, len(rows) + count_change)
    verdict = _check_agreement(bytes(payload), count)
    if isinstance(verdict, RecordsSummary) and count:
        # The decoder reads exactly what was accepted, offsets in order.
        batch = build_batch([Record(0, 0, None, None)], base_timestamp=0)
        header = bytearray(batch[:61])
        header[23:27] = (count - 1).to_bytes(4, "big")
        header[57:61] = count.to_bytes(4, "big")
        header[8:12] = (49 + len(payload)).to_bytes(4, "big", signed=True)
        forged = bytes(header) + bytes(payload)
        import crc32c

        forged = forged[:17] + crc32c.crc32c(forged[21:]).to_bytes(4, "big") + forged[21:]
        offsets = [record.offset for record in iter_records(forged)]
        assert offsets == list(range(count))


@settings(max_examples=300, deadline=None)
@given(payload=st.binary(max_size=300), count=st.integers(min_value=0, max_value=40))
def test_every_path_agrees_on_random_payloads(payload: bytes, count: int) -> None:
    _check_agreement(payload, count)


def _walked(payload: bytes, count: int) -> RecordsSummary | str:
    """What the general walk over the records finds (``validate_records`` reads a lone record
    without it)."""
    from strom.protocol.records.validate import _Walker

    try:
        if count < 0 or count > len(payload) // RECORD_BYTES_MIN:
            raise InvalidRecordError(f"{count} records cannot fit in {len(payload)} bytes")
        walker = _Walker(payload, count, 1 << 20, ONE_BY_ONE)
        walker.walk()
    except InvalidRecordError as error:
        return f"refused: {error}"
    return RecordsSummary(
        walker.timestamp_delta_min,
        walker.timestamp_delta_max,
        walker.keyless_count,
        tuple(walker.keyless_indexes),
    )


@settings(max_examples=400, deadline=None)
@given(
    key=optional_bytes,
    value=optional_bytes,
    headers=header_lists,
    timestamp_delta=st.integers(min_value=-(1 << 50), max_value=1 << 50),
    edits=st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 255)), max_size=3),
    cut=st.integers(min_value=0, max_value=400),
    extra=st.binary(max_size=3),
)
def test_a_lone_record_is_read_as_the_walk_reads_it(
    key: bytes | None,
    value: bytes | None,
    headers: list[tuple[str, bytes | None]],
    timestamp_delta: int,
    edits: list[tuple[int, int]],
    cut: int,
    extra: bytes,
) -> None:
    payload = bytearray(build_batch([Record(0, timestamp_delta, key, value, headers)])[61:])
    for position, byte in edits:
        if payload:
            payload[position % len(payload)] = byte
    for candidate in (bytes(payload), bytes(payload[:cut]), bytes(payload) + extra):
        expected = _walked(candidate, 1)
        assert _summary_or_error(candidate, 1, DEFAULT_TUNING) == expected
        if isinstance(expected, RecordsSummary):  # keyless records counted, none listed unless asked
            summary = validate_records(candidate, 1)
            assert (summary.keyless_count, summary.keyless_indexes) == (expected.keyless_count, ())
