"""What leaders and followers answer, on the wire, in a cluster of three real brokers: produce and
consume only at the leader, leader epochs fenced, the high watermark, OffsetForLeaderEpoch, the
APIs advertised; and a round trip with kafka-python (another client than librdkafka)."""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

import pytest

from strom.broker.cluster.peer import PeerConnection
from strom.cli.dev_cluster import LocalCluster
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from strom.protocol.messages.fetch import FetchRequest, FetchResponse
from strom.protocol.messages.list_offsets import ListOffsetsRequest, ListOffsetsResponse
from strom.protocol.messages.metadata import MetadataRequest, MetadataResponse
from strom.protocol.messages.offset_for_leader_epoch import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from strom.protocol.messages.produce import ProduceRequest, ProduceResponse
from strom.protocol.records.batch import Record, build_batch

from .cluster_support import create_topic

# kafka-python 3 loads its protocol schemas with importlib.resources.read_text/open_text, deprecated
# in 3.11; the suite turns warnings into errors, so its import (and lazy loads) are let through.
KAFKA_PYTHON_WARNING = "(read|open)_text is deprecated"
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=KAFKA_PYTHON_WARNING, category=DeprecationWarning)
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KafkaTopicPartition

TIMEOUT_MS = 10_000


def ask(address: str, request: Any, version: int, response_type: Any) -> Any:
    async def exchange() -> Any:
        host, port = address.rsplit(":", 1)
        peer = PeerConnection(host, int(port), "cluster-protocol-test")
        try:
            return await peer.request(request, version, response_type, TIMEOUT_MS)
        finally:
            peer.close()

    return asyncio.run(exchange())


def produce(address: str, topic: str, acks: int = -1) -> ProduceResponse.PartitionProduceResponse:
    records = build_batch([Record(offset_delta=0, timestamp_delta=0, key=b"k", value=b"v")])
    request = ProduceRequest(
        acks=acks,
        timeout_ms=TIMEOUT_MS,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[ProduceRequest.PartitionProduceData(index=0, records=bytearray(records))],
            )
        ],
    )
    response = ask(address, request, 9, ProduceResponse)
    return response.responses[0].partition_responses[0]


def fetch(address: str, topic: str, current_leader_epoch: int) -> FetchResponse.PartitionData:
    request = FetchRequest(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=1 << 20,
        topics=[
            FetchRequest.FetchTopic(
                topic=topic,
                partitions=[
                    FetchRequest.FetchPartition(
                        partition=0,
                        current_leader_epoch=current_leader_epoch,
                        fetch_offset=0,
                        partition_max_bytes=1 << 20,
                    )
                ],
            )
        ],
    )
    return ask(address, request, 12, FetchResponse).responses[0].partitions[0]


def test_leaders_and_followers_answer_as_kafka_does(cluster: LocalCluster) -> None:
    topic = "wire-answers"
    create_topic(cluster, topic, 1)
    metadata = ask(
        cluster.brokers[1].address,
        MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]),
        12,
        MetadataResponse,
    )
    partition = metadata.topics[0].partitions[0]
    leader, epoch = partition.leader_id, partition.leader_epoch
    assert sorted(partition.replica_nodes) == [1, 2, 3] and partition.offline_replicas == []
    follower = next(node_id for node_id in cluster.brokers if node_id != leader)
    leader_address, follower_address = cluster.brokers[leader].address, cluster.brokers[follower].address

    assert produce(follower_address, topic).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert produce(leader_address, topic).error_code == ErrorCode.NONE
    written = produce(leader_address, topic, acks=-1)
    assert written.error_code == ErrorCode.NONE and written.base_offset == 1
    assert produce(leader_address, topic, acks=1).base_offset == 2

    assert fetch(follower_address, topic, epoch).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert fetch(leader_address, topic, epoch + 1).error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
    if epoch > 0:
        assert fetch(leader_address, topic, epoch - 1).error_code == ErrorCode.FENCED_LEADER_EPOCH
    answered = fetch(leader_address, topic, epoch)
    assert answered.error_code == ErrorCode.NONE and answered.records
    # Both acks=all records are below the high watermark; the acks=1 one may not be yet.
    assert answered.high_watermark in (2, 3)

    listed = (
        ask(
            leader_address,
            ListOffsetsRequest(
                replica_id=-1,
                topics=[
                    ListOffsetsRequest.ListOffsetsTopic(
                        name=topic,
                        partitions=[
                            ListOffsetsRequest.ListOffsetsPartition(
                                partition_index=0, current_leader_epoch=epoch, timestamp=-1
                            )
                        ],
                    )
                ],
            ),
            7,
            ListOffsetsResponse,
        )
        .topics[0]
        .partitions[0]
    )
    assert listed.error_code == ErrorCode.NONE and listed.offset >= answered.high_watermark
    assert listed.leader_epoch == epoch

    ended = (
        ask(
            leader_address,
            OffsetForLeaderEpochRequest(
                replica_id=-1,
                topics=[
                    OffsetForLeaderEpochRequest.OffsetForLeaderTopic(
                        topic=topic,
                        partitions=[
                            OffsetForLeaderEpochRequest.OffsetForLeaderPartition(
                                partition=0, current_leader_epoch=epoch, leader_epoch=epoch
                            )
                        ],
                    )
                ],
            ),
            4,
            OffsetForLeaderEpochResponse,
        )
        .topics[0]
        .partitions[0]
    )
    assert (ended.error_code, ended.leader_epoch, ended.end_offset) == (ErrorCode.NONE, epoch, 3)

    versions = ask(leader_address, ApiVersionsRequest(), 3, ApiVersionsResponse)
    advertised = {entry.api_key: (entry.min_version, entry.max_version) for entry in versions.api_keys}
    assert advertised[4] == (6, 6) and advertised[23] == (0, 4) and advertised[43] == (0, 2)


@pytest.mark.filterwarnings(f"ignore:{KAFKA_PYTHON_WARNING}:DeprecationWarning")
def test_kafka_python_round_trip_on_a_replicated_topic(cluster: LocalCluster) -> None:
    topic = "kafka-python-rf3"
    create_topic(cluster, topic, 3)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap.split(","), acks="all")
    for index in range(300):
        producer.send(topic, key=str(index).encode(), value=str(index).encode())
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap.split(","),
        auto_offset_reset="earliest",
        consumer_timeout_ms=15_000,
    )
    consumer.assign([KafkaTopicPartition(topic, index) for index in range(3)])
    values = {message.value for message in consumer}
    consumer.close()
    assert values == {str(index).encode() for index in range(300)}
