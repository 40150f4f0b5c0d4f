"""Connections that hoard, idle or trickle, against a real broker: the broker's memory stays bounded
while connections pipeline Fetches and never read, idle connections are closed after
connections.max.idle.ms, a request sent a byte at a time is dropped, and everyone else is served
meanwhile, with pipelined answers in order."""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from strom.protocol.headers import decode_response_header, encode_request
from strom.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from strom.protocol.messages.fetch import FetchRequest, FetchResponse
from strom.protocol.messages.metadata import MetadataRequest, MetadataResponse
from tests.compat.hostile import (
    MIB,
    NeverReadingFetcher,
    create_topic,
    fetch_frame,
    fill_partition,
    rss_bytes,
)
from tests.compat.test_metrics import MetricsBroker, scrape, value
from tests.compat.wire import WireClient

pytestmark = pytest.mark.compat

HOARDED_BYTES = 40 * MIB
HOARDERS = 3
HOARDER_REQUESTS = 5_000
HOARDER_FETCH_BYTES = 64 * MIB
# Each hoarder may pin its unsent bound (32 MiB) plus one batch; the rest is slack for the
# allocator and the canary. Without the bounds the broker grew by gigabytes within seconds.
RSS_GROWTH_MAX_BYTES = 256 * MIB
CANARY_ROUNDS_MIN = 5
CANARY_RECORDS_PER_ROUND = 200
CANARY_ROUND_S_MAX = 15.0
SCENARIO_S_MAX = 120.0
IDLE_MS = 1_500
SLOW_IDLE_MS = 2_000  # the receive bound is min(30 s, connections.max.idle.ms)
SLOW_BYTE_INTERVAL_S = 0.1
RECORD_BATCH_BYTES_MIN = 900 * 1000  # fill_partition's batches


@pytest.fixture
def metrics_broker(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[MetricsBroker]:
    settings: dict[str, str] = getattr(request, "param", {})
    broker = MetricsBroker(tmp_path, settings)
    broker.start()
    try:
        yield broker
    finally:
        broker.close()


def _canary_round(producer: Producer, consumer: Consumer, topic: str, expected_total: int) -> int:
    """Produce a round of records and read them back; returns the records consumed so far."""
    for index in range(CANARY_RECORDS_PER_ROUND):
        producer.produce(topic, b"canary-%d" % index)
    assert producer.flush(CANARY_ROUND_S_MAX) == 0, "the canary's records were not acknowledged in time"
    consumed = expected_total - CANARY_RECORDS_PER_ROUND
    deadline = time.monotonic() + CANARY_ROUND_S_MAX
    while consumed < expected_total:
        assert time.monotonic() < deadline, f"the canary consumer starved at {consumed} of {expected_total}"
        for message in consumer.consume(num_messages=1000, timeout=0.5):
            assert message.error() is None, message.error()
            consumed += 1
    return consumed


def test_never_reading_fetchers_leave_memory_bounded_while_a_canary_is_served(
    metrics_broker: MetricsBroker,
) -> None:
    broker = metrics_broker
    fill_partition(broker.port, "hoarded", HOARDED_BYTES)
    with WireClient(broker.port) as client:
        create_topic(client, "canary")
    baseline = rss_bytes(broker.pid)
    hoarders = [
        NeverReadingFetcher(broker.port, "hoarded", HOARDER_REQUESTS, HOARDER_FETCH_BYTES)
        for _ in range(HOARDERS)
    ]
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "canary", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition("canary", 0, 0)])
    try:
        peak = baseline
        rounds = muted_seen = 0
        deadline = time.monotonic() + SCENARIO_S_MAX
        while rounds < CANARY_ROUNDS_MIN or muted_seen < HOARDERS:
            assert time.monotonic() < deadline, f"after {rounds} rounds only {muted_seen} hoarders were muted"
            for hoarder in hoarders:
                hoarder.pump()
            rounds += 1
            assert _canary_round(producer, consumer, "canary", rounds * CANARY_RECORDS_PER_ROUND) == (
                rounds * CANARY_RECORDS_PER_ROUND
            )
            peak = max(peak, rss_bytes(broker.pid))
            muted_seen = int(value(scrape(broker.metrics_port), "strom_connections_muted"))
        peak = max(peak, rss_bytes(broker.pid))
        print(
            f"broker RSS: {baseline / MIB:.0f} MiB before the hoarders, peak {peak / MIB:.0f} MiB"
            f" over {rounds} canary rounds"
        )
        assert peak - baseline < RSS_GROWTH_MAX_BYTES, (baseline, peak)
        # The hoarders are muted, each holding its bound's worth of answers nobody reads.
        samples = scrape(broker.metrics_port)
        assert value(samples, "strom_connection_held_bytes") >= HOARDERS * 8 * MIB
    finally:
        consumer.close()
        for hoarder in hoarders:
            hoarder.close()


