"""What clients are told of transactions on the read side (Fetch, ListOffsets) and what Produce
refuses, through dispatch. Markers are written through the partition log directly (the
WriteTxnMarkers handler comes with the transaction coordinator)."""

from __future__ import annotations

import uuid

import pytest

from strom.protocol.errors import ErrorCode
from strom.protocol.messages.fetch import FetchRequest, FetchResponse
from strom.protocol.messages.init_producer_id import InitProducerIdRequest
from strom.protocol.messages.list_offsets import ListOffsetsRequest
from strom.protocol.messages.metadata import MetadataRequest
from strom.protocol.records import build_batch, decode_batch, iter_batch_headers
from strom.protocol.records.batch import Record
from strom.protocol.records.control import build_end_txn_marker, parse_end_txn_marker
from strom.storage import PartitionLog
from tests.unit.broker.conftest import InProcessBroker
from tests.unit.broker.test_dispatch import create_topic, produce

READ_UNCOMMITTED, READ_COMMITTED = 0, 1


class Producer:
    """A producer id from InitProducerId and its sequence per partition."""

    def __init__(self, broker: InProcessBroker) -> None:
        init = broker.call(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000), 4)
        assert init.error_code == ErrorCode.NONE
        self.producer_id, self.epoch = init.producer_id, init.producer_epoch
        self.sequences: dict[int, int] = {}

    def batch(self, partition: int, *values: bytes, transactional: bool = True) -> bytes:
        sequence = self.sequences.get(partition, 0)
        self.sequences[partition] = sequence + len(values)
        records = [Record(offset_delta=i, timestamp_delta=i, key=None, value=v) for i, v in enumerate(values)]
        return build_batch(
            records,
            base_timestamp=1_000,
            producer_id=self.producer_id,
            producer_epoch=self.epoch,
            base_sequence=sequence,
            is_transactional=transactional,
        )


def partition_log(broker: InProcessBroker, topic: str, partition: int) -> PartitionLog:
    found = broker.server.state.logs.log(topic, partition)
    assert found is not None
    return found


def end_txn(broker: InProcessBroker, producer: Producer, topic: str, partition: int, *, commit: bool) -> int:
    log = partition_log(broker, topic, partition)
    return log.append_marker(producer.producer_id, producer.epoch, commit, 0, broker.clock.wall_ms())


def topic_id(broker: InProcessBroker, name: str) -> uuid.UUID:
    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=name)])
    found: uuid.UUID = broker.call(request, 12).topics[0].topic_id
    return found


def fetch(
    broker: InProcessBroker,
    topic: str,
    offsets: dict[int, int],
    *,
    isolation_level: int,
    version: int = 12,
    replica_id: int = -1,
) -> dict[int, FetchResponse.PartitionData]:
    partitions = [
        FetchRequest.FetchPartition(partition=index, fetch_offset=offset, partition_max_bytes=1 << 20)
        for index, offset in offsets.items()
    ]
    wanted = FetchRequest.FetchTopic(partitions=partitions)
    if version >= 13:
        wanted.topic_id = topic_id(broker, topic)
    else:
        wanted.topic = topic
    request = FetchRequest(
        max_wait_ms=0,
        min_bytes=1,
        session_id=0,
        session_epoch=-1,
        isolation_level=isolation_level,
        topics=[wanted],
    )
    if version >= 15:
        request.replica_state = FetchRequest.ReplicaState(replica_id=replica_id)
    else:
        request.replica_id = replica_id
    response = broker.call(request, version)
    assert response.error_code == ErrorCode.NONE
    return {data.partition_index: data for data in response.responses[0].partitions}


def consumed(data: FetchResponse.PartitionData, fetch_offset: int) -> list[bytes | None]:
    """The values a read_committed client keeps from a fetch answer (Kafka's client rule)."""
    records = bytes(data.records)
    aborted = sorted(
        ((txn.producer_id, txn.first_offset) for txn in data.aborted_transactions or []),
        key=lambda txn: txn[1],
    )
    aborted_producers: set[int] = set()
    values: list[bytes | None] = []
    position = 0
    for header in iter_batch_headers(records):
        while aborted and aborted[0][1] <= header.last_offset:
            aborted_producers.add(aborted.pop(0)[0])
        if header.is_control:
            marker = parse_end_txn_marker(records, position)
            if marker is not None and not marker.commit:
                aborted_producers.discard(header.producer_id)
        elif not (header.is_transactional and header.producer_id in aborted_producers):
            values.extend(
                record.value
                for record in decode_batch(records, position).absolute_records()
                if record.offset >= fetch_offset
            )
        position += header.size_bytes
    return values


