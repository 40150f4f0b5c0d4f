"""The produce-side validator: every poison kind refused with its error, every valid batch (all
codecs, headers, many records, edge values) accepted, on every path (runs, varied records, one by
one) alike."""

from __future__ import annotations

import contextlib
import os
import random
import struct

import pytest

from strom.protocol.errors import ErrorCode
from strom.protocol.records import (
    BatchBuilder,
    CompressionType,
    CorruptBatchError,
    Record,
    build_batch,
    compress,
    decode_batch,
    parse_batch_header,
)
from strom.protocol.records.batch import build_batch_from_rows
from strom.protocol.records.compression import DecompressedTooLargeError, MappedOutput
from strom.protocol.records.control import EndTxnMarker, parse_end_txn_marker
from strom.protocol.records.validate import (
    DEFAULT_TUNING,
    KEYLESS_REASON,
    InvalidRecordError,
    Tuning,
    ValidationTooCostly,
    WorkBound,
    validate_produced_batches,
    validate_records,
)
from strom.protocol.records.varint import encode_varint
from tests.poison_batches import (
    BASE_TIMESTAMP_MS,
    POISONS,
    Poison,
    assemble,
    raw_record,
    record,
    records,
)

# Every path taken as early as possible: runs tried from two records on, tiny windows, varied
# stretches checked as vectors from one record on.
EAGER = Tuning(
    run_records_min=1,
    run_window_records_first=1,
    run_window_growth=2,
    run_window_records_max=8,
    run_backoff_records_max=4,
    vector_records_min=1,
    run_bytes_records_max=2,
)
# The reference: every record parsed one by one.
ONE_BY_ONE = Tuning(run_records_min=1 << 40, vector_records_min=1 << 40)
TUNINGS = pytest.mark.parametrize(
    "tuning", [DEFAULT_TUNING, EAGER, ONE_BY_ONE], ids=["default", "eager", "one-by-one"]
)
ALL_CODECS = pytest.mark.parametrize("codec", list(CompressionType), ids=lambda codec: codec.name.lower())

VALUE = os.urandom(100)


def _validate(batch: bytes, tuning: Tuning = DEFAULT_TUNING, **options: object) -> list:  # type: ignore[type-arg]
    return validate_produced_batches(bytearray(batch), tuning=tuning, **options)  # type: ignore[arg-type]


# ---- poison ---------------------------------------------------------------------------------


@TUNINGS
@pytest.mark.parametrize("poison", POISONS, ids=lambda poison: poison.name)
def test_every_poison_is_refused_with_its_error(poison: Poison, tuning: Tuning) -> None:
    with pytest.raises(CorruptBatchError) as raised:
        _validate(poison.batch, tuning)
    expected = InvalidRecordError if poison.error == ErrorCode.INVALID_RECORD else CorruptBatchError
    assert type(raised.value) is expected, str(raised.value)


@pytest.mark.parametrize("poison", POISONS, ids=lambda poison: poison.name)
def test_a_poison_after_a_good_batch_refuses_the_whole_request(poison: Poison) -> None:
    good = assemble(records(3), count=3)
    with pytest.raises(CorruptBatchError):
        _validate(good + poison.batch)


@TUNINGS
@pytest.mark.parametrize("bad_index", [0, 1, 17, 63, 64, 200, 999])
def test_a_bad_record_anywhere_in_a_long_run_is_found_and_named(tuning: Tuning, bad_index: int) -> None:
    """A run of alike records with one record broken (a gap in the offset deltas) is refused, and
    the answer names that record."""
    payload = b"".join(
        record(index + 1 if index == bad_index else index, value=VALUE) for index in range(1000)
    )
    with pytest.raises(InvalidRecordError, match=f"record {bad_index} has offset delta"):
        _validate(assemble(payload, count=1000), tuning)


def _od(index: int) -> bytes:
    return encode_varint(index)


