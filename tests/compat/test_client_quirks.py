"""Requests real clients send that a strict reading of the specification would refuse, but Kafka
accepts: strom must accept them too, or those clients cannot use it. And clients that go away at
awkward moments: that is the client's business, never a traceback in the broker's log.

- librdkafka 2.15/2.16 (confluent-kafka 2.16) sends an all-topics Metadata v12 request with three
  bytes after the body. Kafka reads the fields it knows and ignores what follows; a broker that
  closes the connection instead breaks ``AdminClient.list_topics()`` and regex subscriptions.
"""

from __future__ import annotations

import socket
import struct
import time

import pytest
from confluent_kafka import Consumer, KafkaError

from strom.protocol.errors import ErrorCode
from strom.protocol.headers import encode_request
from strom.protocol.messages.describe_groups import DescribeGroupsRequest, DescribeGroupsResponse
from strom.protocol.messages.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from strom.protocol.messages.join_group import JoinGroupRequest
from strom.protocol.messages.metadata import MetadataRequest, MetadataResponse
from tests.compat.conftest import BrokerProcess, StartBroker
from tests.compat.support import (
    ADMIN_TIMEOUT_S,
    admin_client,
    confluent_produce,
    confluent_producer,
    create_topic,
    make_records,
    unique_topic,
)
from tests.compat.test_groups_helpers import GROUP_BROKER_SETTINGS
from tests.compat.wire import WireClient

pytestmark = pytest.mark.compat

METADATA_KEY = 3
ASSIGNMENT_TIMEOUT_S = 40.0
# What librdkafka 2.16 put after an all-topics Metadata v12 body, as captured on the wire.
LIBRDKAFKA_TRAILING_BYTES = b"\x01\x00\x00"
JOIN_DELAY_MS = 500
JOIN_WAIT_S = 30.0


@pytest.fixture(scope="module")
def shared_broker_settings() -> dict[str, str]:
    return dict(GROUP_BROKER_SETTINGS)


def test_confluent_admin_list_topics_sees_every_topic(shared_broker: BrokerProcess) -> None:
    topics = [unique_topic("listed") for _ in range(3)]
    for index, topic in enumerate(topics):
        create_topic(shared_broker.bootstrap, topic, index + 1)
    admin = admin_client(shared_broker.bootstrap)
    metadata = admin.list_topics(timeout=ADMIN_TIMEOUT_S)
    for index, topic in enumerate(topics):
        assert topic in metadata.topics
        assert metadata.topics[topic].error is None
        assert sorted(metadata.topics[topic].partitions) == list(range(index + 1))
    assert [broker.id for broker in metadata.brokers.values()] == [0]


def test_confluent_regex_subscription_gets_the_matching_topics(shared_broker: BrokerProcess) -> None:
    prefix = unique_topic("pattern")
    matching = [f"{prefix}-a", f"{prefix}-b"]
    for topic in [*matching, unique_topic("other")]:
        create_topic(shared_broker.bootstrap, topic, 2)
    producer = confluent_producer(shared_broker.bootstrap, linger_ms=0)
    for topic in matching:
        confluent_produce(producer, topic, make_records(5, seed=1))
    consumer = Consumer(
        {
            "bootstrap.servers": shared_broker.bootstrap,
            "broker.address.family": "v4",
            "group.id": unique_topic("regex-group"),
            "auto.offset.reset": "earliest",
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    try:
        consumer.subscribe([f"^{prefix}-.*"])
        deadline = time.monotonic() + ASSIGNMENT_TIMEOUT_S
        read_per_topic = dict.fromkeys(matching, 0)
        while sum(read_per_topic.values()) < 10:
            assert time.monotonic() < deadline, (
                f"regex subscription read {read_per_topic} after {ASSIGNMENT_TIMEOUT_S} s; "
                f"assignment {consumer.assignment()}"
            )
            message = consumer.poll(0.2)
            if message is None:
                continue
            error = message.error()
            assert error is None or error.code() == KafkaError._PARTITION_EOF, error
            if error is None:
                read_per_topic[message.topic()] += 1
        assigned = {(partition.topic, partition.partition) for partition in consumer.assignment()}
        assert assigned == {(topic, index) for topic in matching for index in range(2)}
    finally:
        consumer.close()


@pytest.mark.parametrize("trailing", [LIBRDKAFKA_TRAILING_BYTES, bytes(64)], ids=["librdkafka", "64-zeros"])
def test_metadata_with_bytes_after_the_body_is_answered(
    shared_broker: BrokerProcess, trailing: bytes
) -> None:
    topic = unique_topic("trailing")
    create_topic(shared_broker.bootstrap, topic, 1)
    body = MetadataRequest(topics=None, allow_auto_topic_creation=False).encode(12) + trailing
    with WireClient(shared_broker.port) as client:
        client.send_raw(encode_request(METADATA_KEY, 12, 7, "rdkafka", body))
        response = client.read_response(MetadataResponse, METADATA_KEY, 12, 7)
        assert topic in {entry.name for entry in response.topics}
        # The connection stays usable.
        again = client.round_trip(MetadataRequest(topics=None), MetadataResponse, 12)
        assert all(entry.error_code == ErrorCode.NONE for entry in again.topics)


def test_a_body_cut_short_still_closes_the_connection(shared_broker: BrokerProcess) -> None:
    """Leniency covers bytes after a complete body, never a body that does not decode."""
    body = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="abc")]).encode(12)
    with WireClient(shared_broker.port) as client:
        client.send_raw(encode_request(METADATA_KEY, 12, 1, "cut", body[:-3]))
        assert client.closed_by_peer(timeout_s=5.0)


def test_a_client_gone_before_its_parked_join_is_answered_leaves_no_traceback(
    start_broker: StartBroker,
) -> None:
    """A JoinGroup parks until the group's initial rebalance delay has passed; a client that resets
    the connection meanwhile is not the broker's error: no exception may reach the log."""
    broker = start_broker({"group.initial.rebalance.delay.ms": str(JOIN_DELAY_MS)})
    group = unique_topic("parked")
    join = JoinGroupRequest(
        group_id=group,
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        member_id="",
        protocol_type="consumer",
        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")],
    )
    with WireClient(broker.port) as probe:
        probe.round_trip(FindCoordinatorRequest(key=group), FindCoordinatorResponse, 1)
        for _ in range(3):
            with WireClient(broker.port) as client:
                client.send(join, 1)  # v1: no MEMBER_ID_REQUIRED step, the join parks at once
                # Close with a reset, not a FIN: the broker's transport is torn down at once.
                client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        deadline = time.monotonic() + JOIN_WAIT_S
        while _group_state(probe, group) != "CompletingRebalance":
            assert time.monotonic() < deadline, f"group {group} never completed its rebalance"
        # The parked joins were answered as the group moved on; a few more round trips let the
        # broker's loop run the answering tasks before the log is read.
        for _ in range(3):
            probe.round_trip(MetadataRequest(topics=[]), MetadataResponse, 12)
    assert broker.running
    assert "Traceback" not in broker.log_text(), broker.log_tail()


def _group_state(client: WireClient, group: str) -> str:
    [described] = client.round_trip(DescribeGroupsRequest(groups=[group]), DescribeGroupsResponse, 1).groups
    return str(described.group_state)
