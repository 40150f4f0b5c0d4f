"""What survives a broker stop: an idempotent producer across a SIGTERM restart (no duplicate, no
gap), a clean restart (records and topic configs kept), and kill -9 with flush-every-message (every
acknowledged record readable, in order, nothing torn served)."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import ConfigResource, ResourceType  # type: ignore[attr-defined]  # re-exported untyped

from tests.compat.conftest import BrokerProcess, StartBroker
from tests.compat.support import (
    ADMIN_TIMEOUT_S,
    DELIVERY_TIMEOUT_S,
    admin_client,
    assert_round_trip,
    confluent_produce,
    confluent_producer,
    confluent_read_all,
    create_topic,
    make_records,
    unique_topic,
)

pytestmark = pytest.mark.compat

# Records produced after the restart finished, so the producer demonstrably carries on through it.
RECORDS_AFTER_RESTART = 2_000
PRODUCE_CHUNK = 100
PRODUCE_TEST_TIMEOUT_S = 120.0


class ProduceLog:
    """Delivery reports, filled from the producer's poll() in the producing thread."""

    def __init__(self) -> None:
        self.acknowledged: list[tuple[int, int]] = []  # (sequence, offset)
        self.failures: list[str] = []

    def callback(self, sequence: int) -> object:
        def on_delivery(error: KafkaError | None, message: object) -> None:
            if error is not None:
                self.failures.append(f"record {sequence}: {error}")
            else:
                self.acknowledged.append((sequence, message.offset()))  # type: ignore[attr-defined]

        return on_delivery


def _produce_through(
    broker_event: threading.Event, producer: object, topic: str, produce_log: ProduceLog
) -> int:
    """Produce numbered records in small paced chunks until ``broker_event`` is set and
    RECORDS_AFTER_RESTART more went out; return how many were produced."""
    deadline = time.monotonic() + PRODUCE_TEST_TIMEOUT_S
    sequence = 0
    produced_after = 0
    while produced_after < RECORDS_AFTER_RESTART:
        assert time.monotonic() < deadline, "the producer never got past the broker restart"
        for _ in range(PRODUCE_CHUNK):
            while True:
                try:
                    producer.produce(  # type: ignore[attr-defined]
                        topic, key=b"k", value=b"%d" % sequence, on_delivery=produce_log.callback(sequence)
                    )
                    break
                except BufferError:
                    producer.poll(0.05)  # type: ignore[attr-defined]
            sequence += 1
            if broker_event.is_set():
                produced_after += 1
        producer.poll(0.005)  # type: ignore[attr-defined]
    return sequence


def _restart_when(
    produce_log: ProduceLog, acknowledged_before: int, action: object, done: threading.Event
) -> threading.Thread:
    def run() -> None:
        deadline = time.monotonic() + PRODUCE_TEST_TIMEOUT_S
        while len(produce_log.acknowledged) < acknowledged_before and time.monotonic() < deadline:
            time.sleep(0.01)
        try:
            action()  # type: ignore[operator]
        finally:
            done.set()

    thread = threading.Thread(target=run, name="broker-restarter", daemon=True)
    thread.start()
    return thread


def test_idempotent_producer_across_sigterm_restart(start_broker: StartBroker) -> None:
    broker = start_broker()
    topic = unique_topic("idempotent")
    create_topic(broker.bootstrap, topic, 1)
    producer = confluent_producer(
        broker.bootstrap,
        enable_idempotence=True,
        linger_ms=5,
        batch_num_messages=500,
        message_timeout_ms=int(PRODUCE_TEST_TIMEOUT_S * 1000),
        reconnect_backoff_ms=50,
        reconnect_backoff_max_ms=500,
        retry_backoff_ms=50,
    )
    produce_log = ProduceLog()
    restarted = threading.Event()
    restarter = _restart_when(produce_log, 3_000, broker.restart, restarted)
    produced = _produce_through(restarted, producer, topic, produce_log)
    assert producer.flush(DELIVERY_TIMEOUT_S) == 0
    restarter.join(DELIVERY_TIMEOUT_S)
    assert broker.starts == 2 and broker.running
    assert not produce_log.failures, produce_log.failures[:5]
    assert len(produce_log.acknowledged) == produced

    read = confluent_read_all(broker.bootstrap, topic, 1)
    values = [int(record.value or b"-1") for record in read]
    assert values == list(range(produced)), "duplicates or gaps across the restart"
    assert [record.offset for record in read] == list(range(produced))
    assert sorted(produce_log.acknowledged) == [(sequence, sequence) for sequence in range(produced)]


