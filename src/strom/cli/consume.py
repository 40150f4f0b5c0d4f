"""``strom consume TOPIC``: print records as they arrive, from a chosen starting point."""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from typing import IO, TYPE_CHECKING, Any

from strom.cli.common import add_command, client_settings
from strom.cli.output import UsageError, bytes_to_text

if TYPE_CHECKING:
    from strom.client.consumer import Consumer, ConsumerRecord

__all__ = ["RECORD_FORMATS", "format_record", "parse_timestamp_ms", "record_to_json", "register"]

RECORD_FORMATS = ("value", "key-value", "json")
# poll() is called with at most this timeout so that --timeout-ms and Ctrl-C are noticed promptly.
POLL_SLICE_MS = 200


def register(commands: Any) -> None:
    parser = add_command(
        commands,
        "consume",
        help_text="print records from a topic",
        description=(
            "Print records from a topic, one per line. Without --group every partition is assigned by "
            "hand and nothing is committed; with --group the consumer joins the group (subscribe) "
            "and commits what it printed. Starts at the end of each partition unless told otherwise."
        ),
        run=_consume,
        output=False,
    )
    parser.add_argument("topic", metavar="TOPIC", help="the topic to read")
    start = parser.add_mutually_exclusive_group()
    start.add_argument(
        "--from-beginning", action="store_true", help="start at the earliest offset still in the log"
    )
    start.add_argument(
        "--offset", type=int, default=None, metavar="N", help="start at offset N (needs --partition)"
    )
    start.add_argument(
        "--from-timestamp",
        default=None,
        metavar="TIME",
        help="start at the first record at or after TIME: ISO 8601 (local time unless it has an "
        "offset) or milliseconds since the epoch",
    )
    parser.add_argument("--partition", type=int, default=None, metavar="N", help="read only partition N")
    parser.add_argument("--group", default=None, metavar="GROUP", help="join consumer group GROUP")
    parser.add_argument("--max-messages", type=int, default=None, metavar="N", help="stop after N records")
    parser.add_argument(
        "--timeout-ms",
        type=int,
        default=None,
        metavar="MS",
        help="stop when no record arrived for MS milliseconds (default: wait forever); with --group "
        "the clock starts once the group has assigned partitions",
    )
    parser.add_argument(
        "--format",
        choices=RECORD_FORMATS,
        default="value",
        help="value (default); key-value (key SEP value); json (one object per line with topic, "
        "partition, offset, timestamp, key, value, headers)",
    )
    parser.add_argument(
        "--key-separator",
        default="\t",
        metavar="SEP",
        help="what separates key and value with --format key-value (default a tab)",
    )


