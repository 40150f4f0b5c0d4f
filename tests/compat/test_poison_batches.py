"""Poison batches (valid CRC, content a reader cannot use) sent with raw Produce requests are refused
and leave nothing behind; the real clients then read the partition to its end without stalling.

Each batch of ``tests.poison_batches`` gets its error (CORRUPT_MESSAGE or INVALID_RECORD, with a
message on Produce v8+), the log end offset does not move, and the broker keeps the connection and
logs no traceback. Before this was checked, such batches were stored with error NONE: librdkafka
then stopped at that offset for good, kafka-python spun, and a forged lastOffsetDelta moved the
log end by two billion offsets.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import warnings

import pytest

from strom.protocol.errors import ErrorCode
from strom.protocol.messages.list_offsets import ListOffsetsRequest, ListOffsetsResponse
from strom.protocol.messages.produce import ProduceRequest, ProduceResponse
from strom.protocol.records import CompressionType, build_batch
from strom.protocol.records.batch import Record
from strom.protocol.records.validate import KEYLESS_REASON
from tests.compat.conftest import BrokerProcess
from tests.compat.support import CONSUME_TIMEOUT_S, confluent_read_all, create_topic, unique_topic
from tests.compat.wire import WireClient
from tests.poison_batches import BASE_TIMESTAMP_MS, POISONS, Poison, assemble, raw_record, record, records

KAFKA_PYTHON_WARNING = "(read|open)_text is deprecated"
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=KAFKA_PYTHON_WARNING, category=DeprecationWarning)
    from kafka import KafkaConsumer, TopicPartition

pytestmark = [
    pytest.mark.compat,
    pytest.mark.filterwarnings(f"ignore:{KAFKA_PYTHON_WARNING}:DeprecationWarning"),
]

KCAT = shutil.which("kcat") or "/usr/bin/kcat"
PRODUCE_VERSIONS = (3, 7, 9, 11)  # v3 the oldest strom serves, v8+ with error messages, v9+ flexible
LIST_OFFSETS_VERSION = 5
LATEST = -1
READ_DEADLINE_S = 30.0
ZSTD_MIN_PRODUCE_VERSION = 7


def _produce(
    client: WireClient, topic: str, batch: bytes, version: int = 9
) -> ProduceResponse.PartitionProduceResponse:
    request = ProduceRequest(
        acks=-1,
        timeout_ms=5_000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)]
            )
        ],
    )
    response = client.round_trip(request, ProduceResponse, version)
    [topic_response] = response.responses
    [partition] = topic_response.partition_responses
    return partition


def _log_end_offset(client: WireClient, topic: str) -> int:
    request = ListOffsetsRequest(
        replica_id=-1,
        topics=[
            ListOffsetsRequest.ListOffsetsTopic(
                name=topic,
                partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=LATEST)],
            )
        ],
    )
    response = client.round_trip(request, ListOffsetsResponse, LIST_OFFSETS_VERSION)
    [partition] = response.topics[0].partitions
    assert partition.error_code == ErrorCode.NONE
    return int(partition.offset)


def _good_batch(first_value: int, count: int = 3) -> bytes:
    return build_batch(
        [
            Record(index, BASE_TIMESTAMP_MS + index, b"key", b"good-%d" % (first_value + index))
            for index in range(count)
        ]
    )


@pytest.fixture(scope="module")
def poisoned_topic(shared_broker: BrokerProcess) -> str:
    """A topic that received good records, every poison (each refused), and good records again."""
    topic = unique_topic("poison")
    create_topic(shared_broker.bootstrap, topic, 1)
    with WireClient(shared_broker.port) as client:
        assert _produce(client, topic, _good_batch(0)).error_code == ErrorCode.NONE
    return topic


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
@pytest.mark.parametrize("poison", POISONS, ids=lambda poison: poison.name)
def test_a_poison_batch_is_refused_and_nothing_is_appended(
    shared_broker: BrokerProcess, poisoned_topic: str, poison: Poison, version: int
) -> None:
    with WireClient(shared_broker.port) as client:
        before = _log_end_offset(client, poisoned_topic)
        partition = _produce(client, poisoned_topic, poison.batch, version)
        if poison.codec == CompressionType.ZSTD and version < ZSTD_MIN_PRODUCE_VERSION:
            assert partition.error_code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
        else:
            assert partition.error_code == poison.error
        assert partition.base_offset == -1
        if version >= 8:
            assert partition.error_message
        # The same connection goes on: nothing was appended, and the next request is answered.
        assert _log_end_offset(client, poisoned_topic) == before
    assert "Traceback" not in shared_broker.log_text()


EXPECTED_VALUES = [b"good-%d" % index for index in range(6)]


@pytest.fixture(scope="module")
def settled_topic(shared_broker: BrokerProcess, poisoned_topic: str) -> str:
    """The poisoned topic once every poison has been tried and the good records follow them."""
    with WireClient(shared_broker.port) as client:
        for poison in POISONS:
            assert _produce(client, poisoned_topic, poison.batch).error_code == poison.error
        assert _log_end_offset(client, poisoned_topic) == 3
        partition = _produce(client, poisoned_topic, _good_batch(3))
        assert (partition.error_code, partition.base_offset) == (ErrorCode.NONE, 3)
        assert _log_end_offset(client, poisoned_topic) == 6
    return poisoned_topic


def test_confluent_kafka_reads_to_the_end(shared_broker: BrokerProcess, settled_topic: str) -> None:
    read = confluent_read_all(shared_broker.bootstrap, settled_topic, 1, timeout_s=READ_DEADLINE_S)
    assert [record.offset for record in read] == list(range(6))
    assert [record.value for record in read] == EXPECTED_VALUES


def test_kafka_python_reads_to_the_end(shared_broker: BrokerProcess, settled_topic: str) -> None:
    consumer = KafkaConsumer(
        bootstrap_servers=shared_broker.bootstrap, group_id=None, enable_auto_commit=False
    )
    try:
        partition = TopicPartition(settled_topic, 0)
        consumer.assign([partition])
        consumer.seek(partition, 0)
        values: list[bytes] = []
        offsets: list[int] = []
        deadline = time.monotonic() + READ_DEADLINE_S
        while consumer.position(partition) < 6:
            assert time.monotonic() < deadline, f"kafka-python stalled at {consumer.position(partition)}"
            for batch in consumer.poll(timeout_ms=500).values():
                offsets += [message.offset for message in batch]
                values += [message.value for message in batch]
        assert offsets == list(range(6))
        assert values == EXPECTED_VALUES
    finally:
        consumer.close()


def test_kcat_reads_to_the_end(shared_broker: BrokerProcess, settled_topic: str) -> None:
    command = [
        KCAT,
        "-C",
        "-b",
        shared_broker.bootstrap,
        "-t",
        settled_topic,
        "-o",
        "beginning",
        "-e",
        "-J",
        "-q",
    ]
    command += ["-X", "broker.address.family=v4"]
    completed = subprocess.run(command, capture_output=True, timeout=CONSUME_TIMEOUT_S, check=False)
    assert completed.returncode == 0, completed.stderr.decode(errors="replace")
    read = [json.loads(line) for line in completed.stdout.decode().splitlines()]
    assert [message["offset"] for message in read] == list(range(6))
    assert [message["payload"].encode() for message in read] == EXPECTED_VALUES


# ---- compacted topics: keys checked in the same pass (issue 11, item 6) ----------------------


@pytest.fixture(scope="module")
def compacted_topic(shared_broker: BrokerProcess) -> str:
    topic = unique_topic("poison-compacted")
    create_topic(shared_broker.bootstrap, topic, 1, config={"cleanup.policy": "compact"})
    return topic


def test_keyless_records_to_a_compacted_topic_are_listed(
    shared_broker: BrokerProcess, compacted_topic: str
) -> None:
    payload = b"".join(record(index, key=None if index in (1, 4) else b"k") for index in range(6))
    with WireClient(shared_broker.port) as client:
        before = _log_end_offset(client, compacted_topic)
        partition = _produce(client, compacted_topic, assemble(payload, count=6), version=9)
        assert partition.error_code == ErrorCode.INVALID_RECORD
        assert [
            (error.batch_index, error.batch_index_error_message) for error in partition.record_errors
        ] == [
            (1, KEYLESS_REASON),
            (4, KEYLESS_REASON),
        ]
        assert _log_end_offset(client, compacted_topic) == before


@pytest.mark.parametrize(
    "batch",
    [
        assemble(records(2, key=b"k") + b"\xff" * 9, count=3),
        assemble(records(2, key=b"k") + raw_record(b"\x00\x00\x04\x01\x01"), count=3),
        assemble(b"\x00" * 30, count=3),
    ],
    ids=["garbage-after-keyed-records", "truncated-record", "zeros"],
)
def test_undecodable_records_to_a_compacted_topic_get_invalid_record(
    shared_broker: BrokerProcess, compacted_topic: str, batch: bytes
) -> None:
    """These once raised CorruptBatchError out of the null-key check and closed the connection."""
    with WireClient(shared_broker.port) as client:
        before = _log_end_offset(client, compacted_topic)
        partition = _produce(client, compacted_topic, batch)
        assert partition.error_code == ErrorCode.INVALID_RECORD
        assert _log_end_offset(client, compacted_topic) == before
        assert _produce(client, compacted_topic, _good_batch(0)).error_code == ErrorCode.NONE
        assert _log_end_offset(client, compacted_topic) == before + 3
    assert "Traceback" not in shared_broker.log_text()
