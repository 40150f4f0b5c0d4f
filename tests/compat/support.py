"""Shared pieces of the compat tests: the records we send, the check of what came back, and the
confluent-kafka calls most tests need (create a topic, produce with delivery reports, read back)."""

from __future__ import annotations

import functools
import itertools
import random
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]  # re-exported untyped

RECORD_COUNT = 10_000
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
ADMIN_TIMEOUT_S = 30.0
CONSUME_TIMEOUT_S = 60.0
DELIVERY_TIMEOUT_S = 60.0

Headers = list[tuple[str, bytes | None]]
AnyHeaders = Iterable[tuple[str, str | bytes | None]] | dict[str, str | bytes | None] | None


@dataclass(frozen=True)
class SentRecord:
    """A record as produced; ``partition``/``offset`` come from the client's acknowledgement."""

    sequence: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    partition: int = -1
    offset: int = -1


@dataclass(frozen=True)
class ReadRecord:
    """A record as a client read it back."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers


def unique_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def make_records(count: int = RECORD_COUNT, *, seed: int = 7, binary: bool = True) -> list[SentRecord]:
    """Keyed records with headers. Binary mode covers every byte value, an empty key, null values,
    an empty-valued header and a repeated header name; text mode keeps to printable ASCII (kcat)."""
    generator = random.Random(seed)
    records = []
    for sequence in range(count):
        key = f"key-{sequence % 97}".encode()
        if binary:
            value: bytes | None = generator.randbytes(generator.randrange(0, 160))
            if sequence % 1000 == 13:
                value = None
            if sequence % 1000 == 17:
                key = b""
            headers: Headers = [
                ("seq", str(sequence).encode()),
                ("bin", generator.randbytes(8)),
                ("seq", b"again"),
                ("empty", b""),
            ]
        else:
            filler = "".join(
                generator.choices("abcdefghijklmnopqrstuvwxyz0123456789", k=generator.randrange(1, 80))
            )
            value = f"value-{sequence}-{filler}".encode()
            headers = [("source", b"kcat"), ("run", b"compat")]
        records.append(SentRecord(sequence, key, value, headers))
    return records


def assert_round_trip(
    sent: Sequence[SentRecord], read: Sequence[ReadRecord], *, first_offset: int = 0
) -> None:
    """What came back is exactly what went in.

    Per partition: offsets contiguous from ``first_offset``; records in the order they were sent
    (sequence numbers increase with the offset); key, value and headers byte for byte. When the
    producer reported offsets, each record sits at the offset it was acknowledged with.
    """
    assert len(read) == len(sent), f"read {len(read)} records, sent {len(sent)}"
    sent_by_partition: dict[int, list[SentRecord]] = defaultdict(list)
    for sent_record in sent:
        sent_by_partition[sent_record.partition].append(sent_record)
    read_by_partition: dict[int, list[ReadRecord]] = defaultdict(list)
    for read_record in read:
        read_by_partition[read_record.partition].append(read_record)
    if set(sent_by_partition) == {-1}:  # the producer did not say where its records went
        assert len(read_by_partition) == 1, f"records spread over partitions {sorted(read_by_partition)}"
        sent_by_partition = {next(iter(read_by_partition)): sent_by_partition[-1]}
    assert sorted(read_by_partition) == sorted(sent_by_partition)
    for partition, read_records in read_by_partition.items():
        offsets = [record.offset for record in read_records]
        expected_offsets = list(range(first_offset, first_offset + len(read_records)))
        assert offsets == expected_offsets, (
            f"partition {partition}: offsets not contiguous from {first_offset}"
        )
        expected = sorted(sent_by_partition[partition], key=lambda record: record.sequence)
        assert len(expected) == len(read_records), f"partition {partition}: count differs"
        for want, got in zip(expected, read_records):
            if want.offset >= 0:
                assert got.offset == want.offset, f"record {want.sequence}: acknowledged at {want.offset}"
            assert (got.key, got.value, got.headers) == (want.key, want.value, want.headers), (
                f"partition {partition} offset {got.offset}: record {want.sequence} differs"
            )


def normalize_headers(headers: AnyHeaders) -> Headers:
    """Headers as a list of (name, bytes or None), whatever shape the client returned them in."""
    pairs = headers.items() if isinstance(headers, dict) else headers or []
    return [(name, value.encode() if isinstance(value, str) else value) for name, value in pairs]


# -- confluent-kafka --------------------------------------------------------------------------------


def admin_client(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "broker.address.family": "v4"})


def create_topic(
    bootstrap: str, topic: str, partitions: int = 1, config: dict[str, str] | None = None
) -> None:
    admin = admin_client(bootstrap)  # kept alive until the result is in: dropping it cancels the request
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1, config=config or {})],
        operation_timeout=ADMIN_TIMEOUT_S,
        request_timeout=ADMIN_TIMEOUT_S,
    )
    futures[topic].result(ADMIN_TIMEOUT_S)


def confluent_producer(bootstrap: str, **settings: object) -> Producer:
    config: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "broker.address.family": "v4",
        "linger.ms": 20,
        "batch.num.messages": 10_000,
        "acks": "all",
        "message.timeout.ms": 60_000,
    }
    config.update({key.replace("_", "."): value for key, value in settings.items()})
    return Producer(config)


def confluent_produce(
    producer: Producer, topic: str, records: Sequence[SentRecord], *, partition: int | None = None
) -> list[SentRecord]:
    """Produce every record, wait for all acknowledgements; return the records with their offsets."""
    acknowledged: dict[int, SentRecord] = {}
    failures: list[str] = []

    def on_delivery(error: KafkaError | None, message: Any, *, record: SentRecord) -> None:
        if error is not None:
            failures.append(f"record {record.sequence}: {error}")
            return
        acknowledged[record.sequence] = SentRecord(
            record.sequence,
            record.key,
            record.value,
            record.headers,
            message.partition(),
            message.offset(),
        )

    for record in records:
        extra: dict[str, Any] = {} if partition is None else {"partition": partition}
        while True:
            try:
                producer.produce(
                    topic,
                    value=record.value,
                    key=record.key,
                    headers=list(record.headers),
                    on_delivery=functools.partial(on_delivery, record=record),
                    **extra,
                )
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    remaining = producer.flush(DELIVERY_TIMEOUT_S)
    assert remaining == 0, f"{remaining} records not delivered within {DELIVERY_TIMEOUT_S} s"
    assert not failures, failures[:5]
    return [acknowledged[record.sequence] for record in records]


def confluent_consumer(bootstrap: str, **settings: object) -> Consumer:
    config: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "broker.address.family": "v4",
        "group.id": "strom-compat",  # required by the client; never used: manual assignment only
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": True,
    }
    config.update({key.replace("_", "."): value for key, value in settings.items()})
    return Consumer(config)


def confluent_read_all(
    bootstrap: str,
    topic: str,
    partitions: int,
    *,
    start_offset: int = 0,
    timeout_s: float = CONSUME_TIMEOUT_S,
    **settings: object,
) -> list[ReadRecord]:
    """Read every partition from ``start_offset`` to its end (partition EOF), failing on any error.
    ``settings``: more consumer settings (``isolation_level="read_committed"``)."""
    consumer = confluent_consumer(bootstrap, **settings)
    try:
        consumer.assign([TopicPartition(topic, partition, start_offset) for partition in range(partitions)])
        at_end: set[int] = set()
        read: list[ReadRecord] = []
        deadline = time.monotonic() + timeout_s
        while len(at_end) < partitions:
            assert time.monotonic() < deadline, (
                f"not at the end of {topic} after {timeout_s} s ({len(read)} read)"
            )
            messages: list[Any] = consumer.consume(num_messages=10_000, timeout=0.5)
            for message in messages:
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        at_end.add(message.partition())
                        continue
                    raise KafkaException(error)
                at_end.discard(message.partition())
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


def chunks(items: Sequence[SentRecord], size: int) -> Iterable[Sequence[SentRecord]]:
    iterator = iter(items)
    while chunk := list(itertools.islice(iterator, size)):
        yield chunk
