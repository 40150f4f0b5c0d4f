"""Exactly-once writes (``exactlyOnce=true``): a task's rows in one transaction, with a marker.

Each Spark task writes its rows of batch N (a micro-batch, or a batch write's ``exactlyOnce.batch``)
with a transactional producer whose id is derived from the write's identity and the task's
partition, so every attempt of that task, in this run or after a restart, has the same id. In the
same transaction it commits a *marker* — the offset N + 1 of its own consumer group (named as the
transactional id), with the number of records and a digest of them as metadata — so the rows and
the marker are committed together or not at all. A task:

1. takes its first row (a task without rows writes nothing and needs no marker);
2. ``init_transactions()``: every earlier attempt of the same task is fenced from now on, and the
   transaction it left open is aborted, so no other attempt can commit after the next step;
3. reads its marker (a stable read: ``require_stable``) and decides (``decide``): not written yet
   -> write; batch N already written -> skip (read its rows only to compare them with the marker's
   count and digest); a later batch written -> refuse (the checkpoint is behind the sink);
4. writes: begin, send every row, send the marker as the transaction's offsets, commit.

An attempt fenced while it writes (a speculative copy or a retry took over) waits, up to the
transaction timeout, for the marker of its batch to appear: when it does, the batch is written and
the attempt succeeds without writing; otherwise it fails as fenced.

Pure apart from the ``SinkClients`` it is given: the unit tests drive it with fakes.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from enum import Enum
from typing import Any, NamedTuple, Protocol

from strom.client.cluster import TopicPartition
from strom.client.errors import ProducerFencedError
from strom.client.group_metadata import OffsetAndMetadata

__all__ = [
    "BATCH_ID_PROPERTY",
    "QUERY_ID_PROPERTY",
    "Decision",
    "ExactlyOnceError",
    "Marker",
    "OutgoingRecord",
    "RecordDigest",
    "SinkClients",
    "TaskIdentity",
    "TaskOutcome",
    "decide",
    "stream_task_identity",
    "summarize",
    "transactional_id",
    "write_exactly_once",
]

log = logging.getLogger(__name__)

# Local properties Spark's micro-batch execution sets on the jobs of a streaming query; its tasks
# read them through TaskContext. The query id is written in the checkpoint's ``metadata`` file when
# the query first starts and read back at every restart: the stream's stable identity.
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"

TRANSACTIONAL_ID_PREFIX = "strom-spark-"
MARKER_FORMAT_VERSION = 1
# How often a fenced attempt looks for the marker of the attempt that fenced it.
FENCED_POLL_INTERVAL_S = 0.2
_DIGEST_MODULUS = 1 << 128


class ExactlyOnceError(RuntimeError):
    """The sink cannot write this batch exactly once; the message says why and what to do."""


class OutgoingRecord(NamedTuple):
    """One row as the producer sends it."""

    topic: str
    value: bytes | str | None
    key: bytes | str | None
    partition: int | None
    headers: list[tuple[str, bytes | None]] | None


@dataclass(frozen=True)
class TaskIdentity:
    """Which write, which batch of it, which task (Spark partition)."""

    sink_id: str
    batch: int
    partition: int

    @property
    def transactional_id(self) -> str:
        return transactional_id(self.sink_id, self.partition)

    def __str__(self) -> str:
        return f"{self.sink_id} batch {self.batch} partition {self.partition}"


def transactional_id(sink_id: str, partition: int) -> str:
    """The transactional id of task ``partition`` of a write; its marker's consumer group has the
    same name."""
    return f"{TRANSACTIONAL_ID_PREFIX}{sink_id}-{partition}"


def stream_task_identity(local_properties: Mapping[str, str | None], partition: int) -> TaskIdentity:
    """A streaming task's identity from its TaskContext's local properties."""
    query_id = local_properties.get(QUERY_ID_PROPERTY)
    batch = local_properties.get(BATCH_ID_PROPERTY)
    if not query_id or batch is None:
        raise ExactlyOnceError(
            "format('strom') exactlyOnce: this task does not carry Spark's streaming query id and "
            f"batch id ({QUERY_ID_PROPERTY}, {BATCH_ID_PROPERTY}); only micro-batch queries are supported"
        )
    try:
        batch_id = int(batch)
    except ValueError:
        raise ExactlyOnceError(
            f"format('strom') exactlyOnce: Spark's batch id {batch!r} is not a number"
        ) from None
    return TaskIdentity(query_id, batch_id, partition)


# -- the marker ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Marker:
    """ "Batch ``batch`` of this task is written": its committed offset is ``batch + 1`` (the next
    batch to write, as a consumer's offset is the next record to read); its metadata holds the
    records' count and digest, to tell a replay that differs from what was written."""

    batch: int
    records: int | None = None
    digest: str | None = None

    def to_offset(self) -> OffsetAndMetadata:
        metadata = {
            "v": MARKER_FORMAT_VERSION,
            "batch": self.batch,
            "records": self.records,
            "digest": self.digest,
        }
        return OffsetAndMetadata(self.batch + 1, json.dumps(metadata, separators=(",", ":")))

    @classmethod
    def from_offset(cls, committed: OffsetAndMetadata) -> Marker:
        """Metadata that is not ours (written by hand, say) leaves count and digest unknown."""
        batch = committed.offset - 1
        try:
            metadata = json.loads(committed.metadata or "")
        except ValueError:
            return cls(batch)
        if not isinstance(metadata, dict) or metadata.get("batch") != batch:
            return cls(batch)
        records = metadata.get("records")
        digest = metadata.get("digest")
        return cls(
            batch,
            records if isinstance(records, int) and not isinstance(records, bool) else None,
            digest if isinstance(digest, str) else None,
        )


class Decision(Enum):
    WRITE = "write"
    SKIP = "skip"


def decide(marker: Marker | None, task: TaskIdentity) -> Decision:
    """What a task does once it holds its transactional id, given its committed marker."""
    if marker is None or marker.batch < task.batch:
        return Decision.WRITE
    if marker.batch == task.batch:
        return Decision.SKIP
    raise ExactlyOnceError(
        f"format('strom') exactlyOnce: {task}: batch {marker.batch} of this task is already written "
        f"(the marker of {task.transactional_id}), so batch {task.batch} cannot come now. The checkpoint "
        "is behind the sink (restored from an older copy?), or another write uses the same identity. "
        "Writing would duplicate records and skipping could lose some: refused"
    )


class RecordDigest:
    """Count and digest of records, independent of their order (a shuffle may hand a replayed task
    the same rows in another order): the sum of each record's 128-bit BLAKE2b, modulo 2**128."""

    def __init__(self) -> None:
        self.records = 0
        self._sum = 0

    def add(self, record: OutgoingRecord) -> None:
        self.records += 1
        hashed = hashlib.blake2b(_canonical(record), digest_size=16).digest()
        self._sum = (self._sum + int.from_bytes(hashed, "big")) % _DIGEST_MODULUS

    def hexdigest(self) -> str:
        return f"{self._sum:032x}"


def _field(value: bytes | str | None) -> bytes:
    if value is None:
        return b"\xff\xff\xff\xff"
    data = value.encode("utf-8") if isinstance(value, str) else bytes(value)
    return len(data).to_bytes(4, "big") + data


def _canonical(record: OutgoingRecord) -> bytes:
    # Length-prefixed fields, so no two different records share an encoding.
    parts = [
        _field(record.topic),
        _field(None if record.partition is None else str(record.partition)),
        _field(record.key),
        _field(record.value),
    ]
    for name, value in record.headers or ():
        parts.append(_field(name))
        parts.append(_field(value))
    return b"".join(parts)


# -- the task -------------------------------------------------------------------------------------


class TransactionalProducer(Protocol):
    """The part of ``strom.client.Producer`` a task uses."""

    def init_transactions(self, timeout: float | None = None) -> None: ...
    def begin_transaction(self) -> None: ...
    def send(
        self,
        topic: str,
        value: bytes | str | None = None,
        key: bytes | str | None = None,
        headers: list[tuple[str, bytes | None]] | None = None,
        partition: int | None = None,
    ) -> Future[Any]: ...
    def send_offsets_to_transaction(
        self, offsets: Mapping[tuple[str, int], int | OffsetAndMetadata], group_metadata: str
    ) -> None: ...
    def commit_transaction(self, timeout: float | None = None) -> None: ...
    def close(self, timeout: float | None = None) -> None: ...


class SinkClients(Protocol):
    """What a task needs from the cluster, and time (fakes in the unit tests)."""

    transaction_timeout_ms: int

    def transactional_producer(self, transactional_id: str) -> TransactionalProducer: ...
    def read_marker(self, group_id: str, partition: TopicPartition) -> OffsetAndMetadata | None:
        """The group's committed offset of ``partition``, read stable (``require_stable``)."""
        ...

    def monotonic(self) -> float: ...
    def sleep(self, seconds: float) -> None: ...
    def close(self) -> None: ...


@dataclass(frozen=True)
class TaskOutcome:
    """What a task did, reported to the driver in its commit message."""

    task: TaskIdentity
    records: int
    written: bool  # False: nothing written (no rows, the batch was written already, or by another attempt)
    mismatch: str | None = None  # skipped, but the rows are not those the marker describes


def write_exactly_once(
    records: Iterable[OutgoingRecord], task: TaskIdentity, clients: SinkClients
) -> TaskOutcome:
    """Write ``records`` as batch ``task.batch`` of task ``task.partition``, exactly once."""
    rows = iter(records)
    first = next(rows, None)
    if first is None:
        return TaskOutcome(task, 0, written=False)
    all_rows = _chain(first, rows)
    # The marker lives on partition 0 of the first row's topic: a topic that exists (a group's
    # offsets of a partition that does not are refused), the same at every replay of the rows.
    marker_partition = TopicPartition(first.topic, 0)
    group_id = task.transactional_id
    producer = clients.transactional_producer(task.transactional_id)
    try:
        try:
            producer.init_transactions()
            committed = clients.read_marker(group_id, marker_partition)
            marker = None if committed is None else Marker.from_offset(committed)
            if decide(marker, task) is Decision.SKIP:
                assert marker is not None
                return _skipped(task, marker, all_rows)
            digest = RecordDigest()
            producer.begin_transaction()
            for record in all_rows:
                digest.add(record)
                # A record that fails makes the commit fail: no future needs keeping.
                producer.send(
                    record.topic,
                    value=record.value,
                    key=record.key,
                    headers=record.headers,
                    partition=record.partition,
                )
            written = Marker(task.batch, digest.records, digest.hexdigest())
            producer.send_offsets_to_transaction({marker_partition: written.to_offset()}, group_id)
            producer.commit_transaction()
            return TaskOutcome(task, digest.records, written=True)
        except ProducerFencedError:
            return _after_fence(task, clients, group_id, marker_partition)
    finally:
        producer.close()
        clients.close()


def _chain(first: OutgoingRecord, rest: Iterator[OutgoingRecord]) -> Iterator[OutgoingRecord]:
    yield first
    yield from rest


def _skipped(task: TaskIdentity, marker: Marker, rows: Iterable[OutgoingRecord]) -> TaskOutcome:
    digest = RecordDigest()
    for record in rows:
        digest.add(record)
    mismatch = None
    if marker.records is not None and marker.records != digest.records:
        mismatch = f"{marker.records} records were written, the replay has {digest.records}"
    elif marker.digest is not None and marker.digest != digest.hexdigest():
        mismatch = f"the replay has {digest.records} records as written, but not the same ones"
    if mismatch is not None:
        log.warning(
            "format('strom') exactlyOnce: %s was written before and is skipped, but %s: the query "
            "does not replay the same rows in this task (a changed number of partitions, or a "
            "nondeterministic query); the records written first stay",
            task,
            mismatch,
        )
    return TaskOutcome(task, digest.records, written=False, mismatch=mismatch)


def _after_fence(
    task: TaskIdentity, clients: SinkClients, group_id: str, marker_partition: TopicPartition
) -> TaskOutcome:
    """Fenced: another attempt of this task holds the transactional id now (or the coordinator
    aborted this transaction for outliving its timeout). Spark counts a failed attempt against the
    task, so rather than fail at once, wait for the other attempt's marker."""
    deadline = clients.monotonic() + clients.transaction_timeout_ms / 1000
    while True:
        committed = clients.read_marker(group_id, marker_partition)
        if committed is not None and Marker.from_offset(committed).batch >= task.batch:
            log.info("format('strom') exactlyOnce: %s was written by another attempt", task)
            return TaskOutcome(task, 0, written=False)
        if clients.monotonic() >= deadline:
            raise ExactlyOnceError(
                f"format('strom') exactlyOnce: {task}: fenced, and no other attempt wrote the batch "
                f"within transaction.timeout.ms ({clients.transaction_timeout_ms} ms). If this task "
                "takes longer than that, raise kafka.transaction.timeout.ms"
            )
        clients.sleep(FENCED_POLL_INTERVAL_S)


def summarize(outcomes: Iterable[TaskOutcome], batch: int) -> str | None:
    """The driver's warning for a batch whose replay did not match what was written, if any."""
    mismatched = [outcome for outcome in outcomes if outcome.mismatch]
    if not mismatched:
        return None
    details = "; ".join(f"partition {outcome.task.partition}: {outcome.mismatch}" for outcome in mismatched)
    return (
        f"format('strom') exactlyOnce: batch {batch} was replayed with other rows than were written "
        f"({details}); the records written first were kept. Keep the query's partitioning and "
        "determinism across restarts (docs/spark.md)"
    )
