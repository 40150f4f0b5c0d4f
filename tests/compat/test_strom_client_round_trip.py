"""strom's own client against a real strom broker: Producer, Consumer (manual assignment), Admin."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pytest

from strom.client.admin import (
    Admin,
    AlterConfigOperation,
    ConfigResource,
    ConfigResourceType,
    NewTopic,
)
from strom.client.cluster import TopicPartition
from strom.client.consumer import Consumer
from strom.client.errors import (
    NoOffsetForPartitionError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from strom.client.producer import Producer, RecordMetadata
from tests.compat.conftest import BrokerProcess, StartBroker
from tests.compat.support import (
    CODECS,
    ReadRecord,
    SentRecord,
    assert_round_trip,
    confluent_produce,
    confluent_producer,
    confluent_read_all,
    make_records,
    unique_topic,
)

pytestmark = pytest.mark.compat


@pytest.fixture
def admin(shared_broker: BrokerProcess) -> Iterator[Admin]:
    with Admin(bootstrap_servers=shared_broker.bootstrap) as client:
        yield client


def strom_produce(
    bootstrap: str, topic: str, records: list[SentRecord], **settings: object
) -> list[SentRecord]:
    with Producer(bootstrap_servers=bootstrap, **settings) as producer:
        futures = [
            producer.send(topic, record.value, key=record.key, headers=record.headers) for record in records
        ]
        producer.flush(60)
        acknowledged = []
        for record, future in zip(records, futures):
            metadata = future.result(0)
            acknowledged.append(
                SentRecord(
                    record.sequence,
                    record.key,
                    record.value,
                    record.headers,
                    metadata.partition,
                    metadata.offset,
                )
            )
        return acknowledged


def strom_read_all(bootstrap: str, topic: str, partitions: int, expected: int) -> list[ReadRecord]:
    read: list[ReadRecord] = []
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([(topic, partition) for partition in range(partitions)])
        deadline = time.monotonic() + 60
        while len(read) < expected:
            assert time.monotonic() < deadline, f"read {len(read)} of {expected}"
            for record in consumer.poll(500):
                read.append(
                    ReadRecord(
                        record.partition,
                        record.offset,
                        record.key,
                        record.value,
                        [(name, None if value is None else bytes(value)) for name, value in record.headers],
                    )
                )
        assert consumer.poll(200) == []
    read.sort(key=lambda record: (record.partition, record.offset))
    return read


@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_reads_back_with_confluent_and_strom(
    shared_broker: BrokerProcess, admin: Admin, codec: str
) -> None:
    topic = unique_topic(f"strom-client-{codec}")
    admin.create_topics([NewTopic(topic, 3, 1)])
    records = make_records()
    sent = strom_produce(shared_broker.bootstrap, topic, records, compression_type=codec, linger_ms=20)
    assert_round_trip(sent, confluent_read_all(shared_broker.bootstrap, topic, 3))
    assert_round_trip(sent, strom_read_all(shared_broker.bootstrap, topic, 3, len(sent)))


def test_keys_land_where_confluent_murmur2_puts_them(shared_broker: BrokerProcess, admin: Admin) -> None:
    topic_strom, topic_confluent = unique_topic("keys-strom"), unique_topic("keys-confluent")
    admin.create_topics([NewTopic(topic_strom, 7, 1), NewTopic(topic_confluent, 7, 1)])
    records = make_records(500)
    keyed = [record for record in records if record.key]
    ours = strom_produce(shared_broker.bootstrap, topic_strom, keyed)
    theirs = confluent_produce(
        confluent_producer(shared_broker.bootstrap, partitioner="murmur2_random"), topic_confluent, keyed
    )
    assert [record.partition for record in ours] == [record.partition for record in theirs]
    assert len({record.partition for record in ours}) > 1


def test_keyless_records_stick_to_a_partition_per_batch(shared_broker: BrokerProcess, admin: Admin) -> None:
    topic = unique_topic("sticky")
    admin.create_topics([NewTopic(topic, 4, 1)])
    with Producer(bootstrap_servers=shared_broker.bootstrap, linger_ms=1000) as producer:
        futures = [producer.send(topic, b"v") for _ in range(50)]
        producer.flush(30)
    assert len({future.result(0).partition for future in futures}) == 1


def test_admin_operations(shared_broker: BrokerProcess, admin: Admin) -> None:
    topic = unique_topic("admin")
    admin.create_topics([NewTopic(topic, 2, 1, {"retention.ms": "3600000"})], validate_only=True)
    assert topic not in admin.list_topics()
    admin.create_topics([NewTopic(topic, 2, 1, {"retention.ms": "3600000"})])
    with pytest.raises(TopicAlreadyExistsError):
        admin.create_topics([NewTopic(topic, 2, 1)])
    assert topic in admin.list_topics()
    description = admin.describe_topics([topic])[topic]
    assert [p.partition for p in description.partitions] == [0, 1]
    assert all(p.leader >= 0 and p.replicas and p.isr for p in description.partitions)
    cluster = admin.describe_cluster()
    assert cluster.brokers and cluster.controller_id in {b.node_id for b in cluster.brokers}

    admin.create_partitions({topic: 4})
    assert len(admin.describe_topics([topic])[topic].partitions) == 4
    # Every topic from one Metadata round: the same descriptions, the internal ones only when asked.
    every = admin.describe_all_topics()
    assert sorted(every) == admin.list_topics()
    assert every[topic] == admin.describe_topics([topic])[topic]
    assert sorted(admin.describe_all_topics(include_internal=True)) == admin.list_topics(
        include_internal=True
    )

    resource = ConfigResource(ConfigResourceType.TOPIC, topic)
    assert admin.describe_configs([resource])[resource]["retention.ms"].value == "3600000"
    admin.incremental_alter_configs({resource: [("cleanup.policy", AlterConfigOperation.SET, "compact")]})
    configs = admin.describe_configs([resource])[resource]
    assert configs["cleanup.policy"].value == "compact" and configs["retention.ms"].value == "3600000"
    admin.alter_configs({resource: {"retention.ms": "7200000"}})
    assert admin.describe_configs([resource])[resource]["retention.ms"].value == "7200000"

    before_ms = int(time.time() * 1000) - 1
    strom_produce(shared_broker.bootstrap, topic, make_records(100), partitioner_ignore_keys=True)
    ends = admin.list_offsets({TopicPartition(topic, p): "latest" for p in range(4)})
    (partition,) = [tp.partition for tp, end in ends.items() if end is not None and end.offset > 0]
    tp = TopicPartition(topic, partition)
    latest = admin.list_offsets({tp: "latest"})[tp]
    assert latest is not None and latest.offset == 100
    by_time = admin.list_offsets({tp: before_ms})[tp]
    assert by_time is not None and by_time.offset == 0
    assert admin.list_offsets({tp: int(time.time() * 1000) + 3_600_000})[tp] is None
    assert admin.delete_records({tp: 40}) == {tp: 40}
    earliest = admin.list_offsets({tp: "earliest"})[tp]
    assert earliest is not None and earliest.offset == 40

    admin.delete_topics([topic])
    assert topic not in admin.list_topics()
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.delete_topics([topic])


def test_consumer_positions_seek_pause_and_times(shared_broker: BrokerProcess, admin: Admin) -> None:
    topic = unique_topic("consumer")
    admin.create_topics([NewTopic(topic, 1, 1)])
    tp = TopicPartition(topic, 0)
    with Producer(bootstrap_servers=shared_broker.bootstrap) as producer:
        for index in range(100):
            producer.send(topic, str(index).encode(), partition=0, timestamp=1_000_000 + index * 10)
        producer.flush(30)
    with Consumer(
        bootstrap_servers=shared_broker.bootstrap, auto_offset_reset="latest", max_poll_records=30
    ) as consumer:
        consumer.assign([tp])
        assert consumer.assignment() == {tp}
        assert consumer.position(tp) == 100
        assert consumer.poll(100) == []
        consumer.seek(tp, 90)
        records = consumer.poll(5000)
        assert [record.offset for record in records] == list(range(90, 100))
        assert records[0].value == b"90" and records[0].timestamp == 1_000_900
        consumer.seek_to_beginning([tp])
        assert len(consumer.poll(5000)) == 30  # max.poll.records
        assert consumer.position(tp) == 30
        consumer.pause([tp])
        assert consumer.paused() == {tp}
        assert consumer.poll(300) == []
        consumer.resume([tp])
        assert consumer.poll(5000)[0].offset == 30
        found = consumer.offsets_for_times({tp: 1_000_505})[tp]
        assert found is not None and found.offset == 51
        consumer.seek_to_end([tp])
        assert consumer.position(tp) == 100


def test_out_of_range_resets_and_none_policy_raises(shared_broker: BrokerProcess, admin: Admin) -> None:
    topic = unique_topic("reset")
    admin.create_topics([NewTopic(topic, 1, 1)])
    tp = TopicPartition(topic, 0)
    strom_produce(shared_broker.bootstrap, topic, make_records(20))
    with Consumer(bootstrap_servers=shared_broker.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 1_000)
        records = consumer.poll(5000)
        assert records and records[0].offset == 0
    with Consumer(bootstrap_servers=shared_broker.bootstrap, auto_offset_reset="none") as consumer:
        consumer.assign([tp])
        with pytest.raises(NoOffsetForPartitionError):
            consumer.poll(5000)
        with pytest.raises(NotImplementedError, match="group coordinator"):
            consumer.subscribe([topic])


def test_idempotent_producer_through_broker_restart(start_broker: StartBroker) -> None:
    broker = start_broker()
    topic = unique_topic("restart")
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        admin.create_topics([NewTopic(topic, 2, 1)])
    total = 20_000
    futures: list[Future[RecordMetadata]] = []
    with Producer(
        bootstrap_servers=broker.bootstrap, linger_ms=2, reconnect_backoff_ms=20, request_timeout_ms=5_000
    ) as producer:
        restarted = threading.Event()

        def restart_midway() -> None:
            while len(futures) < total // 3:
                time.sleep(0.01)
            broker.restart()
            restarted.set()

        restarter = threading.Thread(target=restart_midway)
        restarter.start()
        for index in range(total):
            futures.append(producer.send(topic, index.to_bytes(4, "big"), key=str(index % 10).encode()))
        restarter.join(60)
        assert restarted.is_set()
        producer.flush(90)
    assert all(future.exception(0) is None for future in futures)
    read = strom_read_all(broker.bootstrap, topic, 2, total)
    values = sorted(int.from_bytes(record.value or b"", "big") for record in read)
    assert values == list(range(total)), "duplicates or gaps after the restart"
    # Per key (so per partition) the order is the send order.
    by_key: dict[int, list[int]] = {}
    for record in read:
        number = int.from_bytes(record.value or b"", "big")
        by_key.setdefault(number % 10, []).append(number)
    assert all(numbers == sorted(numbers) for numbers in by_key.values())


def test_consumer_reads_on_through_a_broker_killed_and_restarted(start_broker: StartBroker) -> None:
    """The consumer's chain of fetches (answers taken where they are read) meets a connection lost
    mid-chain: it backs off, reconnects and goes on from its position, every record once, in order."""
    broker = start_broker()
    topic = unique_topic("consume-restart")
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        admin.create_topics([NewTopic(topic, 1, 1)])
    total = 6_000
    with Producer(bootstrap_servers=broker.bootstrap, linger_ms=0) as producer:
        for index in range(total):
            producer.send(topic, index.to_bytes(4, "big"), partition=0)
        producer.flush(60)
    values: list[int] = []
    with Consumer(
        bootstrap_servers=broker.bootstrap,
        enable_auto_commit=False,
        max_partition_fetch_bytes=4_096,  # a fetch answer of a few batches: many fetches in a chain
        reconnect_backoff_ms=20,
        retry_backoff_ms=20,
    ) as consumer:
        consumer.assign([(topic, 0)])
        consumer.seek((topic, 0), 0)
        killed = False
        deadline = time.monotonic() + 90
        while len(values) < total:
            assert time.monotonic() < deadline, f"read {len(values)} of {total}"
            values += [int.from_bytes(record.value or b"", "big") for record in consumer.poll(200)]
            if not killed and len(values) >= total // 3:
                broker.kill()  # with fetches in flight: the chain's connection is lost
                broker.start()
                killed = True
        assert killed
        assert consumer.poll(200) == []
    assert values == list(range(total)), "records lost, repeated or out of order across the restart"


def test_produce_request_unanswered_past_its_timeout_is_retried_without_duplicates(
    start_broker: StartBroker,
) -> None:
    """A Produce request the broker does not answer (the process stopped) within request.timeout.ms:
    the producer closes that connection and sends again once the broker answers; sequence numbers
    keep the partition free of duplicates (the broker may still append the first attempt, read
    before the connection closed)."""
    broker = start_broker()
    topic = unique_topic("unanswered")
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        admin.create_topics([NewTopic(topic, 1, 1)])
    with Producer(
        bootstrap_servers=broker.bootstrap,
        linger_ms=0,
        request_timeout_ms=1_000,
        reconnect_backoff_ms=20,
        retry_backoff_ms=20,
    ) as producer:
        producer.send(topic, b"before").result(30)
        os.kill(broker.pid, signal.SIGSTOP)
        try:
            stalled = producer.send(topic, b"while stopped")
            # Past request.timeout.ms: the request is given up (its connection closed) and retried.
            deadline = time.monotonic() + 30
            while not any(channel.closed for channel in _channels_ever(producer)):
                assert time.monotonic() < deadline, "the unanswered request never timed out"
                time.sleep(0.05)
            assert not stalled.done()
        finally:
            os.kill(broker.pid, signal.SIGCONT)
        assert stalled.exception(60) is None
        producer.send(topic, b"after").result(30)
    read = strom_read_all(broker.bootstrap, topic, 1, 3)
    assert [record.value for record in read] == [b"before", b"while stopped", b"after"]


def _channels_ever(producer: Producer) -> list[Any]:
    """The producer's broker connections, remembered across reconnects (a test's view inside)."""
    seen: list[Any] = producer.__dict__.setdefault("_test_channels_seen", [])
    for channel in list(producer._transport._channels.values()):
        if channel not in seen:
            seen.append(channel)
    return seen


def test_throughput_report(
    shared_broker: BrokerProcess, admin: Admin, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = unique_topic("throughput")
    admin.create_topics([NewTopic(topic, 1, 1)])
    count = 100_000
    value = b"x" * 100
    with Producer(bootstrap_servers=shared_broker.bootstrap, linger_ms=5, batch_size=65536) as producer:
        producer.send(topic, value).result(30)
        start = time.perf_counter()
        for _ in range(count):
            producer.send(topic, value)
        producer.flush(120)
        produce_rate = count / (time.perf_counter() - start)
    with Consumer(bootstrap_servers=shared_broker.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([(topic, 0)])
        start = time.perf_counter()
        read = 0
        while read < count + 1:
            batch = consumer.poll(5000)
            assert batch, f"stalled after {read} records"
            read += len(batch)
        consume_rate = read / (time.perf_counter() - start)
    with capsys.disabled():
        print(
            f"\nstrom client: produce {produce_rate:,.0f} records/s, consume {consume_rate:,.0f} records/s (100-byte values)"
        )
    assert read == count + 1
