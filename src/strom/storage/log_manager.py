"""All topics and partition logs under one data directory.

Layout of ``<data_dir>``:

* ``<topic>-<partition>/`` — one directory per partition (see ``partition_log``).
* ``__topics/<topic>.json`` — each topic's metadata: ``{"name", "topic_id" (UUID), "partitions",
  "overrides" (Kafka config keys -> values), "internal"}``, written atomically (temporary file,
  fsync, rename) so ids and configs survive restarts. A broker in a cluster holds only the
  partitions it is a replica of: its topic files add ``"hosted"`` (their indexes), and the topic
  id is the one in ZooKeeper (``host_partitions``, ``begin_remove_partitions``).
* ``.strom_clean_shutdown`` — written by ``close()`` and removed by ``load()``. Without it, every
  segment is recovered (validated by CRC) on load, not only the active ones.
* ``*.deleted`` — partition directories of deleted topics, waiting for a worker to remove them.

**The topic file is the commit point.** Creating a topic (or partitions) makes the partition
directories first, fsyncs the data directory, then writes the topic file; deleting removes the
topic file first (fsynced), then renames the directories away. So whatever a crash interrupts, a
topic file never names a partition directory that is missing, and a partition directory that no
topic file claims (``<name>-<n>`` with no topic ``<name>``, or ``n`` beyond its partition count) is
the leftover of an interrupted create or delete: ``load`` sends it to the trash.

**Phases, for the broker's threads.** Admin operations come in three steps so that the event loop
(the one owner of the maps here) never does file-system work: ``begin_*`` checks and reserves on the
loop (cheap; a refusal raises and changes nothing), ``build_*``/``remove_*`` does the file work in a
worker thread and touches no shared state, and ``install_*``/``abandon`` swaps the finished state in
on the loop. The plain methods (``create_topic``, ``delete_topic``, ...) run the three steps in a row
for callers without threads (tests, small internal topics).

**File descriptors.** Every segment file of every log is opened through one ``OpenFileCache`` whose
capacity comes from the ``FileBudget``; the budget also bounds the partitions a create may add.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import resource
import shutil
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from strom.base import limits
from strom.base.clock import Clock
from strom.storage.budget import FileBudget
from strom.storage.config import LogConfig
from strom.storage.errors import (
    InvalidPartitionsError,
    InvalidTopicError,
    LogFileError,
    PartitionBudgetError,
    StorageError,
    TopicExistsError,
    UnknownTopicError,
)
from strom.storage.files import DELETED_SUFFIX, Trash, empty_trash, fsync_directory, write_file_atomically
from strom.storage.open_files import OpenFileCache
from strom.storage.partition_log import PartitionLog

TOPICS_DIRECTORY_NAME = "__topics"
CLEAN_SHUTDOWN_FILE_NAME = ".strom_clean_shutdown"

_LEGAL_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")

log = logging.getLogger("strom.storage")


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
    # The partitions with a log here: None for all of 0..partitions-1 (a single node); a broker in
    # a cluster holds those it is a replica of.
    hosted: frozenset[int] | None = None

    def partition_indexes(self) -> list[int]:
        """The partitions with a log on this broker, in order."""
        return sorted(self.hosted) if self.hosted is not None else list(range(self.partitions))

    @property
    def hosted_count(self) -> int:
        return len(self.hosted) if self.hosted is not None else self.partitions


@dataclass(frozen=True)
class PendingCreate:
    """A create reserved on the loop: the topic as it will be, and the partitions it adds
    (``new_partitions``; ``new_topic`` when the topic did not exist)."""

    metadata: TopicMetadata
    new_partitions: tuple[int, ...]
    new_topic: bool


@dataclass(frozen=True)
class BuiltCreate:
    """A create whose files are committed, with the new partitions' logs, ready to install."""

    pending: PendingCreate
    logs: list[PartitionLog]


