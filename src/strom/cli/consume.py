"""``strom consume TOPIC ...``: print records as they arrive, from a chosen start to an optional end."""

from __future__ import annotations

import argparse
import datetime
import re
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

from strom.cli.common import add_command, check_client_config, client_settings, open_admin
from strom.cli.output import CliError, UsageError
from strom.cli.record_format import ENCODINGS, FORMAT_TOKENS, RecordFormatter

if TYPE_CHECKING:
    from strom.client.cluster import TopicPartition
    from strom.client.consumer import Consumer, ConsumerRecord

__all__ = [
    "EndBound",
    "format_record",
    "parse_end_bound",
    "parse_timestamp_ms",
    "record_to_json",
    "register",
]

# poll() is called with at most this timeout so that --timeout-ms, --until and Ctrl-C are noticed promptly.
POLL_SLICE_MS = 200


def register(commands: Any) -> None:
    # argparse formats help with %: a literal percent sign is written %%.
    tokens = ", ".join(f"%%{token} {meaning}" for token, meaning in FORMAT_TOKENS.items() if token != "%")
    parser = add_command(
        commands,
        "consume",
        help_text="print records from topics",
        description=(
            "Print records from one or more topics (or every topic matching --include), one per line. "
            "Without --group every partition is assigned by hand and nothing is committed; with "
            "--group the consumer joins the group (subscribe) and commits what it printed. Starts at "
            "the end of each partition unless told otherwise; stops at --until, after "
            "--max-messages, after --timeout-ms without a record, or on Ctrl-C or SIGTERM (leaving "
            "the group and printing how many records it consumed)."
        ),
        run=_consume,
        output=False,
        client="consumer",
    )
    parser.add_argument("topics", nargs="*", metavar="TOPIC", help="topics to read")
    parser.add_argument(
        "--include",
        default=None,
        metavar="REGEX",
        help="read every topic whose whole name matches REGEX (internal topics aside); with --group "
        "topics created later are picked up too",
    )
    start = parser.add_mutually_exclusive_group()
    start.add_argument(
        "--from-beginning", action="store_true", help="start at the earliest offset still in the log"
    )
    start.add_argument(
        "--offset",
        default=None,
        metavar="earliest|latest|N",
        help="where to start: earliest, latest (the default) or offset N (N needs --partition); with "
        "--group, earliest and latest apply where the group has committed nothing",
    )
    start.add_argument(
        "--from-timestamp",
        default=None,
        metavar="TIME",
        help="start at the first record at or after TIME: ISO 8601 (local time unless it has an "
        "offset) or milliseconds since the epoch",
    )
    parser.add_argument(
        "--partition", type=int, default=None, metavar="N", help="read only partition N (of each topic)"
    )
    parser.add_argument(
        "--until",
        default=None,
        metavar="end|OFFSET|TIME",
        help="stop each partition at a bound and exit when all reached it: 'end' (the log end when "
        "the command starts), an offset (records below it are printed), or a time (ISO 8601, or "
        "@MS for milliseconds since the epoch: records before it are printed)",
    )
    parser.add_argument("--group", default=None, metavar="GROUP", help="join consumer group GROUP")
    parser.add_argument(
        "--isolation-level",
        choices=("read_uncommitted", "read_committed"),
        default=None,
        help="read_committed: only records of committed transactions (and no further than the "
        "first transaction still open); read_uncommitted (the default): every record",
    )
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
        default="value",
        metavar="FORMAT",
        help="value (default); key-value (key SEP value); json (one object per line with topic, "
        "partition, offset, timestamp, key, value, headers); or a kcat-like format string with "
        f"{tokens} and the escapes \\n \\t (a newline is added unless it ends with one)",
    )
    parser.add_argument(
        "--key-separator",
        default="\t",
        metavar="SEP",
        help="what separates key and value with --format key-value (default a tab)",
    )
    parser.add_argument(
        "--encoding",
        choices=ENCODINGS,
        default="text",
        help="how keys, values and header values are shown: text (UTF-8, other bytes as \\xNN; the "
        "default), hex or base64",
    )


