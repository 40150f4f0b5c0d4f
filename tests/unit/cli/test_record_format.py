"""How records look as text both ways (pure): named formats, kcat-like format strings, encodings,
and the input parsers of ``strom produce``; and ``--until`` bounds of ``strom consume``."""

from __future__ import annotations

import json
from typing import NamedTuple

import pytest

from strom.cli.consume import EndBound, bound_offsets, parse_end_bound
from strom.cli.output import UsageError
from strom.cli.record_format import (
    InputRecord,
    RecordFormatter,
    decode_bytes,
    encode_bytes,
    parse_json_record,
    parse_text_record,
)
from strom.client.cluster import TopicPartition


class Record(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


RECORD = Record("orders", 2, 41, 1_700_000_000_000, b"k\xff", b"caf\xc3\xa9", (("a", b"1"), ("b", None)))
NULLS = Record("orders", 0, 7, 5, None, None, ())


@pytest.mark.parametrize(
    ("data", "encoding", "text"),
    [
        (b"caf\xc3\xa9\xff", "text", "café\\xff"),
        (b"\x00\xff", "hex", "00ff"),
        (b"\x00\xff", "base64", "AP8="),
        (None, "hex", None),
    ],
)
def test_encodings_round_trip(data: bytes | None, encoding: str, text: str | None) -> None:
    assert encode_bytes(data, encoding) == text  # type: ignore[arg-type]
    if encoding != "text":
        assert decode_bytes(text, encoding) == data  # type: ignore[arg-type]


@pytest.mark.parametrize(("text", "encoding"), [("0g", "hex"), ("@@", "base64"), ("AP8", "base64")])
def test_invalid_hex_and_base64_are_refused(text: str, encoding: str) -> None:
    with pytest.raises(ValueError, match=f"not valid {encoding}"):
        decode_bytes(text, encoding)  # type: ignore[arg-type]


def test_named_formats() -> None:
    assert RecordFormatter("value")(RECORD) == "café\n"
    assert RecordFormatter("key-value", key_separator=":")(RECORD) == "k\\xff:café\n"
    assert RecordFormatter("key-value")(NULLS) == "null\tnull\n"
    assert json.loads(RecordFormatter("json", "hex")(RECORD)) == {
        "topic": "orders",
        "partition": 2,
        "offset": 41,
        "timestamp": 1_700_000_000_000,
        "key": "6bff",
        "value": "636166c3a9",
        "headers": [{"key": "a", "value": "31"}, {"key": "b", "value": None}],
    }


def test_format_strings_like_kcat() -> None:
    formatter = RecordFormatter(r"%t[%p]@%o %T %k(%K)=%s(%S) {%h} 100%%\t.")
    assert formatter(RECORD) == "orders[2]@41 1700000000000 k\\xff(2)=café(5) {a=1,b=} 100%\t.\n"
    # Nulls print as nothing, their sizes as -1; a format ending in a newline gets no second one.
    assert RecordFormatter("%k|%K|%s|%S\\n")(NULLS) == "|-1||-1\n"
    assert RecordFormatter("%s", "base64")(RECORD) == "Y2Fmw6k=\n"


@pytest.mark.parametrize(
    ("template", "message"), [("%s %q", "unknown token %q"), ("50%", "lone '%'"), ("plain", "unknown format")]
)
def test_bad_formats_are_refused(template: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RecordFormatter(template)


def test_text_lines_with_headers_and_keys() -> None:
    assert parse_text_record(b"k:v:w", b":") == InputRecord(b"v:w", b"k")
    assert parse_text_record(b"no separator", b":") == InputRecord(b"no separator")
    parsed = parse_text_record(b"a:1,b:\tkey\tvalue", b"\t", b"\t")
    assert parsed == InputRecord(b"value", b"key", (("a", b"1"), ("b", b"")))
    assert parse_text_record(b"\tvalue", None, b"\t") == InputRecord(b"value")
    assert parse_text_record(b"h=1;g=2|v", None, b"|", b";", b"=").headers == (("h", b"1"), ("g", b"2"))
    with pytest.raises(ValueError, match="no headers delimiter"):
        parse_text_record(b"value", None, b"\t")
    with pytest.raises(ValueError, match="is not name:value"):
        parse_text_record(b"justname\tvalue", None, b"\t")


def test_json_lines_take_what_consume_prints() -> None:
    printed = RecordFormatter("json", "base64")(RECORD)
    parsed = parse_json_record(printed.encode(), "base64")
    assert parsed == InputRecord(RECORD.value, RECORD.key, RECORD.headers, RECORD.timestamp, RECORD.partition)
    assert parse_json_record(b'{"value": "v", "headers": {"h": "x"}}', "text") == InputRecord(
        b"v", None, (("h", b"x"),)
    )


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b"not json", "not JSON"),
        (b"[1]", "must be a JSON object"),
        (b'{"value": 5}', '"value" must be a string or null'),
        (b'{"value": "v", "timestamp": -1}', '"timestamp" must be milliseconds'),
        (b'{"value": "v", "partition": true}', '"partition" must be a non-negative integer'),
        (b'{"value": "v", "headers": [{"value": "x"}]}', "each header must be"),
        (b'{"value": "zz"}', "not valid hex"),
    ],
)
def test_bad_json_lines_are_refused(line: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_json_record(line, "hex" if b"zz" in line else "text")


def test_end_bounds_parse() -> None:
    assert parse_end_bound("end") == EndBound("end")
    assert parse_end_bound("42") == EndBound("offset", 42)
    assert parse_end_bound("@1700000000000") == EndBound("time", 1_700_000_000_000)
    assert parse_end_bound("2023-11-14T22:13:20Z") == EndBound("time", 1_700_000_000_000)
    with pytest.raises(UsageError, match="give 'end', an offset"):
        parse_end_bound("soon")


def test_bound_offsets_per_kind() -> None:
    a, b = TopicPartition("t", 0), TopicPartition("t", 1)
    ends = {a: 10, b: 20}
    assert bound_offsets(EndBound("end"), [a, b], ends, {}, 0) == {a: 10, b: 20}
    assert bound_offsets(EndBound("offset", 5), [a, b], {}, {}, 0) == {a: 5, b: 5}
    # A time with a record at or after it stops there; without one, a past time stops at the end
    # and a future time has no offset bound (the record that reaches it is still to come).
    assert bound_offsets(EndBound("time", 100), [a, b], ends, {a: 3, b: None}, now_ms=200) == {a: 3, b: 20}
    assert bound_offsets(EndBound("time", 300), [a, b], ends, {a: 3, b: None}, now_ms=200) == {a: 3, b: None}
