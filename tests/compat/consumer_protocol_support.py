"""Pieces of the consumer group protocol (KIP-848) compat tests (no tests here): broker settings
with short sessions, a confluent-kafka member speaking ``group.protocol=consumer`` that commits what
it gives up, a shared ledger of every member's assign/revoke callbacks in the order they happened
(the double-ownership check replays it), a producer that writes until stopped, and a raw-wire
member for the epoch tests.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from strom.protocol.errors import ErrorCode
from strom.protocol.messages.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from strom.protocol.messages.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from tests.compat.test_groups_helpers import ConfluentMember, Partition
from tests.compat.wire import WireClient

SESSION_TIMEOUT_MS = 6_000
HEARTBEAT_INTERVAL_MS = 300
# Broker keys: consumer-protocol members heartbeat every 300 ms and expire after 6 s of silence.
CONSUMER_PROTOCOL_BROKER_SETTINGS = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "group.consumer.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    "group.consumer.min.session.timeout.ms": "1000",
    "group.consumer.heartbeat.interval.ms": str(HEARTBEAT_INTERVAL_MS),
    "group.consumer.min.heartbeat.interval.ms": "100",
}
HEARTBEAT_VERSION = 1


@dataclass
class Ledger:
    """Every member's callbacks, in the order they ran: (when, member, kind, partitions)."""

    events: list[tuple[float, str, str, list[Partition]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, member: str, kind: str, partitions: list[Partition]) -> None:
        with self.lock:
            self.events.append((time.monotonic(), member, kind, partitions))

    def double_ownership(self) -> list[str]:
        """Every moment a partition was assigned to a member while another still owned it."""
        owners: dict[Partition, str] = {}
        problems = []
        with self.lock:
            events = list(self.events)
        for at, member, kind, partitions in events:
            for partition in partitions:
                owner = owners.get(partition)
                if kind == "assign":
                    if owner is not None and owner != member:
                        problems.append(f"{at:.3f}: {partition} assigned to {member} while {owner} owns it")
                    owners[partition] = member
                elif owner == member:
                    del owners[partition]
        return problems

    def revoked_between(self, member: str, start: float, end: float) -> set[Partition]:
        with self.lock:
            return {
                partition
                for at, who, kind, partitions in self.events
                if who == member and kind in ("revoke", "lost") and start <= at <= end
                for partition in partitions
            }


class ProtocolMember(ConfluentMember):
    """A confluent-kafka member with ``group.protocol=consumer`` (the coordinator assigns, sets the
    session and the heartbeat interval): it commits the positions of the partitions it gives up
    in its revoke callback, so the next owner resumes where it stopped, and tells the ledger.

    Such a commit can be refused STALE_MEMBER_EPOCH, as Kafka 4.0 refuses it: the member's epoch
    was bumped by a heartbeat answered while it was revoking (librdkafka commits with the epoch
    it had; KIP-1251, later, accepts it). Those partitions are in ``stale_commits``."""

    def __init__(
        self, name: str, bootstrap: str, group: str, topics: Sequence[str], ledger: Ledger, **settings: object
    ) -> None:
        super().__init__(name, bootstrap, group, topics, **settings)
        for key in ("session.timeout.ms", "heartbeat.interval.ms", "partition.assignment.strategy"):
            self.config.pop(key, None)
        self.config["group.protocol"] = "consumer"
        self.ledger = ledger
        # Partitions whose commit on revocation was refused STALE_MEMBER_EPOCH: their next owner
        # may receive again what this member received after its last accepted commit.
        self.stale_commits: set[Partition] = set()

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.ledger.add(self.name, "assign", named_partitions(partitions))
        super()._on_assign(consumer, partitions)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        positions = [position for position in consumer.position(partitions) if position.offset >= 0]
        if positions:
            failures = []
            try:
                results = consumer.commit(offsets=positions, asynchronous=False) or []
                failures = [str(result) for result in results if result.error is not None]
            except KafkaException as error:
                if error.args[0].code() == ErrorCode.STALE_MEMBER_EPOCH:
                    # The member's epoch moved on in a heartbeat answered meanwhile (Kafka 4.0
                    # refuses the commit too): the next owner starts from the previous commit.
                    with self.lock:
                        self.stale_commits.update(named_partitions(partitions))
                else:
                    failures = [f"commit on revoke: {error}"]
            if failures:
                with self.lock:
                    self.log.errors.extend(failures)
        self.ledger.add(self.name, "revoke", named_partitions(partitions))
        super()._on_revoke(consumer, partitions)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.ledger.add(self.name, "lost", named_partitions(partitions))
        super()._on_lost(consumer, partitions)

    def consumed_up_to(self) -> dict[Partition, int]:
        """The highest offset received per partition so far."""
        highest: dict[Partition, int] = {}
        for record in self.snapshot().records:
            key = (record.topic, record.partition)
            highest[key] = max(highest.get(key, -1), record.offset)
        return highest


def named_partitions(partitions: list[TopicPartition]) -> list[Partition]:
    return sorted((partition.topic or "", partition.partition) for partition in partitions)


class ContinuousProducer:
    """Writes keyed records to a topic on its own thread until stopped; remembers every
    acknowledged (partition, offset)."""

    def __init__(self, bootstrap: str, topic: str, pause_s: float = 0.005) -> None:
        self.topic = topic
        self.pause_s = pause_s
        self.acknowledged: list[tuple[int, int]] = []
        self.failures: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._producer = Producer(
            {"bootstrap.servers": bootstrap, "broker.address.family": "v4", "linger.ms": 5, "acks": "all"}
        )
        self._thread = threading.Thread(target=self._run, name="producer", daemon=True)

    def start(self) -> ContinuousProducer:
        self._thread.start()
        return self

    def count(self) -> int:
        with self._lock:
            return len(self.acknowledged)

    def stop(self) -> list[tuple[int, int]]:
        self._stop.set()
        self._thread.join(60)
        assert not self._thread.is_alive(), "producer did not stop"
        assert not self.failures, self.failures[:5]
        with self._lock:
            return list(self.acknowledged)

    def _delivered(self, error: KafkaError | None, message: Any) -> None:
        with self._lock:
            if error is not None:
                self.failures.append(str(error))
            else:
                self.acknowledged.append((message.partition(), message.offset()))

    def _run(self) -> None:
        sequence = 0
        while not self._stop.is_set():
            for _ in range(10):
                self._producer.produce(
                    self.topic, key=str(sequence).encode(), value=b"v", on_delivery=self._delivered
                )
                sequence += 1
            self._producer.poll(self.pause_s)
        remaining = self._producer.flush(60)
        if remaining:
            with self._lock:
                self.failures.append(f"{remaining} records not delivered")


# -- raw wire ----------------------------------------------------------------------------------------


def find_coordinator(client: WireClient, group: str) -> None:
    """Ask for the group's coordinator (a single node makes ``__consumer_offsets`` on this)."""
    found = client.round_trip(FindCoordinatorRequest(key=group), FindCoordinatorResponse, 1)
    assert found.error_code == ErrorCode.NONE, found


def heartbeat(
    client: WireClient, request: ConsumerGroupHeartbeatRequest, timeout_s: float = 30.0
) -> ConsumerGroupHeartbeatResponse:
    """One heartbeat, retried while the coordinator is loading (a broker just started)."""
    deadline = time.monotonic() + timeout_s
    while True:
        response: ConsumerGroupHeartbeatResponse = client.round_trip(
            request, ConsumerGroupHeartbeatResponse, HEARTBEAT_VERSION
        )
        retriable = (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if response.error_code not in retriable or time.monotonic() > deadline:
            return response
        time.sleep(0.1)


def joining(
    group: str, topics: list[str] | None = None, *, regex: str | None = None, assignor: str | None = None
) -> ConsumerGroupHeartbeatRequest:
    """A member's first heartbeat (epoch 0, a member id of its own, as Kafka 4's clients send)."""
    return ConsumerGroupHeartbeatRequest(
        group_id=group,
        member_id=str(uuid.uuid4()),
        member_epoch=0,
        rebalance_timeout_ms=30_000,
        subscribed_topic_names=topics if topics is not None else ([] if regex is None else None),
        subscribed_topic_regex=regex,
        server_assignor=assignor,
        topic_partitions=[],
    )
