"""Where Kafka is lenient strom is too, and where Kafka refuses strom refuses the same way.

- A record header key that is not UTF-8: Kafka appends it unchecked (its log validator skips
  header keys) and its readers decode it leniently; strom stores the batch byte for byte as it came
  and its consumer reads the key with U+FFFD where the bytes are not UTF-8, as Java's String does.
- Request strings that are not UTF-8 (a client id, a topic name): Kafka reads them the same
  lenient way and answers; strom no longer closes the connection over them. A topic name so read
  is no valid name: Metadata answers an error for it.
- Produce v3+ with no record batch or several for one partition: Kafka refuses the partition with
  INVALID_RECORD (``ProduceRequest.validateRecords``), and so does strom, with Kafka's message.
- A produce to ``__consumer_offsets``: Kafka refuses it with INVALID_TOPIC_EXCEPTION ("Cannot append
  to internal topic"; only its own admin client id may), and so does strom: the coordinator
  replays that topic into group state on every start.
"""

from __future__ import annotations

import struct
import time

import pytest

from strom.client.cluster import TopicPartition
from strom.client.consumer import Consumer
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from strom.protocol.messages.fetch import FetchRequest, FetchResponse
from strom.protocol.messages.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from strom.protocol.messages.list_offsets import ListOffsetsRequest, ListOffsetsResponse
from strom.protocol.messages.metadata import MetadataResponse
from strom.protocol.messages.produce import ProduceRequest, ProduceResponse
from strom.protocol.records.header import CRC_OFFSET, MAGIC_OFFSET, parse_batch_header
from tests.compat.conftest import BrokerProcess
from tests.compat.support import create_topic, unique_topic
from tests.compat.wire import SIZE_PREFIX, WireClient
from tests.poison_batches import assemble, record, records

pytestmark = pytest.mark.compat

PRODUCE_VERSION = 9
FETCH_VERSION = 12
METADATA_VERSION = 1  # header v1: the client id is a plain int16-length string
READ_DEADLINE_S = 30.0


def produce(client: WireClient, topic: str, data: bytes) -> ProduceResponse.PartitionProduceResponse:
    request = ProduceRequest(
        acks=-1,
        timeout_ms=5_000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=data)]
            )
        ],
    )
    [partition] = (
        client.round_trip(request, ProduceResponse, PRODUCE_VERSION).responses[0].partition_responses
    )
    return partition


def fetch_records(client: WireClient, topic: str, offset: int) -> bytes:
    request = FetchRequest(
        max_wait_ms=0,
        min_bytes=1,
        topics=[
            FetchRequest.FetchTopic(
                topic=topic,
                partitions=[
                    FetchRequest.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)
                ],
            )
        ],
    )
    [partition] = client.round_trip(request, FetchResponse, FETCH_VERSION).responses[0].partitions
    assert partition.error_code == ErrorCode.NONE, partition
    return bytes(partition.records or b"")


def test_a_header_key_that_is_not_utf8_is_stored_as_it_came(shared_broker: BrokerProcess) -> None:
    topic = unique_topic("header-keys")
    create_topic(shared_broker.bootstrap, topic, 1)
    batch = assemble(
        records(2) + record(2, key=b"k", value=b"v", headers=[(b"caf\xe9", b"1"), (b"\xff\xfe", None)]),
        count=3,
    )
    with WireClient(shared_broker.port) as client:
        answer = produce(client, topic, batch)
        assert (answer.error_code, answer.base_offset) == (ErrorCode.NONE, 0), answer
        stored = fetch_records(client, topic, 0)
    header = parse_batch_header(stored)
    assert header.size_bytes == len(batch) == len(stored)
    # Everything from the magic on (CRC, attributes, records) is what the producer sent; before it
    # the broker writes the base offset and the partition leader epoch.
    assert stored[MAGIC_OFFSET:] == batch[MAGIC_OFFSET:]
    assert stored[CRC_OFFSET : CRC_OFFSET + 4] == batch[CRC_OFFSET : CRC_OFFSET + 4]
    with Consumer(
        {"bootstrap.servers": shared_broker.bootstrap, "auto.offset.reset": "earliest"}
    ) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        read = []
        deadline = time.monotonic() + READ_DEADLINE_S
        while len(read) < 3:
            assert time.monotonic() < deadline, f"read {read}"
            read += consumer.poll(500)
    assert read[2].key == b"k" and read[2].value == b"v"
    assert list(read[2].headers) == [("caf\ufffd", b"1"), ("\ufffd\ufffd", None)]


