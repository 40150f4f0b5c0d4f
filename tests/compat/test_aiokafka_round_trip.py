"""aiokafka: produce 10,000 keyed records with headers under each codec, read them back with its
consumer (manual assignment, no group; the topic made with confluent-kafka's admin client); and
its admin client creating and deleting a topic, reading the answers as its own tests do."""

from __future__ import annotations

import asyncio
import time

import aiokafka.codec
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from tests.compat.conftest import BrokerProcess
from tests.compat.support import (
    CODECS,
    CONSUME_TIMEOUT_S,
    DELIVERY_TIMEOUT_S,
    ReadRecord,
    SentRecord,
    assert_round_trip,
    create_topic,
    make_records,
    normalize_headers,
    unique_topic,
)

pytestmark = pytest.mark.compat

RECORDS = make_records(seed=23)


async def _produce(bootstrap: str, topic: str, codec: str) -> list[SentRecord]:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        compression_type=None if codec == "none" else codec,
        acks="all",
        linger_ms=20,
        max_batch_size=256 * 1024,
        max_request_size=8 * 1024 * 1024,
    )
    await producer.start()
    try:
        futures = [
            (record, await producer.send(topic, key=record.key, value=record.value, headers=record.headers))
            for record in RECORDS
        ]
        await producer.flush()
        sent = []
        for record, future in futures:
            metadata = await asyncio.wait_for(future, DELIVERY_TIMEOUT_S)
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
        await producer.stop()


async def _read_all(bootstrap: str, topic: str, partitions: int, expected_count: int) -> list[ReadRecord]:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=4 * 1024 * 1024,
    )
    await consumer.start()
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
            batches = await consumer.getmany(timeout_ms=500, max_records=10_000)
            for messages in batches.values():
                read.extend(
                    ReadRecord(
                        message.partition,
                        message.offset,
                        message.key,
                        message.value,
                        normalize_headers(message.headers),
                    )
                    for message in messages
                )
        end_offsets = await consumer.end_offsets(assigned)
        assert sum(end_offsets.values()) == expected_count
        read.sort(key=lambda record: (record.partition, record.offset))
        return read
    finally:
        await consumer.stop()


def test_aiokafka_has_every_codec() -> None:
    assert (aiokafka.codec.has_gzip(), aiokafka.codec.has_snappy(), aiokafka.codec.has_lz4()) == (
        True,
        True,
        True,
    )
    assert aiokafka.codec.has_zstd()


@pytest.mark.parametrize("partitions", [1, 3])
@pytest.mark.parametrize("codec", CODECS)
def test_aiokafka_round_trip(shared_broker: BrokerProcess, codec: str, partitions: int) -> None:
    topic = unique_topic(f"aiokafka-{codec}")
    create_topic(shared_broker.bootstrap, topic, partitions)

    async def scenario() -> tuple[list[SentRecord], list[ReadRecord]]:
        sent = await _produce(shared_broker.bootstrap, topic, codec)
        read = await _read_all(shared_broker.bootstrap, topic, partitions, len(sent))
        return sent, read

    sent, read = asyncio.run(asyncio.wait_for(scenario(), CONSUME_TIMEOUT_S + DELIVERY_TIMEOUT_S))
    assert {record.partition for record in sent} == set(range(partitions))
    assert_round_trip(sent, read)


def test_aiokafka_admin_creates_and_deletes_a_topic(shared_broker: BrokerProcess) -> None:
    """aiokafka's own admin test asserts that a created topic's error message is None (Kafka
    answers null, not an empty string), and that a deleted topic is gone from list_topics()."""
    topic = unique_topic("aiokafka-admin")

    async def scenario() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=shared_broker.bootstrap)
        await admin.start()
        try:
            created = await admin.create_topics([NewTopic(topic, 2, 1)])
            assert created.topic_errors == [(topic, 0, None)]
            again = await admin.create_topics([NewTopic(topic, 2, 1)])
            [(name, error_code, message)] = again.topic_errors
            assert (name, error_code) == (topic, 36)  # TOPIC_ALREADY_EXISTS
            assert message
            assert topic in await admin.list_topics()
            deleted = await admin.delete_topics([topic])
            assert [tuple(answer)[:2] for answer in deleted.topic_error_codes] == [(topic, 0)]
            assert topic not in await admin.list_topics()
        finally:
            await admin.close()

    asyncio.run(asyncio.wait_for(scenario(), 60))