# Records broken in every way a record can be, by the index they stand at (their offset delta is
# right unless the fault is in it), and what the answer says about them.
BAD_RECORDS = {
    "negative-key-length": (
        lambda i: raw_record(b"\x00\x00" + _od(i) + encode_varint(-3) + b"\x01\x00"),
        "negative key length",
    ),
    "negative-value-length": (
        lambda i: raw_record(b"\x00\x00" + _od(i) + b"\x01" + encode_varint(-9) + b"\x00"),
        "negative value length",
    ),
    "key-longer-than-the-record": (
        lambda i: raw_record(b"\x00\x00" + _od(i) + encode_varint(90) + b"k\x01\x00"),
        "key longer",
    ),
    "value-longer-than-the-record": (
        lambda i: raw_record(b"\x00\x00" + _od(i) + b"\x01" + encode_varint(90) + b"v\x00"),
        "value longer",
    ),
    "no-room-for-the-header-count": (
        lambda i: raw_record(b"\x00\x00" + _od(i) + b"\x01\x04vv"),
        "ends before its header count",
    ),
    "negative-header-count": (
        lambda i: raw_record(b"\x00\x00" + _od(i) + b"\x01\x01" + encode_varint(-2)),
        "negative header count",
    ),
    "fields-shorter-than-the-length": (lambda i: raw_record(record(i)[1:] + b"\x00\x00"), "its length says"),
    "length-below-six": (
        lambda i: raw_record(b"\x00\x00" + _od(i) + b"\x01")[: 5 + len(_od(i))],
        "out of bounds",
    ),
    "length-negative": (lambda i: encode_varint(-20) + bytes(30), "has length -20"),
    "length-varint-too-long": (lambda i: b"\x80\x80\x80\x80\x80\x01" + bytes(10), "longer than 5 bytes"),
    "length-varint-beyond-32-bits": (lambda i: b"\x80\x80\x80\x80\x70" + bytes(10), "more than 32 bits"),
    "timestamp-varlong-too-long": (
        lambda i: raw_record(b"\x00" + b"\x81" * 10 + b"\x00" + _od(i) + b"\x01\x01\x00"),
        "longer than 10 bytes",
    ),
    "timestamp-varlong-beyond-64-bits": (
        lambda i: raw_record(b"\x00" + b"\x81" * 9 + b"\x02" + _od(i) + b"\x01\x01\x00"),
        "more than 64 bits",
    ),
    "offset-delta-varint-too-long": (
        lambda i: raw_record(b"\x00\x00" + b"\x80" * 5 + b"\x00\x01\x01\x00"),
        "longer than 5 bytes",
    ),
    "offset-delta-skips-one": (lambda i: record(i + 1), "has offset delta"),
    "key-length-varint-too-long": (
        lambda i: raw_record(b"\x00\x00" + _od(i) + b"\x81\x80\x80\x80\x80\x00\x01\x00"),
        "longer than 5 bytes",
    ),
    "value-length-varint-beyond-32-bits": (
        lambda i: raw_record(b"\x00\x00" + _od(i) + b"\x01\x81\x80\x80\x80\x20\x00"),
        "more than 32 bits",
    ),
    "header-count-varint-too-long": (
        lambda i: raw_record(b"\x00\x00" + _od(i) + b"\x01\x01" + b"\x82" * 5 + b"\x00"),
        "longer than 5 bytes",
    ),
    "cut-short": (lambda i: record(i, value=bytes(50))[:-10], "out of bounds"),
}