# -- pure helpers --------------------------------------------------------------------------------------


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


@dataclass(frozen=True)
class EndBound:
    """Where ``--until`` stops: the log ends at the start (``end``), an offset, or a time in ms."""

    kind: str  # "end" | "offset" | "time"
    value: int = 0


def parse_end_bound(text: str) -> EndBound:
    stripped = text.strip()
    if stripped == "end":
        return EndBound("end")
    if stripped.isdigit():
        return EndBound("offset", int(stripped))
    if stripped.startswith("@") and stripped[1:].isdigit():
        return EndBound("time", int(stripped[1:]))
    try:
        return EndBound("time", parse_timestamp_ms(stripped))
    except UsageError:
        raise UsageError(
            f"--until {text!r}: give 'end', an offset, an ISO 8601 time or @MS (ms since the epoch)"
        ) from None


def record_to_json(record: ConsumerRecord) -> dict[str, Any]:
    return RecordFormatter("json").to_json(record)


def format_record(record: ConsumerRecord, record_format: str, key_separator: str = "\t") -> str:
    """One output line (without its newline). A null key or value prints as ``null`` in the
    named text formats so that it differs from an empty one."""
    return RecordFormatter(record_format, key_separator=key_separator)(record)[:-1]


def bound_offsets(
    bound: EndBound,
    partitions: Iterable[TopicPartition],
    log_ends: Mapping[TopicPartition, int],
    at_time: Mapping[TopicPartition, int | None],
    now_ms: int,
) -> dict[TopicPartition, int | None]:
    """The offset each partition stops before (None: no offset bound yet; only a time bound in the
    future, where the record that reaches it has not been written, ends such a partition)."""
    offsets: dict[TopicPartition, int | None] = {}
    for partition in partitions:
        if bound.kind == "end":
            offsets[partition] = log_ends[partition]
        elif bound.kind == "offset":
            offsets[partition] = bound.value
        else:
            found = at_time.get(partition)
            if found is not None:
                offsets[partition] = found
            else:
                # No record at or after the time yet: if it has passed, none will come before it
                # beyond what is there (producers stamp the present); if not, wait for one.
                offsets[partition] = log_ends[partition] if bound.value <= now_ms else None
    return offsets


# -- the command ---------------------------------------------------------------------------------------


def _check(arguments: argparse.Namespace) -> None:
    if not arguments.topics and arguments.include is None:
        raise UsageError("name the topics to read, or give --include REGEX")
    if arguments.topics and arguments.include is not None:
        raise UsageError("give topic names or --include, not both")
    if arguments.include is not None:
        try:
            re.compile(arguments.include)
        except re.error as error:
            raise UsageError(
                f"--include {arguments.include!r} is not a regular expression: {error}"
            ) from None
    if arguments.offset is not None:
        if arguments.offset not in ("earliest", "latest") and not arguments.offset.isdigit():
            raise UsageError(
                f"--offset takes earliest, latest or a non-negative offset, not {arguments.offset!r}"
            )
        if arguments.offset.isdigit() and arguments.partition is None:
            raise UsageError("--offset N needs --partition (an offset means something in one partition only)")
    if arguments.group is not None and (
        (arguments.offset is not None and arguments.offset.isdigit()) or arguments.partition is not None
    ):
        raise UsageError(
            "--group reads the partitions the group assigns from its committed offsets; "
            "--offset N and --partition work without a group (use `strom groups reset-offsets` to move a group)"
        )
    if arguments.group is not None and arguments.from_timestamp is not None:
        raise UsageError(
            "--from-timestamp works without a group (use `strom groups reset-offsets --to-datetime`)"
        )
    if arguments.max_messages is not None and arguments.max_messages < 1:
        raise UsageError(f"--max-messages must be at least 1, not {arguments.max_messages}")
    if arguments.timeout_ms is not None and arguments.timeout_ms < 0:
        raise UsageError(f"--timeout-ms must not be negative, not {arguments.timeout_ms}")
    if arguments.partition is not None and arguments.partition < 0:
        raise UsageError(f"--partition must not be negative, not {arguments.partition}")
    if arguments.from_timestamp is not None:
        parse_timestamp_ms(arguments.from_timestamp)
    if arguments.until is not None:
        parse_end_bound(arguments.until)


