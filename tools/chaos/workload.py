"""The campaign's workload, and what each client was told (the only evidence the checker uses).

* ``ProducerThread``: an idempotent acks=all confluent-kafka producer sending unique values; every
  acknowledgement (partition, offset, value, when) and every failed delivery is recorded.
* ``GroupMember``: a confluent-kafka consumer of the group, committing after processing (its
  position of every owned partition, synchronously, every ``COMMIT_INTERVAL_S``); every assignment
  with its generation, every record it processed, every acknowledged or refused commit is recorded.
* ``AdminThread``: creates and deletes scratch topics, as operators do under load.
* ``ReassignThread`` (``--reassign``): every few seconds moves the replicas of a partition of the
  main topic (AlterPartitionReassignments, to the controller, with strom's admin client): a
  partition with three replicas shrinks to two (the broker dropped drawn from the seed), one with
  two grows back to three; each move started, refused or seen ended is recorded. After the faults,
  ``restore`` moves every partition back to every broker and waits until nothing is moving.
* ``Observer``: every half second, what Metadata says (leaders, ISRs, replicas, the controller)
  and what the group has committed (OffsetFetch), for the timeline and the commit monotonicity check.

Clients are used only from their own threads; the records are appended under one lock.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from strom.client.admin import Admin, PartitionDescription, PartitionReassignment
from strom.client.cluster import TopicPartition as Partition
from strom.client.errors import KafkaError as StromError

GROUP_METADATA_MAGIC = b"CGMDv2:"
COMMIT_INTERVAL_S = 1.0
OBSERVE_INTERVAL_S = 0.5
ADMIN_INTERVAL_S = 3.0
REASSIGN_INTERVAL_S = 3.0
# strom's admin client: each call gives up after about twice this (the controller may be paused).
REASSIGN_REQUEST_TIMEOUT_MS = 5_000
RESTORE_POLL_S = 0.5
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
    # (when, partition, replicas as Metadata names them) each time they changed.
    replicas: list[tuple[float, int, tuple[int, ...]]] = field(default_factory=list)
    # (when, partition, target replicas, what: started / refused: ERROR / completed / ...) for
    # every reassignment the ReassignThread asked for, and what became of it.
    moves: list[tuple[float, int, tuple[int, ...], str]] = field(default_factory=list)
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


class ReassignThread(Worker):
    """Moves replicas of ``topic`` while the faults run (``--reassign``).

    Every ``REASSIGN_INTERVAL_S`` it draws a partition and a broker from its own generator (seeded
    from the campaign's seed, so a seed replays the same draws; the two draws are made whatever the
    cluster answers), asks the controller which moves are in progress and Metadata for the
    replicas, and moves the partition: its target (the replicas, less those leaving if it is being
    moved) of three loses the broker drawn; a target of two gets the missing broker back, last.
    A partition still being moved gets a new target, as KIP-455 allows. Errors (no controller, a
    controller that changed or does not answer) are evidence, as for the AdminThread; nothing is
    cancelled.

    ``counts``: ``started`` (accepted by the controller), ``refused`` (an error for the partition
    or for the call, by reason in ``refusals``), ``completed`` (no longer in progress, and Metadata
    names its target), ``changed in progress`` (a new target given before it ended); the same with
    ``restore`` for the moves ``restore`` makes after the faults. A refused call may still have
    been recorded by the controller (it answers after its write)."""

    def __init__(
        self,
        name: str,
        evidence: Evidence,
        bootstrap: str,
        topic: str,
        partitions: int,
        brokers: list[int],
        seed: int,
    ) -> None:
        super().__init__(name, evidence)
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.brokers = sorted(brokers)
        self.rng = random.Random(f"reassign-{seed}")
        self.counts: Counter[str] = Counter()
        self.refusals: Counter[str] = Counter()
        self.restore_s: float | None = None
        # partition -> (target, count prefix) of the last move accepted, until it is seen ended
        self._pending: dict[int, tuple[tuple[int, ...], str]] = {}

    def _admin(self) -> Admin:
        return Admin(
            {
                "bootstrap.servers": self.bootstrap,
                "client.id": self.name,
                "request.timeout.ms": REASSIGN_REQUEST_TIMEOUT_MS,
            }
        )

    def run(self) -> None:
        admin = self._admin()
        try:
            while not self.stopping.wait(REASSIGN_INTERVAL_S):
                partition = self.rng.randrange(self.partitions)
                dropped = self.rng.choice(self.brokers)
                self._move(admin, partition, dropped)
        finally:
            admin.close()

    def _move(self, admin: Admin, partition: int, dropped: int) -> None:
        observed = self._observe(admin)
        if observed is None or self.stopping.is_set():
            self.counts["skipped"] += 1
            return
        moving, described = observed
        target = _target(partition, moving, described)
        if target is None or (partition in self._pending and partition not in moving):
            # Not in Metadata; or its move ended but Metadata does not say so yet (a stale
            # broker): where it is is not known for sure.
            self.counts["skipped"] += 1
            return
        if len(target) == len(self.brokers):
            new = tuple(broker for broker in target if broker != dropped)
        else:
            new = target + tuple(broker for broker in self.brokers if broker not in target)
        self._alter(admin, {partition: new}, moving, "")

    def _observe(
        self, admin: Admin
    ) -> tuple[dict[int, PartitionReassignment], dict[int, PartitionDescription]] | None:
        """The moves in progress (the controller's word) and each partition's Metadata; the moves
        accepted that have ended are noted. None when either could not be had.

        Metadata first: it names the controller (the admin client also looks the controller up
        again when the one it knew cannot be reached or answers NOT_CONTROLLER, but a paused one
        only times out)."""
        try:
            described = admin.describe_topics([self.topic])[self.topic]
            listed = admin.list_partition_reassignments(
                [Partition(self.topic, p) for p in range(self.partitions)]
            )
        except StromError as error:
            self.evidence.error(self.name, f"observe: {error}")
            return None
        moving = {tp.partition: move for tp, move in listed.items() if tp.topic == self.topic}
        partitions = {p.partition: p for p in described.partitions}
        for partition, (target, prefix) in list(self._pending.items()):
            found = partitions.get(partition)
            if partition not in moving and found is not None and sorted(found.replicas) == sorted(target):
                del self._pending[partition]
                self.counts[f"{prefix}completed"] += 1
                self._note(partition, target, "completed", prefix)
        return moving, partitions

    def _alter(
        self,
        admin: Admin,
        wanted: Mapping[int, tuple[int, ...]],
        moving: Mapping[int, PartitionReassignment],
        prefix: str,
    ) -> None:
        """Ask for the moves; ``prefix``: "" for the workload's, "restore " for restore's."""
        try:
            outcomes = admin.alter_partition_reassignments(
                {Partition(self.topic, p): list(target) for p, target in wanted.items()},
                timeout_ms=REASSIGN_REQUEST_TIMEOUT_MS,
            )
        except StromError as error:
            for partition, target in wanted.items():
                self._refused(partition, target, error, prefix)
            return
        for tp, refusal in outcomes.items():
            target = wanted[tp.partition]
            if refusal is not None:
                self._refused(tp.partition, target, refusal, prefix)
                continue
            self.counts[f"{prefix}started"] += 1
            if tp.partition in moving:
                self.counts[f"{prefix}changed in progress"] += 1
            self._pending[tp.partition] = (target, prefix)
            self._note(tp.partition, target, "started", prefix)

    def _refused(self, partition: int, target: tuple[int, ...], error: StromError, prefix: str) -> None:
        reason = error.code.name if error.code is not None else type(error).__name__
        self.counts[f"{prefix}refused"] += 1
        self.refusals[reason] += 1
        self.evidence.error(self.name, f"reassign {self.topic}-{partition} to {list(target)}: {error}")
        self._note(partition, target, f"refused: {reason}", prefix)

    def _note(self, partition: int, target: tuple[int, ...], what: str, prefix: str) -> None:
        with self.evidence.lock:
            self.evidence.moves.append((time.monotonic(), partition, target, f"{prefix}{what}"))

    def restore(self, deadline: float) -> bool:
        """After the faults (the thread stopped): every partition moved back to every broker (no
        cancellation: a target of all three, the brokers missing appended), then until the
        controller lists no move and Metadata names all three replicas of every partition, or
        ``deadline`` (``time.monotonic()``). Whether that was reached."""
        began = time.monotonic()
        admin = self._admin()
        try:
            while time.monotonic() < deadline:
                observed = self._observe(admin)
                if observed is not None:
                    moving, described = observed
                    wanted: dict[int, tuple[int, ...]] = {}
                    settled = not moving and len(described) == self.partitions
                    for partition in range(self.partitions):
                        target = _target(partition, moving, described)
                        if target is None:
                            settled = False
                        elif sorted(target) != self.brokers:
                            wanted[partition] = target + tuple(b for b in self.brokers if b not in target)
                        if partition in described and sorted(described[partition].replicas) != self.brokers:
                            settled = False
                    if settled and not wanted:
                        self.restore_s = time.monotonic() - began
                        return True
                    if wanted:
                        self._alter(admin, wanted, moving, "restore ")
                time.sleep(RESTORE_POLL_S)
            return False
        finally:
            admin.close()


def _target(
    partition: int, moving: Mapping[int, PartitionReassignment], described: Mapping[int, PartitionDescription]
) -> tuple[int, ...] | None:
    """Where ``partition`` is going: the replicas of its move in progress less those leaving, or
    else its replicas as Metadata names them (None: Metadata does not name it)."""
    move = moving.get(partition)
    if move is not None:
        return tuple(r for r in move.replicas if r not in move.removing_replicas)
    found = described.get(partition)
    return None if found is None else tuple(found.replicas)


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
        self.last_replicas: dict[int, tuple[int, ...]] = {}
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
        replicas: dict[int, tuple[int, ...]] = {}
        described = metadata.topics.get(self.topic)
        if described is not None and described.error is None:
            for index, partition in described.partitions.items():
                seen[index] = (partition.leader, tuple(sorted(partition.isrs)))
                replicas[index] = tuple(partition.replicas)
        with self.evidence.lock:
            for key, state in seen.items():
                if self.last.get(key) != state:
                    self.evidence.leaders.append((now, key, state[0], state[1]))
            self.last = seen
            for index, names in replicas.items():
                if self.last_replicas.get(index) != names:
                    self.evidence.replicas.append((now, index, names))
                    self.last_replicas[index] = names
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
