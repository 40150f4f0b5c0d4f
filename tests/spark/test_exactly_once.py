"""The exactly-once sink's pieces without Spark: the identity of a task, the marker, the skip
decision and the digest, and a task's whole write against a fake cluster that keeps transactions
and fences as a broker does (retries, replays, a zombie fenced by a speculative copy, a checkpoint
behind the sink); then two attempts of one task racing against a real broker."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import Future
from typing import Any

import pyarrow as pa
import pytest

from strom.client.cluster import TopicPartition
from strom.client.consumer import Consumer
from strom.client.errors import ProducerFencedError
from strom.client.group_metadata import OffsetAndMetadata
from strom.spark.exactly_once import (
    BATCH_ID_PROPERTY,
    QUERY_ID_PROPERTY,
    Decision,
    ExactlyOnceError,
    Marker,
    OutgoingRecord,
    RecordDigest,
    TaskIdentity,
    TaskOutcome,
    decide,
    stream_task_identity,
    summarize,
    transactional_id,
    write_exactly_once,
)
from strom.spark.options import SourceOptionsError, parse_write_options
from strom.spark.writing import write_batches_exactly_once
from tests.compat.conftest import BrokerProcess
from tests.spark.support import create_topic

QUERY = "4b1f6a2e-0000-4000-8000-000000000001"
TIMEOUT_MS = 60_000


def rows(count: int, prefix: str = "r", topic: str = "out") -> list[OutgoingRecord]:
    return [OutgoingRecord(topic, f"{prefix}-{index}".encode(), None, None, None) for index in range(count)]


# -- identity, marker, decision, digest ------------------------------------------------------------


def test_the_transactional_id_is_the_identity_and_the_partition_whatever_the_batch_or_attempt() -> None:
    assert transactional_id(QUERY, 3) == f"strom-spark-{QUERY}-3"
    assert TaskIdentity(QUERY, 0, 3).transactional_id == TaskIdentity(QUERY, 41, 3).transactional_id
    assert TaskIdentity(QUERY, 0, 3).transactional_id != TaskIdentity(QUERY, 0, 4).transactional_id


def test_a_stream_task_takes_query_and_batch_from_spark_local_properties() -> None:
    properties = {QUERY_ID_PROPERTY: QUERY, BATCH_ID_PROPERTY: "17"}
    assert stream_task_identity(properties, 2) == TaskIdentity(QUERY, 17, 2)
    for missing in (QUERY_ID_PROPERTY, BATCH_ID_PROPERTY):
        with pytest.raises(ExactlyOnceError, match="micro-batch"):
            stream_task_identity({**properties, missing: None}, 2)
    with pytest.raises(ExactlyOnceError, match="not a number"):
        stream_task_identity({**properties, BATCH_ID_PROPERTY: "x"}, 2)


def test_the_marker_is_the_next_batch_with_count_and_digest_as_metadata() -> None:
    marker = Marker(6, 500, "ab" * 16)
    committed = marker.to_offset()
    assert committed.offset == 7
    assert Marker.from_offset(committed) == marker
    # Metadata that is not the sink's (an offset set by hand) leaves count and digest unknown.
    assert Marker.from_offset(OffsetAndMetadata(7, "set by hand")) == Marker(6)
    assert Marker.from_offset(OffsetAndMetadata(7, None)) == Marker(6)
    assert Marker.from_offset(OffsetAndMetadata(7, '{"batch": 3, "records": 1}')) == Marker(6)


@pytest.mark.parametrize(
    ("marker", "expected"),
    [
        (None, Decision.WRITE),
        (Marker(3), Decision.WRITE),
        (Marker(4), Decision.WRITE),
        (Marker(5), Decision.SKIP),
    ],
)
def test_decide_writes_a_batch_not_written_yet_and_skips_one_that_is(
    marker: Marker | None, expected: Decision
) -> None:
    assert decide(marker, TaskIdentity(QUERY, 5, 0)) is expected


def test_decide_refuses_a_batch_older_than_the_one_written() -> None:
    with pytest.raises(
        ExactlyOnceError, match=r"batch 9 of this task is already written.*batch 5 cannot"
    ) as raised:
        decide(Marker(9), TaskIdentity(QUERY, 5, 0))
    assert "checkpoint is behind" in str(raised.value)


def test_the_digest_ignores_order_and_tells_records_apart() -> None:
    def digest(records: list[OutgoingRecord]) -> tuple[int, str]:
        computed = RecordDigest()
        for record in records:
            computed.add(record)
        return computed.records, computed.hexdigest()

    records = rows(50)
    assert digest(records) == digest(list(reversed(records)))
    assert digest(records) != digest(records[:-1])
    variants = [
        OutgoingRecord("out", b"v", None, None, None),
        OutgoingRecord("out", b"v", b"", None, None),
        OutgoingRecord("out", b"v", None, 0, None),
        OutgoingRecord("out", "v", b"k", None, None),
        OutgoingRecord("other", b"v", None, None, None),
        OutgoingRecord("out", b"v", None, None, [("h", None)]),
        OutgoingRecord("out", b"v", None, None, [("h", b"")]),
    ]
    assert len({digest([variant]) for variant in variants}) == len(variants)
    # A string value is its UTF-8 bytes, as the producer sends it.
    assert digest([OutgoingRecord("out", "é", None, None, None)]) == digest(
        [OutgoingRecord("out", "é".encode(), None, None, None)]
    )


# -- a task against a fake cluster -------------------------------------------------------------------


class FakeCluster:
    """Transactions as the broker keeps them: an epoch per transactional id (``init`` bumps it and
    aborts what the previous holder left open), records and offsets visible at commit only, and
    every call of a producer whose epoch is not the current one fenced."""

    def __init__(self) -> None:
        self.epochs: dict[str, int] = {}
        self.open: dict[
            str, tuple[list[OutgoingRecord], dict[tuple[str, TopicPartition], OffsetAndMetadata]]
        ] = {}
        self.committed_records: list[OutgoingRecord] = []
        self.offsets: dict[tuple[str, TopicPartition], OffsetAndMetadata] = {}
        self.now_s = 0.0
        self.producers_made = 0
        self.on_sleep: list[Any] = []


class FakeProducer:
    def __init__(self, cluster: FakeCluster, transactional_id: str) -> None:
        self.cluster = cluster
        self.transactional_id = transactional_id
        self.epoch: int | None = None
        self.closed = False

    def _check(self) -> None:
        assert self.epoch is not None, "init_transactions first"
        if self.cluster.epochs[self.transactional_id] != self.epoch:
            raise ProducerFencedError("fenced by a newer producer")

    def init_transactions(self, timeout: float | None = None) -> None:
        self.cluster.open.pop(self.transactional_id, None)  # the previous holder's transaction: aborted
        self.epoch = self.cluster.epochs.get(self.transactional_id, -1) + 1
        self.cluster.epochs[self.transactional_id] = self.epoch

    def begin_transaction(self) -> None:
        self._check()
        self.cluster.open[self.transactional_id] = ([], {})

    def send(
        self,
        topic: str,
        value: bytes | str | None = None,
        key: bytes | str | None = None,
        headers: list[tuple[str, bytes | None]] | None = None,
        partition: int | None = None,
    ) -> Future[Any]:
        self._check()
        self.cluster.open[self.transactional_id][0].append(
            OutgoingRecord(topic, value, key, partition, headers)
        )
        return Future()

    def send_offsets_to_transaction(
        self, offsets: Mapping[tuple[str, int], int | OffsetAndMetadata], group_metadata: str
    ) -> None:
        self._check()
        for tp, committed in offsets.items():
            assert isinstance(committed, OffsetAndMetadata)
            self.cluster.open[self.transactional_id][1][(group_metadata, TopicPartition(*tp))] = committed

    def commit_transaction(self, timeout: float | None = None) -> None:
        self._check()
        records, offsets = self.cluster.open.pop(self.transactional_id)
        self.cluster.committed_records.extend(records)
        self.cluster.offsets.update(offsets)

    def close(self, timeout: float | None = None) -> None:
        self.closed = True


class FakeClients:
    transaction_timeout_ms = TIMEOUT_MS

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster
        self.producers: list[FakeProducer] = []

    def transactional_producer(self, transactional_id: str) -> FakeProducer:
        producer = FakeProducer(self.cluster, transactional_id)
        self.producers.append(producer)
        self.cluster.producers_made += 1
        return producer

    def read_marker(self, group_id: str, partition: TopicPartition) -> OffsetAndMetadata | None:
        return self.cluster.offsets.get((group_id, partition))

    def monotonic(self) -> float:
        return self.cluster.now_s

    def sleep(self, seconds: float) -> None:
        self.cluster.now_s += seconds
        due, self.cluster.on_sleep = self.cluster.on_sleep, []
        for callback in due:
            callback()

    def close(self) -> None:
        pass


def run(cluster: FakeCluster, records: Any, batch: int = 0, partition: int = 0) -> TaskOutcome:
    return write_exactly_once(records, TaskIdentity(QUERY, batch, partition), FakeClients(cluster))


def marker_of(cluster: FakeCluster, partition: int = 0, topic: str = "out") -> Marker:
    return Marker.from_offset(cluster.offsets[(transactional_id(QUERY, partition), TopicPartition(topic, 0))])


def test_a_task_writes_its_rows_and_its_marker_in_one_transaction() -> None:
    cluster = FakeCluster()
    outcome = run(cluster, rows(10), batch=0)
    assert (outcome.records, outcome.written, outcome.mismatch) == (10, True, None)
    assert cluster.committed_records == rows(10)
    marker = marker_of(cluster)
    assert (marker.batch, marker.records) == (0, 10)
    # The next batch is written too, and moves the marker on.
    run(cluster, rows(5, "b1"), batch=1)
    assert cluster.committed_records == rows(10) + rows(5, "b1")
    assert marker_of(cluster).batch == 1


def test_a_task_without_rows_opens_no_transaction() -> None:
    cluster = FakeCluster()
    assert run(cluster, [], batch=3) == TaskOutcome(TaskIdentity(QUERY, 3, 0), 0, written=False)
    assert cluster.producers_made == 0 and not cluster.offsets


def test_the_marker_lives_on_partition_0_of_the_first_rows_topic() -> None:
    cluster = FakeCluster()
    run(cluster, rows(2, topic="alpha") + rows(2, topic="beta"), partition=7)
    assert list(cluster.offsets) == [(transactional_id(QUERY, 7), TopicPartition("alpha", 0))]


def test_a_replayed_batch_already_written_is_skipped() -> None:
    cluster = FakeCluster()
    run(cluster, rows(10), batch=4)
    outcome = run(cluster, rows(10), batch=4)
    assert (outcome.records, outcome.written, outcome.mismatch) == (10, False, None)
    assert cluster.committed_records == rows(10)
    assert summarize([outcome], 4) is None


def test_a_replay_with_other_rows_is_skipped_and_reported() -> None:
    cluster = FakeCluster()
    run(cluster, rows(10), batch=4)
    fewer = run(cluster, rows(8), batch=4)
    other = run(cluster, rows(10, "other"), batch=4, partition=0)
    assert cluster.committed_records == rows(10)
    assert fewer.mismatch == "10 records were written, the replay has 8"
    assert other.mismatch == "the replay has 10 records as written, but not the same ones"
    warning = summarize([fewer, TaskOutcome(TaskIdentity(QUERY, 4, 1), 3, written=True)], 4)
    assert warning is not None
    assert (
        "batch 4 was replayed with other rows" in warning
        and "partition 0: 10 records were written" in warning
    )


def failing_after(records: list[OutgoingRecord], count: int) -> Iterator[OutgoingRecord]:
    yield from records[:count]
    raise RuntimeError("the task died")


def test_a_task_that_fails_midway_leaves_nothing_and_its_retry_writes_everything_once() -> None:
    cluster = FakeCluster()
    with pytest.raises(RuntimeError, match="the task died"):
        run(cluster, failing_after(rows(10), 6), batch=2)
    assert cluster.committed_records == [] and not cluster.offsets
    assert run(cluster, rows(10), batch=2).written
    assert cluster.committed_records == rows(10)


def test_a_zombie_fenced_by_a_newer_attempt_succeeds_once_that_attempt_wrote_the_batch() -> None:
    """Attempt A is halfway when attempt B (a speculative copy, or a retry while A hangs) starts:
    B's init fences A and aborts A's transaction, B writes everything; A's next send is fenced and
    A waits for B's marker instead of failing (Spark would count the failure against the task)."""
    cluster = FakeCluster()
    outcomes: list[TaskOutcome] = []

    def attempt_a() -> Iterator[OutgoingRecord]:
        yield from rows(10)[:5]
        outcomes.append(run(cluster, rows(10), batch=1))  # attempt B, start to end
        yield from rows(10)[5:]

    outcome_a = run(cluster, attempt_a(), batch=1)
    assert outcomes[0].written and not outcome_a.written
    assert cluster.committed_records == rows(10)