@dataclass(frozen=True)
class DetachedTopic:
    """A topic (or some of its partitions) taken out of the maps, whose files are still to be
    removed. ``remaining``: the topic as it stays when only some partitions go (None: it is gone)."""

    metadata: TopicMetadata
    logs: list[PartitionLog]
    partitions: tuple[int, ...] = ()
    remaining: TopicMetadata | None = None


def current_open_files_limit() -> int:
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


class LogManager:
    def __init__(
        self,
        data_dir: Path,
        default_config: LogConfig,
        clock: Clock,
        budget: FileBudget | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.default_config = default_config
        self.clock = clock
        self.budget = budget or FileBudget.from_open_files_limit(current_open_files_limit())
        self.files = OpenFileCache(self.budget.segment_files_max)
        self.trash = Trash()
        self._topics: dict[str, TopicMetadata] = {}
        self._topics_by_id: dict[uuid.UUID, TopicMetadata] = {}
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        # Names with a create in progress, and the partitions reserved by creates in progress.
        self._pending_names: set[str] = set()
        self._partitions_reserved = 0
        self._partitions_held = 0

    @property
    def _topics_directory(self) -> Path:
        return self.data_dir / TOPICS_DIRECTORY_NAME

    @property
    def partitions_held(self) -> int:
        """Partitions of every topic, plus those reserved by creates in progress."""
        return self._partitions_held + self._partitions_reserved

    # ---- loading -----------------------------------------------------------------------------

    def load(self) -> list[str]:
        """Open every topic's partitions, recovering them; returns lines saying what recovery did.

        Leftovers of deletes (``.deleted``) and partition directories no topic claims go to the
        trash (``trash.take()`` then ``empty_trash``). Loading never needs more descriptors than the
        file cache holds, so a broker always starts on its own data, whatever the partition count.
        """
        metadata_existed = self._topics_directory.is_dir()
        # A data directory without the topics directory is new: nothing to recover, nothing crashed.
        fresh = not metadata_existed
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
            self._partitions_held += metadata.hosted_count
            for partition in metadata.partition_indexes():
                directory = self._partition_directory(metadata.name, partition)
                if not directory.is_dir():
                    messages.append(f"{directory} is missing: {metadata.name}-{partition} starts empty")
                partition_log = PartitionLog.open(
                    directory,
                    metadata.name,
                    partition,
                    metadata.config,
                    recover_all=not clean,
                    files=self.files,
                    trash=self.trash,
                )
                self._logs[(metadata.name, partition)] = partition_log
                messages.extend(partition_log.recovery_messages)
        messages.extend(self._collect_leftovers(sweep_orphans=metadata_existed))
        if self._partitions_held > self.budget.partitions_max:
            messages.append(
                f"{self._partitions_held} partitions exceed this broker's budget of "
                f"{self.budget.partitions_max} ({self.budget.describe()}): all are served, "
                "creating more is refused; raise the open files limit (ulimit -n)"
            )
        return messages

    def _collect_leftovers(self, *, sweep_orphans: bool) -> list[str]:
        messages: list[str] = []
        leftovers: list[Path] = []
        for entry in sorted(self.data_dir.iterdir()):
            if entry.name.endswith(DELETED_SUFFIX):
                leftovers.append(entry)
                continue
            if entry.name == TOPICS_DIRECTORY_NAME or not entry.is_dir():
                continue
            topic, _, partition_text = entry.name.rpartition("-")
            if not partition_text.isdigit() or validate_topic_name(topic) is not None:
                continue
            if (topic, int(partition_text)) in self._logs:
                continue
            if not sweep_orphans:
                messages.append(
                    f"ignoring {entry}: no topic metadata for it ({self._topics_directory} was missing)"
                )
                continue
            target = self._trash_name(entry)
            entry.rename(target)
            leftovers.append(target)
            messages.append(f"removing {entry}: no topic claims it (left by an interrupted create or delete)")
        if leftovers:
            fsync_directory(self.data_dir)
            self.trash.add(leftovers)
        return messages

    @staticmethod
    def _trash_name(directory: Path) -> Path:
        return directory.with_name(f"{directory.name}.{uuid.uuid4().hex[:12]}{DELETED_SUFFIX}")

    def _read_topic_file(self, path: Path) -> TopicMetadata:
        document = json.loads(path.read_bytes())
        overrides = {str(key): str(value) for key, value in document["overrides"].items()}
        hosted = document.get("hosted")
        return TopicMetadata(
            name=str(document["name"]),
            topic_id=uuid.UUID(document["topic_id"]),
            partitions=int(document["partitions"]),
            overrides=overrides,
            config=LogConfig.from_properties(overrides, self.default_config),
            internal=bool(document.get("internal", False)),
            hosted=frozenset(int(index) for index in hosted) if hosted is not None else None,
        )

    def write_topic_file(self, metadata: TopicMetadata) -> None:
        """Write (atomically, durably) the topic's file: a worker thread's job."""
        document = {
            "name": metadata.name,
            "topic_id": str(metadata.topic_id),
            "partitions": metadata.partitions,
            "overrides": metadata.overrides,
            "internal": metadata.internal,
        }
        if metadata.hosted is not None:
            document["hosted"] = sorted(metadata.hosted)
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

    def is_being_created(self, name: str) -> bool:
        return name in self._pending_names

    # ---- creating topics ------------------------------------------------------------------------

    def check_create_topic(
        self,
        name: str,
        partitions: int,
        overrides: Mapping[str, str] | None = None,
        *,
        internal: bool = False,
        topic_id: uuid.UUID | None = None,
    ) -> TopicMetadata:
        """The topic a create would make, or InvalidTopicError, InvalidPartitionsError,
        ConfigError, TopicExistsError or PartitionBudgetError (CreateTopics with validate_only)."""
        problem = validate_topic_name(name)
        if problem is not None:
            raise InvalidTopicError(problem)
        if name in self._topics or name in self._pending_names:
            raise TopicExistsError(f"topic {name!r} already exists")
        # '.' and '_' collide in metric names, so Kafka refuses topics differing only by them.
        collision_key = name.replace(".", "_")
        for existing in [*self._topics, *self._pending_names]:
            if existing.replace(".", "_") == collision_key:
                raise InvalidTopicError(f"topic {name!r} collides with existing topic {existing!r}")
        self._check_partition_count(partitions)
        if not internal:
            self._check_budget(partitions)
        override_map = dict(overrides or {})
        config = LogConfig.from_properties(override_map, self.default_config)
        return TopicMetadata(name, topic_id or uuid.uuid4(), partitions, override_map, config, internal)

    def begin_create_topic(
        self,
        name: str,
        partitions: int,
        overrides: Mapping[str, str] | None = None,
        *,
        internal: bool = False,
    ) -> PendingCreate:
        """Check the create and reserve its name and partitions (loop thread)."""
        metadata = self.check_create_topic(name, partitions, overrides, internal=internal)
        self._pending_names.add(name)
        self._partitions_reserved += partitions
        return PendingCreate(metadata, tuple(range(partitions)), new_topic=True)

    def build_create(self, pending: PendingCreate) -> BuiltCreate:
        """Make the new partitions' directories, then commit the topic file (worker thread).

        On failure everything made is removed again and LogFileError raised."""
        metadata = pending.metadata
        made: list[Path] = []
        try:
            for partition in pending.new_partitions:
                directory = self._partition_directory(metadata.name, partition)
                if directory.exists():
                    # Left over from an older topic of that name; it is not part of any topic now.
                    shutil.rmtree(directory)
                directory.mkdir()
                made.append(directory)
            fsync_directory(self.data_dir)
            self.write_topic_file(metadata)
        except OSError as error:
            # rmdir, not rmtree: the directories are empty, and rmtree needs descriptors, which
            # may be what ran out. Any left (on a failing disk) no topic claims: load removes them.
            for directory in made:
                with contextlib.suppress(OSError):
                    directory.rmdir()
            raise LogFileError(f"cannot create the files of topic {metadata.name!r}: {error}") from error
        logs = [
            PartitionLog.new(
                self._partition_directory(metadata.name, partition),
                metadata.name,
                partition,
                metadata.config,
                files=self.files,
                trash=self.trash,
            )
            for partition in pending.new_partitions
        ]
        return BuiltCreate(pending, logs)

    def install_create(self, built: BuiltCreate) -> TopicMetadata:
        """Make a built create visible (loop thread)."""
        pending = built.pending
        metadata = pending.metadata
        self._release(pending)
        self._remember(metadata)
        self._partitions_held += len(pending.new_partitions)
        for partition_log in built.logs:
            self._logs[(metadata.name, partition_log.partition)] = partition_log
        return metadata

    def abandon_create(self, pending: PendingCreate) -> None:
        """Give back what ``begin_*`` reserved for a create that failed (loop thread)."""
        self._release(pending)

    def _release(self, pending: PendingCreate) -> None:
        if pending.new_topic:
            self._pending_names.discard(pending.metadata.name)
        self._partitions_reserved -= len(pending.new_partitions)

    def create_topic(
        self,
        name: str,
        partitions: int,
        overrides: Mapping[str, str] | None = None,
        *,
        internal: bool = False,
        validate_only: bool = False,
    ) -> TopicMetadata:
        """Create a topic with ``partitions`` empty partitions in this thread; raises
        InvalidTopicError, InvalidPartitionsError, ConfigError, TopicExistsError,
        PartitionBudgetError or LogFileError and then creates nothing."""
        if validate_only:
            return self.check_create_topic(name, partitions, overrides, internal=internal)
        pending = self.begin_create_topic(name, partitions, overrides, internal=internal)
        try:
            built = self.build_create(pending)
        except BaseException:
            self.abandon_create(pending)
            raise
        return self.install_create(built)

    @staticmethod
    def _check_partition_count(partitions: int) -> None:
        if not 1 <= partitions <= limits.partitions_per_topic_max:
            raise InvalidPartitionsError(
                f"partition count {partitions} is outside 1..{limits.partitions_per_topic_max}"
            )

    def _check_budget(self, added: int) -> None:
        held = self.partitions_held
        if held + added > self.budget.partitions_max:
            raise PartitionBudgetError(
                f"this broker holds {held} partitions and accepts at most {self.budget.partitions_max} "
                f"({self.budget.describe()}); {added} more cannot be served. Delete topics or raise "
                "the broker's open files limit (ulimit -n)"
            )

    # ---- creating partitions --------------------------------------------------------------------

    def begin_create_partitions(self, name: str, total: int) -> PendingCreate:
        """Check that ``name`` may grow to ``total`` partitions and reserve them (loop thread)."""
        metadata = self._topics.get(name)
        if metadata is None:
            raise UnknownTopicError(f"topic {name!r} does not exist")
        self._check_partition_count(total)
        if total <= metadata.partitions:
            raise InvalidPartitionsError(
                f"topic {name!r} has {metadata.partitions} partitions; the new count must be larger, not {total}"
            )
        self._check_budget(total - metadata.partitions)
        self._partitions_reserved += total - metadata.partitions
        return PendingCreate(
            replace(metadata, partitions=total), tuple(range(metadata.partitions, total)), new_topic=False
        )

    def create_partitions(self, name: str, total: int) -> None:
        pending = self.begin_create_partitions(name, total)
        try:
            built = self.build_create(pending)
        except BaseException:
            self.abandon_create(pending)
            raise
        self.install_create(built)

    # ---- deleting topics ------------------------------------------------------------------------

    def detach_topic(self, name: str) -> DetachedTopic:
        """Forget the topic and stop using its logs (loop thread: only the maps change, a few
        microseconds a partition); its files stay until ``remove_topic_files``."""
        metadata = self._topics.pop(name, None)
        if metadata is None:
            raise UnknownTopicError(f"topic {name!r} does not exist")
        del self._topics_by_id[metadata.topic_id]
        self._partitions_held -= metadata.hosted_count
        partitions = tuple(metadata.partition_indexes())
        logs: list[PartitionLog] = []
        for partition in partitions:
            partition_log = self._logs.pop((name, partition), None)
            if partition_log is not None:
                partition_log.stop()
                logs.append(partition_log)
        return DetachedTopic(metadata, logs, partitions)

    def remove_topic_files(self, detached: DetachedTopic) -> list[Path]:
        """Close the logs' files, remove the topic file (the commit point of the delete, fsynced),
        then rename the partition directories to ``.deleted`` names (worker thread). Returns the
        renamed directories for ``empty_trash``."""
        for partition_log in detached.logs:
            partition_log.detach()
        name = detached.metadata.name
        path = self._topics_directory / f"{name}.json"
        try:
            if detached.remaining is not None:
                self.write_topic_file(detached.remaining)
            else:
                path.unlink(missing_ok=True)
        except OSError as error:
            raise LogFileError(f"cannot delete the topic file of {name!r}: {error}") from error
        # From here on the delete has happened; what fails now (fsyncs need descriptors, which may
        # be what ran out) is logged, and the next load finishes the job.
        _fsync_or_warn(self._topics_directory)
        renamed: list[Path] = []
        for partition in detached.partitions:
            directory = self._partition_directory(name, partition)
            target = self._trash_name(directory)
            try:
                directory.rename(target)
            except FileNotFoundError:
                continue
            except OSError as error:
                log.warning("cannot rename %s away (%s); it is removed on the next start", directory, error)
                continue
            renamed.append(target)
        _fsync_or_warn(self.data_dir)
        return renamed

    def delete_topic(self, name: str) -> None:
        """Forget the topic and remove its files, all in this thread."""
        detached = self.detach_topic(name)
        empty_trash(self.remove_topic_files(detached))

    # ---- a broker in a cluster ---------------------------------------------------------------

    def begin_host_partitions(
        self,
        name: str,
        topic_id: uuid.UUID,
        partitions: Iterable[int],
        overrides: Mapping[str, str] | None = None,
        *,
        internal: bool = False,
    ) -> PendingCreate | None:
        """Reserve the logs of ``partitions`` of the topic the controller placed on this broker
        (loop thread); None if all of them are here already. The topic id is ZooKeeper's; a topic
        known here under another id (deleted and created again) raises TopicExistsError: the
        caller removes the old one first. Never refused for the budget: the controller decided."""
        wanted = frozenset(partitions)
        assert wanted and min(wanted) >= 0, wanted
        current = self._topics.get(name)
        if current is not None and current.topic_id != topic_id:
            raise TopicExistsError(f"topic {name!r} is here under id {current.topic_id}, not {topic_id}")
        if name in self._pending_names:
            raise TopicExistsError(f"topic {name!r} is being created")
        if current is None:
            problem = validate_topic_name(name)
            if problem is not None:
                raise InvalidTopicError(problem)
            override_map = dict(overrides or {})
            config = LogConfig.from_properties(override_map, self.default_config)
            metadata = TopicMetadata(
                name, topic_id, max(wanted) + 1, override_map, config, internal, hosted=wanted
            )
            new = tuple(sorted(wanted))
            self._pending_names.add(name)
        else:
            hosted = frozenset(current.partition_indexes())
            new = tuple(sorted(wanted - hosted))
            if not new:
                return None
            metadata = replace(
                current, partitions=max(current.partitions, max(new) + 1), hosted=hosted | wanted
            )
        self._partitions_reserved += len(new)
        return PendingCreate(metadata, new, new_topic=current is None)

    def begin_remove_partitions(self, name: str, partitions: Iterable[int]) -> DetachedTopic | None:
        """Take the logs of ``partitions`` out of the maps (loop thread; StopReplica with delete);
        the topic goes when none is left. None if none of them is here."""
        metadata = self._topics.get(name)
        if metadata is None:
            return None
        hosted = frozenset(metadata.partition_indexes())
        going = tuple(sorted(hosted & frozenset(partitions)))
        if not going:
            return None
        if going == tuple(sorted(hosted)):
            return self.detach_topic(name)
        remaining = replace(metadata, hosted=hosted - frozenset(going))
        self._remember(remaining)
        self._partitions_held -= len(going)
        logs: list[PartitionLog] = []
        for partition in going:
            partition_log = self._logs.pop((name, partition), None)
            if partition_log is not None:
                partition_log.stop()
                logs.append(partition_log)
        return DetachedTopic(metadata, logs, going, remaining)

    def hosted_partitions(self) -> list[tuple[str, int, uuid.UUID]]:
        """(topic, partition, topic id) of every partition log here."""
        return [
            (metadata.name, partition, metadata.topic_id)
            for metadata in self._topics.values()
            for partition in metadata.partition_indexes()
        ]

    # ---- configs --------------------------------------------------------------------------------

    def prepare_topic_config(self, name: str, overrides: Mapping[str, str]) -> TopicMetadata:
        """The topic with ``overrides`` replacing its own (validated; ConfigError, UnknownTopicError)."""
        metadata = self._topics.get(name)
        if metadata is None:
            raise UnknownTopicError(f"topic {name!r} does not exist")
        override_map = dict(overrides)
        config = LogConfig.from_properties(override_map, self.default_config)
        return replace(metadata, overrides=override_map, config=config)

    def apply_topic_config(self, updated: TopicMetadata) -> None:
        """Make a config whose topic file is written take effect (loop thread); a topic deleted or
        recreated meanwhile is left alone."""
        current = self._topics.get(updated.name)
        if current is None or current.topic_id != updated.topic_id:
            return
        updated = replace(updated, partitions=current.partitions, hosted=current.hosted)
        self._remember(updated)
        for partition in updated.partition_indexes():
            partition_log = self._logs.get((updated.name, partition))
            if partition_log is not None:
                partition_log.reconfigure(updated.config)

    def alter_topic_config(self, name: str, overrides: Mapping[str, str]) -> None:
        """Replace the topic's overrides (validated first), persist them and apply them."""
        updated = self.prepare_topic_config(name, overrides)
        self.write_topic_file(updated)
        self.apply_topic_config(updated)

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
            for partition in metadata.partition_indexes():
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
        """Retention and compaction over every log, all in this thread; returns a line per log that
        changed. (The broker runs the same steps with compaction in a worker thread.)"""
        events: list[str] = []
        for partition_log in list(self._logs.values()):
            events.extend(apply_retention(partition_log, now_ms))
            compacted = partition_log.compact(now_ms)
            if compacted:
                events.append(
                    f"compacted {partition_log.topic}-{partition_log.partition}: freed {compacted} bytes"
                )
        empty_trash(self.trash.take())
        return events

    def logs_needing_flush(self, now_ms: int) -> list[PartitionLog]:
        return [
            partition_log
            for partition_log in self._logs.values()
            if partition_log.needs_flush(now_ms) or partition_log.has_pending_files
        ]

    def close(self) -> None:
        """Close every log, make everything durable with one sync of the file system (thousands
        of partitions would otherwise cost several fsyncs each), and leave the clean shutdown
        marker."""
        for partition_log in self._logs.values():
            partition_log.close(sync=False)
        os.sync()
        self._logs.clear()
        self.files.close_all()
        empty_trash(self.trash.take())
        if self.data_dir.exists():
            write_file_atomically(self.data_dir / CLEAN_SHUTDOWN_FILE_NAME, b"")


def _fsync_or_warn(directory: Path) -> None:
    try:
        fsync_directory(directory)
    except OSError as error:
        log.warning("cannot fsync %s: %s", directory, error)


def apply_retention(partition_log: PartitionLog, now_ms: int) -> list[str]:
    """Retention on one log (loop thread: it only renames files); a line if it changed anything."""
    freed = partition_log.apply_retention(now_ms)
    if not freed:
        return []
    return [
        f"retention on {partition_log.topic}-{partition_log.partition}: deleted {freed} bytes, "
        f"log start offset now {partition_log.log_start_offset}"
    ]
