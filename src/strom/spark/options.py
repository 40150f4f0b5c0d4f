"""The ``format("strom")`` options, parsed and checked, and the pure offset arithmetic the source
plans with: offset JSON in Spark's Kafka-source shape, admission control (``maxOffsetsPerTrigger``)
and splitting large ranges across tasks (``minPartitions``). No Spark, no sockets: unit-tested alone.

Option names are those of Spark's built-in Kafka source, so a job written for it moves over by
changing ``format("kafka")`` to ``format("strom")``.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "EARLIEST",
    "LATEST",
    "OffsetRange",
    "OffsetSpec",
    "ReadOptions",
    "SourceOptionsError",
    "TopicPartitionKey",
    "WriteOptions",
    "limit_offsets",
    "offsets_from_json",
    "offsets_to_json",
    "option_warnings",
    "parse_read_options",
    "parse_write_options",
    "split_ranges",
]

# In offset JSON, as in Spark's Kafka source: -2 means the earliest offset, -1 the latest.
EARLIEST = -2
LATEST = -1

TopicPartitionKey = tuple[str, int]

# The options each side takes (Spark hands their names lower-cased; these are the spellings shown).
READ_OPTION_NAMES = (
    "bootstrap.servers",
    "subscribe",
    "subscribePattern",
    "assign",
    "startingOffsets",
    "endingOffsets",
    "startingTimestamp",
    "startingOffsetsByTimestamp",
    "endingTimestamp",
    "endingOffsetsByTimestamp",
    "maxOffsetsPerTrigger",
    "minPartitions",
    "failOnDataLoss",
    "includeHeaders",
    "groupId",
    "kafkaConsumer.pollTimeoutMs",
)
# ``checkpointLocation`` is Spark's own; Spark passes it to a streaming sink with the others.
WRITE_OPTION_NAMES = (
    "bootstrap.servers",
    "topic",
    "checkpointLocation",
    "exactlyOnce",
    "exactlyOnce.id",
    "exactlyOnce.batch",
)
# A transactional id is the exactly-once sink's to choose (one per task); the producer of the
# at-least-once sink never begins a transaction, so it could not send at all with one.
WRITE_CLIENT_SETTINGS_REFUSED = ("transactional.id",)
# Options of Spark's Kafka source that format("strom") does not implement: named, so a job moved
# over from format("kafka") is told what it loses rather than that the name is unknown.
KAFKA_SOURCE_OPTIONS_NOT_SUPPORTED = (
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "maxRecordsPerPartition",
    "fetchOffset.numRetries",
    "fetchOffset.retryIntervalMs",
    "startingOffsetsByTimestampStrategy",
)


class SourceOptionsError(ValueError):
    """An option is missing, unknown in combination, or malformed; the message names it."""


@dataclass(frozen=True)
class OffsetSpec:
    """Where to start or end: ``kind`` is ``"earliest"``, ``"latest"``, ``"offsets"`` (a JSON map
    of explicit offsets, -2/-1 allowed), ``"timestamp"`` (one timestamp in ms for every partition) or
    ``"timestamps"`` (a JSON map of timestamps)."""

    kind: str
    offsets: dict[TopicPartitionKey, int] = field(default_factory=dict)
    timestamp_ms: int = 0


@dataclass(frozen=True)
class OffsetRange:
    """Records ``[from_offset, until_offset)`` of one topic-partition: one Spark task."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    @property
    def size(self) -> int:
        return max(self.until_offset - self.from_offset, 0)


