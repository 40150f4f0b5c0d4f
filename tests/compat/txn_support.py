"""What the transaction tests share: a transactional confluent-kafka producer, sentinels that say
"every marker before me is in", and readers at either isolation level.

Markers are written after EndTxn is answered (as in Kafka), so a read_committed consumer that reads
to the end right after ``commit_transaction`` may stop before the records become visible. The
tests never wait on time for that: after the transactions under test, one more transaction commits
a *sentinel* record to every partition, and a reader reads until it has seen every sentinel. A
partition's records are delivered in offset order and read_committed stops at the last stable
offset, so once a partition's sentinel is read every transaction before it is decided and read (or
skipped, if aborted).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from tests.compat.support import CONSUME_TIMEOUT_S, ReadRecord, normalize_headers

SENTINEL_KEY = b"sentinel"
TRANSACTION_TIMEOUT_S = 30.0


def transactional_producer(bootstrap: str, transactional_id: str, **settings: object) -> Producer:
    config: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "broker.address.family": "v4",
        "transactional.id": transactional_id,
        "linger.ms": 5,
    }
    config.update({key.replace("_", "."): value for key, value in settings.items()})
    return Producer(config)


def commit_sentinels(producer: Producer, topic: str, partitions: int, tag: str) -> None:
    """One committed transaction with a sentinel record (value ``tag``) in every partition."""
    producer.begin_transaction()
    for partition in range(partitions):
        producer.produce(topic, key=SENTINEL_KEY, value=tag.encode(), partition=partition)
    producer.commit_transaction(TRANSACTION_TIMEOUT_S)


def isolation_consumer(bootstrap: str, isolation_level: str, **settings: object) -> Consumer:
    config: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "broker.address.family": "v4",
        "group.id": "strom-compat-txn-reader",  # never used: manual assignment, no commits
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "isolation.level": isolation_level,
    }
    config.update({key.replace("_", "."): value for key, value in settings.items()})
    return Consumer(config)


def read_until_sentinels(
    bootstrap: str,
    topic: str,
    partitions: int,
    tag: str,
    *,
    isolation_level: str = "read_committed",
    timeout_s: float = CONSUME_TIMEOUT_S,
) -> list[ReadRecord]:
    """Every record of ``topic`` up to the sentinel ``tag`` of each partition (sentinels left out),
    read at ``isolation_level``, in (partition, offset) order."""
    consumer = isolation_consumer(bootstrap, isolation_level)
    try:
        consumer.assign([TopicPartition(topic, partition, 0) for partition in range(partitions)])
        read: list[ReadRecord] = []
        done: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while len(done) < partitions:
            assert time.monotonic() < deadline, (
                f"{isolation_level}: sentinel {tag!r} not read in partitions "
                f"{sorted(set(range(partitions)) - done)} of {topic} after {timeout_s} s ({len(read)} read)"
            )
            messages: list[Any] = consumer.consume(num_messages=1_000, timeout=0.2)
            for message in messages:
                error = message.error()
                if error is not None:
                    raise KafkaException(error)
                if message.partition() in done:
                    continue
                if message.key() == SENTINEL_KEY:  # this one, or an earlier test's in the topic
                    if message.value() == tag.encode():
                        done.add(message.partition())
                    continue
                read.append(
                    ReadRecord(
                        message.partition(),
                        message.offset(),
                        message.key(),
                        message.value(),
                        normalize_headers(message.headers()),
                    )
                )
        read.sort(key=lambda record: (record.partition, record.offset))
        return read
    finally:
        consumer.close()


def values(records: Iterable[ReadRecord]) -> list[bytes]:
    return [record.value or b"" for record in records]


def kafka_error(failure: BaseException) -> KafkaError:
    assert isinstance(failure, KafkaException), f"not a KafkaException: {failure!r}"
    error = failure.args[0]
    assert isinstance(error, KafkaError), f"a KafkaException without a KafkaError: {failure!r}"
    return error


def by_partition(records: list[ReadRecord]) -> dict[int, list[bytes]]:
    """The values read, per partition, in offset order."""
    grouped: dict[int, list[bytes]] = defaultdict(list)
    for record in records:
        grouped[record.partition].append(record.value or b"")
    return dict(grouped)


def commit_or_abort(producer: Producer) -> bool:
    """commit_transaction, retried while librdkafka says the error is retriable; an abortable error
    aborts. Whether the transaction committed, as the producer was told."""
    deadline = time.monotonic() + TRANSACTION_TIMEOUT_S
    while True:
        try:
            producer.commit_transaction(TRANSACTION_TIMEOUT_S)
            return True
        except KafkaException as failure:
            error = kafka_error(failure)
            assert not error.fatal(), error
            assert time.monotonic() < deadline, error
            if error.txn_requires_abort():
                producer.abort_transaction(TRANSACTION_TIMEOUT_S)
                return False
            assert error.retriable(), error