def _start_at(arguments: argparse.Namespace) -> str:
    if arguments.from_beginning:
        return "earliest"
    if arguments.offset is not None:
        return str(arguments.offset)
    return "latest"


def _include_pattern(arguments: argparse.Namespace) -> re.Pattern[str]:
    # Kafka matches a subscription pattern against the whole topic name.
    return re.compile(f"(?:{arguments.include})\\Z")


def _topics_to_read(arguments: argparse.Namespace) -> list[str]:
    """The named topics, checked to exist; or the topics --include matches now."""
    with open_admin(arguments, passthrough=False) as admin:
        if arguments.include is None:
            admin.describe_topics(arguments.topics)  # raises, naming a topic that does not exist
            return list(dict.fromkeys(arguments.topics))
        pattern = _include_pattern(arguments)
        matched = [name for name in admin.list_topics() if pattern.match(name)]
    if not matched and arguments.group is None:
        # Without a group the topics are those matching now: with none, nothing would ever come.
        raise CliError(
            f"no topic matches --include {arguments.include!r} (`strom topics list` shows the topics; "
            "with --group, topics created later are picked up)"
        )
    return matched


def _assign_by_hand(arguments: argparse.Namespace, consumer: Consumer, topics: list[str]) -> None:
    from strom.client.cluster import TopicPartition

    with open_admin(arguments, passthrough=False) as admin:
        descriptions = admin.describe_topics(topics) if topics else {}
    partitions: list[TopicPartition] = []
    for topic in topics:
        numbers = [partition.partition for partition in descriptions[topic].partitions]
        if arguments.partition is not None:
            if arguments.partition not in numbers:
                raise UsageError(
                    f"topic {topic!r} has partitions 0-{len(numbers) - 1}, not {arguments.partition}"
                )
            numbers = [arguments.partition]
        partitions += [TopicPartition(topic, number) for number in numbers]
    consumer.assign(partitions)
    start = _start_at(arguments)
    if arguments.from_timestamp is not None:
        timestamp_ms = parse_timestamp_ms(arguments.from_timestamp)
        found = consumer.offsets_for_times(dict.fromkeys(partitions, timestamp_ms)) if partitions else {}
        for partition in partitions:
            answer = found.get(partition)
            if answer is None:
                consumer.seek_to_end([partition])  # nothing that new yet: wait for what comes
            else:
                consumer.seek(partition, answer.offset)
    elif start == "earliest":
        consumer.seek_to_beginning(partitions)
    elif start == "latest":
        consumer.seek_to_end(partitions)
    else:
        for partition in partitions:
            consumer.seek(partition, int(start))