@TUNINGS
@pytest.mark.parametrize("bad_index", [0, 5, 40, 300, 399])
@pytest.mark.parametrize("fault", list(BAD_RECORDS), ids=str)
def test_a_bad_record_among_varied_records_is_found_and_named(
    tuning: Tuning, bad_index: int, fault: str
) -> None:
    """Records of varied layouts (checked as vectors) with one broken record: refused, and the
    answer names that record and its fault."""
    build, says = BAD_RECORDS[fault]
    chooser = random.Random(bad_index)
    parts = []
    for index in range(400):
        if index == bad_index:
            parts.append(build(index))
            if fault == "cut-short":
                break
        else:
            value = os.urandom(chooser.randint(0, 300))
            parts.append(
                record(index, value=value, key=b"k%d" % index, timestamp_delta=chooser.randint(-9, 9))
            )
    pattern = (
        f"record {bad_index} (has|runs)"
        if fault.startswith("length") or fault == "cut-short"
        else f"record {bad_index} "
    )
    count = bad_index + 1 if fault == "cut-short" else 400
    with pytest.raises(InvalidRecordError, match=pattern) as raised:
        _validate(assemble(b"".join(parts), count=count), tuning)
    assert says in str(raised.value)


@TUNINGS
@pytest.mark.parametrize("fault", list(BAD_RECORDS), ids=str)
def test_a_bad_record_after_a_run_is_found_and_named(tuning: Tuning, fault: str) -> None:
    build, says = BAD_RECORDS[fault]
    parts = [record(index, value=VALUE) for index in range(150)] + [build(150)]
    count = 151 if fault == "cut-short" else 160
    if fault != "cut-short":
        parts += [record(index, value=VALUE) for index in range(151, 160)]
    with pytest.raises(InvalidRecordError, match="record 150 ") as raised:
        _validate(assemble(b"".join(parts), count=count), tuning)
    assert says in str(raised.value)


def test_a_decompression_bomb_is_refused_within_the_cap() -> None:
    payload = records(2000, value=bytes(1000))
    batch = assemble(compress(CompressionType.ZSTD, payload), count=2000, attributes=CompressionType.ZSTD)
    assert len(batch) < 10_000
    with pytest.raises(CorruptBatchError, match="exceeds"):
        _validate(batch, decompressed_bytes_max=len(payload) - 1)
    assert _validate(batch, decompressed_bytes_max=len(payload))


@pytest.mark.parametrize("codec", [CompressionType.ZSTD, CompressionType.GZIP, CompressionType.LZ4])
def test_a_bomb_beyond_the_cap_is_corrupt_and_one_within_it_passes_whatever_the_codec(
    codec: CompressionType,
) -> None:
    payload = records(300, value=bytes(30_000))
    batch = assemble(compress(codec, payload), count=300, attributes=codec)
    with pytest.raises(DecompressedTooLargeError, match="exceeds"):
        _validate(batch, decompressed_bytes_max=len(payload) - 1)
    sizes: list[int] = []
    assert _validate(batch, decompressed_bytes_max=len(payload), on_decompressed=sizes.append)
    assert sizes == [len(payload)]


# ---- how much work a call may take on (the broker's event loop gives it a bound) ---------------

SMALL_BOUND = WorkBound(bytes_max=4096, records_max=50)


@pytest.mark.parametrize(
    ("batch", "why"),
    [
        (lambda: assemble(records(51), count=51), "51 records"),
        (lambda: assemble(records(10, value=bytes(500)), count=10), "bytes, more than 4096"),
        (
            lambda: assemble(
                compress(CompressionType.ZSTD, records(20, value=bytes(500))), count=20, attributes=4
            ),
            "decompresses to more than 4096",
        ),
        (  # a gzip bomb whose records would be refused: too costly to find out within the bound
            lambda: assemble(compress(CompressionType.GZIP, bytes(100_000)), count=5, attributes=1),
            "decompresses to more than 4096",
        ),
    ],
    ids=["records", "uncompressed-bytes", "decompressed-bytes", "decompressed-poison"],
)
def test_batches_beyond_the_work_bound_are_left_undecided(batch: object, why: str) -> None:
    built = batch()  # type: ignore[operator]
    with pytest.raises(ValidationTooCostly, match=why):
        _validate(built, work_bound=SMALL_BOUND)
    # Without the bound (in a worker thread) the same batches are decided.
    with contextlib.suppress(InvalidRecordError):
        _validate(built)