def _metadata_frame(client_id: bytes, topic: bytes) -> bytes:
    """Metadata v1 for one topic, with the client id and topic name given as raw bytes."""
    header = struct.pack(">hhih", 3, METADATA_VERSION, 7, len(client_id)) + client_id
    body = struct.pack(">ih", 1, len(topic)) + topic
    return SIZE_PREFIX.pack(len(header) + len(body)) + header + body


def test_request_strings_that_are_not_utf8_get_an_answer(shared_broker: BrokerProcess) -> None:
    with WireClient(shared_broker.port) as client:
        client.send_raw(_metadata_frame(b"client-\xff\xfe", b"caf\xe9"))
        frame = client.read_frame()
        (correlation_id,) = struct.unpack_from(">i", frame)
        assert correlation_id == 7
        response = MetadataResponse.decode(memoryview(frame)[4:], METADATA_VERSION)
        [topic] = response.topics
        assert topic.name == "caf\ufffd"
        assert topic.error_code in (ErrorCode.INVALID_TOPIC_EXCEPTION, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        # The connection is still served.
        versions = client.round_trip(ApiVersionsRequest(), ApiVersionsResponse, 3)
        assert versions.error_code == ErrorCode.NONE


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"", "must have at least one record batch per partition"),
        (
            assemble(records(2), count=2) + assemble(records(3), count=3),
            "only allowed to contain exactly one record batch per partition",
        ),
    ],
    ids=["no-batch", "two-batches"],
)
def test_a_partition_with_no_batch_or_several_is_refused_as_kafka_refuses_it(
    shared_broker: BrokerProcess, data: bytes, says: str
) -> None:
    topic = unique_topic("batches")
    create_topic(shared_broker.bootstrap, topic, 1)
    with WireClient(shared_broker.port) as client:
        refused = produce(client, topic, data)
        assert refused.error_code == ErrorCode.INVALID_RECORD, refused
        assert says in (refused.error_message or "")
        accepted = produce(client, topic, assemble(records(1), count=1))
        assert (accepted.error_code, accepted.base_offset) == (ErrorCode.NONE, 0), "nothing was appended"


OFFSETS_TOPIC = "__consumer_offsets"


def test_a_produce_to_the_offsets_topic_is_refused_as_kafka_refuses_it(shared_broker: BrokerProcess) -> None:
    with WireClient(shared_broker.port) as client:
        found = client.round_trip(
            FindCoordinatorRequest(key="leniency-group", key_type=0), FindCoordinatorResponse, 2
        )
        assert found.error_code in (ErrorCode.NONE, ErrorCode.COORDINATOR_NOT_AVAILABLE), found
        offsets_before = _offsets_topic_end(client)
        refused = produce(client, OFFSETS_TOPIC, assemble(records(1, key=b"k"), count=1))
        assert refused.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION, refused
        assert f"Cannot append to internal topic {OFFSETS_TOPIC}" in (refused.error_message or "")
        assert _offsets_topic_end(client) == offsets_before


def _offsets_topic_end(client: WireClient) -> int:
    """The log end of __consumer_offsets partition 0, once FindCoordinator has made the topic."""
    request = ListOffsetsRequest(
        replica_id=-1,
        topics=[
            ListOffsetsRequest.ListOffsetsTopic(
                name=OFFSETS_TOPIC,
                partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-1)],
            )
        ],
    )
    deadline = time.monotonic() + READ_DEADLINE_S
    while True:
        [partition] = client.round_trip(request, ListOffsetsResponse, 5).topics[0].partitions
        if partition.error_code == ErrorCode.NONE:
            return int(partition.offset)
        assert time.monotonic() < deadline, partition
        time.sleep(0.1)
