"""All topics and partition logs under one data directory.

Layout of ``<data_dir>``:

* ``<topic>-<partition>/`` — one directory per partition (see ``partition_log``).
* ``__topics/<topic>.json`` — each topic's metadata: ``{"name", "topic_id" (UUID), "partitions",
  "overrides" (Kafka config keys -> values), "internal"}``, written atomically (temporary file,
  fsync, rename) so ids and configs survive restarts. A partition directory without such a file is
  left alone and reported on load.
* ``.strom_clean_shutdown`` — written by ``close()`` and removed by ``load()``. Without it, every
  segment is recovered (validated by CRC) on load, not only the active ones.
"""

from __future__ import annotations

import json
import re
import shutil
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from strom.base import limits
from strom.base.clock import Clock
from strom.storage.config import LogConfig
from strom.storage.errors import (
    InvalidPartitionsError,
    InvalidTopicError,
    StorageError,
    TopicExistsError,
    UnknownTopicError,
)
from strom.storage.files import fsync_directory, write_file_atomically
from strom.storage.partition_log import PartitionLog

TOPICS_DIRECTORY_NAME = "__topics"
CLEAN_SHUTDOWN_FILE_NAME = ".strom_clean_shutdown"

_LEGAL_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")


def validate_topic_name(name: str) -> str | None:
    """Kafka's rules: 1..249 characters of [a-zA-Z0-9._-], not "." or "..". Returns the problem."""
    if not name:
        return "topic name is empty"
    if name in (".", ".."):
        return f"topic name cannot be {name!r}"
    if len(name) > limits.topic_name_chars_max:
        return f"topic name is {len(name)} characters, at most {limits.topic_name_chars_max} allowed"
    if _LEGAL_TOPIC_NAME.fullmatch(name) is None:
        return f"topic name {name!r} has characters other than ASCII letters, digits, '.', '_' and '-'"
    return None


@dataclass(frozen=True)
class TopicMetadata:
    name: str
    topic_id: uuid.UUID
    partitions: int
    overrides: dict[str, str] = field(default_factory=dict)
    config: LogConfig = field(default_factory=LogConfig)
    internal: bool = False


