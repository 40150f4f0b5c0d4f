"""Fetch long-poll: a fetch with max_wait_ms and min_bytes=1 on an empty partition is answered as soon
as a record arrives, and with nothing when nothing arrives before max_wait_ms."""

from __future__ import annotations

import threading
import time

import pytest

from strom.protocol.errors import ErrorCode
from strom.protocol.messages.fetch import FetchRequest, FetchResponse
from strom.protocol.records import iter_records
from tests.compat.conftest import BrokerProcess
from tests.compat.support import confluent_producer, create_topic, unique_topic
from tests.compat.wire import WireClient

pytestmark = pytest.mark.compat

FETCH_VERSION = 12  # the newest version that names topics (13+ use topic ids)
MAX_WAIT_MS = 2_000
PRODUCE_AFTER_S = 0.3


def _fetch_request(topic: str, max_wait_ms: int) -> FetchRequest:
    return FetchRequest(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=1024 * 1024,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            FetchRequest.FetchTopic(
                topic=topic,
                partitions=[
                    FetchRequest.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1024 * 1024)
                ],
            )
        ],
        forgotten_topics_data=[],
        rack_id="",
    )


def _only_partition(response: FetchResponse) -> FetchResponse.PartitionData:
    assert response.error_code == ErrorCode.NONE
    [topic_response] = response.responses
    [partition] = topic_response.partitions
    assert partition.error_code == ErrorCode.NONE
    return partition


def test_fetch_returns_as_soon_as_a_record_is_produced(shared_broker: BrokerProcess) -> None:
    topic = unique_topic("long-poll")
    create_topic(shared_broker.bootstrap, topic, 1)
    producer = confluent_producer(shared_broker.bootstrap, linger_ms=0)
    producer.flush(10)  # metadata and connection ready before the clock starts

    def produce_later() -> None:
        time.sleep(PRODUCE_AFTER_S)
        producer.produce(topic, key=b"k", value=b"wake up")
        producer.flush(10)

    with WireClient(shared_broker.port) as client:
        started = time.monotonic()
        correlation_id = client.send(_fetch_request(topic, MAX_WAIT_MS), FETCH_VERSION)
        producing = threading.Thread(target=produce_later, name="late-producer")
        producing.start()
        response = client.read_response(FetchResponse, FetchRequest.API_KEY, FETCH_VERSION, correlation_id)
        elapsed_s = time.monotonic() - started
        producing.join(10)

    partition = _only_partition(response)
    assert partition.high_watermark == 1
    records = list(iter_records(partition.records or b""))
    assert [(record.offset, record.key, record.value) for record in records] == [(0, b"k", b"wake up")]
    # Loosely: answered because of the record, not because max_wait_ms ran out.
    assert elapsed_s < MAX_WAIT_MS / 1000 * 0.9, f"fetch took {elapsed_s:.2f} s"


def test_fetch_on_an_empty_partition_waits_and_returns_nothing(shared_broker: BrokerProcess) -> None:
    topic = unique_topic("long-poll-empty")
    create_topic(shared_broker.bootstrap, topic, 1)
    max_wait_ms = 500
    with WireClient(shared_broker.port) as client:
        started = time.monotonic()
        response = client.round_trip(_fetch_request(topic, max_wait_ms), FetchResponse, FETCH_VERSION)
        elapsed_s = time.monotonic() - started
    partition = _only_partition(response)
    assert partition.high_watermark == 0
    assert not partition.records
    assert elapsed_s >= max_wait_ms / 1000 * 0.5, f"an empty fetch came back after {elapsed_s:.3f} s"