class _Bounds:
    """``--until``: which partitions are done, and which records are past their bound."""

    def __init__(self, bound: EndBound | None, consumer: Consumer) -> None:
        self.bound = bound
        self.consumer = consumer
        self.offsets: dict[TopicPartition, int | None] = {}
        self.done: set[TopicPartition] = set()

    def track(self, partitions: Iterable[TopicPartition]) -> None:
        """Find the bounds of partitions seen for the first time (assigned by hand or by the group)."""
        if self.bound is None:
            return
        new = [partition for partition in partitions if partition not in self.offsets]
        if not new:
            return
        log_ends = self.consumer.end_offsets(new) if self.bound.kind != "offset" else {}
        at_time: dict[TopicPartition, int | None] = {}
        if self.bound.kind == "time":
            found = self.consumer.offsets_for_times(dict.fromkeys(new, self.bound.value))
            at_time = {
                partition: (None if answer is None else answer.offset) for partition, answer in found.items()
            }
        self.offsets.update(bound_offsets(self.bound, new, log_ends, at_time, int(time.time() * 1000)))

    def keep(self, record: ConsumerRecord) -> bool:
        """Whether ``record`` is before its partition's bound (records past it are not printed)."""
        if self.bound is None:
            return True
        from strom.client.cluster import TopicPartition

        partition = TopicPartition(record.topic, record.partition)
        if partition in self.done:
            return False
        limit = self.offsets.get(partition)
        if limit is not None and record.offset >= limit:
            self._finish(partition)
            return False
        if self.bound.kind == "time" and record.timestamp >= self.bound.value:
            self._finish(partition)
            return False
        return True

    def _finish(self, partition: TopicPartition) -> None:
        self.done.add(partition)
        self.consumer.pause([partition])

    def all_done(self, assignment: set[TopicPartition]) -> bool:
        """Every assigned partition reached its bound (positions checked for those with no record
        past it, such as a partition that was already at its bound)."""
        if self.bound is None or not assignment:
            return False
        for partition in assignment - self.done:
            limit = self.offsets.get(partition)
            if limit is None:
                return False
            if self.consumer.position(partition) < limit:
                return False
            self._finish(partition)
        return True


def _consume(arguments: argparse.Namespace) -> int:
    from strom.client.cluster import TopicPartition
    from strom.client.config import ConsumerConfig
    from strom.client.consumer import Consumer

    _check(arguments)
    try:
        formatter = RecordFormatter(arguments.format, arguments.encoding, arguments.key_separator)
    except ValueError as error:
        raise UsageError(f"--format: {error}") from None
    bound = None if arguments.until is None else parse_end_bound(arguments.until)
    check_client_config(arguments, ConsumerConfig)
    topics = _topics_to_read(arguments)
    settings = client_settings(arguments, passthrough=True)
    start = _start_at(arguments)
    settings.setdefault("auto.offset.reset", start if start in ("earliest", "latest") else "latest")
    if arguments.isolation_level is not None:
        settings.setdefault("isolation.level", arguments.isolation_level)
    if arguments.group is not None:
        settings["group.id"] = arguments.group
        # The command commits what it has printed, after printing it: nothing unprinted is committed.
        settings["enable.auto.commit"] = False
    out: IO[str] = sys.stdout
    count = 0
    consumer = Consumer(settings)
    bounds = _Bounds(bound, consumer)
    try:
        if arguments.group is not None:
            consumer.subscribe(_include_pattern(arguments) if arguments.include is not None else topics)
        else:
            _assign_by_hand(arguments, consumer, topics)
        last_record_at = time.monotonic()
        while arguments.max_messages is None or count < arguments.max_messages:
            assignment = consumer.assignment()
            bounds.track(assignment)
            if bounds.all_done(assignment):
                break
            wait_ms = POLL_SLICE_MS
            if arguments.timeout_ms is not None:
                if arguments.group is not None and not assignment:
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
            printed: dict[tuple[str, int], int] = {}
            for record in records:
                if not bounds.keep(record):
                    continue
                out.write(formatter(record))
                printed[TopicPartition(record.topic, record.partition)] = record.offset + 1
                count += 1
            out.flush()
            if printed:
                last_record_at = time.monotonic()
                if arguments.group is not None:
                    # Without a bound the positions are exactly what was printed (poll returns at
                    # most what is still wanted), and partitions that gave nothing yet commit their
                    # start, as Kafka's console consumer does; with a bound, records past it were
                    # returned but not printed, so only the printed offsets are committed.
                    consumer.commit(printed if bound is not None else None)
    except KeyboardInterrupt:
        pass  # Ctrl-C (or SIGTERM) is how a person stops a consumer: not an error
    finally:
        consumer.close()  # leaves the group at once, so its partitions move on without waiting
        print(f"consumed {count} records", file=sys.stderr)
    return 0
