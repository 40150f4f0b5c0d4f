"""Bad input over a raw socket gets a clear answer, and the broker keeps serving everyone else.

Requests are built with strom's own protocol classes (``strom.protocol.messages``, ``headers``,
``records``); after each case a confluent-kafka producer on a fresh connection must still work."""

from __future__ import annotations

import struct

import pytest

from strom.protocol.errors import ErrorCode
from strom.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from strom.protocol.messages.create_topics import CreateTopicsRequest, CreateTopicsResponse
from strom.protocol.messages.metadata import MetadataRequest, MetadataResponse
from strom.protocol.messages.produce import ProduceRequest, ProduceResponse
from strom.protocol.records import Record, build_batch
from tests.compat.conftest import BrokerProcess
from tests.compat.support import (
    confluent_produce,
    confluent_producer,
    create_topic,
    make_records,
    unique_topic,
)
from tests.compat.wire import WireClient

pytestmark = pytest.mark.compat

REQUEST_BYTES_MAX = 1024 * 1024
MESSAGE_BYTES_MAX = 100_000
BAD_TOPIC_NAME = "bad name!"
PRODUCE_VERSION = 9  # flexible; any of 3-11 would do
API_VERSIONS_KEY = 18
PRODUCE_KEY = 0


@pytest.fixture(scope="module")
def shared_broker_settings() -> dict[str, str]:
    return {
        "socket.request.max.bytes": str(REQUEST_BYTES_MAX),
        "message.max.bytes": str(MESSAGE_BYTES_MAX),
        "auto.create.topics.enable": "false",
    }


@pytest.fixture(scope="module")
def good_topic(shared_broker: BrokerProcess) -> str:
    topic = unique_topic("good")
    create_topic(shared_broker.bootstrap, topic, 1)
    return topic


def assert_still_serving(broker: BrokerProcess, topic: str) -> None:
    """A real client on a new connection still produces and gets acknowledgements."""
    assert broker.running
    producer = confluent_producer(broker.bootstrap, linger_ms=0)
    [sent] = confluent_produce(producer, topic, make_records(1, seed=3))
    assert sent.offset >= 0


def _batch(value_bytes: int = 10, count: int = 3) -> bytes:
    records = [Record(i, 1_700_000_000_000 + i, b"key-%d" % i, bytes(value_bytes), []) for i in range(count)]
    return build_batch(records)


def _produce_request(topic: str, records: bytes) -> ProduceRequest:
    return ProduceRequest(
        acks=-1,
        timeout_ms=5_000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=records)]
            )
        ],
    )


def _produce_error(broker: BrokerProcess, topic: str, records: bytes) -> int:
    with WireClient(broker.port) as client:
        response = client.round_trip(_produce_request(topic, records), ProduceResponse, PRODUCE_VERSION)
    [topic_response] = response.responses
    [partition_response] = topic_response.partition_responses
    return int(partition_response.error_code)


def test_a_good_produce_over_the_raw_socket_is_accepted(
    shared_broker: BrokerProcess, good_topic: str
) -> None:
    """The baseline the bad cases differ from: the same request with an intact batch succeeds."""
    assert _produce_error(shared_broker, good_topic, _batch()) == ErrorCode.NONE


def test_oversize_frame_closes_the_connection_without_reading_the_body(
    shared_broker: BrokerProcess, good_topic: str
) -> None:
    with WireClient(shared_broker.port) as client:
        # Only the size prefix is sent: a broker that waited for the body would never close.
        client.send_raw(struct.pack(">i", REQUEST_BYTES_MAX + 1))
        assert client.closed_by_peer(timeout_s=5.0)
    with WireClient(shared_broker.port) as client:
        client.send_raw(struct.pack(">i", 512 * 1024 * 1024) + bytes(64 * 1024))
        assert client.closed_by_peer(timeout_s=5.0)
    assert_still_serving(shared_broker, good_topic)


