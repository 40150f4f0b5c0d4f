"""``strom produce TOPIC``: one record per input line, from stdin or a file."""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from strom.cli.common import add_command, client_settings, parse_key_value
from strom.cli.output import CliError, UsageError

__all__ = ["ACKS_CHOICES", "COMPRESSION_CHOICES", "acks_setting", "read_records", "register", "split_line"]

COMPRESSION_CHOICES = ("none", "gzip", "snappy", "lz4", "zstd")
ACKS_CHOICES = ("0", "1", "all", "-1")
# How long the final flush may take before the command reports records as undelivered.
FLUSH_TIMEOUT_S = 120.0


def register(commands: Any) -> None:
    parser = add_command(
        commands,
        "produce",
        help_text="write records to a topic, one per input line",
        description=(
            "Write records to a topic, one per line of stdin (or --file). With --key-separator the "
            "text before the first separator is the key; a line without it has no key. Prints how "
            "many records were delivered to stderr; exits 1 if any were not."
        ),
        run=_produce,
        output=False,
    )
    parser.add_argument("topic", metavar="TOPIC", help="the topic to write to")
    parser.add_argument("--file", type=Path, default=None, help="read lines from FILE instead of stdin")
    parser.add_argument(
        "--key-separator", default=None, metavar="SEP", help="split each line into key SEP value"
    )
    parser.add_argument(
        "--header",
        type=parse_key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a header on every record (repeatable)",
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
    """Producer settings for ``--acks``: idempotence (the default) needs acks=all, so it is turned
    off for 0 and 1."""
    if acks in ("all", "-1"):
        return {"acks": -1, "enable.idempotence": True}
    return {"acks": int(acks), "enable.idempotence": False}


def split_line(line: bytes, key_separator: bytes | None) -> tuple[bytes | None, bytes]:
    """(key, value) of one line; the key is None without a separator, or when the line has none."""
    if key_separator is None:
        return None, line
    key, separator, value = line.partition(key_separator)
    if not separator:
        return None, line
    return key, value


def read_records(stream: IO[bytes], key_separator: bytes | None) -> Iterator[tuple[bytes | None, bytes]]:
    """(key, value) per line; the line ending (``\\n`` or ``\\r\\n``) is not part of the value."""
    for raw_line in stream:
        line = raw_line[:-1] if raw_line.endswith(b"\n") else raw_line
        if line.endswith(b"\r"):
            line = line[:-1]
        yield split_line(line, key_separator)


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


def _send_all(
    arguments: argparse.Namespace, records: Iterable[tuple[bytes | None, bytes]], counter: _DeliveryCounter
) -> int:
    from strom.client.producer import Producer

    settings = client_settings(arguments)
    settings.update(acks_setting(arguments.acks))
    settings["compression.type"] = arguments.compression
    settings["linger.ms"] = arguments.linger_ms
    headers = [(key, value.encode()) for key, value in arguments.header]
    sent = 0
    with Producer(settings) as producer:
        for key, value in records:
            producer.send(
                arguments.topic,
                value=value,
                key=key,
                headers=headers or None,
                partition=arguments.partition,
                callback=counter,
            )
            sent += 1
        producer.flush(FLUSH_TIMEOUT_S)
    return sent


def _produce(arguments: argparse.Namespace) -> int:
    if arguments.partition is not None and arguments.partition < 0:
        raise UsageError(f"--partition must not be negative, not {arguments.partition}")
    if arguments.key_separator == "":
        raise UsageError("--key-separator must not be empty")
    separator = None if arguments.key_separator is None else arguments.key_separator.encode()
    counter = _DeliveryCounter()
    if arguments.file is not None:
        try:
            stream: IO[bytes] = arguments.file.open("rb")
        except OSError as error:
            raise CliError(f"cannot read {arguments.file}: {error.strerror}") from None
        with stream:
            sent = _send_all(arguments, read_records(stream, separator), counter)
    else:
        sent = _send_all(arguments, read_records(sys.stdin.buffer, separator), counter)
    print(f"produced {counter.delivered} of {sent} records to {arguments.topic!r}", file=sys.stderr)
    if counter.failed or counter.delivered != sent:
        reason = f": {counter.first_error}" if counter.first_error is not None else ""
        raise CliError(f"{sent - counter.delivered} records were not delivered{reason}")
    return 0
