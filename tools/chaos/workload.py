"""The campaign's workload, and what each client was told (the only evidence the checker uses).

* ``ProducerThread``: an idempotent acks=all confluent-kafka producer sending unique values; every
  acknowledgement (partition, offset, value, when) and every failed delivery is recorded.
* ``GroupMember``: a confluent-kafka consumer of the group, committing after processing (its
  position of every owned partition, synchronously, every ``COMMIT_INTERVAL_S``); every assignment
  with its generation, every record it processed, every acknowledged or refused commit is recorded.
* ``AdminThread``: creates and deletes scratch topics, as operators do under load.
* ``Observer``: every half second, what Metadata says (leaders, ISRs, the controller) and what
  the group has committed (OffsetFetch), for the timeline and the commit monotonicity check.

Clients are used only from their own threads; the records are appended under one lock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

GROUP_METADATA_MAGIC = b"CGMDv2:"
COMMIT_INTERVAL_S = 1.0
OBSERVE_INTERVAL_S = 0.5
ADMIN_INTERVAL_S = 3.0
PRODUCE_PAUSE_S = 0.004  # about 250 records a second per producer: the machine is shared


@dataclass(frozen=True)
class Acked:
    partition: int
    # None when the client acknowledged the record without telling its offset (librdkafka does so
    # for a retry it knows was persisted): the checker finds it by its value in the log.
    offset: int | None
    value: bytes
    at: float


@dataclass(frozen=True)
class Processed:
    member: str
    generation: int
    partition: int
    offset: int
    value: bytes
    session: int  # the member's assignment this record was processed under
    at: float


@dataclass(frozen=True)
class Assigned:
    member: str
    generation: int
    partitions: tuple[int, ...]
    session: int
    at: float


@dataclass(frozen=True)
class Committed:
    member: str
    generation: int
    offsets: tuple[tuple[int, int], ...]
    at: float


@dataclass
class Evidence:
    """Everything the clients were told, with times (``time.monotonic()``)."""

    acked: list[Acked] = field(default_factory=list)
    processed: list[Processed] = field(default_factory=list)
    assigned: list[Assigned] = field(default_factory=list)
    committed: list[Committed] = field(default_factory=list)
    # (when, offsets per partition) as an OffsetFetch of the group returned them.
    observed_commits: list[tuple[float, dict[int, int]]] = field(default_factory=list)
    # (when, client, error) for every error a client reported.
    client_errors: list[tuple[float, str, str]] = field(default_factory=list)
    # (when, partition or -1 for the controller, leader, ISR) each time it changed.
    leaders: list[tuple[float, int, int, tuple[int, ...]]] = field(default_factory=list)
    admin_operations: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def error(self, client: str, error: object) -> None:
        with self.lock:
            self.client_errors.append((time.monotonic(), client, str(error)))


class Worker:
    def __init__(self, name: str, evidence: Evidence) -> None:
        self.name = name
        self.evidence = evidence
        self.stopping = threading.Event()
        self.failure: str | None = None
        self._thread = threading.Thread(target=self._guarded, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 120.0) -> None:
        self.stopping.set()
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            self.failure = self.failure or f"{self.name} did not stop in {timeout_s} s"

    def _guarded(self) -> None:
        try:
            self.run()
        except Exception as error:
            self.failure = f"{type(error).__name__}: {error}"

    def run(self) -> None:
        raise NotImplementedError


class ProducerThread(Worker):
    def __init__(self, name: str, evidence: Evidence, bootstrap: str, topic: str) -> None:
        super().__init__(name, evidence)
        self.topic = topic
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": name,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 300_000,
                "error_cb": lambda error: evidence.error(name, error),
            }
        )
        self.sent = 0

    def _delivered(self, error: KafkaError | None, message: Any) -> None:
        if error is not None:
            self.evidence.error(self.name, error)
            return
        acked = Acked(message.partition(), message.offset(), message.value(), time.monotonic())
        with self.evidence.lock:
            self.evidence.acked.append(acked)

    def run(self) -> None:
        while not self.stopping.is_set():
            value = f"{self.name}-{self.sent}".encode()
            try:
                self.producer.produce(
                    self.topic, key=str(self.sent % 97).encode(), value=value, on_delivery=self._delivered
                )
            except BufferError:
                self.producer.poll(0.1)
                continue
            self.sent += 1
            self.producer.poll(0)
            time.sleep(PRODUCE_PAUSE_S)

    def flush(self, timeout_s: float) -> int:
        """Wait for every delivery report; how many records are still without one."""
        return int(self.producer.flush(timeout_s))


class GroupMember(Worker):
    def __init__(self, name: str, evidence: Evidence, bootstrap: str, group: str, topic: str) -> None:
        super().__init__(name, evidence)
        self.topic = topic
        self.config = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": name,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 15_000,
            "heartbeat.interval.ms": 500,
            "partition.assignment.strategy": "range",
            "error_cb": lambda error: evidence.error(name, error),
        }
        self.session = 0
        self.generation = -1
        self.owned: set[int] = set()
        self.positions: dict[int, int] = {}  # next offset to process, per owned partition
        self.drain = threading.Event()  # set: commit what was processed, then stop

    def run(self) -> None:
        consumer = Consumer(self.config)
        try:
            consumer.subscribe(
                [self.topic], on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._revoked
            )
            next_commit = time.monotonic() + COMMIT_INTERVAL_S
            while not self.stopping.is_set():
                message = consumer.poll(0.1)
                if message is not None:
                    self._process(message)
                if time.monotonic() >= next_commit:
                    self._commit(consumer)
                    next_commit = time.monotonic() + COMMIT_INTERVAL_S
            self._commit(consumer)
        finally:
            consumer.close()

    def _generation_of(self, consumer: Consumer) -> int:
        metadata = consumer.consumer_group_metadata()
        if isinstance(metadata, bytes) and metadata.startswith(GROUP_METADATA_MAGIC):
            start = len(GROUP_METADATA_MAGIC)
            return int.from_bytes(metadata[start : start + 4], "little", signed=True)
        return -1

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.session += 1
        self.generation = self._generation_of(consumer)
        self.owned = {p.partition for p in partitions}
        self.positions = {}
        event = Assigned(
            self.name, self.generation, tuple(sorted(self.owned)), self.session, time.monotonic()
        )
        with self.evidence.lock:
            self.evidence.assigned.append(event)

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.owned -= {p.partition for p in partitions}
        for partition in partitions:
            self.positions.pop(partition.partition, None)

    def _process(self, message: Any) -> None:
        error = message.error()
        if error is not None:
            if error.code() != KafkaError._PARTITION_EOF:
                self.evidence.error(self.name, error)
            return
        partition = message.partition()
        if partition not in self.owned:
            return
        event = Processed(
            self.name,
            self.generation,
            partition,
            message.offset(),
            message.value(),
            self.session,
            time.monotonic(),
        )
        with self.evidence.lock:
            self.evidence.processed.append(event)
        self.positions[partition] = message.offset() + 1

    def _commit(self, consumer: Consumer) -> None:
        offsets = {p: o for p, o in self.positions.items() if p in self.owned}
        if not offsets:
            return
        generation = self.generation
        try:
            results = consumer.commit(
                offsets=[TopicPartition(self.topic, p, o) for p, o in sorted(offsets.items())],
                asynchronous=False,
            )
        except KafkaException as error:
            self.evidence.error(self.name, f"commit: {error}")
            return
        refused = [result for result in results or [] if result.error is not None]
        if refused:
            self.evidence.error(self.name, f"commit: {refused[0].error}")
            return
        event = Committed(self.name, generation, tuple(sorted(offsets.items())), time.monotonic())
        with self.evidence.lock:
            self.evidence.committed.append(event)


class AdminThread(Worker):
    def __init__(self, name: str, evidence: Evidence, bootstrap: str) -> None:
        super().__init__(name, evidence)
        self.admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10_000})

    def run(self) -> None:
        created: list[str] = []
        index = 0
        while not self.stopping.wait(ADMIN_INTERVAL_S):
            name = f"chaos-scratch-{index}"
            index += 1
            self._wait(
                self.admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=3)]), name
            )
            created.append(name)
            if len(created) > 2:
                old = created.pop(0)
                self._wait(self.admin.delete_topics([old]), old)

    def _wait(self, futures: dict[str, Any], name: str) -> None:
        try:
            futures[name].result(30)
            with self.evidence.lock:
                self.evidence.admin_operations += 1
        except Exception as error:
            self.evidence.error(self.name, f"{name}: {error}")


class Observer(Worker):
    """Metadata (leaders, ISRs, controller) and the group's committed offsets, twice a second."""

    def __init__(
        self, name: str, evidence: Evidence, bootstrap: str, group: str, topic: str, partitions: int
    ) -> None:
        super().__init__(name, evidence)
        self.topic = topic
        self.partitions = partitions
        self.admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 3_000})
        self.offsets = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "enable.auto.commit": False,
                "client.id": name,
            }
        )
        self.last: dict[int, tuple[int, tuple[int, ...]]] = {}
        self.snapshot: dict[int, tuple[int, tuple[int, ...]]] = {}

    def run(self) -> None:
        try:
            while not self.stopping.wait(OBSERVE_INTERVAL_S):
                self.observe()
        finally:
            self.offsets.close()

    def observe(self) -> None:
        now = time.monotonic()
        try:
            metadata = self.admin.list_topics(self.topic, timeout=3)
        except KafkaException:
            return
        seen: dict[int, tuple[int, tuple[int, ...]]] = {-1: (metadata.controller_id, ())}
        described = metadata.topics.get(self.topic)
        if described is not None and described.error is None:
            for index, partition in described.partitions.items():
                seen[index] = (partition.leader, tuple(sorted(partition.isrs)))
        with self.evidence.lock:
            for key, state in seen.items():
                if self.last.get(key) != state:
                    self.evidence.leaders.append((now, key, state[0], state[1]))
            self.last = seen
        self.snapshot = seen
        try:
            found = self.offsets.committed([TopicPartition(self.topic, p) for p in range(self.partitions)], 3)
        except KafkaException:
            return
        offsets = {p.partition: p.offset for p in found if p.error is None and p.offset >= 0}
        with self.evidence.lock:
            self.evidence.observed_commits.append((now, offsets))


def stop_all(workers: list[Worker], on_failure: Callable[[str], None]) -> None:
    for worker in workers:
        worker.stop()
        if worker.failure:
            on_failure(f"{worker.name}: {worker.failure}")