def parse_timestamp_ms(text: str) -> int:
    """Milliseconds since the epoch from digits, or from ISO 8601 (naive times are local time)."""
    stripped = text.strip()
    if stripped.isdigit():
        return int(stripped)
    try:
        moment = datetime.datetime.fromisoformat(stripped)
    except ValueError:
        raise UsageError(
            f"{text!r} is neither milliseconds since the epoch nor an ISO 8601 time "
            "(such as 2024-05-01T12:00:00Z)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.astimezone()  # the local time zone, as a person at the terminal means it
    return int(moment.timestamp() * 1000)


def record_to_json(record: ConsumerRecord) -> dict[str, Any]:
    return {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp,
        "key": bytes_to_text(record.key),
        "value": bytes_to_text(record.value),
        "headers": [{"key": name, "value": bytes_to_text(value)} for name, value in record.headers],
    }


def format_record(record: ConsumerRecord, record_format: str, key_separator: str = "\t") -> str:
    """One output line (without its newline). A null key or value prints as ``null`` in the text
    formats so that it differs from an empty one."""
    if record_format == "json":
        return json.dumps(record_to_json(record), ensure_ascii=False)
    value = bytes_to_text(record.value)
    value_text = "null" if value is None else value
    if record_format == "value":
        return value_text
    assert record_format == "key-value", f"unknown record format {record_format!r}"
    key = bytes_to_text(record.key)
    return f"{'null' if key is None else key}{key_separator}{value_text}"


def _check(arguments: argparse.Namespace) -> None:
    if arguments.offset is not None and arguments.partition is None:
        raise UsageError("--offset needs --partition (an offset means something in one partition only)")
    if arguments.offset is not None and arguments.offset < 0:
        raise UsageError(f"--offset must not be negative, not {arguments.offset}")
    if arguments.group is not None and (arguments.offset is not None or arguments.partition is not None):
        raise UsageError(
            "--group reads the partitions the group assigns from its committed offsets; "
            "--offset and --partition work without a group (use `strom groups reset-offsets` to move a group)"
        )
    if arguments.group is not None and arguments.from_timestamp is not None:
        raise UsageError(
            "--from-timestamp works without a group (use `strom groups reset-offsets --to-datetime`)"
        )
    if arguments.max_messages is not None and arguments.max_messages < 1:
        raise UsageError(f"--max-messages must be at least 1, not {arguments.max_messages}")
    if arguments.timeout_ms is not None and arguments.timeout_ms < 0:
        raise UsageError(f"--timeout-ms must not be negative, not {arguments.timeout_ms}")


def _assign_by_hand(arguments: argparse.Namespace, consumer: Consumer) -> None:
    from strom.cli.common import open_admin
    from strom.client.cluster import TopicPartition

    with open_admin(arguments) as admin:
        description = admin.describe_topics([arguments.topic])[arguments.topic]
    partitions = [
        TopicPartition(arguments.topic, partition.partition) for partition in description.partitions
    ]
    if arguments.partition is not None:
        wanted = TopicPartition(arguments.topic, arguments.partition)
        if wanted not in partitions:
            raise UsageError(
                f"topic {arguments.topic!r} has partitions 0-{len(partitions) - 1}, not {arguments.partition}"
            )
        partitions = [wanted]
    consumer.assign(partitions)
    if arguments.offset is not None:
        consumer.seek(partitions[0], arguments.offset)
    elif arguments.from_beginning:
        consumer.seek_to_beginning(partitions)
    elif arguments.from_timestamp is not None:
        timestamp_ms = parse_timestamp_ms(arguments.from_timestamp)
        found = consumer.offsets_for_times(dict.fromkeys(partitions, timestamp_ms))
        for partition in partitions:
            answer = found.get(partition)
            if answer is None:
                consumer.seek_to_end([partition])  # nothing that new yet: wait for what comes
            else:
                consumer.seek(partition, answer.offset)
    else:
        consumer.seek_to_end(partitions)


def _consume(arguments: argparse.Namespace) -> int:
    from strom.client.consumer import Consumer

    _check(arguments)
    if arguments.from_timestamp is not None:
        parse_timestamp_ms(arguments.from_timestamp)  # a usage error before connecting
    settings = client_settings(arguments)
    settings["auto.offset.reset"] = "earliest" if arguments.from_beginning else "latest"
    if arguments.group is not None:
        settings["group.id"] = arguments.group
        # The command commits what it has printed, after printing it: nothing unprinted is committed.
        settings["enable.auto.commit"] = False
    out: IO[str] = sys.stdout
    count = 0
    consumer = Consumer(settings)
    try:
        if arguments.group is not None:
            consumer.subscribe([arguments.topic])
        else:
            _assign_by_hand(arguments, consumer)
        last_record_at = time.monotonic()
        while arguments.max_messages is None or count < arguments.max_messages:
            wait_ms = POLL_SLICE_MS
            if arguments.timeout_ms is not None:
                if arguments.group is not None and not consumer.assignment():
                    # Joining the group (the broker's initial rebalance delay, a rebalance): not
                    # idleness of the topic, so the idle clock waits for partitions.
                    last_record_at = time.monotonic()
                idle_ms = (time.monotonic() - last_record_at) * 1000
                if idle_ms >= arguments.timeout_ms:
                    break
                wait_ms = max(1, min(wait_ms, int(arguments.timeout_ms - idle_ms)))
            limit = None if arguments.max_messages is None else arguments.max_messages - count
            records = consumer.poll(timeout_ms=wait_ms, max_records=limit)
            if not records:
                continue
            for record in records:
                out.write(format_record(record, arguments.format, arguments.key_separator) + "\n")
            out.flush()
            count += len(records)
            last_record_at = time.monotonic()
            if arguments.group is not None:
                consumer.commit()
    except KeyboardInterrupt:
        pass  # Ctrl-C is how a person stops a consumer: not an error
    finally:
        consumer.close()
        print(f"consumed {count} records", file=sys.stderr)
    return 0