def test_a_fenced_attempt_waits_for_the_other_attempts_marker() -> None:
    cluster = FakeCluster()
    clients = FakeClients(cluster)

    def attempt_a() -> Iterator[OutgoingRecord]:
        yield from rows(4)[:2]
        # B takes the id now, and commits only after A has been waiting a while.
        b_producer = FakeClients(cluster).transactional_producer(transactional_id(QUERY, 0))
        b_producer.init_transactions()

        def b_commits() -> None:
            if cluster.now_s < 5:
                cluster.on_sleep.append(b_commits)
                return
            b_producer.begin_transaction()
            for record in rows(4):
                b_producer.send(record.topic, record.value)
            b_producer.send_offsets_to_transaction(
                {("out", 0): Marker(1, 4, None).to_offset()}, transactional_id(QUERY, 0)
            )
            b_producer.commit_transaction()

        cluster.on_sleep.append(b_commits)
        yield from rows(4)[2:]

    outcome = write_exactly_once(attempt_a(), TaskIdentity(QUERY, 1, 0), clients)
    assert not outcome.written and 5 <= cluster.now_s < 6
    assert [record.value for record in cluster.committed_records] == [record.value for record in rows(4)]
    assert all(producer.closed for producer in clients.producers)


def test_a_fenced_attempt_fails_when_no_other_attempt_writes_the_batch() -> None:
    """What a transaction outliving transaction.timeout.ms looks like too: the coordinator aborts
    it and bumps the epoch."""
    cluster = FakeCluster()

    def fenced_midway() -> Iterator[OutgoingRecord]:
        yield from rows(4)[:2]
        cluster.epochs[transactional_id(QUERY, 0)] += 1
        cluster.open.pop(transactional_id(QUERY, 0))
        yield from rows(4)[2:]

    with pytest.raises(
        ExactlyOnceError, match=r"fenced, and no other attempt.*transaction.timeout.ms \(60000 ms\)"
    ):
        run(cluster, fenced_midway(), batch=0)
    assert cluster.now_s >= TIMEOUT_MS / 1000
    assert cluster.committed_records == [] and not cluster.offsets


