"""Shared pieces of the consumer-group compat tests (no tests here): broker settings for short
session timeouts, a confluent-kafka group member that runs its own bounded poll loop on a thread and
records what its rebalance callbacks saw, and the checks every group test makes.

Each member's ``Consumer`` is created, polled, committed and closed on its own thread only; the test
thread reads what the member recorded under the member's lock and talks to it through events.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from tests.compat.support import SentRecord

SESSION_TIMEOUT_MS = 6_000
HEARTBEAT_INTERVAL_MS = 300
# Broker keys for every group test module: no initial join delay, short sessions allowed.
GROUP_BROKER_SETTINGS = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
}
STABLE_TIMEOUT_S = 40.0
CONSUME_TIMEOUT_S = 40.0
POLL_TIMEOUT_S = 0.1
THREAD_JOIN_TIMEOUT_S = 30.0

Partition = tuple[str, int]
GENERATION_BYTE_ORDER: Literal["little", "big"] = "little"


@dataclass(frozen=True)
class Consumed:
    """One record as a group member received it."""

    member: str
    topic: str
    partition: int
    offset: int
    value: bytes | None


@dataclass
class MemberLog:
    """What a member's rebalance callbacks and poll loop saw, in order."""

    assigned_calls: list[list[Partition]] = field(default_factory=list)
    revoked_calls: list[list[Partition]] = field(default_factory=list)
    lost_calls: list[list[Partition]] = field(default_factory=list)
    records: list[Consumed] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _partitions(partitions: Iterable[TopicPartition]) -> list[Partition]:
    return sorted((partition.topic, partition.partition) for partition in partitions)


class ConfluentMember:
    """A confluent-kafka group member on its own thread: subscribe, poll until stopped, close.

    The current assignment follows the callbacks: on_assign adds, on_revoke and on_lost remove,
    which is right for eager protocols (revoke all, then assign all) and cooperative ones (deltas).
    """

    def __init__(
        self,
        name: str,
        bootstrap: str,
        group: str,
        topics: Sequence[str],
        **settings: object,
    ) -> None:
        self.name = name
        self.group = group
        self.topics = list(topics)
        self.config: dict[str, object] = {
            "bootstrap.servers": bootstrap,
            "broker.address.family": "v4",
            "group.id": group,
            "client.id": name,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": SESSION_TIMEOUT_MS,
            "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
            # librdkafka pauses fetching for a whole second when its queue is over-full by default.
            "fetch.queue.backoff.ms": 10,
        }
        self.config.update({key.replace("_", "."): value for key, value in settings.items()})
        self.log = MemberLog()
        self.lock = threading.Lock()
        self.assignment: set[Partition] = set()
        self.generation_ids: list[int] = []
        self.committed: list[Partition] = []
        self._stop = threading.Event()
        self._commit_requested = threading.Event()
        self.commit_done = threading.Event()
        self.closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"member-{name}", daemon=True)

    # -- test thread ---------------------------------------------------------------------------------

    def start(self) -> ConfluentMember:
        self._thread.start()
        return self

    def current_assignment(self) -> set[Partition]:
        with self.lock:
            return set(self.assignment)

    def snapshot(self) -> MemberLog:
        with self.lock:
            return MemberLog(
                list(self.log.assigned_calls),
                list(self.log.revoked_calls),
                list(self.log.lost_calls),
                list(self.log.records),
                list(self.log.errors),
            )

    def request_commit(self) -> None:
        """Ask the member to commit its positions synchronously (from its own thread)."""
        self.commit_done.clear()
        self._commit_requested.set()

    def stop(self) -> None:
        """Leave the poll loop and close the consumer; waits (bounded) for the thread to end."""
        self._stop.set()
        self._thread.join(THREAD_JOIN_TIMEOUT_S)
        assert not self._thread.is_alive(), f"member {self.name} did not close in {THREAD_JOIN_TIMEOUT_S} s"

    # -- member thread -------------------------------------------------------------------------------

    def _run(self) -> None:
        consumer = Consumer(self.config)
        try:
            consumer.subscribe(
                self.topics, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
            )
            while not self._stop.is_set():
                message = consumer.poll(POLL_TIMEOUT_S)
                if self._commit_requested.is_set():
                    self._commit_requested.clear()
                    self._commit(consumer)
                if message is None:
                    continue
                error = message.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        with self.lock:
                            self.log.errors.append(str(error))
                    continue
                topic, partition, offset = message.topic(), message.partition(), message.offset()
                assert topic is not None and partition is not None and offset is not None  # set on records
                with self.lock:
                    self.log.records.append(Consumed(self.name, topic, partition, offset, message.value()))
        except Exception as error:  # reported to the test thread, which fails on it
            with self.lock:
                self.log.errors.append(f"{type(error).__name__}: {error}")
        finally:
            consumer.close()
            self.closed.set()

    def _commit(self, consumer: Consumer) -> None:
        positions = [
            position for position in consumer.position(consumer.assignment()) if position.offset >= 0
        ]
        if positions:
            results = consumer.commit(offsets=positions, asynchronous=False) or []
            failures = [str(result) for result in results if result.error is not None]
            with self.lock:
                self.log.errors.extend(failures)
                self.committed = _partitions(positions)
        self.commit_done.set()

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        metadata = consumer.consumer_group_metadata()
        generation = _generation_of(metadata)
        with self.lock:
            self.log.assigned_calls.append(_partitions(partitions))
            self.assignment.update(_partitions(partitions))
            if generation is not None:
                self.generation_ids.append(generation)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        with self.lock:
            self.log.revoked_calls.append(_partitions(partitions))
            self.assignment.difference_update(_partitions(partitions))

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        with self.lock:
            self.log.lost_calls.append(_partitions(partitions))
            self.assignment.difference_update(_partitions(partitions))