@dataclass(frozen=True)
class ReadOptions:
    client_config: dict[str, str]
    subscribe: tuple[str, ...] = ()
    subscribe_pattern: str | None = None
    assign: tuple[TopicPartitionKey, ...] = ()
    starting: OffsetSpec | None = None  # None: the default (earliest for batch, latest for streams)
    ending: OffsetSpec = OffsetSpec("latest")
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    group_id: str | None = None
    poll_timeout_ms: int = 120_000

    def matches(self, topic: str) -> bool:
        """Whether a topic is read (for subscribe and subscribePattern; assign lists partitions)."""
        if self.subscribe:
            return topic in self.subscribe
        if self.subscribe_pattern is not None:
            return re.fullmatch(self.subscribe_pattern, topic) is not None
        return any(assigned_topic == topic for assigned_topic, _ in self.assign)


@dataclass(frozen=True)
class WriteOptions:
    client_config: dict[str, str]
    topic: str | None = None
    # exactlyOnce: every task's rows in one transaction with a marker (strom.spark.exactly_once).
    exactly_once: bool = False
    # Batch writes only: the write's identity (None: a new one per write) and its batch number.
    exactly_once_id: str | None = None
    exactly_once_batch: int = 0


def _lookup(options: Mapping[str, str], name: str) -> str | None:
    """Spark hands options case-insensitively (a CaseInsensitiveDict); plain dicts in tests may not."""
    if name in options:
        return options[name]
    lowered = name.lower()
    for key, value in options.items():
        if key.lower() == lowered:
            return value
    return None


def _to_bool(name: str, text: str) -> bool:
    if text.strip().lower() in ("true", "false"):
        return text.strip().lower() == "true"
    raise SourceOptionsError(f"option {name} must be true or false, not {text!r}")


def _to_positive_int(name: str, text: str) -> int:
    try:
        number = int(text.strip())
    except ValueError:
        raise SourceOptionsError(f"option {name} must be an integer, not {text!r}") from None
    if number < 1:
        raise SourceOptionsError(f"option {name} must be at least 1, not {number}")
    return number


def client_config_from(options: Mapping[str, str]) -> dict[str, str]:
    """``kafka.*`` options (prefix removed) plus ``bootstrap.servers`` given without the prefix."""
    config: dict[str, str] = {}
    for key, value in options.items():
        if key.lower().startswith("kafka."):
            config[key[len("kafka.") :]] = value
    plain = _lookup(options, "bootstrap.servers")
    if plain is not None:
        config["bootstrap.servers"] = plain
    if not config.get("bootstrap.servers"):
        raise SourceOptionsError("option bootstrap.servers (or kafka.bootstrap.servers) is required")
    return config


def offsets_from_json(name: str, text: str) -> dict[TopicPartitionKey, int]:
    """``{"topic": {"0": 23, "1": -2}}`` -> ``{("topic", 0): 23, ("topic", 1): -2}``."""
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as error:
        raise SourceOptionsError(f"option {name} is not valid JSON: {error}") from None
    if not isinstance(parsed, dict):
        raise SourceOptionsError(f'option {name} must be a JSON object like {{"topic": {{"0": 23}}}}')
    offsets: dict[TopicPartitionKey, int] = {}
    for topic, partitions in parsed.items():
        if not isinstance(partitions, dict):
            raise SourceOptionsError(f"option {name}: topic {topic!r} must map partitions to numbers")
        for partition, offset in partitions.items():
            try:
                partition_number = int(partition)
            except ValueError:
                raise SourceOptionsError(f"option {name}: partition {partition!r} is not a number") from None
            if not isinstance(offset, int) or isinstance(offset, bool):
                raise SourceOptionsError(f"option {name}: offset {offset!r} is not an integer")
            offsets[(topic, partition_number)] = offset
    return offsets


def offsets_to_json(offsets: Mapping[TopicPartitionKey, int]) -> dict[str, dict[str, int]]:
    """The streaming offset Spark checkpoints: ``{topic: {partition: next offset}}`` (JSON keys are
    strings, so partitions are too)."""
    nested: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        nested.setdefault(topic, {})[str(partition)] = offset
    return nested


def offsets_from_checkpoint(nested: Mapping[str, Any]) -> dict[TopicPartitionKey, int]:
    return {
        (topic, int(partition)): int(offset)
        for topic, partitions in nested.items()
        for partition, offset in partitions.items()
    }