def test_batches_within_the_work_bound_are_decided_as_without_it() -> None:
    good = assemble(compress(CompressionType.LZ4, records(40, value=b"v" * 50)), count=40, attributes=3)
    assert _validate(good, work_bound=SMALL_BOUND) == _validate(good)
    poison = assemble(records(2) + record(3), count=3)
    with pytest.raises(InvalidRecordError, match="offset delta"):
        _validate(poison, work_bound=SMALL_BOUND)
    unknown_codec = assemble(records(3), count=3, attributes=6)
    with pytest.raises(CorruptBatchError, match="codec"):
        _validate(unknown_codec, work_bound=SMALL_BOUND)


def test_a_work_bound_at_the_cap_leaves_the_cap_to_answer() -> None:
    payload = records(20, value=bytes(500))
    batch = assemble(compress(CompressionType.ZSTD, payload), count=20, attributes=4)
    with pytest.raises(DecompressedTooLargeError):
        _validate(
            batch,
            decompressed_bytes_max=len(payload) - 1,
            work_bound=WorkBound(bytes_max=len(payload) - 1, records_max=100),
        )


@pytest.mark.parametrize(
    "codec", [CompressionType.GZIP, CompressionType.LZ4, CompressionType.ZSTD, CompressionType.SNAPPY]
)
def test_payloads_decompressed_into_mappings_are_checked_alike_and_unmapped(
    monkeypatch: pytest.MonkeyPatch, codec: CompressionType
) -> None:
    """Worker threads decompress into memory mappings: same answers, and each mapping is unmapped
    when its batch is decided, even when a record is refused (whose traceback held views of it)."""
    unmapped: list[bool] = []
    close = MappedOutput.close

    def counted_close(output: MappedOutput) -> bool:
        unmapped.append(close(output))
        return unmapped[-1]

    monkeypatch.setattr(MappedOutput, "close", counted_close)
    good = build_batch_from_rows(
        [(BASE_TIMESTAMP_MS + index, None, VALUE, ()) for index in range(3000)], compression=codec
    )
    assert _validate(good, mapped=True) == _validate(good)
    chooser = random.Random(9)
    for fault in ("cut-short", "offset-delta-skips-one", "length-varint-too-long", "negative-key-length"):
        build, says = BAD_RECORDS[fault]
        for neighbours in ("alike", "varied"):
            parts = [
                record(index, value=VALUE if neighbours == "alike" else os.urandom(chooser.randint(0, 200)))
                for index in range(500)
            ]
            parts.append(build(500))
            count = 501 if fault == "cut-short" else 600
            if fault != "cut-short":
                parts += [record(index, value=VALUE) for index in range(501, 600)]
            batch = assemble(compress(codec, b"".join(parts)), count=count, attributes=codec)
            with pytest.raises(InvalidRecordError, match="record 500 ") as raised:
                _validate(batch, mapped=True)
            assert says in str(raised.value)
    assert len(unmapped) == 9 and all(unmapped), unmapped


# ---- header keys ----------------------------------------------------------------------------------


@TUNINGS
def test_header_keys_that_are_not_utf8_pass_as_kafka_lets_them(tuning: Tuning) -> None:
    """Kafka appends them unchecked (its validator skips header keys) and its readers decode them
    leniently: refusing them would refuse what Kafka accepts. Alike records (runs), varied ones
    and few ones."""
    alike = b"".join(record(index, headers=[(b"\xff\xfe", b"v")]) for index in range(200))
    varied = b"".join(
        record(index, value=os.urandom(index % 37), headers=[(b"k\xc3", None), (b"\x80" * (index % 5), b"")])
        for index in range(200)
    )
    for payload in (alike, varied, record(0, headers=[(b"\xc3", None)])):
        count = 1 if len(payload) < 100 else 200
        batch = assemble(payload, count=count)
        assert _validate(batch, tuning)
        decoded = decode_batch(batch)
        assert all("\ufffd" in record.headers[0][0] for record in decoded.records)


