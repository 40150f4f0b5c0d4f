"""DescribeProducers through the in-process broker: idempotent and transactional producers of a
partition, and the errors of partitions it cannot describe."""

from __future__ import annotations

from strom.protocol.errors import ErrorCode
from strom.protocol.messages.describe_producers import DescribeProducersRequest
from tests.unit.broker.conftest import InProcessBroker
from tests.unit.broker.test_dispatch import batch, create_topic, produce


def test_active_producers_and_the_start_of_their_open_transaction(broker: InProcessBroker) -> None:
    create_topic(broker, "t")
    assert produce(
        broker, "t", batch([b"a", b"b"], producer_id=7, producer_epoch=0, base_sequence=0)
    ).error_code == (ErrorCode.NONE)
    transactional = batch([b"c"], producer_id=9, producer_epoch=3, base_sequence=0, is_transactional=True)
    assert produce(broker, "t", transactional).error_code == ErrorCode.NONE
    request = DescribeProducersRequest(
        topics=[
            DescribeProducersRequest.TopicRequest(name="t", partition_indexes=[0, 5]),
            DescribeProducersRequest.TopicRequest(name="missing", partition_indexes=[0]),
        ]
    )
    response = broker.call(request, 0)
    by_partition = {
        (topic.name, partition.partition_index): partition
        for topic in response.topics
        for partition in topic.partitions
    }
    described = by_partition[("t", 0)]
    assert described.error_code == ErrorCode.NONE
    producers = {p.producer_id: p for p in described.active_producers}
    assert (
        producers[7].producer_epoch,
        producers[7].last_sequence,
        producers[7].current_txn_start_offset,
    ) == (
        0,
        1,
        -1,
    )
    assert (producers[9].producer_epoch, producers[9].current_txn_start_offset) == (3, 2)
    assert by_partition[("t", 5)].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert by_partition[("missing", 0)].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