def test_a_checkpoint_behind_the_sink_is_refused_before_anything_is_written() -> None:
    cluster = FakeCluster()
    run(cluster, rows(3), batch=7)
    with pytest.raises(ExactlyOnceError, match="checkpoint is behind"):
        run(cluster, rows(3, "again"), batch=2)
    assert cluster.committed_records == rows(3)


# -- options ---------------------------------------------------------------------------------------

BOOTSTRAP = {"bootstrap.servers": "127.0.0.1:9092"}


def test_exactly_once_options() -> None:
    assert parse_write_options(BOOTSTRAP).exactly_once is False
    streaming = parse_write_options({**BOOTSTRAP, "exactlyOnce": "true"}, streaming=True)
    assert (streaming.exactly_once, streaming.exactly_once_id, streaming.exactly_once_batch) == (
        True,
        None,
        0,
    )
    batch = parse_write_options(
        {**BOOTSTRAP, "exactlyonce": "TRUE", "exactlyonce.id": " nightly ", "exactlyonce.batch": "12"}
    )
    assert (batch.exactly_once, batch.exactly_once_id, batch.exactly_once_batch) == (True, "nightly", 12)


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        ({"exactlyOnce": "yes"}, False, "exactlyOnce must be true or false"),
        ({"exactlyOnce.id": "x"}, False, "exactlyOnce.id is for exactlyOnce=true writes"),
        ({"exactlyOnce.batch": "1"}, False, "exactlyOnce.batch is for exactlyOnce=true writes"),
        ({"exactlyOnce": "true", "exactlyOnce.id": "x"}, True, "exactlyOnce.id is for batch writes"),
        ({"exactlyOnce": "true", "exactlyOnce.batch": "1"}, True, "exactlyOnce.batch is for batch writes"),
        ({"exactlyOnce": "true", "exactlyOnce.id": " "}, False, "must not be empty"),
        ({"exactlyOnce": "true", "exactlyOnce.batch": "-1"}, False, "must not be negative"),
        ({"exactlyOnce": "true", "exactlyOnce.batch": "one"}, False, "must be an integer"),
        ({"kafka.transactional.id": "mine"}, False, "gives each task its own transactional id"),
        ({"exactlyOnce": "true", "kafka.transactional.id": "mine"}, True, "its own transactional id"),
    ],
)
def test_exactly_once_options_refused(options: dict[str, str], streaming: bool, message: str) -> None:
    with pytest.raises(SourceOptionsError, match=message):
        parse_write_options({**BOOTSTRAP, **options}, streaming=streaming)