def test_keyless_records_on_a_compacted_topic_are_listed() -> None:
    payload = b"".join(record(index, key=None if index % 3 == 0 else b"k") for index in range(10))
    with pytest.raises(InvalidRecordError) as raised:
        _validate(assemble(payload, count=10), keys_required=True)
    assert raised.value.record_errors == tuple((index, KEYLESS_REASON) for index in (0, 3, 6, 9))
    assert "4 record(s) without a key" in str(raised.value)


@TUNINGS
def test_keyless_records_are_listed_up_to_the_bound_across_batches(tuning: Tuning) -> None:
    first = assemble(records(5, key=b"k"), count=5)
    second = assemble(build_batch_from_rows([(BASE_TIMESTAMP_MS, None, VALUE, ())] * 3000)[61:], count=3000)
    with pytest.raises(InvalidRecordError) as raised:
        _validate(first + second, tuning, keys_required=True, record_errors_max=100)
    indexes = [index for index, _ in raised.value.record_errors]
    assert indexes == list(range(5, 105)), "indexes count from the partition's first record"
    assert str(raised.value).startswith("3000 record(s) without a key")


def test_keyed_records_pass_on_a_compacted_topic() -> None:
    assert _validate(assemble(records(3, key=b""), count=3), keys_required=True)


# ---- valid batches ----------------------------------------------------------------------------


