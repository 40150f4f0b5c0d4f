"""What the console asks of a cluster, and the one implementation that asks a real one.

``ClusterSource`` is the whole of the console's view of a cluster: the pages call nothing else, so
unit tests drive them with an in-memory fake and the benchmark with a large one. ``ClientSource``
answers it with strom's own admin client and a consumer, over the Kafka protocol only, so the
console works against any Kafka-compatible cluster. Its methods block (the client is synchronous)
and run in the console's worker threads, never on an event loop.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from strom.client.admin import (
    Admin,
    AlterConfigOperation,
    ClusterDescription,
    ConfigEntry,
    ConfigResource,
    ConfigResourceType,
    GroupDescription,
    GroupListing,
    NewTopic,
    OffsetAndMetadata,
    TopicDescription,
)
from strom.client.cluster import TopicPartition
from strom.client.consumer import Consumer
from strom.client.errors import ClientClosedError
from strom.protocol.group_history import RebalanceEntry

# The message browser's consumer: how long the broker may hold a fetch that found nothing.
BROWSER_FETCH_WAIT_MS = 10

__all__ = [
    "BrowsedRecord",
    "ClientSource",
    "ClusterSource",
    "OffsetRange",
    "ReadRequest",
    "ReadResult",
]


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """A partition's log-start offset and log-end offset (the next offset to be written)."""

    start: int
    end: int


@dataclass(frozen=True, slots=True)
class BrowsedRecord:
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True, slots=True)
class ReadRequest:
    """Read ``partition`` of ``topic`` from ``start_offset``: keep records that ``keep`` accepts
    (all when None), stop at ``records_max`` kept, ``scan_max`` read, the log end, or ``deadline``
    (``time.monotonic()`` seconds)."""

    topic: str
    partition: int
    start_offset: int
    records_max: int
    scan_max: int
    deadline: float
    keep: Callable[[BrowsedRecord], bool] | None = None


@dataclass(frozen=True, slots=True)
class ReadResult:
    records: list[BrowsedRecord]
    scanned: int
    # Where the read stopped: the offset after the last record read.
    next_offset: int
    # Why it stopped: "limit", "end", "scan" (scan_max read) or "time".
    stopped_by: str


class ClusterSource(Protocol):
    """The cluster as the console sees it. Every method may raise ``strom.client.errors.KafkaError``."""

    def cluster(self) -> ClusterDescription: ...

    def topics(self) -> dict[str, TopicDescription]:
        """Every topic, internal ones included."""
        ...

    def topic(self, name: str) -> TopicDescription:
        """One topic (UNKNOWN_TOPIC_OR_PARTITION when there is none)."""
        ...

    def offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, OffsetRange]: ...

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]: ...

    def offset_for_time(self, partition: TopicPartition, timestamp_ms: int) -> int | None:
        """The first offset whose record is at or after ``timestamp_ms`` (None: no such record)."""
        ...

    def sizes(self, topics: Iterable[str] | None) -> dict[TopicPartition, int]:
        """Bytes on disk per partition (summed over replicas), every topic when None."""
        ...

    def topic_configs(self, topic: str) -> dict[str, ConfigEntry]: ...

    def create_topic(
        self, name: str, partitions: int, replication_factor: int, configs: Mapping[str, str]
    ) -> None: ...

    def set_topic_config(self, topic: str, key: str, value: str | None) -> None:
        """Set ``key`` (``value`` None: back to its default), leaving the other keys alone."""
        ...

    def delete_topic(self, name: str) -> None: ...

    def groups(self) -> list[GroupListing]: ...

    def describe_group(self, group_id: str) -> GroupDescription: ...

    def committed(self, group_id: str) -> dict[TopicPartition, OffsetAndMetadata]: ...

    def group_history(self, group_id: str) -> list[RebalanceEntry]:
        """The group's rebalances, oldest first (the last with ``end_ms`` -1 if under way). A
        strom broker only: any other cluster raises ``UnsupportedVersionError``."""
        ...

    def read(self, request: ReadRequest) -> ReadResult: ...

    def close(self) -> None: ...


def _no_more_clients() -> dict[str, Any]:
    raise ClientClosedError("this console session's clients are closed: log in again")