@pytest.mark.parametrize("version", [4, 7, 11, 12, 13, 17])
def test_read_committed_stops_at_the_last_stable_offset_and_names_aborted_transactions(
    broker: InProcessBroker, version: int
) -> None:
    create_topic(broker, "t", partitions=2)
    aborter, open_one = Producer(broker), Producer(broker)
    produce(broker, "t", aborter.batch(0, b"aborted-1"))  # 0
    produce(broker, "t", build_batch([Record(0, 0, None, b"plain")], base_timestamp=1_000))  # 1
    produce(broker, "t", aborter.batch(0, b"aborted-2"))  # 2
    assert end_txn(broker, aborter, "t", 0, commit=False) == 3
    produce(broker, "t", build_batch([Record(0, 0, None, b"before")], base_timestamp=1_000), partition=1)
    produce(broker, "t", open_one.batch(1, b"open"), partition=1)  # 1 on partition 1, still open

    committed = fetch(broker, "t", {0: 0, 1: 0}, isolation_level=READ_COMMITTED, version=version)
    first, second = committed[0], committed[1]
    assert (first.high_watermark, first.last_stable_offset) == (4, 4)
    assert [(txn.producer_id, txn.first_offset) for txn in first.aborted_transactions] == [
        (aborter.producer_id, 0)
    ]
    assert consumed(first, 0) == [b"plain"]
    assert (second.high_watermark, second.last_stable_offset) == (2, 1)
    assert second.aborted_transactions == []
    assert consumed(second, 0) == [b"before"]  # nothing of the open transaction
    assert [header.last_offset for header in iter_batch_headers(bytes(second.records))] == [0]

    uncommitted = fetch(broker, "t", {0: 0, 1: 0}, isolation_level=READ_UNCOMMITTED, version=version)
    assert uncommitted[0].aborted_transactions is None
    assert uncommitted[1].last_stable_offset == 1  # reported to every consumer
    assert consumed(uncommitted[1], 0) == [b"before", b"open"]

    end_txn(broker, open_one, "t", 1, commit=True)
    later = fetch(broker, "t", {1: 1}, isolation_level=READ_COMMITTED, version=version)[1]
    assert later.last_stable_offset == 3
    assert consumed(later, 1) == [b"open"]


def test_read_committed_tells_only_the_aborted_transactions_of_what_it_returns(
    broker: InProcessBroker,
) -> None:
    create_topic(broker, "t")
    producer = Producer(broker)
    produce(broker, "t", producer.batch(0, b"a"))  # 0
    end_txn(broker, producer, "t", 0, commit=False)  # 1
    produce(broker, "t", build_batch([Record(0, 0, None, b"plain")], base_timestamp=1_000))  # 2
    produce(broker, "t", producer.batch(0, b"b"))  # 3
    end_txn(broker, producer, "t", 0, commit=False)  # 4
    answer = fetch(broker, "t", {0: 2}, isolation_level=READ_COMMITTED)[0]
    assert [(txn.producer_id, txn.first_offset) for txn in answer.aborted_transactions] == [
        (producer.producer_id, 3)
    ]
    assert consumed(answer, 2) == [b"plain"]
    at_end = fetch(broker, "t", {0: 5}, isolation_level=READ_COMMITTED)[0]
    assert (at_end.records, at_end.aborted_transactions, at_end.last_stable_offset) == (b"", [], 5)


def test_an_offset_out_of_range_answer_carries_the_last_stable_offset(broker: InProcessBroker) -> None:
    create_topic(broker, "t")
    producer = Producer(broker)
    produce(broker, "t", build_batch([Record(0, 0, None, b"plain")], base_timestamp=1_000))
    produce(broker, "t", producer.batch(0, b"open"))
    answer = fetch(broker, "t", {0: 99}, isolation_level=READ_COMMITTED)[0]
    assert answer.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert (answer.high_watermark, answer.last_stable_offset) == (2, 1)