def _assign_from_json(text: str) -> tuple[TopicPartitionKey, ...]:
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as error:
        raise SourceOptionsError(f"option assign is not valid JSON: {error}") from None
    if not isinstance(parsed, dict) or not all(
        isinstance(partitions, list)
        and all(isinstance(p, int) and not isinstance(p, bool) for p in partitions)
        for partitions in parsed.values()
    ):
        raise SourceOptionsError('option assign must be JSON like {"topicA": [0, 1], "topicB": [2]}')
    return tuple((topic, partition) for topic, partitions in parsed.items() for partition in partitions)


def _starting_spec(options: Mapping[str, str]) -> OffsetSpec | None:
    # Precedence as in Spark's Kafka source: one timestamp, then timestamps per partition, then offsets.
    timestamp = _lookup(options, "startingTimestamp")
    if timestamp is not None:
        return OffsetSpec("timestamp", timestamp_ms=_timestamp(timestamp, "startingTimestamp"))
    by_timestamp = _lookup(options, "startingOffsetsByTimestamp")
    if by_timestamp is not None:
        return OffsetSpec("timestamps", offsets_from_json("startingOffsetsByTimestamp", by_timestamp))
    text = _lookup(options, "startingOffsets")
    if text is None:
        return None
    return _offsets_spec("startingOffsets", text)


def _ending_spec(options: Mapping[str, str]) -> OffsetSpec:
    timestamp = _lookup(options, "endingTimestamp")
    if timestamp is not None:
        return OffsetSpec("timestamp", timestamp_ms=_timestamp(timestamp, "endingTimestamp"))
    by_timestamp = _lookup(options, "endingOffsetsByTimestamp")
    if by_timestamp is not None:
        return OffsetSpec("timestamps", offsets_from_json("endingOffsetsByTimestamp", by_timestamp))
    text = _lookup(options, "endingOffsets")
    if text is None:
        return OffsetSpec("latest")
    spec = _offsets_spec("endingOffsets", text)
    if spec.kind == "earliest" or EARLIEST in spec.offsets.values():
        raise SourceOptionsError("option endingOffsets cannot be earliest (-2)")
    return spec


