"""kafka-python: create a topic with its admin client, produce 10,000 keyed records with headers under
each codec it can write, read them back with its consumer (manual assignment, no group)."""

from __future__ import annotations

import time
import warnings

import pytest

from tests.compat.conftest import BrokerProcess
from tests.compat.support import (
    CODECS,
    CONSUME_TIMEOUT_S,
    DELIVERY_TIMEOUT_S,
    ReadRecord,
    SentRecord,
    assert_round_trip,
    make_records,
    normalize_headers,
    unique_topic,
)

# kafka-python 3 loads its protocol schemas with importlib.resources.read_text/open_text, deprecated in 3.11;
# the suite turns warnings into errors, so the import (and any lazy schema load) is let through here.
KAFKA_PYTHON_WARNING = "(read|open)_text is deprecated"
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=KAFKA_PYTHON_WARNING, category=DeprecationWarning)
    import kafka.codec
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic


pytestmark = [
    pytest.mark.compat,
    pytest.mark.filterwarnings(f"ignore:{KAFKA_PYTHON_WARNING}:DeprecationWarning"),
]

# kafka-python is pure Python and much slower per record than librdkafka: large batches keep it quick.
RECORDS = make_records(seed=11)
CODEC_AVAILABLE = {
    "none": True,
    "gzip": kafka.codec.has_gzip(),
    "snappy": kafka.codec.has_snappy(),  # needs python-snappy, which this venv does not have
    "lz4": kafka.codec.has_lz4(),
    "zstd": kafka.codec.has_zstd(),
}


def _create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)
    try:
        admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    finally:
        admin.close()


def _produce(bootstrap: str, topic: str, codec: str) -> list[SentRecord]:
    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        compression_type=None if codec == "none" else codec,
        acks="all",
        linger_ms=20,
        batch_size=256 * 1024,
        max_request_size=8 * 1024 * 1024,
    )
    try:
        futures = [
            (record, producer.send(topic, key=record.key, value=record.value, headers=record.headers))
            for record in RECORDS
        ]
        producer.flush(DELIVERY_TIMEOUT_S)
        sent = []
        for record, future in futures:
            metadata = future.get(timeout=DELIVERY_TIMEOUT_S)
            sent.append(
                SentRecord(
                    record.sequence,
                    record.key,
                    record.value,
                    record.headers,
                    metadata.partition,
                    metadata.offset,
                )
            )
        return sent
    finally:
        producer.close(timeout=10)


def _read_all(bootstrap: str, topic: str, partitions: int, expected_count: int) -> list[ReadRecord]:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=4 * 1024 * 1024,
    )
    try:
        assigned = [TopicPartition(topic, partition) for partition in range(partitions)]
        consumer.assign(assigned)
        for partition in assigned:
            consumer.seek(partition, 0)
        read: list[ReadRecord] = []
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        while len(read) < expected_count:
            assert time.monotonic() < deadline, (
                f"read {len(read)} of {expected_count} in {CONSUME_TIMEOUT_S} s"
            )
            for batch in consumer.poll(timeout_ms=500, max_records=10_000).values():
                read.extend(
                    ReadRecord(
                        message.partition,
                        message.offset,
                        message.key,
                        message.value,
                        normalize_headers(message.headers),
                    )
                    for message in batch
                )
        # Nothing beyond what was sent: every partition's position is its end offset.
        end_offsets = consumer.end_offsets(assigned)
        assert sum(end_offsets.values()) == expected_count
        read.sort(key=lambda record: (record.partition, record.offset))
        return read
    finally:
        consumer.close()


def test_kafka_python_lacks_only_snappy() -> None:
    """Say which codecs this client cannot write here (so a missing one is reported, not skipped)."""
    missing = sorted(codec for codec, available in CODEC_AVAILABLE.items() if not available)
    assert missing in ([], ["snappy"]), missing


@pytest.mark.parametrize("partitions", [1, 3])
@pytest.mark.parametrize("codec", [codec for codec in CODECS if CODEC_AVAILABLE[codec]])
def test_kafka_python_round_trip(shared_broker: BrokerProcess, codec: str, partitions: int) -> None:
    topic = unique_topic(f"kafka-python-{codec}")
    _create_topic(shared_broker.bootstrap, topic, partitions)
    sent = _produce(shared_broker.bootstrap, topic, codec)
    assert {record.partition for record in sent} == set(range(partitions))
    read = _read_all(shared_broker.bootstrap, topic, partitions, len(sent))
    assert_round_trip(sent, read)