class ClientSource:
    """``ClusterSource`` over strom's admin client and a consumer. The clients are made on first
    use, so a console beside a broker starts before the broker listens. The message browser's
    consumer is one, used by one page at a time (a lock). Every topic's metadata (``topics``, the
    console's snapshot, 10,000 partitions in two Metadata rounds) is asked through an admin
    client of its own: its answers, tens of ms to decode, are not decoded on the event loop
    thread that the pages' own requests wait on."""

    def __init__(self, settings: Callable[[], dict[str, Any]]) -> None:
        self._settings = settings
        self._lock = threading.Lock()
        self._admin: Admin | None = None
        self._metadata_admin: Admin | None = None
        self._consumer: Consumer | None = None
        self._consumer_lock = threading.Lock()
        # Asks for earliest and latest offsets at once (each is a request per leader).
        self._side = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="strom-console-offsets")

    @classmethod
    def for_user(cls, settings: Mapping[str, Any], user: str, password: str) -> ClientSource:
        """A source with ``user``'s own clients (``settings`` plus the user's SASL username and
        password), built now and checked with one request (DescribeCluster, which any
        authenticated principal may send): ``AuthenticationError`` for bad credentials. The
        password is held by the clients' configs only, as they need it to reconnect; the source
        keeps no way to build clients again."""
        user_settings = {**settings, "sasl.username": user, "sasl.password": password}
        source = cls(lambda: user_settings)
        try:
            source.admin.describe_cluster()
            source._metadata()
            with source._consumer_lock:
                source._browser()
        except BaseException:
            source.close()
            raise
        finally:
            source._settings = _no_more_clients
        return source

    @property
    def admin(self) -> Admin:
        with self._lock:
            if self._admin is None:
                self._admin = Admin({**self._settings(), "client.id": "strom-console"})
            return self._admin

    def _metadata(self) -> Admin:
        with self._lock:
            if self._metadata_admin is None:
                self._metadata_admin = Admin({**self._settings(), "client.id": "strom-console-metadata"})
            return self._metadata_admin

    def _browser(self) -> Consumer:
        if self._consumer is None:
            settings = {
                key: value
                for key, value in self._settings().items()
                if key not in {"group.id", "enable.auto.commit"}
            }
            self._consumer = Consumer(
                {
                    **settings,
                    "client.id": "strom-console-browser",
                    "enable.auto.commit": False,
                    # It reads what is there: a fetch that waits for more (500 ms by default) would
                    # hold up the next page's read behind it.
                    "fetch.max.wait.ms": BROWSER_FETCH_WAIT_MS,
                }
            )
        return self._consumer

    def close(self) -> None:
        self._side.shutdown()
        with self._lock:
            admins = [self._admin, self._metadata_admin]
            self._admin = self._metadata_admin = None
        for admin in admins:
            if admin is not None:
                admin.close()
        with self._consumer_lock:
            consumer, self._consumer = self._consumer, None
        if consumer is not None:
            consumer.close()

    def cluster(self) -> ClusterDescription:
        return self.admin.describe_cluster()

    def topics(self) -> dict[str, TopicDescription]:
        return self._metadata().describe_all_topics(include_internal=True)

    def topic(self, name: str) -> TopicDescription:
        return self.admin.describe_topics([name])[name]

    def offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, OffsetRange]:
        wanted = list(partitions)
        if not wanted:
            return {}
        admin = self.admin
        asked = self._side.submit(admin.list_offsets, dict.fromkeys(wanted, "earliest"))
        latest = admin.list_offsets(dict.fromkeys(wanted, "latest"))
        earliest = asked.result()
        ranges: dict[TopicPartition, OffsetRange] = {}
        for tp in wanted:
            start, end = earliest.get(tp), latest.get(tp)
            if start is not None and end is not None:
                ranges[tp] = OffsetRange(start.offset, end.offset)
        return ranges

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        wanted = list(partitions)
        if not wanted:
            return {}
        latest = self.admin.list_offsets(dict.fromkeys(wanted, "latest"))
        return {tp: found.offset for tp, found in latest.items() if found is not None}

    def offset_for_time(self, partition: TopicPartition, timestamp_ms: int) -> int | None:
        found = self.admin.list_offsets({partition: timestamp_ms}).get(partition)
        return None if found is None else found.offset

    def sizes(self, topics: Iterable[str] | None) -> dict[TopicPartition, int]:
        return self.admin.log_dir_sizes(topics)

    def topic_configs(self, topic: str) -> dict[str, ConfigEntry]:
        resource = ConfigResource(ConfigResourceType.TOPIC, topic)
        return self.admin.describe_configs([resource])[resource]

    def create_topic(
        self, name: str, partitions: int, replication_factor: int, configs: Mapping[str, str]
    ) -> None:
        self.admin.create_topics([NewTopic(name, partitions, replication_factor, dict(configs))])

    def set_topic_config(self, topic: str, key: str, value: str | None) -> None:
        operation = AlterConfigOperation.SET if value is not None else AlterConfigOperation.DELETE
        resource = ConfigResource(ConfigResourceType.TOPIC, topic)
        self.admin.incremental_alter_configs({resource: [(key, operation, value)]})

    def delete_topic(self, name: str) -> None:
        self.admin.delete_topics([name])

    def groups(self) -> list[GroupListing]:
        return self.admin.list_groups()

    def describe_group(self, group_id: str) -> GroupDescription:
        return self.admin.describe_groups([group_id])[group_id]

    def committed(self, group_id: str) -> dict[TopicPartition, OffsetAndMetadata]:
        return self.admin.list_group_offsets(group_id)

    def group_history(self, group_id: str) -> list[RebalanceEntry]:
        return self.admin.group_history(group_id)

    def read(self, request: ReadRequest) -> ReadResult:
        partition = TopicPartition(request.topic, request.partition)
        end = self.end_offsets([partition]).get(partition, 0)
        kept: list[BrowsedRecord] = []
        scanned = 0
        position = request.start_offset
        stopped_by = "end"
        with self._consumer_lock:
            consumer = self._browser()
            consumer.assign([partition])
            try:
                consumer.seek(partition, request.start_offset)
                while position < end:
                    if len(kept) >= request.records_max:
                        stopped_by = "limit"
                        break
                    if scanned >= request.scan_max:
                        stopped_by = "scan"
                        break
                    remaining_ms = int((request.deadline - time.monotonic()) * 1000)
                    if remaining_ms <= 0:
                        stopped_by = "time"
                        break
                    batch = consumer.poll(
                        timeout_ms=min(remaining_ms, 500), max_records=request.scan_max - scanned
                    )
                    for record in batch:
                        if record.offset >= end:
                            continue
                        scanned += 1
                        position = record.offset + 1
                        browsed = BrowsedRecord(
                            record.offset, record.timestamp, record.key, record.value, record.headers
                        )
                        if request.keep is None or request.keep(browsed):
                            kept.append(browsed)
                            if len(kept) >= request.records_max:
                                break
                    if not batch:
                        # Records may be missing below the end (compacted away, or control
                        # records of transactions): the consumer's position says how far it got.
                        position = max(position, consumer.position(partition))
            finally:
                consumer.assign([])
        if stopped_by == "end" and len(kept) >= request.records_max and position < end:
            stopped_by = "limit"
        return ReadResult(kept, scanned, position, stopped_by)