class LogManager:
    def __init__(self, data_dir: Path, default_config: LogConfig, clock: Clock) -> None:
        self.data_dir = data_dir
        self.default_config = default_config
        self.clock = clock
        self._topics: dict[str, TopicMetadata] = {}
        self._topics_by_id: dict[uuid.UUID, TopicMetadata] = {}
        self._logs: dict[tuple[str, int], PartitionLog] = {}

    @property
    def _topics_directory(self) -> Path:
        return self.data_dir / TOPICS_DIRECTORY_NAME

    # ---- loading -----------------------------------------------------------------------------

    def load(self) -> list[str]:
        """Open every topic's partitions, recovering them; returns lines saying what recovery did."""
        # A data directory without the topics directory is new: nothing to recover, nothing crashed.
        fresh = not self._topics_directory.exists()
        self._topics_directory.mkdir(parents=True, exist_ok=True)
        marker = self.data_dir / CLEAN_SHUTDOWN_FILE_NAME
        clean = marker.exists() or fresh
        if marker.exists():
            marker.unlink()
            fsync_directory(self.data_dir)
        messages: list[str] = []
        if not clean:
            messages.append(f"no clean shutdown marker in {self.data_dir}: recovering every segment")
        for path in sorted(self._topics_directory.glob("*.json")):
            try:
                metadata = self._read_topic_file(path)
            except (OSError, ValueError, KeyError, TypeError, StorageError) as error:
                messages.append(f"skipping unreadable topic file {path}: {error}")
                continue
            self._remember(metadata)
            for partition in range(metadata.partitions):
                log = PartitionLog.open(
                    self._partition_directory(metadata.name, partition),
                    metadata.name,
                    partition,
                    metadata.config,
                    recover_all=not clean,
                )
                self._logs[(metadata.name, partition)] = log
                messages.extend(log.recovery_messages)
        for directory in sorted(self.data_dir.iterdir()):
            if directory.name == TOPICS_DIRECTORY_NAME or not directory.is_dir():
                continue
            topic, _, partition_text = directory.name.rpartition("-")
            if partition_text.isdigit() and (topic, int(partition_text)) in self._logs:
                continue
            messages.append(f"ignoring {directory}: no topic metadata for it")
        return messages

    def _read_topic_file(self, path: Path) -> TopicMetadata:
        document = json.loads(path.read_bytes())
        overrides = {str(key): str(value) for key, value in document["overrides"].items()}
        return TopicMetadata(
            name=str(document["name"]),
            topic_id=uuid.UUID(document["topic_id"]),
            partitions=int(document["partitions"]),
            overrides=overrides,
            config=LogConfig.from_properties(overrides, self.default_config),
            internal=bool(document.get("internal", False)),
        )

    def _write_topic_file(self, metadata: TopicMetadata) -> None:
        document = {
            "name": metadata.name,
            "topic_id": str(metadata.topic_id),
            "partitions": metadata.partitions,
            "overrides": metadata.overrides,
            "internal": metadata.internal,
        }
        write_file_atomically(self._topics_directory / f"{metadata.name}.json", json.dumps(document).encode())

    def _remember(self, metadata: TopicMetadata) -> None:
        self._topics[metadata.name] = metadata
        self._topics_by_id[metadata.topic_id] = metadata

    def _partition_directory(self, topic: str, partition: int) -> Path:
        return self.data_dir / f"{topic}-{partition}"

    # ---- topics ------------------------------------------------------------------------------

    def topic_names(self) -> list[str]:
        return sorted(self._topics)

    def topic(self, name: str) -> TopicMetadata | None:
        return self._topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None:
        return self._topics_by_id.get(topic_id)

    def create_topic(
        self,
        name: str,
        partitions: int,
        overrides: Mapping[str, str] | None = None,
        *,
        internal: bool = False,
        validate_only: bool = False,
    ) -> TopicMetadata:
        """Create a topic with ``partitions`` empty partitions; raises InvalidTopicError,
        InvalidPartitionsError, ConfigError or TopicExistsError and then creates nothing."""
        problem = validate_topic_name(name)
        if problem is not None:
            raise InvalidTopicError(problem)
        if name in self._topics:
            raise TopicExistsError(f"topic {name!r} already exists")
        # '.' and '_' collide in metric names, so Kafka refuses topics differing only by them.
        collision_key = name.replace(".", "_")
        for existing in self._topics:
            if existing.replace(".", "_") == collision_key:
                raise InvalidTopicError(f"topic {name!r} collides with existing topic {existing!r}")
        self._check_partition_count(partitions)
        override_map = dict(overrides or {})
        config = LogConfig.from_properties(override_map, self.default_config)
        metadata = TopicMetadata(name, uuid.uuid4(), partitions, override_map, config, internal)
        if validate_only:
            return metadata
        self._write_topic_file(metadata)
        self._remember(metadata)
        for partition in range(partitions):
            self._open_new_log(metadata, partition)
        return metadata

    @staticmethod
    def _check_partition_count(partitions: int) -> None:
        if not 1 <= partitions <= limits.partitions_per_topic_max:
            raise InvalidPartitionsError(
                f"partition count {partitions} is outside 1..{limits.partitions_per_topic_max}"
            )

    def _open_new_log(self, metadata: TopicMetadata, partition: int) -> None:
        directory = self._partition_directory(metadata.name, partition)
        if directory.exists():
            # Left over from a topic of the same name deleted while files were held open.
            shutil.rmtree(directory)
        self._logs[(metadata.name, partition)] = PartitionLog.open(
            directory, metadata.name, partition, metadata.config
        )

    def delete_topic(self, name: str) -> None:
        """Forget the topic and remove its files (the metadata file first, so a crash half-way
        leaves only ignorable partition directories)."""
        metadata = self._topics.pop(name, None)
        if metadata is None:
            raise UnknownTopicError(f"topic {name!r} does not exist")
        del self._topics_by_id[metadata.topic_id]
        (self._topics_directory / f"{name}.json").unlink()
        fsync_directory(self._topics_directory)
        for partition in range(metadata.partitions):
            log = self._logs.pop((name, partition), None)
            if log is not None:
                log.close()
            shutil.rmtree(self._partition_directory(name, partition), ignore_errors=True)

    def create_partitions(self, name: str, total: int) -> None:
        metadata = self._topics.get(name)
        if metadata is None:
            raise UnknownTopicError(f"topic {name!r} does not exist")
        self._check_partition_count(total)
        if total <= metadata.partitions:
            raise InvalidPartitionsError(
                f"topic {name!r} has {metadata.partitions} partitions; the new count must be larger, not {total}"
            )
        updated = replace(metadata, partitions=total)
        self._write_topic_file(updated)
        self._remember(updated)
        for partition in range(metadata.partitions, total):
            self._open_new_log(updated, partition)

    def alter_topic_config(self, name: str, overrides: Mapping[str, str]) -> None:
        """Replace the topic's overrides (validated first), persist them and apply them."""
        metadata = self._topics.get(name)
        if metadata is None:
            raise UnknownTopicError(f"topic {name!r} does not exist")
        override_map = dict(overrides)
        config = LogConfig.from_properties(override_map, self.default_config)
        updated = replace(metadata, overrides=override_map, config=config)
        self._write_topic_file(updated)
        self._remember(updated)
        for partition in range(updated.partitions):
            log = self._logs.get((name, partition))
            if log is not None:
                log.reconfigure(config)

    def set_default_config(self, default_config: LogConfig) -> list[str]:
        """Make ``default_config`` what every topic starts from (dynamic broker configs): each
        topic's config is derived again from its overrides and applied to its logs at once.
        Nothing is written (topic files keep only overrides). Returns the topics whose config
        changed."""
        updated = {
            name: replace(metadata, config=LogConfig.from_properties(metadata.overrides, default_config))
            for name, metadata in self._topics.items()
        }
        self.default_config = default_config
        changed = []
        for name, metadata in updated.items():
            if metadata.config == self._topics[name].config:
                continue
            changed.append(name)
            self._remember(metadata)
            for partition in range(metadata.partitions):
                log = self._logs.get((name, partition))
                if log is not None:
                    log.reconfigure(metadata.config)
        return changed

    # ---- logs --------------------------------------------------------------------------------

    def log(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def logs(self) -> Iterable[PartitionLog]:
        return list(self._logs.values())

    def run_housekeeping(self, now_ms: int) -> list[str]:
        """Retention and compaction over every log; returns a line per log that changed."""
        events: list[str] = []
        for log in list(self._logs.values()):
            name = f"{log.topic}-{log.partition}"
            freed = log.apply_retention(now_ms)
            if freed:
                events.append(
                    f"retention on {name}: deleted {freed} bytes, log start offset now {log.log_start_offset}"
                )
            compacted = log.compact(now_ms)
            if compacted:
                events.append(f"compacted {name}: freed {compacted} bytes")
        return events

    def logs_needing_flush(self, now_ms: int) -> list[PartitionLog]:
        return [log for log in self._logs.values() if log.needs_flush(now_ms)]

    def close(self) -> None:
        """Close every log and leave the clean shutdown marker."""
        for log in self._logs.values():
            log.close()
        self._logs.clear()
        if self.data_dir.exists():
            write_file_atomically(self.data_dir / CLEAN_SHUTDOWN_FILE_NAME, b"")
