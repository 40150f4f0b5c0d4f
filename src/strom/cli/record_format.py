"""How records look as text, both ways: the output of ``strom consume`` (named formats, kcat-like
format strings, text/hex/base64 for bytes) and the input of ``strom produce`` (lines with a key
separator and Kafka console-producer style headers, or one JSON object per line). Pure.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

__all__ = [
    "ENCODINGS",
    "FORMAT_TOKENS",
    "NAMED_FORMATS",
    "Encoding",
    "InputRecord",
    "RecordFormatter",
    "RecordLike",
    "decode_bytes",
    "encode_bytes",
    "parse_format_string",
    "parse_header_text",
    "parse_json_record",
    "parse_text_record",
]

Encoding = Literal["text", "hex", "base64"]
ENCODINGS: tuple[Encoding, ...] = ("text", "hex", "base64")
NAMED_FORMATS = ("value", "key-value", "json")

# kcat's format tokens (kcat -f), and what each prints.
FORMAT_TOKENS = {
    "t": "topic",
    "p": "partition",
    "o": "offset",
    "T": "timestamp (ms since the epoch)",
    "k": "key",
    "K": "key size in bytes (-1 for a null key)",
    "s": "value",
    "S": "value size in bytes (-1 for a null value)",
    "h": "headers as name=value, comma separated",
    "%": "a percent sign",
}
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "0": "\0"}


class RecordLike(Protocol):
    """What a formatter reads of a record (``ConsumerRecord`` has all of it)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def timestamp(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Sequence[tuple[str, bytes | None]]: ...


def encode_bytes(data: bytes | None, encoding: Encoding) -> str | None:
    """Bytes as text: UTF-8 with backslash escapes for what is not UTF-8 (``text``), lower-case hex,
    or standard base64. None stays None."""
    if data is None:
        return None
    if encoding == "text":
        return data.decode("utf-8", errors="backslashreplace")
    if encoding == "hex":
        return data.hex()
    assert encoding == "base64", f"unknown encoding {encoding!r}"
    return base64.b64encode(data).decode("ascii")


def decode_bytes(text: str | None, encoding: Encoding) -> bytes | None:
    """The inverse of ``encode_bytes`` for input: ``text`` is taken as UTF-8 as it is (no escapes);
    hex and base64 must be valid (ValueError)."""
    if text is None:
        return None
    if encoding == "text":
        return text.encode()
    try:
        if encoding == "hex":
            return bytes.fromhex(text)
        return base64.b64decode(text, validate=True)
    except (ValueError, binascii.Error):
        raise ValueError(f"{text[:40]!r} is not valid {encoding}") from None


# -- output --------------------------------------------------------------------------------------------

Piece = Callable[[RecordLike], str]


def _unescape(text: str) -> str:
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char == "\\" and index + 1 < len(text) and text[index + 1] in _ESCAPES:
            out.append(_ESCAPES[text[index + 1]])
            index += 2
            continue
        out.append(char)
        index += 1
    return "".join(out)


def parse_format_string(template: str, encoding: Encoding) -> Callable[[RecordLike], str]:
    """A kcat-like format string (``%t %p %o %T %k %K %s %S %h %%``, escapes ``\\n \\t \\r \\\\``)
    as a function from a record to its text. A null key or value prints as nothing (its size as
    -1). The result always ends with one newline: one is added unless the format ends with one."""
    text = _unescape(template)
    pieces: list[Piece] = []
    literal: list[str] = []

    def flush_literal() -> None:
        if literal:
            constant = "".join(literal)
            pieces.append(lambda record: constant)
            literal.clear()

    def size(data: bytes | None) -> str:
        return "-1" if data is None else str(len(data))

    def headers_text(record: RecordLike) -> str:
        return ",".join(f"{name}={encode_bytes(value, encoding) or ''}" for name, value in record.headers)

    token_pieces: dict[str, Piece] = {
        "t": lambda record: record.topic,
        "p": lambda record: str(record.partition),
        "o": lambda record: str(record.offset),
        "T": lambda record: str(record.timestamp),
        "k": lambda record: encode_bytes(record.key, encoding) or "",
        "K": lambda record: size(record.key),
        "s": lambda record: encode_bytes(record.value, encoding) or "",
        "S": lambda record: size(record.value),
        "h": headers_text,
    }
    index = 0
    while index < len(text):
        char = text[index]
        if char != "%":
            literal.append(char)
            index += 1
            continue
        if index + 1 >= len(text):
            raise ValueError(f"format {template!r} ends with a lone '%' (write %% for a percent sign)")
        token = text[index + 1]
        index += 2
        if token == "%":
            literal.append("%")
            continue
        piece = token_pieces.get(token)
        if piece is None:
            known = " ".join(f"%{name}" for name in FORMAT_TOKENS)
            raise ValueError(f"format {template!r}: unknown token %{token} (known: {known})")
        flush_literal()
        pieces.append(piece)
    if not text.endswith("\n"):
        literal.append("\n")
    flush_literal()
    return lambda record: "".join(piece(record) for piece in pieces)


@dataclass
class RecordFormatter:
    """One record -> its output text (newline included), for a named format or a format string."""

    record_format: str
    encoding: Encoding = "text"
    key_separator: str = "\t"
    _render: Callable[[RecordLike], str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.record_format == "value":
            self._render = lambda record: self._text_or_null(record.value) + "\n"
        elif self.record_format == "key-value":
            self._render = lambda record: (
                f"{self._text_or_null(record.key)}{self.key_separator}{self._text_or_null(record.value)}\n"
            )
        elif self.record_format == "json":
            self._render = lambda record: json.dumps(self.to_json(record), ensure_ascii=False) + "\n"
        elif "%" in self.record_format:
            self._render = parse_format_string(self.record_format, self.encoding)
        else:
            raise ValueError(
                f"unknown format {self.record_format!r}: {', '.join(NAMED_FORMATS)}, or a format string "
                "with %-tokens such as '%t/%p@%o %k=%s'"
            )

    def _text_or_null(self, data: bytes | None) -> str:
        text = encode_bytes(data, self.encoding)
        return "null" if text is None else text

    def to_json(self, record: RecordLike) -> dict[str, Any]:
        return {
            "topic": record.topic,
            "partition": record.partition,
            "offset": record.offset,
            "timestamp": record.timestamp,
            "key": encode_bytes(record.key, self.encoding),
            "value": encode_bytes(record.value, self.encoding),
            "headers": [
                {"key": name, "value": encode_bytes(value, self.encoding)} for name, value in record.headers
            ],
        }

    def __call__(self, record: RecordLike) -> str:
        return self._render(record)


# -- input ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class InputRecord:
    """One record to produce, as read from a line of input."""

    value: bytes | None
    key: bytes | None = None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp_ms: int | None = None
    partition: int | None = None


def parse_header_text(text: bytes, separator: bytes, key_separator: bytes) -> list[tuple[str, bytes]]:
    """``name:value,name2:value2`` (Kafka console producer's ``parse.headers`` form) -> headers.
    ``name:`` gives an empty value; a name without the key separator is refused (more likely a typo
    than a header meant to be empty)."""
    headers: list[tuple[str, bytes]] = []
    if not text:
        return headers
    for item in text.split(separator):
        name, found, value = item.partition(key_separator)
        if not found or not name:
            raise ValueError(
                f"header {item.decode(errors='backslashreplace')!r} is not "
                f"name{key_separator.decode(errors='backslashreplace')}value"
            )
        headers.append((name.decode("utf-8", errors="strict"), value))
    return headers


def parse_text_record(
    line: bytes,
    key_separator: bytes | None,
    headers_delimiter: bytes | None = None,
    headers_separator: bytes = b",",
    headers_key_separator: bytes = b":",
) -> InputRecord:
    """One line of text input (its line ending already removed). With ``headers_delimiter`` the
    line starts with headers up to the delimiter; with ``key_separator`` the key comes next, up to
    the separator (a line without it has no key); the rest is the value."""
    headers: tuple[tuple[str, bytes | None], ...] = ()
    if headers_delimiter is not None:
        header_text, found, line = line.partition(headers_delimiter)
        if not found:
            raise ValueError(
                f"no headers delimiter {headers_delimiter.decode(errors='backslashreplace')!r} in the line"
            )
        headers = tuple(parse_header_text(header_text, headers_separator, headers_key_separator))
    if key_separator is None:
        return InputRecord(line, None, headers)
    key, found, value = line.partition(key_separator)
    if not found:
        return InputRecord(line, None, headers)
    return InputRecord(value, key, headers)


def _bytes_field(document: dict[str, Any], name: str, encoding: Encoding) -> bytes | None:
    value = document.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f'"{name}" must be a string or null, not {type(value).__name__}')
    return decode_bytes(value, encoding)


def parse_json_record(line: bytes, encoding: Encoding) -> InputRecord:
    """One JSON object per line, the shape ``strom consume --format json`` prints: ``value``, and
    optionally ``key``, ``headers`` (a list of ``{"key", "value"}``, or an object name -> value),
    ``timestamp`` (ms) and ``partition``. ``topic`` and ``offset`` are ignored, so consumed records
    can be produced again as they are."""
    try:
        document = json.loads(line)
    except json.JSONDecodeError as error:
        raise ValueError(f"not JSON: {error.msg} at column {error.colno}") from None
    if not isinstance(document, dict):
        raise ValueError("each line must be a JSON object")
    raw_headers = document.get("headers") or []
    headers: list[tuple[str, bytes | None]] = []
    if isinstance(raw_headers, dict):
        raw_headers = [{"key": name, "value": value} for name, value in raw_headers.items()]
    if not isinstance(raw_headers, list):
        raise ValueError('"headers" must be a list of {"key", "value"} or an object')
    for header in raw_headers:
        if not isinstance(header, dict) or not isinstance(header.get("key"), str):
            raise ValueError('each header must be {"key": NAME, "value": VALUE}')
        headers.append((header["key"], _bytes_field(header, "value", encoding)))
    timestamp = document.get("timestamp")
    if timestamp is not None and (
        not isinstance(timestamp, int) or isinstance(timestamp, bool) or timestamp < 0
    ):
        raise ValueError('"timestamp" must be milliseconds since the epoch (a non-negative integer)')
    partition = document.get("partition")
    if partition is not None and (
        not isinstance(partition, int) or isinstance(partition, bool) or partition < 0
    ):
        raise ValueError('"partition" must be a non-negative integer')
    return InputRecord(
        _bytes_field(document, "value", encoding),
        _bytes_field(document, "key", encoding),
        tuple(headers),
        timestamp,
        partition,
    )