def _timestamp(text: str, name: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise SourceOptionsError(
            f"option {name} must be milliseconds since the epoch, not {text!r}"
        ) from None
    if value < 0:
        raise SourceOptionsError(f"option {name} must not be negative, not {value}")
    return value


def _offsets_spec(name: str, text: str) -> OffsetSpec:
    word = text.strip().lower()
    if word in ("earliest", "latest"):
        return OffsetSpec(word)
    offsets = offsets_from_json(name, text)
    for (topic, partition), offset in offsets.items():
        if offset < EARLIEST:
            raise SourceOptionsError(f"option {name}: offset {offset} for {topic}-{partition} is invalid")
    return OffsetSpec("offsets", offsets)


def option_warnings(options: Mapping[str, str], *, side: str, client_keys: Iterable[str] = ()) -> list[str]:
    """One warning per option name ``format("strom")`` does not know on ``side`` (``"read"`` or
    ``"write"``), with the names meant when they are close; ``kafka.*`` names are checked against
    ``client_keys`` (the settings of the clients that side uses). Unknown names are ignored, as
    Spark's Kafka source ignores them, but a misspelt ``startingOffsets`` silently reads from the
    default, so it is worth a line."""
    known = READ_OPTION_NAMES if side == "read" else WRITE_OPTION_NAMES
    by_lower = {name.lower(): name for name in known}
    client_by_lower = {key.lower(): key for key in client_keys}
    not_supported = {name.lower(): name for name in KAFKA_SOURCE_OPTIONS_NOT_SUPPORTED}
    warnings: list[str] = []
    for given in sorted(options):
        lowered = given.lower()
        if lowered in by_lower:
            continue
        if lowered.startswith("kafka."):
            setting = lowered[len("kafka.") :]
            if setting in client_by_lower:
                continue
            close = difflib.get_close_matches(setting, list(client_by_lower), n=3, cutoff=0.75)
            hint = (
                f" (did you mean {', '.join('kafka.' + client_by_lower[c] for c in close)}?)" if close else ""
            )
            warnings.append(
                f"format('strom'): option {given!r} is not a setting of strom's client{hint}; ignored"
            )
            continue
        if side == "read" and lowered in not_supported:
            warnings.append(
                f"format('strom'): option {not_supported[lowered]!r} of Spark's Kafka source is not "
                "supported here; ignored"
            )
            continue
        close = difflib.get_close_matches(lowered, list(by_lower), n=3, cutoff=0.75)
        hint = f" (did you mean {', '.join(by_lower[c] for c in close)}?)" if close else ""
        warnings.append(f"format('strom'): unknown {side} option {given!r}{hint}; ignored")
    return warnings


def client_setting_names(*config_classes: type) -> set[str]:
    """The Kafka names of the settings the given client configuration classes take (and their
    other names, such as librdkafka's sasl.mechanisms)."""
    from strom.client.config import KEY_ALIASES

    names = {
        config_field.name.replace("_", ".")
        for config_class in config_classes
        for config_field in dataclasses.fields(config_class)
    }
    return names | {alias for alias, key in KEY_ALIASES.items() if key in names}


def parse_read_options(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    """Check and convert the options of ``spark.read`` / ``spark.readStream``."""
    subscribe = _lookup(options, "subscribe")
    pattern = _lookup(options, "subscribePattern")
    assign = _lookup(options, "assign")
    given = [
        name
        for name, value in (("subscribe", subscribe), ("subscribePattern", pattern), ("assign", assign))
        if value
    ]
    if len(given) != 1:
        raise SourceOptionsError(
            "exactly one of subscribe, subscribePattern or assign is required"
            + (f" (got {', '.join(given)})" if given else "")
        )
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as error:
            raise SourceOptionsError(f"option subscribePattern is not a valid pattern: {error}") from None
    ending = _ending_spec(options)
    if streaming and any(
        _lookup(options, name) is not None
        for name in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp")
    ):
        raise SourceOptionsError("ending offsets are for batch queries; a stream runs until stopped")
    max_per_trigger = _lookup(options, "maxOffsetsPerTrigger")
    min_partitions = _lookup(options, "minPartitions")
    fail_on_data_loss = _lookup(options, "failOnDataLoss")
    include_headers = _lookup(options, "includeHeaders")
    poll_timeout = _lookup(options, "kafkaConsumer.pollTimeoutMs")
    return ReadOptions(
        client_config=client_config_from(options),
        subscribe=tuple(topic.strip() for topic in subscribe.split(",") if topic.strip())
        if subscribe
        else (),
        subscribe_pattern=pattern,
        assign=_assign_from_json(assign) if assign else (),
        starting=_starting_spec(options),
        ending=ending,
        max_offsets_per_trigger=(
            _to_positive_int("maxOffsetsPerTrigger", max_per_trigger) if max_per_trigger else None
        ),
        min_partitions=_to_positive_int("minPartitions", min_partitions) if min_partitions else None,
        fail_on_data_loss=_to_bool("failOnDataLoss", fail_on_data_loss) if fail_on_data_loss else True,
        include_headers=_to_bool("includeHeaders", include_headers) if include_headers else False,
        group_id=_lookup(options, "groupId") or None,
        poll_timeout_ms=_to_positive_int("kafkaConsumer.pollTimeoutMs", poll_timeout)
        if poll_timeout
        else 120_000,
    )


def parse_write_options(options: Mapping[str, str], *, streaming: bool = False) -> WriteOptions:
    """Check and convert the options of ``df.write`` / ``df.writeStream``."""
    client_config = client_config_from(options)
    for setting in WRITE_CLIENT_SETTINGS_REFUSED:
        if setting in client_config:
            raise SourceOptionsError(
                f"option kafka.{setting} is not for format('strom'): with exactlyOnce=true the sink "
                "gives each task its own transactional id"
            )
    exactly_once_text = _lookup(options, "exactlyOnce")
    exactly_once = _to_bool("exactlyOnce", exactly_once_text) if exactly_once_text else False
    write_id = _lookup(options, "exactlyOnce.id")
    batch_text = _lookup(options, "exactlyOnce.batch")
    for name, value in (("exactlyOnce.id", write_id), ("exactlyOnce.batch", batch_text)):
        if value is None:
            continue
        if not exactly_once:
            raise SourceOptionsError(f"option {name} is for exactlyOnce=true writes")
        if streaming:
            raise SourceOptionsError(
                f"option {name} is for batch writes: a stream's identity is its query id (kept in its "
                "checkpoint) and its batches are Spark's micro-batches"
            )
    if write_id is not None and not write_id.strip():
        raise SourceOptionsError("option exactlyOnce.id must not be empty")
    batch = 0
    if batch_text is not None:
        try:
            batch = int(batch_text.strip())
        except ValueError:
            raise SourceOptionsError(
                f"option exactlyOnce.batch must be an integer, not {batch_text!r}"
            ) from None
        if batch < 0:
            raise SourceOptionsError(f"option exactlyOnce.batch must not be negative, not {batch}")
    return WriteOptions(
        client_config=client_config,
        topic=_lookup(options, "topic") or None,
        exactly_once=exactly_once,
        exactly_once_id=write_id.strip() if write_id is not None else None,
        exactly_once_batch=batch,
    )


# -- offset arithmetic ---------------------------------------------------------------------------


def limit_offsets(
    start: Mapping[TopicPartitionKey, int], latest: Mapping[TopicPartitionKey, int], max_records: int
) -> dict[TopicPartitionKey, int]:
    """End offsets that admit at most ``max_records`` records in all, shared in proportion to each
    partition's backlog (as Spark's Kafka source does), and exactly ``max_records`` when at least
    that many are waiting, so a backlog of N takes ceil(N / max_records) micro-batches."""
    backlog = {tp: max(latest[tp] - start.get(tp, latest[tp]), 0) for tp in latest}
    total = sum(backlog.values())
    if total <= max_records:
        return dict(latest)
    shares = {tp: size * max_records // total for tp, size in backlog.items()}
    remainder = max_records - sum(shares.values())
    # Largest leftover first, ties by name: deterministic, so a restarted query plans the same.
    by_leftover = sorted(backlog, key=lambda tp: (-(backlog[tp] * max_records % total), tp))
    for tp in by_leftover:
        if remainder == 0:
            break
        if shares[tp] < backlog[tp]:
            shares[tp] += 1
            remainder -= 1
    return {tp: (start[tp] + shares[tp]) if tp in start else latest[tp] for tp in latest}


def split_ranges(ranges: Iterable[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """One range per topic-partition, or, when ``minPartitions`` asks for more tasks than that,
    large ranges cut into pieces in proportion to their size (every piece non-empty)."""
    ranges = [offset_range for offset_range in ranges if offset_range.size > 0]
    if min_partitions is None or min_partitions <= len(ranges):
        return ranges
    total = sum(offset_range.size for offset_range in ranges)
    result: list[OffsetRange] = []
    for offset_range in ranges:
        pieces = max(1, min(offset_range.size, round(offset_range.size * min_partitions / total)))
        step, extra = divmod(offset_range.size, pieces)
        position = offset_range.from_offset
        for index in range(pieces):
            length = step + (1 if index < extra else 0)
            result.append(
                OffsetRange(offset_range.topic, offset_range.partition, position, position + length)
            )
            position += length
    return result
