"""What the cluster tests' clients do, and how their outcome is judged: producers that remember what
they were told (acknowledged offsets, errors), readers that read a partition back, and the checks
that compare the two. Judged from the clients' side only: never from a broker's view of itself."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

READ_TIMEOUT_S = 90.0


@dataclass
class Deliveries:
    """What the producer was told, per partition: (offset, value) acknowledged, errors otherwise."""

    acknowledged: dict[int, list[tuple[int, bytes]]] = field(default_factory=dict)
    errors: list[KafkaError] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, error: KafkaError | None, message: object) -> None:
        with self.lock:
            if error is not None:
                self.errors.append(error)
            else:
                self.acknowledged.setdefault(message.partition(), []).append(  # type: ignore[attr-defined]
                    (message.offset(), message.value())  # type: ignore[attr-defined]
                )

    @property
    def count(self) -> int:
        with self.lock:
            return sum(len(records) for records in self.acknowledged.values())


class BackgroundProducer:
    """An acks=all idempotent producer sending keyed records from a thread until stopped."""

    def __init__(self, bootstrap: str, topic: str, *, records_per_pause: int = 200, **config: object) -> None:
        self.topic = topic
        self.records_per_pause = records_per_pause
        self.deliveries = Deliveries()
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 120_000,
                **config,
            }
        )
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.producer.produce(
                    self.topic,
                    key=str(self.sent % 1000).encode(),
                    value=str(self.sent).encode(),
                    on_delivery=self.deliveries,
                )
            except BufferError:
                self.producer.poll(0.05)
                continue
            self.sent += 1
            if self.sent % self.records_per_pause == 0:
                self.producer.poll(0)
                time.sleep(0.01)  # at most 100 x records_per_pause a second: the machine is shared

    def __enter__(self) -> BackgroundProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join()
        remaining = self.producer.flush(150)
        assert remaining == 0, f"{remaining} records never got an answer"


def read_partitions(
    bootstrap: str, topic: str, partitions: int, expected: int
) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of the topic, from offset 0, by partition (a consumer without a group)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{topic}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition(topic, index, 0) for index in range(partitions)])
    found: dict[int, list[tuple[int, bytes]]] = {}
    total = 0
    deadline = time.monotonic() + 90
    try:
        while total < expected and time.monotonic() < deadline:
            for message in consumer.consume(1000, 1.0):
                if message.error() is not None:
                    continue
                found.setdefault(message.partition(), []).append((message.offset(), message.value()))
                total += 1
    finally:
        consumer.close()
    return found


def assert_every_acknowledged_record_once_in_order(
    deliveries: Deliveries, found: dict[int, list[tuple[int, bytes]]]
) -> None:
    for partition, acknowledged in deliveries.acknowledged.items():
        read = found.get(partition, [])
        offsets = [offset for offset, _ in read]
        assert offsets == sorted(set(offsets)), f"partition {partition}: offsets out of order or repeated"
        values = [value for _, value in read]
        assert len(values) == len(set(values)), f"partition {partition}: a record was written twice"
        at = dict(read)
        lost = [(offset, value) for offset, value in acknowledged if at.get(offset) != value]
        assert not lost, f"partition {partition}: {len(lost)} acknowledged records lost, first {lost[:3]}"
        # One producer, idempotent: its records are in the log in the order it sent them.
        sent = {int(value) for _, value in acknowledged}
        log_order = [int(value) for value in values if int(value) in sent]
        assert log_order == sorted(log_order), f"partition {partition}: records out of send order"


def produce_all(
    bootstrap: str, topic: str, values: Iterable[bytes], *, partition: int = 0, **config: object
) -> Deliveries:
    """Send ``values`` to one partition and wait for every answer; what the producer was told."""
    deliveries = Deliveries()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2, **config})
    for value in values:
        while True:
            try:
                producer.produce(topic, value=value, partition=partition, on_delivery=deliveries)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    remaining = producer.flush(120)
    assert remaining == 0, f"{remaining} records never got an answer"
    return deliveries


def read_log(bootstrap: str, topic: str, partition: int) -> list[tuple[int, bytes]]:
    """Every record of one partition up to its high watermark, as a consumer is given them."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"log-reader-{topic}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        _, end = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
        consumer.assign([TopicPartition(topic, partition, 0)])
        found: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + READ_TIMEOUT_S
        while (not found or found[-1][0] < end - 1) and time.monotonic() < deadline:
            for message in consumer.consume(1000, 1.0):
                if message.error() is None:
                    found.append((message.offset(), message.value()))
        return found
    finally:
        consumer.close()


class GroupConsumer:
    """One member of a consumer group consuming from a thread until stopped: every value it was
    given, and the offsets of each commit it was told succeeded, in order, per partition.

    Commits are synchronous, after each batch: one at a time, so their order is the client's.
    (Asynchronous auto-commits are not: librdkafka resends a commit refused with
    COORDINATOR_LOAD_IN_PROGRESS after a backoff, and a newer commit can land first; the older
    offsets then win, with Kafka as with strom.)"""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        self.consumed: set[bytes] = set()
        self.commits: dict[int, list[int]] = {}
        self.commit_errors: list[KafkaError] = []
        self._lock = threading.Lock()
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": 10_000,
            }
        )
        self._consumer.subscribe([topic])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            messages = self._consumer.consume(500, 0.2)
            with self._lock:
                self.consumed.update(message.value() for message in messages if message.error() is None)
            if not messages:
                continue
            try:
                committed = self._consumer.commit(asynchronous=False)
            except KafkaException as failure:  # the coordinator is moving: the next commit covers it
                with self._lock:
                    self.commit_errors.append(failure.args[0])
                continue
            with self._lock:
                for partition in committed or []:
                    if partition.error is None and partition.offset >= 0:
                        self.commits.setdefault(partition.partition, []).append(partition.offset)

    def count(self) -> int:
        with self._lock:
            return len(self.consumed)

    def missing(self, values: Iterable[bytes]) -> int:
        with self._lock:
            return sum(1 for value in values if value not in self.consumed)

    def __enter__(self) -> GroupConsumer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join()
            self._consumer.close()


class CommittedOffsetsWatcher:
    """Asks the group's coordinator for the group's committed offsets a few times a second, from a
    thread; every answer it got, in order, per partition. Through a consumer of the group that
    never joins it (OffsetFetch only). Not librdkafka's admin client: 2.16 aborts on an assertion
    in its FindCoordinator handling when asked like this while coordinators move
    (rd_kafka_admin_coord_response_parse: eonce->refcnt > 0); not kafka-python's either, which
    leaves the sockets of refused connections open."""

    def __init__(
        self, bootstrap: str, group: str, topic: str, partitions: int, interval_s: float = 0.3
    ) -> None:
        self.seen: dict[int, list[int]] = {}
        self.answers = 0
        self._partitions = [TopicPartition(topic, index) for index in range(partitions)]
        self._consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
        )
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                answer = self._consumer.committed(self._partitions, timeout=5)
            except KafkaException:  # the coordinator is moving: ask again
                continue
            self.answers += 1
            for partition in answer:
                if partition.error is None and partition.offset >= 0:
                    self.seen.setdefault(partition.partition, []).append(partition.offset)

    def __enter__(self) -> CommittedOffsetsWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()
        self._consumer.close()


def backwards(sequences: dict[int, list[int]]) -> list[tuple[int, int, int]]:
    """(partition, offset, the smaller one after it) wherever a sequence of offsets went back."""
    found = []
    for partition, offsets in sequences.items():
        for earlier, later in itertools.pairwise(offsets):
            if later < earlier:
                found.append((partition, earlier, later))
    return found