# -- two attempts of one task against a real broker ------------------------------------------------


def arrow_rows(values: list[bytes]) -> pa.RecordBatch:
    return pa.record_batch([pa.array(values, pa.binary())], names=["value"])


def read_committed(bootstrap: str, topic: str) -> list[bytes | None]:
    with Consumer(
        {"bootstrap.servers": bootstrap, "isolation.level": "read_committed", "auto.offset.reset": "earliest"}
    ) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        end = consumer.end_offsets([TopicPartition(topic, 0)])[TopicPartition(topic, 0)]
        read: list[bytes | None] = []
        deadline = time.monotonic() + 30
        while consumer.position(TopicPartition(topic, 0)) < end:
            assert time.monotonic() < deadline, f"{topic} not read to {end} in time"
            read.extend(record.value for record in consumer.poll(timeout_ms=200))
    return read


def test_a_zombie_attempt_and_its_successor_write_the_batch_once_through_a_real_broker(
    shared_broker: BrokerProcess,
) -> None:
    """Attempt A writes half its rows and stalls; attempt B of the same task starts (fencing A and
    aborting A's transaction) and writes the batch; A, resumed, is fenced and succeeds without
    writing once it sees B's marker. A replay of the batch afterwards skips it."""
    bootstrap = shared_broker.bootstrap
    topic = "eos-race"
    create_topic(bootstrap, topic, 1)
    options = parse_write_options({"bootstrap.servers": bootstrap, "topic": topic, "exactlyOnce": "true"})
    values = [f"v{index}".encode() for index in range(200)]
    task = TaskIdentity("race-query", 0, 0)
    a_halfway, b_done = threading.Event(), threading.Event()
    outcomes: dict[str, TaskOutcome] = {}

    def a_batches() -> Iterator[pa.RecordBatch]:
        yield arrow_rows(values[:100])
        a_halfway.set()
        assert b_done.wait(60)
        yield arrow_rows(values[100:])

    def attempt_a() -> None:
        outcomes["a"] = write_batches_exactly_once(a_batches(), options, task)

    thread = threading.Thread(target=attempt_a)
    thread.start()
    try:
        assert a_halfway.wait(60)
        time.sleep(0.3)  # A's first records are on their way inside its transaction
        outcomes["b"] = write_batches_exactly_once(iter([arrow_rows(values)]), options, task)
    finally:
        b_done.set()
        thread.join(90)
    assert not thread.is_alive()
    assert outcomes["b"].written and outcomes["b"].records == 200
    assert not outcomes["a"].written
    assert read_committed(bootstrap, topic) == values
    replay = write_batches_exactly_once(iter([arrow_rows(values)]), options, task)
    assert (replay.written, replay.records, replay.mismatch) == (False, 200, None)
    assert read_committed(bootstrap, topic) == values