@pytest.mark.parametrize(
    "frame_body",
    [
        b"\x00",  # shorter than any header
        b"\x00\x03\x00\x05\x00\x00\x00\x01\x7f\xff",  # Metadata v5 whose client id claims 32767 bytes
        b"\x00\x03\x00\x05\x00\x00\x00\x01\xff\xfe",  # a negative client id length other than -1
    ],
    ids=["too-short", "client-id-overruns", "negative-client-id-length"],
)
def test_malformed_header_closes_that_connection(
    shared_broker: BrokerProcess, good_topic: str, frame_body: bytes
) -> None:
    with WireClient(shared_broker.port) as client:
        client.send_raw(struct.pack(">i", len(frame_body)) + frame_body)
        assert client.closed_by_peer(timeout_s=5.0)
    assert_still_serving(shared_broker, good_topic)


def test_api_versions_above_max_gets_v0_unsupported_version_and_the_table(
    shared_broker: BrokerProcess, good_topic: str
) -> None:
    with WireClient(shared_broker.port) as client:
        # A client sends its newest version; the body is opaque to a broker that does not know it.
        correlation_id = client.send(ApiVersionsRequest(), 3, api_version_in_header=99)
        response = client.read_response(ApiVersionsResponse, API_VERSIONS_KEY, 0, correlation_id)
        assert response.error_code == ErrorCode.UNSUPPORTED_VERSION
        table = {entry.api_key: (entry.min_version, entry.max_version) for entry in response.api_keys}
        assert table[API_VERSIONS_KEY] == (0, 4)
        assert PRODUCE_KEY in table
        # The same connection goes on with a version from the table.
        response = client.round_trip(ApiVersionsRequest(), ApiVersionsResponse, 3)
        assert response.error_code == ErrorCode.NONE
    assert_still_serving(shared_broker, good_topic)


def test_corrupted_crc_gets_corrupt_message(shared_broker: BrokerProcess, good_topic: str) -> None:
    batch = bytearray(_batch())
    batch[-1] ^= 0xFF  # a byte of the last record: covered by the CRC, not by any length field
    assert _produce_error(shared_broker, good_topic, bytes(batch)) == ErrorCode.CORRUPT_MESSAGE
    assert_still_serving(shared_broker, good_topic)


def test_batch_above_max_message_bytes_gets_message_too_large(
    shared_broker: BrokerProcess, good_topic: str
) -> None:
    batch = _batch(value_bytes=MESSAGE_BYTES_MAX // 2, count=3)
    assert MESSAGE_BYTES_MAX < len(batch) < REQUEST_BYTES_MAX
    assert _produce_error(shared_broker, good_topic, batch) == ErrorCode.MESSAGE_TOO_LARGE
    assert_still_serving(shared_broker, good_topic)


def test_produce_to_unknown_topic_gets_unknown_topic_or_partition(
    shared_broker: BrokerProcess, good_topic: str
) -> None:
    assert (
        _produce_error(shared_broker, unique_topic("absent"), _batch())
        == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    )
    assert_still_serving(shared_broker, good_topic)


@pytest.mark.parametrize("version", [1, 4, 9, 12])
def test_metadata_for_a_bad_name_gets_invalid_topic(
    shared_broker: BrokerProcess, good_topic: str, version: int
) -> None:
    request = MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=BAD_TOPIC_NAME)], allow_auto_topic_creation=True
    )
    with WireClient(shared_broker.port) as client:
        response = client.round_trip(request, MetadataResponse, version)
    [topic] = response.topics
    assert topic.name == BAD_TOPIC_NAME
    assert topic.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert_still_serving(shared_broker, good_topic)


@pytest.mark.parametrize("version", [2, 5, 7])
def test_create_topics_with_a_bad_name_gets_invalid_topic(
    shared_broker: BrokerProcess, good_topic: str, version: int
) -> None:
    request = CreateTopicsRequest(
        topics=[
            CreateTopicsRequest.CreatableTopic(name=BAD_TOPIC_NAME, num_partitions=1, replication_factor=1)
        ],
        timeout_ms=5_000,
    )
    with WireClient(shared_broker.port) as client:
        response = client.round_trip(request, CreateTopicsResponse, version)
    [topic] = response.topics
    assert topic.name == BAD_TOPIC_NAME
    assert topic.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert_still_serving(shared_broker, good_topic)