GROUP_METADATA_MAGIC = b"CGMDv2:"


def _generation_of(metadata: object) -> int | None:
    """The generation id inside confluent-kafka's serialized group metadata.

    librdkafka writes ``CGMDv2:`` then the generation id as a 4-byte integer, then the group id,
    member id and instance id as NUL-terminated strings; other shapes give None.
    """
    if not isinstance(metadata, bytes) or not metadata.startswith(GROUP_METADATA_MAGIC):
        return None
    start = len(GROUP_METADATA_MAGIC)
    return int.from_bytes(metadata[start : start + 4], GENERATION_BYTE_ORDER, signed=True)


def wait_until(condition: Callable[[], bool], timeout_s: float, what: Callable[[], str]) -> None:
    """Poll ``condition`` every 50 ms until it holds; fail with ``what()`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what()}")
        time.sleep(0.05)


def all_partitions(topic: str, count: int) -> set[Partition]:
    return {(topic, partition) for partition in range(count)}


def assignments_are_complete(
    assignments: Sequence[set[Partition]], expected: set[Partition], *, every_member_has_one: bool
) -> bool:
    """Every expected partition owned by exactly one member (and, when asked, nobody left empty)."""
    owners = Counter(partition for assignment in assignments for partition in assignment)
    if set(owners) != expected or any(count != 1 for count in owners.values()):
        return False
    return not every_member_has_one or all(assignments)


def wait_until_stable(
    members: Sequence[Any], expected: set[Partition], timeout_s: float = STABLE_TIMEOUT_S
) -> None:
    """Wait until the members' assignments cover ``expected`` exactly once each (every member gets
    one when there are enough partitions), and the members report no errors."""
    every_member_has_one = len(members) <= len(expected)

    def complete() -> bool:
        for member in members:
            errors = member.snapshot().errors
            assert not errors, f"member {member.name}: {errors[:5]}"
        return assignments_are_complete(
            [member.current_assignment() for member in members],
            expected,
            every_member_has_one=every_member_has_one,
        )

    wait_until(
        complete,
        timeout_s,
        lambda: (
            "assignments " + str({member.name: sorted(member.current_assignment()) for member in members})
        ),
    )


def consumed_records(members: Sequence[Any]) -> list[Consumed]:
    return [record for member in members for record in member.snapshot().records]


def assert_consumed_exactly_once(members: Sequence[Any], sent: Sequence[SentRecord], topic: str) -> None:
    """Every acknowledged record was received by exactly one member, by the member owning it."""
    received = Counter(
        (record.partition, record.offset) for record in consumed_records(members) if record.topic == topic
    )
    expected = Counter((record.partition, record.offset) for record in sent)
    duplicates = {key: count for key, count in received.items() if count > 1}
    assert not duplicates, f"received more than once: {sorted(duplicates)[:10]}"
    missing = expected - received
    assert not missing, f"{sum(missing.values())} records never received, e.g. {sorted(missing)[:10]}"
    extra = received - expected
    assert not extra, f"received records never sent: {sorted(extra)[:10]}"


def wait_for_consumed(members: Sequence[Any], count: int, timeout_s: float = CONSUME_TIMEOUT_S) -> None:
    def enough() -> bool:
        for member in members:
            errors = member.snapshot().errors
            assert not errors, f"member {member.name}: {errors[:5]}"
        return len(consumed_records(members)) >= count

    wait_until(enough, timeout_s, lambda: f"{len(consumed_records(members))} of {count} records consumed")


def end_offsets(sent: Sequence[SentRecord]) -> dict[int, int]:
    """Per partition, the offset after the last acknowledged record (what a full commit stores)."""
    ends: dict[int, int] = {}
    for record in sent:
        ends[record.partition] = max(ends.get(record.partition, 0), record.offset + 1)
    return ends


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets as a fresh confluent-kafka consumer of the group reads them."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "broker.address.family": "v4", "group.id": group})
    try:
        found = consumer.committed(
            [TopicPartition(topic, partition) for partition in range(partitions)], 30.0
        )
    finally:
        consumer.close()
    for partition in found:
        if partition.error is not None:
            raise KafkaException(partition.error)
    return {partition.partition: partition.offset for partition in found}


def stop_all(members: Iterable[Any]) -> None:
    """Stop every member, even when one of them fails to stop in time."""
    failures = []
    for member in members:
        try:
            member.stop()
        except AssertionError as error:
            failures.append(str(error))
    assert not failures, failures