# -- a batch write on a real SparkSession -------------------------------------------------------------


@pytest.mark.spark
def test_a_batch_write_with_an_identity_is_written_once_per_batch_number(
    spark: Any, shared_broker: BrokerProcess
) -> None:
    """Written again with the same ``exactlyOnce.id`` and ``exactlyOnce.batch``, a write is
    skipped; a new batch number writes again; an older one is refused; no id is a new write."""
    bootstrap = shared_broker.bootstrap
    topic = "eos-batch-write"
    create_topic(bootstrap, topic, 1)
    values = [f"row-{index}".encode() for index in range(300)]
    frame = spark.createDataFrame(
        spark.sparkContext.parallelize([(value,) for value in values], 3), "value binary"
    )

    def write(**options: str) -> None:
        writer = frame.write.format("strom").option("bootstrap.servers", bootstrap).option("topic", topic)
        for name, value in {"exactlyOnce": "true", **options}.items():
            writer = writer.option(name, value)
        writer.mode("append").save()

    write(**{"exactlyOnce.id": "nightly"})
    assert sorted(read_committed(bootstrap, topic)) == sorted(values)
    write(**{"exactlyOnce.id": "nightly"})  # batch 0 again: every task finds its marker
    assert sorted(read_committed(bootstrap, topic)) == sorted(values)
    write(**{"exactlyOnce.id": "nightly", "exactlyOnce.batch": "1"})
    assert sorted(read_committed(bootstrap, topic)) == sorted(values * 2)
    with pytest.raises(Exception, match="checkpoint is behind"):
        write(**{"exactlyOnce.id": "nightly", "exactlyOnce.batch": "0"})
    write()  # an identity of its own
    assert sorted(read_committed(bootstrap, topic)) == sorted(values * 3)
