"""format("strom") against a real broker: batch reads byte for byte, admission control, restarts
from the checkpoint, failOnDataLoss both ways, the sink, and committing progress to a group."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import TopicPartition as ConfluentTopicPartition

from strom.client.admin import Admin
from strom.client.cluster import TopicPartition
from tests.compat.conftest import BrokerProcess
from tests.spark.support import Produced, create_topic, produce

pytestmark = pytest.mark.spark


def _where(record: Produced) -> tuple[int, int]:
    return record.partition, record.offset


def _stream(spark: Any, broker: BrokerProcess, topic: str, **options: str) -> Any:
    reader = spark.readStream.format("strom").option("bootstrap.servers", broker.bootstrap)
    reader = reader.option("subscribe", topic).option("startingOffsets", "earliest")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def _run_to_parquet(spark: Any, frame: Any, output: Path) -> Any:
    query = (
        frame.select("partition", "offset", "value")
        .writeStream.format("parquet")
        .option("path", str(output))
        .option("checkpointLocation", str(output / "_checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return query


def _offsets_in(spark: Any, output: Path) -> list[tuple[int, int]]:
    rows = spark.read.parquet(str(output)).select("partition", "offset").collect()
    return sorted((row.partition, row.offset) for row in rows)


def test_batch_read_equals_what_was_produced_byte_for_byte(spark: Any, shared_broker: BrokerProcess) -> None:
    topic = "batch-bytes"
    create_topic(shared_broker.bootstrap, topic, 3)
    count = 300
    values: list[bytes | None] = [bytes([index % 256]) * (index % 50) + b"\x00\xff" for index in range(count)]
    values[7] = None
    values[8] = b""
    keys: list[bytes | None] = [None if index % 5 == 0 else f"key-{index}".encode() for index in range(count)]
    headers = [
        [] if index % 3 == 0 else [("h", bytes([index % 256])), ("empty", b""), ("none", None)]
        for index in range(count)
    ]
    produced = produce(shared_broker.bootstrap, topic, values, keys=keys, headers=headers)

    frame = (
        spark.read.format("strom")
        .option("kafka.bootstrap.servers", shared_broker.bootstrap)
        .option("subscribe", topic)
        .option("includeHeaders", "true")
        .load()
    )
    assert frame.columns == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"
    ]  # fmt: skip
    assert frame.rdd.getNumPartitions() == 3
    read = [
        Produced(
            row.topic,
            row.partition,
            row.offset,
            None if row.key is None else bytes(row.key),
            None if row.value is None else bytes(row.value),
            tuple(
                (header.key, None if header.value is None else bytes(header.value)) for header in row.headers
            ),
        )
        for row in frame.collect()
    ]
    assert sorted(read, key=_where) == sorted(produced, key=_where)

    # minPartitions splits the ranges across more tasks; the records stay exactly the same.
    split = (
        frame.sparkSession.read.format("strom")
        .options(**{"bootstrap.servers": shared_broker.bootstrap, "subscribe": topic, "minPartitions": "9"})
        .load()
    )
    assert split.rdd.getNumPartitions() >= 8
    assert sorted(
        (row.partition, row.offset) for row in split.select("partition", "offset").collect()
    ) == sorted((record.partition, record.offset) for record in produced)

    # Exact ranges from JSON offsets (-2 = earliest) and an end offset.
    starting = json.dumps({topic: {"0": 5, "1": -2, "2": -2}})
    ending = json.dumps({topic: {"0": 10, "1": 3, "2": -1}})
    ranged = (
        spark.read.format("strom")
        .option("bootstrap.servers", shared_broker.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", starting)
        .option("endingOffsets", ending)
        .load()
        .select("partition", "offset")
        .collect()
    )
    per_partition = {p: sum(1 for record in produced if record.partition == p) for p in range(3)}
    expected = (
        [(0, offset) for offset in range(5, 10)]
        + [(1, offset) for offset in range(3)]
        + [(2, offset) for offset in range(per_partition[2])]
    )
    assert sorted((row.partition, row.offset) for row in ranged) == expected


def test_max_offsets_per_trigger_runs_the_expected_micro_batches(
    spark: Any, shared_broker: BrokerProcess, tmp_path: Path
) -> None:
    topic = "rate-limited"
    create_topic(shared_broker.bootstrap, topic, 2)
    produce(shared_broker.bootstrap, topic, [b"v%d" % index for index in range(100)])
    frame = _stream(spark, shared_broker, topic, maxOffsetsPerTrigger="30")
    query = _run_to_parquet(spark, frame, tmp_path / "out")
    batch_sizes = [progress["numInputRows"] for progress in query.recentProgress if progress["numInputRows"]]
    assert batch_sizes == [30, 30, 30, 10]
    assert len(_offsets_in(spark, tmp_path / "out")) == 100


def test_restart_from_checkpoint_loses_and_duplicates_nothing(
    spark: Any, shared_broker: BrokerProcess, tmp_path: Path
) -> None:
    topic = "restarted"
    create_topic(shared_broker.bootstrap, topic, 2)
    first = produce(shared_broker.bootstrap, topic, [b"a%d" % index for index in range(60)])
    output = tmp_path / "out"
    # A running stream, stopped after its first micro-batches.
    query = (
        _stream(spark, shared_broker, topic, maxOffsetsPerTrigger="20")
        .select("partition", "offset", "value")
        .writeStream.format("parquet")
        .option("path", str(output))
        .option("checkpointLocation", str(output / "_checkpoint"))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        while sum(progress["numInputRows"] for progress in query.recentProgress) < 20:
            query.awaitTermination(0.2)
    finally:
        query.stop()
    assert 20 <= len(_offsets_in(spark, output)) < 60 or len(_offsets_in(spark, output)) == 60
    second = produce(shared_broker.bootstrap, topic, [b"b%d" % index for index in range(40)])
    _run_to_parquet(spark, _stream(spark, shared_broker, topic), output)
    assert _offsets_in(spark, output) == sorted(
        (record.partition, record.offset) for record in first + second
    )


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_deleted_records_under_a_running_stream(
    spark: Any, shared_broker: BrokerProcess, tmp_path: Path, fail_on_data_loss: bool
) -> None:
    topic = f"data-loss-{str(fail_on_data_loss).lower()}"
    create_topic(shared_broker.bootstrap, topic, 1)
    output = tmp_path / "out"
    options = {"failOnDataLoss": str(fail_on_data_loss).lower()}
    produce(shared_broker.bootstrap, topic, [b"x%d" % index for index in range(50)], partition=0)
    _run_to_parquet(spark, _stream(spark, shared_broker, topic, **options), output)
    produce(shared_broker.bootstrap, topic, [b"y%d" % index for index in range(50)], partition=0)
    with Admin({"bootstrap.servers": shared_broker.bootstrap}) as admin:
        assert admin.delete_records({TopicPartition(topic, 0): 80}) == {TopicPartition(topic, 0): 80}
    if fail_on_data_loss:
        with pytest.raises(Exception, match=r"offsets 50-79 were deleted") as failure:
            _run_to_parquet(spark, _stream(spark, shared_broker, topic, **options), output)
        assert "failOnDataLoss=false" in str(failure.value)
        assert _offsets_in(spark, output) == [(0, offset) for offset in range(50)]
    else:
        _run_to_parquet(spark, _stream(spark, shared_broker, topic, **options), output)
        assert _offsets_in(spark, output) == [(0, offset) for offset in [*range(50), *range(80, 100)]]


def test_write_round_trip_batch(spark: Any, shared_broker: BrokerProcess) -> None:
    topic = "written"
    create_topic(shared_broker.bootstrap, topic, 2)
    rows = [
        (
            f"k{index}".encode() if index % 4 else None,
            f"value-{index}",
            index % 2,
            [("n", str(index).encode())],
        )
        for index in range(200)
    ]
    # Two writing tasks: rows 0-99 and 100-199.
    frame = spark.createDataFrame(
        spark.sparkContext.parallelize(rows, 2),
        "key binary, value string, partition int, headers array<struct<key: string, value: binary>>",
    )
    frame.write.format("strom").option("bootstrap.servers", shared_broker.bootstrap).option(
        "topic", topic
    ).mode("append").save()
    read = (
        spark.read.format("strom")
        .option("bootstrap.servers", shared_broker.bootstrap)
        .option("subscribe", topic)
        .option("includeHeaders", "true")
        .load()
        .collect()
    )
    assert sorted(
        (
            (
                None if row.key is None else bytes(row.key),
                bytes(row.value).decode(),
                row.partition,
                [(header.key, bytes(header.value)) for header in row.headers],
            )
            for row in read
        ),
        key=repr,
    ) == sorted(((key, value, partition, headers) for key, value, partition, headers in rows), key=repr)
    # Each task's records keep their order within a partition (two tasks wrote here, so compare
    # against the row order of each task's slice: the value numbers rise within a task).
    for partition in (0, 1):
        in_partition = sorted(
            (row.offset, int(bytes(row.value).decode().split("-")[1]))
            for row in read
            if row.partition == partition
        )
        numbers = [number for _, number in in_partition]
        halves = [[n for n in numbers if n < 100], [n for n in numbers if n >= 100]]
        assert all(half == sorted(half) for half in halves)

    with pytest.raises(Exception, match="value"):
        spark.createDataFrame([("x",)], "other string").write.format("strom").option(
            "bootstrap.servers", shared_broker.bootstrap
        ).option("topic", topic).mode("append").save()


def test_group_id_commits_the_consumed_offsets(
    spark: Any, shared_broker: BrokerProcess, tmp_path: Path
) -> None:
    topic = "grouped"
    group = "spark-pipeline-group"
    create_topic(shared_broker.bootstrap, topic, 2)
    produced = produce(shared_broker.bootstrap, topic, [b"g%d" % index for index in range(70)])
    _run_to_parquet(
        spark,
        _stream(spark, shared_broker, topic, groupId=group, maxOffsetsPerTrigger="25"),
        tmp_path / "out",
    )
    ends = {p: sum(1 for record in produced if record.partition == p) for p in (0, 1)}
    reader = ConfluentConsumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": group})
    try:
        committed = reader.committed([ConfluentTopicPartition(topic, p) for p in (0, 1)], timeout=10)
    finally:
        reader.close()
    assert {tp.partition: tp.offset for tp in committed} == ends


def test_pattern_stream_picks_up_new_partitions_and_topics_from_their_beginning(
    spark: Any, shared_broker: BrokerProcess, tmp_path: Path
) -> None:
    create_topic(shared_broker.bootstrap, "grow-a", 1)
    first = produce(shared_broker.bootstrap, "grow-a", [b"a%d" % index for index in range(10)])
    output = tmp_path / "out"
    frame = (
        spark.readStream.format("strom")
        .option("bootstrap.servers", shared_broker.bootstrap)
        .option("subscribePattern", "grow-.*")
        .option("startingOffsets", "earliest")
        .load()
        .select("topic", "partition", "offset")
    )

    def run() -> list[tuple[str, int, int]]:
        query = (
            frame.writeStream.format("parquet")
            .option("path", str(output))
            .option("checkpointLocation", str(output / "_checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        rows = spark.read.parquet(str(output)).collect()
        return sorted((row.topic, row.partition, row.offset) for row in rows)

    assert run() == sorted((r.topic, r.partition, r.offset) for r in first)
    with Admin({"bootstrap.servers": shared_broker.bootstrap}) as admin:
        admin.create_partitions({"grow-a": 2})
    create_topic(shared_broker.bootstrap, "grow-b", 1)
    later = produce(shared_broker.bootstrap, "grow-a", [b"n%d" % index for index in range(6)], partition=1)
    later += produce(shared_broker.bootstrap, "grow-b", [b"b%d" % index for index in range(4)])
    assert run() == sorted((r.topic, r.partition, r.offset) for r in first + later)


def test_timestamps_choose_the_range(spark: Any, shared_broker: BrokerProcess) -> None:
    topic = "timed"
    create_topic(shared_broker.bootstrap, topic, 1)
    from strom.client.producer import Producer

    with Producer({"bootstrap.servers": shared_broker.bootstrap}) as producer:
        for index in range(20):
            producer.send(topic, value=b"t%d" % index, partition=0, timestamp=1_000_000 + 1000 * index)
        producer.flush()

    def offsets(**options: str) -> list[int]:
        reader = spark.read.format("strom").option("bootstrap.servers", shared_broker.bootstrap)
        reader = reader.option("subscribe", topic)
        for key, value in options.items():
            reader = reader.option(key, value)
        return sorted(row.offset for row in reader.load().select("offset").collect())

    assert offsets(startingTimestamp="1005000", endingTimestamp="1008000") == [5, 6, 7]
    assert offsets(startingOffsetsByTimestamp=json.dumps({topic: {"0": 1017500}})) == [18, 19]
    assert offsets(startingTimestamp="2000000") == []


def test_stream_to_stream_write(spark: Any, shared_broker: BrokerProcess, tmp_path: Path) -> None:
    source, target = "copy-from", "copy-to"
    create_topic(shared_broker.bootstrap, source, 2)
    create_topic(shared_broker.bootstrap, target, 1)
    produced = produce(
        shared_broker.bootstrap, source, [b"c%d" % index for index in range(50)], keys=[b"k"] * 50
    )
    query = (
        _stream(spark, shared_broker, source, maxOffsetsPerTrigger="20")
        .selectExpr(
            "key", "value", "array(named_struct('key', 'from', 'value', CAST(topic AS BINARY))) AS headers"
        )
        .writeStream.format("strom")
        .option("bootstrap.servers", shared_broker.bootstrap)
        .option("topic", target)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    copied = (
        spark.read.format("strom")
        .option("bootstrap.servers", shared_broker.bootstrap)
        .option("subscribe", target)
        .option("includeHeaders", "true")
        .load()
        .collect()
    )
    assert sorted(bytes(row.value) for row in copied) == sorted(record.value or b"" for record in produced)
    assert {bytes(row.key) for row in copied} == {b"k"}
    assert all(
        [(h.key, bytes(h.value)) for h in row.headers] == [("from", source.encode())] for row in copied
    )


def _batch(spark: Any, broker: BrokerProcess, **options: str) -> Any:
    reader = spark.read.format("strom").option("bootstrap.servers", broker.bootstrap)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_a_topic_or_partition_that_does_not_exist_is_an_error_not_an_empty_result(
    spark: Any, shared_broker: BrokerProcess, tmp_path: Path
) -> None:
    create_topic(shared_broker.bootstrap, "exists-two", 2)
    with pytest.raises(Exception, match=r"topic no-such-topic named by option subscribe does not exist"):
        _batch(spark, shared_broker, subscribe="exists-two,no-such-topic").collect()
    with pytest.raises(Exception, match=r"assign names partitions that do not exist: exists-two-5"):
        _batch(spark, shared_broker, assign=json.dumps({"exists-two": [0, 5]})).collect()
    with pytest.raises(Exception, match=r"topic no-such-stream named by option subscribe does not exist"):
        _run_to_parquet(spark, _stream(spark, shared_broker, "no-such-stream"), tmp_path / "out")
    # A pattern may match nothing: topics come and go.
    assert _batch(spark, shared_broker, subscribePattern="no-such-.*").count() == 0


def test_offsets_past_the_end_are_an_error_not_an_empty_result(
    spark: Any, shared_broker: BrokerProcess, tmp_path: Path
) -> None:
    topic = "short"
    create_topic(shared_broker.bootstrap, topic, 1)
    produce(shared_broker.bootstrap, topic, [b"s%d" % index for index in range(10)])
    past = json.dumps({topic: {"0": 500}})
    with pytest.raises(Exception, match=r"short-0 starts at 500 but its latest offset is 10"):
        _batch(spark, shared_broker, subscribe=topic, startingOffsets=past).collect()
    with pytest.raises(Exception, match=r"short-0 ends at 600 but its latest offset is 10"):
        _batch(
            spark,
            shared_broker,
            subscribe=topic,
            endingOffsets=json.dumps({topic: {"0": 600}}),
        ).collect()
    with pytest.raises(Exception, match=r"short-0 starts at 7 and ends at 3"):
        _batch(
            spark,
            shared_broker,
            subscribe=topic,
            startingOffsets=json.dumps({topic: {"0": 7}}),
            endingOffsets=json.dumps({topic: {"0": 3}}),
        ).collect()
    with pytest.raises(Exception, match=r"short-0 starts at 500 but its latest offset is 10"):
        _run_to_parquet(spark, _stream(spark, shared_broker, topic, startingOffsets=past), tmp_path / "out")
    # Up to the end is fine: nothing to read, no error.
    at_end = json.dumps({topic: {"0": 10}})
    assert _batch(spark, shared_broker, subscribe=topic, startingOffsets=at_end).count() == 0