@pytest.mark.parametrize("metrics_broker", [{"connections.max.idle.ms": str(IDLE_MS)}], indirect=True)
def test_idle_connections_are_closed_but_not_during_a_long_poll(metrics_broker: MetricsBroker) -> None:
    broker = metrics_broker
    with WireClient(broker.port) as idle, WireClient(broker.port) as polling, WireClient(broker.port) as busy:
        create_topic(busy, "quiet")
        for client in (idle, polling):
            assert client.round_trip(ApiVersionsRequest(), ApiVersionsResponse, 3).error_code == 0
        # A long poll twice as long as the idle time: the connection is waiting for us, not idle.
        poll = FetchRequest(
            max_wait_ms=2 * IDLE_MS,
            min_bytes=1,
            topics=[
                FetchRequest.FetchTopic(
                    topic="quiet",
                    partitions=[
                        FetchRequest.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=MIB)
                    ],
                )
            ],
        )
        poll_id = polling.send(poll, 12)
        started = time.monotonic()
        # A connection sending a request every third of the idle time stays open throughout.
        while time.monotonic() - started < 2 * IDLE_MS / 1000:
            assert busy.round_trip(MetadataRequest(topics=[]), MetadataResponse, 9).brokers
            time.sleep(IDLE_MS / 3 / 1000)
        answered = polling.read_response(FetchResponse, 1, 12, poll_id)
        assert answered.responses[0].partitions[0].error_code == 0
        assert idle.closed_by_peer(timeout_s=10 * IDLE_MS / 1000)
        assert busy.round_trip(ApiVersionsRequest(), ApiVersionsResponse, 3).error_code == 0
        # After its long poll was answered, the polling connection went idle too.
        assert polling.closed_by_peer(timeout_s=10 * IDLE_MS / 1000)
    assert value(scrape(broker.metrics_port), "strom_connections_closed_total", reason="idle") >= 2


@pytest.mark.parametrize("metrics_broker", [{"connections.max.idle.ms": str(SLOW_IDLE_MS)}], indirect=True)
def test_a_request_sent_a_byte_at_a_time_is_dropped_while_others_are_served(
    metrics_broker: MetricsBroker,
) -> None:
    broker = metrics_broker
    # Long enough that trickling it takes several times the receive bound.
    padded = encode_request(18, 3, 1, "slowloris" + "x" * 200, ApiVersionsRequest().encode(3))
    assert len(padded) * SLOW_BYTE_INTERVAL_S > 3 * SLOW_IDLE_MS / 1000
    slow = socket.create_connection(("127.0.0.1", broker.port))
    with WireClient(broker.port) as canary:
        started = time.monotonic()
        sent = 0
        closed = False
        while sent < len(padded) and not closed:
            try:
                slow.send(padded[sent : sent + 1])
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            sent += 1
            assert canary.round_trip(MetadataRequest(topics=None), MetadataResponse, 9).brokers
            readable, _, _ = select.select([slow], [], [], SLOW_BYTE_INTERVAL_S)
            if readable:
                closed = slow.recv(1) == b""
        elapsed = time.monotonic() - started
        slow.close()
        assert closed, f"the slow request was still being received after {elapsed:.1f} s ({sent} bytes)"
        assert sent < len(padded)
        # Bytes kept coming (never idle): it was the request's slowness that closed it.
        assert elapsed >= SLOW_IDLE_MS / 1000 * 0.9
        assert canary.round_trip(ApiVersionsRequest(), ApiVersionsResponse, 3).error_code == 0
    assert "a request has been arriving for more than" in broker.log_text()
    samples = scrape(broker.metrics_port)
    assert value(samples, "strom_connections_closed_total", reason="slow_request") == 1
    assert value(samples, "strom_connections_closed_total", reason="idle") == 0


def test_many_small_pipelined_requests_are_all_answered_in_order(metrics_broker: MetricsBroker) -> None:
    """More requests in one burst than a connection may have unanswered: the broker takes them in
    slices, and every answer comes back, in order."""
    requests = 5_000
    frames: list[bytes] = []
    for correlation_id in range(requests):
        if correlation_id % 2:
            body, api_key, version = MetadataRequest(topics=[]).encode(9), 3, 9
        else:
            body, api_key, version = ApiVersionsRequest().encode(3), 18, 3
        frames.append(encode_request(api_key, version, correlation_id, "pipeliner", body))
    with WireClient(metrics_broker.port) as client:
        sender = threading.Thread(target=client.send_raw, args=(b"".join(frames),))
        sender.start()
        try:
            for correlation_id in range(requests):
                answer = client.read_frame()
                api_key, version = (3, 9) if correlation_id % 2 else (18, 3)
                header, _ = decode_response_header(answer, api_key, version)
                assert header.correlation_id == correlation_id
        finally:
            sender.join(30)
        assert not sender.is_alive()


def test_pipelined_big_fetches_to_a_slow_reader_come_back_whole_and_in_order(
    metrics_broker: MetricsBroker,
) -> None:
    """A reader slower than the broker: its connection is muted and resumed many times over, and
    each Fetch answer is cut to what the connection may still buffer (at least one whole batch),
    but never reordered or lost."""
    broker = metrics_broker
    fill_partition(broker.port, "slow-reader", 8 * MIB)
    fetches = 12
    with WireClient(broker.port, timeout_s=60) as client:
        client.send_raw(
            b"".join(fetch_frame("slow-reader", index, HOARDER_FETCH_BYTES) for index in range(fetches))
        )
        for correlation_id in range(fetches):
            time.sleep(0.05)
            answer = client.read_frame()
            header, offset = decode_response_header(answer, 1, 12)
            assert header.correlation_id == correlation_id
            response = FetchResponse.decode(memoryview(answer)[offset:], 12)
            partition = response.responses[0].partitions[0]
            assert partition.error_code == 0
            assert int.from_bytes(bytes(partition.records[:8]), "big") == 0  # from the first batch
            assert len(partition.records) >= RECORD_BATCH_BYTES_MIN
