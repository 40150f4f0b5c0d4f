"""Compaction leaves the log start offset alone: a reader at an offset compacted away gets the next
record that survived, as in Kafka, not OFFSET_OUT_OF_RANGE (after which kcat would reset to the end
and skip the surviving latest values, and Spark would report data loss).

A broker that runs housekeeping every 300 ms and a compacted topic of 2 KiB segments: keys are
overwritten many times, so the first segments empty out. Readers start at offset 0 (compacted
away) and at an offset in the middle of a compacted gap, with ``auto.offset.reset=error`` so that
an out-of-range answer would fail the test rather than be papered over by a reset.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from .conftest import BrokerProcess, StartBroker
from .support import (
    CONSUME_TIMEOUT_S,
    SentRecord,
    confluent_consumer,
    confluent_produce,
    confluent_producer,
    create_topic,
    unique_topic,
)

pytestmark = pytest.mark.compat

KCAT = shutil.which("kcat") or "/usr/bin/kcat"
KEYS = 10
ROUNDS = 60
COMPACTION_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def shared_broker_settings() -> dict[str, str]:
    return {"log.retention.check.interval.ms": "300"}


def _produce_overwrites(bootstrap: str, topic: str) -> dict[bytes, bytes]:
    """KEYS keys written ROUNDS times each; returns each key's latest value."""
    records = [
        SentRecord(sequence, f"key-{sequence % KEYS}".encode(), f"value-{sequence}".encode(), [])
        for sequence in range(KEYS * ROUNDS)
    ]
    # Small batches: a segment holds several, so segments roll and fill with overwritten keys.
    producer = confluent_producer(bootstrap, batch_size=512, linger_ms=0)
    confluent_produce(producer, topic, records, partition=0)
    return {record.key: record.value for record in records if record.key and record.value}


def _wait_for_compaction(broker: BrokerProcess, topic: str) -> None:
    deadline = time.monotonic() + COMPACTION_TIMEOUT_S
    while f"compacted {topic}-0" not in broker.log_text():
        assert time.monotonic() < deadline, "the topic was not compacted"
        time.sleep(0.2)


def _confluent_read_from(bootstrap: str, topic: str, offset: int) -> list[tuple[int, bytes, bytes]]:
    consumer = confluent_consumer(bootstrap, auto_offset_reset="error")
    try:
        consumer.assign([TopicPartition(topic, 0, offset)])
        read: list[tuple[int, bytes, bytes]] = []
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        while True:
            assert time.monotonic() < deadline, f"not at the end of {topic} after {CONSUME_TIMEOUT_S} s"
            message: Any = consumer.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    return read
                raise KafkaException(error)
            read.append((message.offset(), message.key(), message.value()))
    finally:
        consumer.close()


def _kcat_read_from(bootstrap: str, topic: str, offset: int) -> list[tuple[int, bytes, bytes]]:
    command = [KCAT, "-C", "-b", bootstrap, "-t", topic, "-p", "0", "-o", str(offset), "-e", "-J"]
    command += ["-X", "broker.address.family=v4", "-X", "topic.auto.offset.reset=error", "-q"]
    completed = subprocess.run(command, capture_output=True, timeout=CONSUME_TIMEOUT_S, check=False)
    assert completed.returncode == 0, completed.stderr.decode(errors="replace")
    read = []
    for line in completed.stdout.decode().splitlines():
        envelope = json.loads(line)
        read.append((envelope["offset"], envelope["key"].encode(), envelope["payload"].encode()))
    return read


def _latest(read: list[tuple[int, bytes, bytes]]) -> dict[bytes, bytes]:
    return {key: value for _offset, key, value in sorted(read)}


def test_readers_at_compacted_offsets_get_the_next_surviving_records(shared_broker: BrokerProcess) -> None:
    topic = unique_topic("compacted")
    create_topic(
        shared_broker.bootstrap,
        topic,
        1,
        {"cleanup.policy": "compact", "segment.bytes": "2048", "min.cleanable.dirty.ratio": "0.01"},
    )
    latest = _produce_overwrites(shared_broker.bootstrap, topic)
    _wait_for_compaction(shared_broker, topic)

    from_start = _confluent_read_from(shared_broker.bootstrap, topic, 0)
    offsets = [offset for offset, _key, _value in from_start]
    assert offsets[0] > 0, "offset 0 was compacted away, so the first record read comes later"
    assert _latest(from_start) == latest  # every key's latest value survived
    gap = offsets[0] // 2  # an offset in the middle of the compacted-away range
    assert gap > 0

    consumer = confluent_consumer(shared_broker.bootstrap)
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        consumer.close()
    assert (low, high) == (0, KEYS * ROUNDS), "compaction must not move the log start offset"

    for read_from in (_confluent_read_from, _kcat_read_from):
        for start in (0, gap):
            read = read_from(shared_broker.bootstrap, topic, start)
            assert read, f"{read_from.__name__} at {start} read nothing"
            assert read[0][0] == offsets[0], (read_from.__name__, start, read[0])
            assert [offset for offset, _key, _value in read] == [o for o in offsets if o >= start]
            assert _latest(read) == latest


def test_the_cleaner_compacts_new_segments_between_retention_passes(start_broker: StartBroker) -> None:
    """As Kafka's log cleaner (every log.cleaner.backoff.ms, 15 s by default), not only at the
    retention check (librdkafka's own 0077_compaction waits ~20 s for it): here retention runs
    hourly, the cleaner every 300 ms."""
    broker = start_broker({"log.retention.check.interval.ms": "3600000", "log.cleaner.backoff.ms": "300"})
    topic = unique_topic("cleaned")
    create_topic(broker.bootstrap, topic, 1, {"cleanup.policy": "compact", "segment.bytes": "2048"})
    latest = _produce_overwrites(broker.bootstrap, topic)
    _wait_for_compaction(broker, topic)
    assert _latest(_confluent_read_from(broker.bootstrap, topic, 0)) == latest