def _describe_topic_configs(bootstrap: str, topic: str) -> dict[str, tuple[str | None, int]]:
    admin = admin_client(bootstrap)
    resource = ConfigResource(ResourceType.TOPIC, topic)
    entries = admin.describe_configs([resource], request_timeout=ADMIN_TIMEOUT_S)[resource].result(
        ADMIN_TIMEOUT_S
    )
    return {name: (entry.value, int(entry.source)) for name, entry in entries.items()}


def test_clean_restart_keeps_records_and_topic_configs(start_broker: StartBroker) -> None:
    broker = start_broker()
    topic = unique_topic("restart")
    topic_config = {"retention.ms": "123456789", "max.message.bytes": "2000000", "cleanup.policy": "delete"}
    create_topic(broker.bootstrap, topic, 2, topic_config)
    sent = confluent_produce(
        confluent_producer(broker.bootstrap, compression_type="lz4"), topic, make_records(3_000, seed=5)
    )
    configs_before = _describe_topic_configs(broker.bootstrap, topic)
    for name, value in topic_config.items():
        assert configs_before[name][0] == value

    assert broker.stop() == 0, "SIGTERM did not stop the broker cleanly"
    broker.start()

    assert_round_trip(sent, confluent_read_all(broker.bootstrap, topic, 2))
    assert _describe_topic_configs(broker.bootstrap, topic) == configs_before
    metadata = admin_client(broker.bootstrap).list_topics(topic, timeout=ADMIN_TIMEOUT_S)
    assert sorted(metadata.topics[topic].partitions) == [0, 1]


def test_kill_9_during_produce_keeps_every_acknowledged_record(start_broker: StartBroker) -> None:
    broker: BrokerProcess = start_broker({"log.flush.interval.messages": "1"})
    topic = unique_topic("kill9")
    create_topic(broker.bootstrap, topic, 1)
    producer = confluent_producer(
        broker.bootstrap,
        enable_idempotence=False,
        max_in_flight_requests_per_connection=1,  # so acknowledged order is log order
        linger_ms=2,
        batch_num_messages=200,
        message_timeout_ms=int(PRODUCE_TEST_TIMEOUT_S * 1000),
        reconnect_backoff_ms=50,
        reconnect_backoff_max_ms=500,
        retry_backoff_ms=50,
    )
    produce_log = ProduceLog()

    def kill_then_start() -> None:
        broker.kill()
        time.sleep(0.3)  # the producer keeps producing into a dead broker for a moment
        broker.start()

    restarted = threading.Event()
    restarter = _restart_when(produce_log, 2_000, kill_then_start, restarted)
    produced = _produce_through(restarted, producer, topic, produce_log)
    producer.flush(DELIVERY_TIMEOUT_S)
    restarter.join(DELIVERY_TIMEOUT_S)
    assert broker.starts == 2 and broker.running
    assert len(produce_log.acknowledged) >= 2_000

    # Reading to the end raises on any error the client sees (a torn or corrupt batch included).
    read = confluent_read_all(broker.bootstrap, topic, 1)
    assert [record.offset for record in read] == list(range(len(read)))
    value_at = {record.offset: record.value for record in read}
    sent_values = {b"%d" % sequence for sequence in range(produced)}
    assert all(value in sent_values for value in value_at.values()), "a record we never sent was served"
    for sequence, offset in produce_log.acknowledged:
        assert value_at.get(offset) == b"%d" % sequence, (
            f"acknowledged record {sequence} lost at offset {offset}"
        )
    offsets_in_sequence_order = [offset for _, offset in sorted(produce_log.acknowledged)]
    assert offsets_in_sequence_order == sorted(offsets_in_sequence_order), "acknowledged records out of order"
