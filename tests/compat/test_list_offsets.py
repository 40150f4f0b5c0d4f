"""ListOffsets through confluent-kafka: by timestamp (the first offset whose timestamp is >= the asked
time), earliest and latest (watermarks and AdminClient.list_offsets), and the log start moving with
DeleteRecords."""

from __future__ import annotations

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]  # re-exported untyped

from tests.compat.conftest import BrokerProcess
from tests.compat.support import (
    ADMIN_TIMEOUT_S,
    admin_client,
    confluent_consumer,
    confluent_producer,
    create_topic,
    unique_topic,
)

pytestmark = pytest.mark.compat

RECORD_COUNT = 100
BASE_TIMESTAMP_MS = 1_700_000_000_000
TIMESTAMP_STEP_MS = 10


def _produce_timestamped(bootstrap: str, topic: str) -> None:
    """Records i = 0..99 at BASE + 10 i ms, in batches small enough that many batches exist."""
    producer = confluent_producer(bootstrap, linger_ms=0, batch_num_messages=7)
    for index in range(RECORD_COUNT):
        producer.produce(
            topic,
            value=b"record-%d" % index,
            key=b"k",
            timestamp=BASE_TIMESTAMP_MS + index * TIMESTAMP_STEP_MS,
        )
        if index % 7 == 6:
            producer.flush(10)  # force many batches, so the lookup must go inside and across batches
    assert producer.flush(30) == 0


@pytest.fixture(scope="module")
def timestamped_topic(shared_broker: BrokerProcess) -> str:
    topic = unique_topic("timestamps")
    create_topic(shared_broker.bootstrap, topic, 1)
    _produce_timestamped(shared_broker.bootstrap, topic)
    return topic


@pytest.mark.parametrize(
    ("asked_ms", "expected_offset"),
    [
        (0, 0),  # before everything: the first record
        (BASE_TIMESTAMP_MS, 0),  # exact first timestamp
        (BASE_TIMESTAMP_MS + 50, 5),  # exact match inside the log
        (BASE_TIMESTAMP_MS + 55, 6),  # between two records: the later one
        (BASE_TIMESTAMP_MS + 99 * TIMESTAMP_STEP_MS, 99),  # the last record
        (BASE_TIMESTAMP_MS + 99 * TIMESTAMP_STEP_MS + 1, -1),  # after everything: none (end)
    ],
)
def test_offsets_for_times(
    shared_broker: BrokerProcess, timestamped_topic: str, asked_ms: int, expected_offset: int
) -> None:
    consumer = confluent_consumer(shared_broker.bootstrap)
    try:
        [found] = consumer.offsets_for_times(
            [TopicPartition(timestamped_topic, 0, asked_ms)], timeout=ADMIN_TIMEOUT_S
        )
    finally:
        consumer.close()
    assert found.error is None
    assert found.offset == expected_offset


def test_watermarks_and_admin_list_offsets(shared_broker: BrokerProcess, timestamped_topic: str) -> None:
    consumer = confluent_consumer(shared_broker.bootstrap)
    try:
        low, high = consumer.get_watermark_offsets(
            TopicPartition(timestamped_topic, 0), timeout=ADMIN_TIMEOUT_S, cached=False
        )
    finally:
        consumer.close()
    assert (low, high) == (0, RECORD_COUNT)

    partition = TopicPartition(timestamped_topic, 0)
    admin = admin_client(shared_broker.bootstrap)
    results = {}
    for name, spec in [
        ("earliest", OffsetSpec.earliest()),  # type: ignore[no-untyped-call]
        ("latest", OffsetSpec.latest()),  # type: ignore[no-untyped-call]
        ("max_timestamp", OffsetSpec.max_timestamp()),  # type: ignore[no-untyped-call]
        ("for_timestamp", OffsetSpec.for_timestamp(BASE_TIMESTAMP_MS + 421)),
    ]:
        futures = admin.list_offsets({partition: spec}, request_timeout=ADMIN_TIMEOUT_S)
        results[name] = futures[partition].result(ADMIN_TIMEOUT_S)
    assert results["earliest"].offset == 0
    assert results["latest"].offset == RECORD_COUNT
    assert results["max_timestamp"].offset == RECORD_COUNT - 1
    assert results["max_timestamp"].timestamp == BASE_TIMESTAMP_MS + (RECORD_COUNT - 1) * TIMESTAMP_STEP_MS
    assert results["for_timestamp"].offset == 43
    assert results["for_timestamp"].timestamp == BASE_TIMESTAMP_MS + 43 * TIMESTAMP_STEP_MS


def test_earliest_follows_delete_records(shared_broker: BrokerProcess) -> None:
    topic = unique_topic("delete-records")
    create_topic(shared_broker.bootstrap, topic, 1)
    _produce_timestamped(shared_broker.bootstrap, topic)
    admin = admin_client(shared_broker.bootstrap)
    futures = admin.delete_records([TopicPartition(topic, 0, 30)], request_timeout=ADMIN_TIMEOUT_S)
    [deleted] = [future.result(ADMIN_TIMEOUT_S) for future in futures.values()]
    assert deleted.low_watermark == 30
    consumer = confluent_consumer(shared_broker.bootstrap)
    try:
        low, high = consumer.get_watermark_offsets(
            TopicPartition(topic, 0), timeout=ADMIN_TIMEOUT_S, cached=False
        )
        # A time before the new log start answers with the log start, not a deleted offset.
        [found] = consumer.offsets_for_times(
            [TopicPartition(topic, 0, BASE_TIMESTAMP_MS)], timeout=ADMIN_TIMEOUT_S
        )
    finally:
        consumer.close()
    assert (low, high) == (30, RECORD_COUNT)
    assert found.offset == 30
