"""``strom produce TOPIC``: one record per input line, from stdin or a file."""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from strom.cli.common import add_command, check_client_config, client_settings, parse_key_value
from strom.cli.consume import parse_timestamp_ms
from strom.cli.output import CliError, UsageError
from strom.cli.record_format import ENCODINGS, InputRecord, parse_json_record, parse_text_record

__all__ = [
    "ACKS_CHOICES",
    "COMPRESSION_CHOICES",
    "acks_setting",
    "read_input_records",
    "read_records",
    "register",
    "split_line",
]

COMPRESSION_CHOICES = ("none", "gzip", "snappy", "lz4", "zstd")
ACKS_CHOICES = ("0", "1", "all", "-1")
INPUT_FORMATS = ("lines", "json")
# How long the final flush may take before the command reports records as undelivered.
FLUSH_TIMEOUT_S = 120.0


def register(commands: Any) -> None:
    parser = add_command(
        commands,
        "produce",
        help_text="write records to a topic, one per input line",
        description=(
            "Write records to a topic, one per line of stdin (or --file). With --key-separator the "
            "text before the first separator is the key; a line without it has no key. With "
            "--parse-headers each line starts with its own headers (name:value,name2:value2, then a "
            "tab). With --input-format json each line is a JSON object as `strom consume --format "
            "json` prints it (value, key, headers, timestamp, partition). Prints how many records "
            "were delivered to stderr; exits 1 if any were not."
        ),
        run=_produce,
        output=False,
        client="producer",
    )
    parser.add_argument("topic", metavar="TOPIC", help="the topic to write to")
    parser.add_argument("--file", type=Path, default=None, help="read lines from FILE instead of stdin")
    parser.add_argument(
        "--input-format",
        choices=INPUT_FORMATS,
        default="lines",
        help="lines: the line is the value (default); json: one JSON object per line",
    )
    parser.add_argument(
        "--key-separator", default=None, metavar="SEP", help="split each line into key SEP value"
    )
    parser.add_argument(
        "--parse-headers",
        action="store_true",
        help="each line starts with its headers, up to --headers-delimiter",
    )
    parser.add_argument(
        "--headers-delimiter",
        default="\t",
        metavar="SEP",
        help="ends the headers at the start of a line (default a tab)",
    )
    parser.add_argument(
        "--headers-separator",
        default=",",
        metavar="SEP",
        help="separates one header from the next (default ,)",
    )
    parser.add_argument(
        "--headers-key-separator",
        default=":",
        metavar="SEP",
        help="separates a header's name from its value (default :)",
    )
    parser.add_argument(
        "--header",
        type=parse_key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a header on every record (repeatable; after a line's own headers)",
    )
    parser.add_argument(
        "--timestamp",
        default=None,
        metavar="TIME",
        help="the timestamp of every record without its own: ms since the epoch or ISO 8601 "
        "(default: the time of sending)",
    )
    parser.add_argument(
        "--encoding",
        choices=ENCODINGS,
        default="text",
        help="with --input-format json: how key, value and header values are written "
        "(text, hex or base64; default text)",
    )
    parser.add_argument(
        "--compression", choices=COMPRESSION_CHOICES, default="none", help="batch compression (default none)"
    )
    parser.add_argument(
        "--acks",
        choices=ACKS_CHOICES,
        default="all",
        help="acknowledgements to wait for: 0, 1 or all (default all)",
    )
    parser.add_argument(
        "--partition", type=int, default=None, metavar="N", help="write every record to partition N"
    )
    parser.add_argument(
        "--linger-ms", type=int, default=5, metavar="MS", help="how long to wait to fill a batch (default 5)"
    )


def acks_setting(acks: str) -> dict[str, Any]:
    """Producer settings for ``--acks``: the client turns its default idempotence off by itself for
    acks 0 and 1 (idempotence needs acks=all)."""
    return {"acks": -1 if acks in ("all", "-1") else int(acks)}


def split_line(line: bytes, key_separator: bytes | None) -> tuple[bytes | None, bytes]:
    """(key, value) of one line; the key is None without a separator, or when the line has none."""
    record = parse_text_record(line, key_separator)
    assert record.value is not None
    return record.key, record.value


def _lines(stream: IO[bytes]) -> Iterator[tuple[int, bytes]]:
    """(line number, line without its ending ``\\n`` or ``\\r\\n``)."""
    for number, raw_line in enumerate(stream, start=1):
        line = raw_line[:-1] if raw_line.endswith(b"\n") else raw_line
        if line.endswith(b"\r"):
            line = line[:-1]
        yield number, line


def read_records(stream: IO[bytes], key_separator: bytes | None) -> Iterator[tuple[bytes | None, bytes]]:
    """(key, value) per line; the line ending (``\\n`` or ``\\r\\n``) is not part of the value."""
    for _, line in _lines(stream):
        yield split_line(line, key_separator)


def read_input_records(stream: IO[bytes], arguments: argparse.Namespace) -> Iterator[InputRecord]:
    """The records of the input as the options describe it; a line that does not parse stops the
    command (CliError naming the line): records before it are sent."""
    separator = None if arguments.key_separator is None else arguments.key_separator.encode()
    delimiter = arguments.headers_delimiter.encode() if arguments.parse_headers else None
    for number, line in _lines(stream):
        try:
            if arguments.input_format == "json":
                if not line.strip():
                    continue
                yield parse_json_record(line, arguments.encoding)
            else:
                yield parse_text_record(
                    line,
                    separator,
                    delimiter,
                    arguments.headers_separator.encode(),
                    arguments.headers_key_separator.encode(),
                )
        except (ValueError, UnicodeDecodeError) as error:
            raise InputLineError(f"line {number}: {error}") from None


class InputLineError(CliError):
    """A line of input that does not parse: the records before it are sent, then the command stops."""


class _DeliveryCounter:
    """Counts acknowledgements from the producer's thread; keeps the first error to show it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.delivered = 0
        self.failed = 0
        self.first_error: Exception | None = None

    def __call__(self, error: Exception | None, metadata: object) -> None:
        with self._lock:
            if error is None:
                self.delivered += 1
            else:
                self.failed += 1
                if self.first_error is None:
                    self.first_error = error


def _check(arguments: argparse.Namespace) -> None:
    if arguments.partition is not None and arguments.partition < 0:
        raise UsageError(f"--partition must not be negative, not {arguments.partition}")
    for option in ("key_separator", "headers_delimiter", "headers_separator", "headers_key_separator"):
        if getattr(arguments, option) == "":
            raise UsageError(f"--{option.replace('_', '-')} must not be empty")
    if arguments.input_format == "json" and (arguments.key_separator is not None or arguments.parse_headers):
        raise UsageError(
            "--key-separator and --parse-headers read text lines; a JSON line has its own fields"
        )
    if arguments.encoding != "text" and arguments.input_format != "json":
        raise UsageError("--encoding applies to --input-format json (text lines are bytes as they are)")


def _send_all(
    arguments: argparse.Namespace, records: Iterable[InputRecord], counter: _DeliveryCounter
) -> int:
    from strom.client.config import ProducerConfig
    from strom.client.producer import Producer

    check_client_config(arguments, ProducerConfig)
    settings = client_settings(arguments)
    settings.update(acks_setting(arguments.acks))
    settings["compression.type"] = arguments.compression
    settings["linger.ms"] = arguments.linger_ms
    # send() waits for the topic's metadata at most this long: the user's timeout, not a minute.
    settings["max.block.ms"] = arguments.request_timeout_ms
    settings.update(dict(arguments.client_config))
    common_headers = tuple((key, value.encode()) for key, value in arguments.header)
    default_timestamp = None if arguments.timestamp is None else parse_timestamp_ms(arguments.timestamp)
    sent = 0
    with Producer(settings) as producer:
        for record in records:
            headers = record.headers + common_headers
            producer.send(
                arguments.topic,
                value=record.value,
                key=record.key,
                headers=headers or None,
                partition=arguments.partition if record.partition is None else record.partition,
                timestamp=default_timestamp if record.timestamp_ms is None else record.timestamp_ms,
                callback=counter,
            )
            sent += 1
        producer.flush(FLUSH_TIMEOUT_S)
    return sent


def _produce(arguments: argparse.Namespace) -> int:
    _check(arguments)
    if arguments.timestamp is not None:
        parse_timestamp_ms(arguments.timestamp)  # a usage error before connecting
    counter = _DeliveryCounter()
    sent = 0
    try:
        if arguments.file is not None:
            try:
                stream: IO[bytes] = arguments.file.open("rb")
            except OSError as error:
                raise CliError(f"cannot read {arguments.file}: {error.strerror}") from None
            with stream:
                sent = _send_all(arguments, read_input_records(stream, arguments), counter)
        else:
            sent = _send_all(arguments, read_input_records(sys.stdin.buffer, arguments), counter)
    except InputLineError:
        print(
            f"produced {counter.delivered} records to {arguments.topic!r} before the error", file=sys.stderr
        )
        raise
    print(f"produced {counter.delivered} of {sent} records to {arguments.topic!r}", file=sys.stderr)
    if counter.failed or counter.delivered != sent:
        reason = f": {counter.first_error}" if counter.first_error is not None else ""
        raise CliError(f"{sent - counter.delivered} records were not delivered{reason}")
    return 0
