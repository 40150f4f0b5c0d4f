"""Topic-level log configuration, under Kafka's key names.

``LogConfig`` holds the values the log acts on, in the units their names say. ``TOPIC_CONFIG_KEYS``
describes every supported key (type, default, doc) for DescribeConfigs and ``--help-config``; keys
that strom stores and reports but does not act on yet say so in their doc.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from strom.storage.errors import ConfigError

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1

# cleanup.policy is a list of these, in any order, or empty (neither: the log keeps everything).
CLEANUP_POLICIES = ("delete", "compact")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
COMPRESSION_TYPES = ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")


@dataclass(frozen=True)
class LogConfig:
    segment_bytes: int = 1_073_741_824  # segment.bytes
    segment_ms: int = 7 * 24 * 3600 * 1000  # segment.ms
    retention_ms: int = 7 * 24 * 3600 * 1000  # retention.ms (-1 = unlimited)
    retention_bytes: int = -1  # retention.bytes (-1 = unlimited)
    cleanup_policy: str = "delete"  # cleanup.policy: "delete", "compact", both in either order, or ""
    delete_retention_ms: int = 86_400_000  # delete.retention.ms (tombstones kept this long)
    min_compaction_lag_ms: int = 0  # min.compaction.lag.ms
    max_compaction_lag_ms: int = LONG_MAX  # max.compaction.lag.ms (stored, not acted on)
    min_cleanable_dirty_ratio: float = 0.5  # min.cleanable.dirty.ratio (stored, not acted on)
    flush_messages: int = LONG_MAX  # flush.messages (fsync after this many messages)
    flush_ms: int = LONG_MAX  # flush.ms
    index_interval_bytes: int = 4096  # index.interval.bytes
    segment_index_bytes: int = 10_485_760  # segment.index.bytes (stored; indexes grow as needed)
    segment_jitter_ms: int = 0  # segment.jitter.ms (stored, not acted on)
    max_message_bytes: int = 1_048_588  # max.message.bytes (largest batch)
    message_timestamp_type: str = "CreateTime"  # message.timestamp.type ("LogAppendTime" too)
    compression_type: str = "producer"  # compression.type (the broker decides whether to recompress)
    min_insync_replicas: int = 1  # min.insync.replicas (the broker checks it for acks=all)
    unclean_leader_election_enable: bool = False  # unclean.leader.election.enable
    file_delete_delay_ms: int = 60_000  # file.delete.delay.ms (stored; files are deleted at once)
    preallocate: bool = False  # preallocate (stored, not acted on)

    @property
    def compacted(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def deletes(self) -> bool:
        """Whether retention (by time and size) applies."""
        return "delete" in self.cleanup_policy

    @property
    def requires_keys(self) -> bool:
        """Compacted topics refuse records without a key at produce time (Kafka does the same)."""
        return self.compacted

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @classmethod
    def from_properties(cls, props: Mapping[str, str], base: LogConfig | None = None) -> LogConfig:
        """Kafka key names -> LogConfig over ``base`` (or the defaults); bad key/value -> ConfigError."""
        changes: dict[str, Any] = {}
        for key, raw in props.items():
            info = TOPIC_CONFIG_KEYS.get(key)
            if info is None:
                raise ConfigError(f"unknown topic config key {key!r}")
            changes[info.field] = info.parse(raw)
        return dataclasses.replace(base if base is not None else cls(), **changes)

    def to_properties(self) -> dict[str, str]:
        """Every supported key with its value as Kafka writes it."""
        return {key: info.render(getattr(self, info.field)) for key, info in TOPIC_CONFIG_KEYS.items()}


@dataclass(frozen=True)
class ConfigKeyInfo:
    name: str  # Kafka's key, e.g. "segment.bytes"
    field: str  # the LogConfig attribute
    type: str  # Kafka's config type: "long", "int", "double", "boolean", "string", "list"
    default: str  # rendered as Kafka renders it
    doc: str
    minimum: int | float | None = None
    maximum: int | float | None = None
    choices: tuple[str, ...] = ()
    extra_check: Callable[[Any], str | None] | None = None

    def parse(self, raw: str) -> Any:
        value: Any
        text = raw.strip()
        try:
            if self.type in ("long", "int"):
                value = int(text)
            elif self.type == "double":
                value = float(text)
            elif self.type == "boolean":
                lowered = text.lower()
                if lowered not in ("true", "false"):
                    raise ValueError(text)
                value = lowered == "true"
            else:
                value = text
        except ValueError:
            raise ConfigError(f"invalid value {raw!r} for config {self.name}: expected {self.type}") from None
        if self.type == "list":
            # As Kafka: the items in the order given (a repeated one once), spaces around them
            # dropped; each must be one of the choices; the empty list is a value too.
            parts = list(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
            unknown = [part for part in parts if self.choices and part not in self.choices]
            if unknown:
                raise ConfigError(
                    f"invalid value {raw!r} for config {self.name}: {unknown[0]!r} is not one of "
                    f"{', '.join(self.choices)}"
                )
            value = ",".join(parts)
        elif self.choices and value not in self.choices:
            raise ConfigError(
                f"invalid value {raw!r} for config {self.name}: expected one of {', '.join(self.choices)}"
            )
        if self.minimum is not None and value < self.minimum:
            raise ConfigError(f"invalid value {raw!r} for config {self.name}: below {self.minimum}")
        if self.maximum is not None and value > self.maximum:
            raise ConfigError(f"invalid value {raw!r} for config {self.name}: above {self.maximum}")
        if self.extra_check is not None:
            problem = self.extra_check(value)
            if problem is not None:
                raise ConfigError(f"invalid value {raw!r} for config {self.name}: {problem}")
        return value

    def render(self, value: Any) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)


def _minus_one_or_positive(value: Any) -> str | None:
    return None if value == -1 or value >= 0 else "must be -1 (unlimited) or >= 0"


def _key(
    name: str,
    field: str,
    type_name: str,
    doc: str,
    *,
    minimum: int | float | None = None,
    maximum: int | float | None = None,
    choices: tuple[str, ...] = (),
    extra_check: Callable[[Any], str | None] | None = None,
) -> ConfigKeyInfo:
    default_value = getattr(LogConfig(), field)
    rendered = (
        ("true" if default_value else "false") if isinstance(default_value, bool) else str(default_value)
    )
    return ConfigKeyInfo(name, field, type_name, rendered, doc, minimum, maximum, choices, extra_check)


TOPIC_CONFIG_KEYS: dict[str, ConfigKeyInfo] = {
    info.name: info
    for info in (
        _key(
            "cleanup.policy",
            "cleanup_policy",
            "list",
            "delete: drop old segments by retention; compact: keep the latest record per key; "
            "both (delete,compact); empty: neither, the log keeps everything.",
            choices=CLEANUP_POLICIES,
        ),
        _key(
            "compression.type",
            "compression_type",
            "string",
            "Final compression of the topic's batches; 'producer' keeps what the producer sent.",
            choices=COMPRESSION_TYPES,
        ),
        _key(
            "delete.retention.ms",
            "delete_retention_ms",
            "long",
            "How long tombstones are kept on a compacted topic.",
            minimum=0,
        ),
        _key(
            "file.delete.delay.ms",
            "file_delete_delay_ms",
            "long",
            "Delay before deleting a file (stored; strom deletes at once).",
            minimum=0,
        ),
        _key(
            "flush.messages",
            "flush_messages",
            "long",
            "fsync the log after this many messages.",
            minimum=1,
        ),
        _key(
            "flush.ms", "flush_ms", "long", "fsync the log when a message is this old unflushed.", minimum=0
        ),
        _key(
            "index.interval.bytes",
            "index_interval_bytes",
            "int",
            "Bytes of log between two entries of the sparse offset index.",
            minimum=0,
            maximum=INT_MAX,
        ),
        _key(
            "max.compaction.lag.ms",
            "max_compaction_lag_ms",
            "long",
            "Longest a record stays uncompacted (stored, not acted on).",
            minimum=1,
        ),
        _key(
            "max.message.bytes",
            "max_message_bytes",
            "int",
            "Largest record batch accepted.",
            minimum=0,
            maximum=INT_MAX,
        ),
        _key(
            "message.timestamp.type",
            "message_timestamp_type",
            "string",
            "CreateTime keeps the producer's timestamps; LogAppendTime stamps the broker's time.",
            choices=TIMESTAMP_TYPES,
        ),
        _key(
            "min.cleanable.dirty.ratio",
            "min_cleanable_dirty_ratio",
            "double",
            "Dirty ratio before compaction runs (stored, not acted on).",
            minimum=0.0,
            maximum=1.0,
        ),
        _key(
            "min.compaction.lag.ms",
            "min_compaction_lag_ms",
            "long",
            "Records younger than this are never compacted.",
            minimum=0,
        ),
        _key(
            "min.insync.replicas",
            "min_insync_replicas",
            "int",
            "Replicas that must have a write for acks=all to succeed.",
            minimum=1,
            maximum=INT_MAX,
        ),
        _key("preallocate", "preallocate", "boolean", "Preallocate segment files (stored, not acted on)."),
        _key(
            "retention.bytes",
            "retention_bytes",
            "long",
            "Largest size of a partition before old segments are deleted; -1 = unlimited.",
            extra_check=_minus_one_or_positive,
        ),
        _key(
            "retention.ms",
            "retention_ms",
            "long",
            "How long a segment is kept after its newest record; -1 = unlimited.",
            extra_check=_minus_one_or_positive,
        ),
        _key(
            "segment.bytes",
            "segment_bytes",
            "int",
            "Size at which a new segment file is started.",
            minimum=14,
            maximum=INT_MAX,
        ),
        _key(
            "segment.index.bytes",
            "segment_index_bytes",
            "int",
            "Maximum index size (stored; strom's indexes grow as needed).",
            minimum=4,
            maximum=INT_MAX,
        ),
        _key(
            "segment.jitter.ms",
            "segment_jitter_ms",
            "long",
            "Random jitter on segment.ms (stored, not acted on).",
            minimum=0,
        ),
        _key(
            "segment.ms",
            "segment_ms",
            "long",
            "Time after a segment's first batch at which a new segment is started.",
            minimum=1,
        ),
        _key(
            "unclean.leader.election.enable",
            "unclean_leader_election_enable",
            "boolean",
            "Allow a replica outside the ISR to become leader (stored for the controller).",
        ),
    )
}
