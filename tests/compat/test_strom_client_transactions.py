"""Transactions with strom's own client against a real strom broker, and beside confluent-kafka:
strom's transactions read by strom's and by confluent's read_committed consumers, confluent's
transactions read by strom's, a zombie producer fenced, a transaction timed out by the
coordinator, an abortable error and the epoch bump after it, and a consume-transform-produce loop
whose output holds every input record exactly once through aborts and a crashed instance."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from strom.client.admin import Admin, OffsetAndMetadata
from strom.client.cluster import TopicPartition
from strom.client.consumer import Consumer, ConsumerRecord
from strom.client.errors import (
    BrokerResponseError,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionAbortedError,
    TransactionStateError,
)
from strom.client.producer import Producer
from strom.protocol.errors import ErrorCode
from tests.compat.conftest import BrokerProcess
from tests.compat.support import confluent_producer, confluent_read_all, create_topic, unique_topic

pytestmark = pytest.mark.compat

# The coordinator looks for timed-out transactions often, so the timeout test is quick.
BROKER_SETTINGS = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
}
TIMEOUT_S = 30.0
READ_DEADLINE_S = 30.0


@pytest.fixture(scope="module")
def shared_broker_settings() -> dict[str, str]:
    return dict(BROKER_SETTINGS)


@pytest.fixture
def bootstrap(shared_broker: BrokerProcess) -> str:
    return shared_broker.bootstrap


def transactional(bootstrap: str, transactional_id: str, **settings: object) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id}, **settings)
    producer.init_transactions(TIMEOUT_S)
    return producer


def strom_read_all(bootstrap: str, topic: str, partitions: int, isolation_level: str) -> list[ConsumerRecord]:
    """Every record of ``topic`` up to its end as the isolation level sees it (read_committed: the
    last stable offset), in partition and offset order."""
    with Consumer(
        {"bootstrap.servers": bootstrap, "isolation.level": isolation_level, "auto.offset.reset": "earliest"}
    ) as consumer:
        assigned = [TopicPartition(topic, partition) for partition in range(partitions)]
        consumer.assign(assigned)
        ends = consumer.end_offsets(assigned)
        read: list[ConsumerRecord] = []
        deadline = time.monotonic() + READ_DEADLINE_S
        while any(consumer.position(tp) < ends[tp] for tp in assigned):
            assert time.monotonic() < deadline, f"{topic} not read to {ends} in time ({len(read)} read)"
            read.extend(consumer.poll(timeout_ms=200))
        read.extend(consumer.poll(timeout_ms=0))
    return sorted(read, key=lambda record: (record.partition, record.offset))


def values(records: list[ConsumerRecord]) -> list[bytes | None]:
    return [record.value for record in records]


def send_all(producer: Producer, topic: str, prefix: str, count: int, partitions: int) -> list[bytes]:
    sent = []
    for index in range(count):
        value = f"{prefix}-{index}".encode()
        producer.send(topic, value, partition=index % partitions)
        sent.append(value)
    return sent


def by_partition_order(sent: list[bytes], partitions: int) -> list[bytes]:
    """Values sent round-robin over partitions, in the order a reader of partition 0, 1, ... sees them."""
    return [value for partition in range(partitions) for value in sent[partition::partitions]]


# -- strom's transactions, read by strom and by confluent ---------------------------------------------


def test_committed_and_aborted_transactions_as_read_committed_readers_see_them(bootstrap: str) -> None:
    topic = unique_topic("txn-strom")
    create_topic(bootstrap, topic, 3)
    with transactional(bootstrap, f"tx-{topic}") as producer:
        producer.begin_transaction()
        first = send_all(producer, topic, "committed-1", 30, 3)
        producer.commit_transaction(TIMEOUT_S)
        producer.begin_transaction()
        aborted = send_all(producer, topic, "aborted", 30, 3)
        producer.flush(TIMEOUT_S)  # in the log, then aborted
        producer.abort_transaction(TIMEOUT_S)
        producer.begin_transaction()
        second = send_all(producer, topic, "committed-2", 30, 3)
        producer.commit_transaction(TIMEOUT_S)
    committed = [value for partition in range(3) for value in first[partition::3] + second[partition::3]]
    assert values(strom_read_all(bootstrap, topic, 3, "read_committed")) == committed
    confluent = confluent_read_all(bootstrap, topic, 3, isolation_level="read_committed")
    assert [record.value for record in confluent] == committed
    everything = values(strom_read_all(bootstrap, topic, 3, "read_uncommitted"))
    assert sorted(everything, key=str) == sorted(first + aborted + second, key=str)
    # Offsets leave room for the markers: 3 transactions, one marker per partition each.
    assert [record.offset for record in confluent if record.partition == 0] == [*range(10), *range(22, 32)]


def test_records_queued_when_the_transaction_aborts_fail_with_transaction_aborted(bootstrap: str) -> None:
    topic = unique_topic("txn-queued")
    create_topic(bootstrap, topic, 1)
    with transactional(bootstrap, f"tx-{topic}", linger_ms=60_000) as producer:
        producer.begin_transaction()
        future = producer.send(topic, b"never sent")
        producer.abort_transaction(TIMEOUT_S)
        with pytest.raises(TransactionAbortedError):
            future.result(TIMEOUT_S)
        with pytest.raises(TransactionStateError, match="begin_transaction"):
            producer.send(topic, b"outside a transaction")
        producer.begin_transaction()
        producer.send(topic, b"sent")
        producer.commit_transaction(TIMEOUT_S)
    assert values(strom_read_all(bootstrap, topic, 1, "read_committed")) == [b"sent"]


# -- confluent's transactions, read by strom ------------------------------------------------------------


def test_confluent_transactions_read_by_strom_read_committed_up_to_the_open_one(bootstrap: str) -> None:
    topic = unique_topic("txn-confluent")
    create_topic(bootstrap, topic, 2)
    producer = confluent_producer(bootstrap, transactional_id=f"tx-{topic}")
    producer.init_transactions(TIMEOUT_S)
    expected: list[bytes] = []
    for round_number in range(4):
        producer.begin_transaction()
        batch = [f"round-{round_number}-{index}".encode() for index in range(10)]
        for index, value in enumerate(batch):
            producer.produce(topic, value=value, partition=index % 2)
        assert producer.flush(TIMEOUT_S) == 0
        if round_number % 2:
            producer.abort_transaction(TIMEOUT_S)
        else:
            producer.commit_transaction(TIMEOUT_S)
            expected.extend(batch)
    # An open transaction: its records are in the log but past the last stable offset.
    producer.begin_transaction()
    for index in range(4):
        producer.produce(topic, value=f"open-{index}".encode(), partition=index % 2)
    assert producer.flush(TIMEOUT_S) == 0
    read = strom_read_all(bootstrap, topic, 2, "read_committed")
    assert sorted(values(read), key=str) == sorted(expected, key=str)
    assert len(strom_read_all(bootstrap, topic, 2, "read_uncommitted")) == 44
    producer.commit_transaction(TIMEOUT_S)
    read = strom_read_all(bootstrap, topic, 2, "read_committed")
    assert sorted(values(read), key=str) == sorted(
        expected + [f"open-{index}".encode() for index in range(4)], key=str
    )


# -- fencing ------------------------------------------------------------------------------------------


def test_offsets_committed_in_a_transaction_are_read_stable_with_their_metadata(bootstrap: str) -> None:
    topic = unique_topic("txn-offsets")
    create_topic(bootstrap, topic, 1)
    group = f"group-{topic}"
    partition = TopicPartition(topic, 0)
    with (
        transactional(bootstrap, f"tx-{topic}") as producer,
        Admin({"bootstrap.servers": bootstrap}) as admin,
    ):
        producer.begin_transaction()
        producer.send_offsets_to_transaction({partition: OffsetAndMetadata(5, "batch 4")}, group, TIMEOUT_S)
        # Pending in the open transaction: not committed yet, and a stable read waits for its end.
        assert admin.list_group_offsets(group, [partition]) == {}
        with ThreadPoolExecutor(1) as pool:
            stable = pool.submit(admin.list_group_offsets, group, [partition], require_stable=True)
            time.sleep(0.5)
            assert not stable.done()
            producer.commit_transaction(TIMEOUT_S)
            assert stable.result(TIMEOUT_S) == {partition: OffsetAndMetadata(5, "batch 4")}


def test_a_second_producer_with_the_same_id_fences_the_first_and_aborts_its_transaction(
    bootstrap: str,
) -> None:
    topic = unique_topic("txn-zombie")
    create_topic(bootstrap, topic, 1)
    transactional_id = f"tx-{topic}"
    zombie = transactional(bootstrap, transactional_id)
    try:
        zombie.begin_transaction()
        zombie.send(topic, b"from the zombie").result(TIMEOUT_S)
        with transactional(bootstrap, transactional_id) as successor:
            successor.begin_transaction()
            successor.send(topic, b"from the successor")
            successor.commit_transaction(TIMEOUT_S)
        with pytest.raises(ProducerFencedError, match="fenced"):
            zombie.commit_transaction(TIMEOUT_S)
        with pytest.raises(ProducerFencedError):
            zombie.send(topic, b"again")
        with pytest.raises(ProducerFencedError):
            zombie.begin_transaction()
    finally:
        zombie.close(TIMEOUT_S)
    assert values(strom_read_all(bootstrap, topic, 1, "read_committed")) == [b"from the successor"]
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        description = admin.describe_transactions([transactional_id])[transactional_id]
    assert (description.state, description.producer_epoch) == ("CompleteCommit", 2)


def test_a_zombie_sending_records_after_the_fence_is_refused(bootstrap: str) -> None:
    topic = unique_topic("txn-zombie-send")
    create_topic(bootstrap, topic, 1)
    transactional_id = f"tx-{topic}"
    zombie = transactional(bootstrap, transactional_id)
    try:
        zombie.begin_transaction()
        zombie.send(topic, b"before").result(TIMEOUT_S)
        transactional(bootstrap, transactional_id).close()
        late = zombie.send(topic, b"after the fence")
        with pytest.raises(ProducerFencedError) as fenced:
            late.result(TIMEOUT_S)
        assert fenced.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
        with pytest.raises(ProducerFencedError):
            zombie.commit_transaction(TIMEOUT_S)
    finally:
        zombie.close(TIMEOUT_S)
    assert values(strom_read_all(bootstrap, topic, 1, "read_committed")) == []


def test_a_transaction_open_past_its_timeout_is_aborted_and_its_producer_fenced(bootstrap: str) -> None:
    topic = unique_topic("txn-timeout")
    create_topic(bootstrap, topic, 1)
    transactional_id = f"tx-{topic}"
    producer = transactional(bootstrap, transactional_id, transaction_timeout_ms=1_000)
    try:
        producer.begin_transaction()
        producer.send(topic, b"too slow").result(TIMEOUT_S)
        # The coordinator aborts it once the timeout has passed (it looks every 200 ms).
        deadline = time.monotonic() + TIMEOUT_S
        with Admin({"bootstrap.servers": bootstrap}) as admin:
            while admin.describe_transactions([transactional_id])[transactional_id].state == "Ongoing":
                assert time.monotonic() < deadline, "the coordinator did not abort the timed-out transaction"
                time.sleep(0.2)
        with pytest.raises(ProducerFencedError):
            producer.commit_transaction(TIMEOUT_S)
    finally:
        producer.close(TIMEOUT_S)
    assert values(strom_read_all(bootstrap, topic, 1, "read_committed")) == []


# -- an abortable error ----------------------------------------------------------------------------------


def test_a_refused_record_makes_the_transaction_abortable_and_the_next_one_works(bootstrap: str) -> None:
    topic = unique_topic("txn-abortable")
    create_topic(bootstrap, topic, 2, {"max.message.bytes": "2000"})
    transactional_id = f"tx-{topic}"
    with transactional(bootstrap, transactional_id) as producer:
        producer.begin_transaction()
        small = producer.send(topic, b"small", partition=1)
        large = producer.send(topic, b"x" * 5_000, partition=0)
        with pytest.raises(BrokerResponseError) as refused:
            large.result(TIMEOUT_S)
        assert refused.value.code == ErrorCode.MESSAGE_TOO_LARGE
        small.result(TIMEOUT_S)
        with pytest.raises(TransactionAbortableError, match="abort_transaction"):
            producer.commit_transaction(TIMEOUT_S)
        with pytest.raises(TransactionAbortableError):
            producer.send(topic, b"not now", partition=1)
        producer.abort_transaction(TIMEOUT_S)
        # The failed batch left a gap in partition 0's sequence: the abort bumped the epoch,
        # which starts it again, so the next transaction writes there.
        producer.begin_transaction()
        producer.send(topic, b"next", partition=0)
        producer.send(topic, b"next", partition=1)
        producer.commit_transaction(TIMEOUT_S)
    assert values(strom_read_all(bootstrap, topic, 2, "read_committed")) == [b"next", b"next"]
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        description = admin.describe_transactions([transactional_id])[transactional_id]
    assert (description.state, description.producer_epoch) == ("CompleteCommit", 1)


# -- exactly once: consume, transform, produce -----------------------------------------------------------


def test_consume_transform_produce_gives_every_input_record_exactly_once(bootstrap: str) -> None:
    """Two instances of a loop (read_committed consumer in a group, transactional producer with one
    transactional id): every fourth transaction is aborted and its input read again; the first
    instance then crashes inside a transaction (never committed, never closed), and the second,
    with the same transactional id, fences it and takes over. The output holds each input record's
    transformation exactly once, and the group's offsets are at the input's end."""
    input_topic = unique_topic("eos-in")
    output_topic = unique_topic("eos-out")
    create_topic(bootstrap, input_topic, 3)
    create_topic(bootstrap, output_topic, 3)
    group = f"eos-{uuid.uuid4().hex[:8]}"
    transactional_id = f"eos-{uuid.uuid4().hex[:8]}"
    inputs = [f"record-{index}".encode() for index in range(300)]
    with Producer({"bootstrap.servers": bootstrap}) as plain:
        for index, value in enumerate(inputs):
            plain.send(input_topic, value, key=f"key-{index % 17}")
        plain.flush(TIMEOUT_S)
    assigned = [TopicPartition(input_topic, partition) for partition in range(3)]

    def instance(stop_after_transactions: int | None) -> tuple[Consumer, Producer]:
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
                "max.poll.records": 40,
                "session.timeout.ms": 6_000,
                "heartbeat.interval.ms": 500,
            }
        )
        producer = transactional(bootstrap, transactional_id)
        consumer.subscribe([input_topic])
        transactions = 0
        idle_polls = 0
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            records = consumer.poll(timeout_ms=300)
            if not records:
                # Idle only counts once partitions are assigned (joining is not idleness).
                idle_polls = idle_polls + 1 if consumer.assignment() else 0
                if idle_polls >= 10:
                    return consumer, producer
                continue
            idle_polls = 0
            transactions += 1
            producer.begin_transaction()
            for record in records:
                producer.send(output_topic, record.value.upper() if record.value else None, key=record.key)
            offsets: dict[tuple[str, int], int] = {}
            for record in records:
                offsets[(record.topic, record.partition)] = record.offset + 1
            producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), TIMEOUT_S)
            if stop_after_transactions is not None and transactions >= stop_after_transactions:
                producer.flush(TIMEOUT_S)  # its output is in the log, uncommitted: then the "crash"
                return consumer, producer
            if transactions % 4 == 0:
                producer.abort_transaction(TIMEOUT_S)
                # Read the aborted transaction's input again: back to the committed offsets.
                committed = consumer.committed(consumer.assignment())
                for partition, offset in committed.items():
                    if offset is None:
                        consumer.seek_to_beginning([partition])
                    else:
                        consumer.seek(partition, offset)
            else:
                producer.commit_transaction(TIMEOUT_S)
        raise AssertionError("the loop did not finish in time")

    crashed_consumer, crashed_producer = instance(stop_after_transactions=6)
    crashed_consumer.close()  # leaves the group without committing: its partitions move on
    try:
        survivor_consumer, survivor_producer = instance(stop_after_transactions=None)
        try:
            committed = survivor_consumer.committed(assigned)
        finally:
            survivor_consumer.close()
            survivor_producer.close(TIMEOUT_S)
        with pytest.raises(ProducerFencedError):
            crashed_producer.commit_transaction(TIMEOUT_S)
    finally:
        crashed_producer.close(TIMEOUT_S)
    with Consumer({"bootstrap.servers": bootstrap}) as reader:
        ends = reader.end_offsets(assigned)
    assert committed == ends
    output = values(strom_read_all(bootstrap, output_topic, 3, "read_committed"))
    assert Counter(output) == Counter(value.upper() for value in inputs)
    uncommitted = values(strom_read_all(bootstrap, output_topic, 3, "read_uncommitted"))
    assert len(uncommitted) > len(output), "aborted output was written and left out"