@TUNINGS
@ALL_CODECS
@pytest.mark.parametrize("count", [1, 2, 63, 64, 65, 8192, 8193, 20_000])
def test_a_producers_batch_passes(tuning: Tuning, codec: CompressionType, count: int) -> None:
    """What a producer sends: alike records, offset deltas through every varint width."""
    if count > 8193 and tuning is EAGER:
        count = 300  # eager windows are tiny: keep the run short
    rows = [(BASE_TIMESTAMP_MS + index // 7, None, VALUE, ()) for index in range(count)]
    batch = build_batch_from_rows(rows, compression=codec)
    [header] = _validate(batch, tuning)
    assert header == parse_batch_header(batch)


@TUNINGS
@ALL_CODECS
def test_records_with_headers_and_edge_values_pass(tuning: Tuning, codec: CompressionType) -> None:
    chooser = random.Random(5)
    built = []
    for index in range(500):
        headers = [("", None), ("trace-id", b"%d" % index), ("ünï", b"")][: index % 4]
        built.append(
            Record(
                index,
                BASE_TIMESTAMP_MS + chooser.choice([-100_000, -1, 0, 5, 1 << 40]),
                chooser.choice([None, b"", b"key-%d" % (index % 7)]),
                chooser.choice([None, b"", VALUE, os.urandom(chooser.randint(0, 20_000))]),
                headers,
            )
        )
    batch = build_batch(built, compression=codec)
    [header] = _validate(batch, tuning)
    assert header.max_timestamp == max(record.timestamp_delta for record in built)


@TUNINGS
def test_runs_with_headers_pass(tuning: Tuning) -> None:
    rows = [(BASE_TIMESTAMP_MS + index, b"key", VALUE, [("h", b"1"), ("g", None)]) for index in range(3000)]
    assert _validate(build_batch_from_rows(rows), tuning)


@TUNINGS
def test_non_canonical_varints_pass(tuning: Tuning) -> None:
    """Varints padded with zero groups are read by Kafka and by every client: accepted."""
    padded_fields = [
        raw_record(b"\x00\x80\x00" + bytes([2 * index]) + b"\x81\x00\x02v\x80\x00") for index in range(40)
    ]
    padded_prefix = []
    for index in range(40, 80):
        body = record(index)[1:]  # these records have a one-byte length prefix
        padded_prefix.append(bytes([2 * len(body) | 0x80, 0x00]) + body)
    summary = validate_records(
        b"".join(padded_fields + padded_prefix), 80, keyless_listed_max=100, tuning=tuning
    )
    assert summary.keyless_indexes == tuple(range(80))


@TUNINGS
def test_timestamps_at_the_int64_bounds_pass(tuning: Tuning) -> None:
    low = assemble(
        records(40, timestamp_delta=-5), count=40, base_timestamp=-(1 << 63) + 5, max_timestamp=-(1 << 63)
    )
    high = assemble(
        records(40, timestamp_delta=5), count=40, base_timestamp=(1 << 63) - 6, max_timestamp=(1 << 63) - 1
    )
    assert _validate(low, tuning)
    assert _validate(high, tuning)


@TUNINGS
def test_runs_with_ten_byte_timestamp_deltas_pass(tuning: Tuning) -> None:
    payload = records(300, timestamp_delta=1 << 62)
    summary = validate_records(payload, 300, tuning=tuning)
    assert summary.timestamp_delta_min == summary.timestamp_delta_max == 1 << 62


def test_a_batch_of_more_records_than_the_offset_delta_tables_hold_passes() -> None:
    count = 140_000
    batch = build_batch_from_rows([(BASE_TIMESTAMP_MS, None, b"", ())] * count)
    [header] = _validate(batch)
    assert header.record_count == count
    broken = bytearray(batch[61:])
    broken[-5] ^= 0x02  # the low bit of the last record's offset delta (bytes: delta x3, key, value, headers)
    with pytest.raises(InvalidRecordError, match=f"record {count - 1} has offset delta"):
        validate_records(bytes(broken), count)


def test_varint_widths_at_their_limits_pass() -> None:
    body = b"\x00" + b"\xfe" + b"\xff" * 8 + b"\x01" + b"\x00\x01\x01\x00"  # timestamp delta 2**63 - 1
    assert validate_records(raw_record(body), 1).timestamp_delta_max == (1 << 63) - 1
    assert validate_records(record(0, timestamp_delta=-(1 << 63)), 1).timestamp_delta_min == -(1 << 63)


def test_a_wrong_max_timestamp_is_set_as_kafka_does() -> None:
    payload = b"".join(record(index, timestamp_delta=delta) for index, delta in enumerate((3, 90, -4)))
    batch = bytearray(assemble(payload, count=3, max_timestamp=BASE_TIMESTAMP_MS + 10**9))
    [header] = validate_produced_batches(batch)
    assert header.max_timestamp == BASE_TIMESTAMP_MS + 90
    assert decode_batch(bytes(batch)).header == header, "CRC recomputed over the corrected header"


def test_a_log_append_time_batch_keeps_its_max_timestamp() -> None:
    batch = bytearray(assemble(records(3), count=3, attributes=0x08, max_timestamp=42))
    [header] = validate_produced_batches(batch)
    assert header.max_timestamp == 42


@TUNINGS
def test_summary_matches_the_decoder(tuning: Tuning) -> None:
    chooser = random.Random(9)
    built = BatchBuilder()
    for index in range(3000):
        same = index < 1500
        built.append(
            BASE_TIMESTAMP_MS + (index if same else chooser.randint(-500, 500)),
            None if (same and index % 2) or chooser.random() < 0.2 else b"k",
            VALUE if same else os.urandom(chooser.randint(0, 200)),
        )
    batch = built.build()
    decoded = decode_batch(batch)
    summary = validate_records(
        memoryview(batch)[61:], len(decoded.records), keyless_listed_max=10**6, tuning=tuning
    )
    deltas = [record.timestamp_delta for record in decoded.records]
    assert (summary.timestamp_delta_min, summary.timestamp_delta_max) == (min(deltas), max(deltas))
    keyless = tuple(index for index, record in enumerate(decoded.records) if record.key is None)
    assert summary.keyless_indexes == keyless
    assert summary.keyless_count == len(keyless)


def test_several_batches_in_one_request_pass() -> None:
    batches = [build_batch_from_rows([(BASE_TIMESTAMP_MS, None, VALUE, ())] * count) for count in (1, 70, 3)]
    headers = _validate(b"".join(batches))
    assert [header.record_count for header in headers] == [1, 70, 3]


def test_the_headers_already_checked_are_taken_as_given() -> None:
    batch = bytearray(build_batch_from_rows([(BASE_TIMESTAMP_MS, None, VALUE, ())] * 10))
    header = parse_batch_header(batch)
    assert validate_produced_batches(batch, [header]) == [header]


def test_random_bytes_raise_only_the_validators_error() -> None:
    chooser = random.Random(3)
    for _ in range(2000):
        payload = chooser.randbytes(chooser.randint(0, 120))
        count = chooser.randint(0, 20)
        for tuning in (DEFAULT_TUNING, EAGER):
            with contextlib.suppress(InvalidRecordError):
                validate_records(payload, count, tuning=tuning)


def test_records_struct_helpers_agree_with_the_codec() -> None:
    """The hand-built records of the poison catalogue are the codec's records when well formed."""
    built = build_batch(
        [Record(index, 0, None, b"value") for index in range(3)], base_timestamp=BASE_TIMESTAMP_MS
    )
    assert built[61:] == records(3)
    assert struct.unpack_from(">i", built, 57)[0] == 3


def test_a_plan_guessed_for_another_layout_is_not_used() -> None:
    """Two layouts of one size whose first and last bytes agree: the plan remembered for the first
    is guessed for the second, takes none of its records, and is replaced by the second's own;
    both kinds of batch are checked exactly."""
    from strom.protocol.records import validate as validator

    key = b"k" * 10
    first = [record(index, key=key, value=bytes(20), headers=[(b"h", b"x" * 30)]) for index in range(100)]
    second = [record(index, key=key, value=bytes(30), headers=[(b"h", b"x" * 20)]) for index in range(100)]
    assert (
        len(first[0]) == len(second[0]) and first[0][:8] == second[0][:8] and first[0][-8:] == second[0][-8:]
    )
    guess = validator._plan_guess(b"".join(second), 0, len(second[0]))
    assert guess == validator._plan_guess(b"".join(first), 0, len(first[0]))
    _validate(assemble(b"".join(first), count=100))
    first_plan = validator._plans_by_guess[guess]
    summary = validate_records(b"".join(second), 100)
    assert validator._plans_by_guess[guess] is not first_plan
    assert summary.keyless_count == 0
    broken = [*second[:50], record(51, key=key, value=bytes(30), headers=[(b"h", b"x" * 20)]), *second[51:]]
    with pytest.raises(InvalidRecordError, match="record 50 has offset delta 51"):
        _validate(assemble(b"".join(broken), count=100))
    # And back: the first layout's batches still pass, whatever plan is remembered.
    assert validate_records(b"".join(first), 100).keyless_count == 0


def test_a_guessed_plan_reports_the_keys_of_the_records_it_takes() -> None:
    """Keyless records and keyed ones of one size with equal first and last bytes are impossible
    (the key length is among the first bytes); what a run reports about keys comes from the plan
    that took its records."""
    from strom.protocol.records import validate as validator

    keyless = b"".join(record(index, key=None, value=bytes(40)) for index in range(100))
    keyed = b"".join(record(index, key=b"", value=bytes(39)) for index in range(100))
    assert validate_records(keyless, 100, keyless_listed_max=200).keyless_count == 100
    assert validate_records(keyed, 100, keyless_listed_max=200).keyless_count == 0
    assert validator._plans_by_guess


def test_a_transaction_marker_from_a_producer_is_refused_with_a_clear_message() -> None:
    marker = next(poison for poison in POISONS if poison.name == "transaction-marker").batch
    assert parse_end_txn_marker(marker) == EndTxnMarker(commit=True, coordinator_epoch=0)
    with pytest.raises(InvalidRecordError, match="transaction markers are written by the broker"):
        _validate(marker)
    unowned = next(poison for poison in POISONS if poison.name == "transactional-without-a-producer-id")
    with pytest.raises(InvalidRecordError, match="a transactional batch needs a producer id"):
        _validate(unowned.batch)