def test_a_replica_reads_to_the_log_end_whatever_its_isolation(broker: InProcessBroker) -> None:
    create_topic(broker, "t")
    producer = Producer(broker)
    produce(broker, "t", producer.batch(0, b"open"))
    answer = fetch(broker, "t", {0: 0}, isolation_level=READ_COMMITTED, replica_id=1)[0]
    assert answer.aborted_transactions is None
    assert [header.last_offset for header in iter_batch_headers(bytes(answer.records))] == [0]


def list_offsets(
    broker: InProcessBroker, version: int, isolation_level: int, timestamp: int
) -> tuple[int, int]:
    """(offset, timestamp) ListOffsets answers for partition 0 of topic t."""
    request = ListOffsetsRequest(
        replica_id=-1,
        isolation_level=isolation_level,
        topics=[
            ListOffsetsRequest.ListOffsetsTopic(
                name="t",
                partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=timestamp)],
            )
        ],
    )
    partition = broker.call(request, version).topics[0].partitions[0]
    assert partition.error_code == ErrorCode.NONE
    return partition.offset, partition.timestamp


@pytest.mark.parametrize("version", [2, 5, 8])
def test_list_offsets_latest_is_the_last_stable_offset_for_read_committed(
    broker: InProcessBroker, version: int
) -> None:
    create_topic(broker, "t")
    producer = Producer(broker)
    produce(broker, "t", build_batch([Record(0, 0, None, b"plain")], base_timestamp=1_000))
    produce(broker, "t", producer.batch(0, b"open"))

    def latest(isolation_level: int) -> int:
        return list_offsets(broker, version, isolation_level, timestamp=-1)[0]

    assert latest(READ_UNCOMMITTED) == 2
    assert latest(READ_COMMITTED) == 1
    end_txn(broker, producer, "t", 0, commit=True)
    assert latest(READ_COMMITTED) == 3


@pytest.mark.parametrize("version", [2, 7, 8])
def test_list_offsets_by_timestamp_answers_only_what_the_isolation_level_may_read(
    broker: InProcessBroker, version: int
) -> None:
    create_topic(broker, "t")
    producer = Producer(broker)
    produce(broker, "t", build_batch([Record(0, 0, None, b"plain")], base_timestamp=1_000))
    produce(broker, "t", producer.batch(0, b"open-1", b"open-2"))  # timestamps 1000, 1001

    def lookup(isolation_level: int, timestamp: int) -> tuple[int, int]:
        return list_offsets(broker, version, isolation_level, timestamp)

    # The open transaction's second record (offset 2) is the first at 1001: past the LSO (1).
    assert lookup(READ_UNCOMMITTED, 1_001) == (2, 1_001)
    assert lookup(READ_COMMITTED, 1_001) == (-1, -1)
    assert lookup(READ_COMMITTED, 1_000) == (0, 1_000)
    if version >= 7:  # max timestamp
        assert lookup(READ_UNCOMMITTED, -3) == (2, 1_001)
        assert lookup(READ_COMMITTED, -3) == (-1, -1)
    end_txn(broker, producer, "t", 0, commit=True)
    assert lookup(READ_COMMITTED, 1_001) == (2, 1_001)


def test_produce_refuses_markers_and_writes_outside_a_transaction(broker: InProcessBroker) -> None:
    create_topic(broker, "t")
    producer = Producer(broker)
    marker = build_end_txn_marker(
        producer_id=producer.producer_id,
        producer_epoch=producer.epoch,
        commit=True,
        coordinator_epoch=0,
        timestamp_ms=1_000,
    )
    refused = produce(broker, "t", marker)
    assert refused.error_code == ErrorCode.INVALID_RECORD
    assert "transaction markers are written by the broker" in refused.error_message
    unowned = build_batch([Record(0, 0, None, b"x")], base_timestamp=1_000, is_transactional=True)
    assert produce(broker, "t", unowned).error_code == ErrorCode.INVALID_RECORD
    # Transactional batches go through the idempotence checks.
    first = producer.batch(0, b"t")
    assert produce(broker, "t", first).base_offset == 0
    retry = produce(broker, "t", first)
    assert (retry.error_code, retry.base_offset) == (ErrorCode.NONE, 0)
    producer.sequences[0] = 5
    assert (
        produce(broker, "t", producer.batch(0, b"gap")).error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    )
    producer.sequences[0] = 1
    outside = produce(broker, "t", producer.batch(0, b"idempotent", transactional=False))
    assert outside.error_code == ErrorCode.INVALID_TXN_STATE
    assert partition_log(broker, "t", 0).log_end_offset == 1
