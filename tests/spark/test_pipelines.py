"""The pipelines users run: page-view counts equal the ground truth; the archive, run twice with new
data in between, holds every record exactly once."""

from __future__ import annotations

import argparse
import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from strom.cli.pipeline import add_pipeline_parser
from strom.client.admin import Admin
from strom.client.producer import Producer
from strom.spark.archive_state import ArchiveStateError
from strom.spark.demo_events import page_views
from strom.spark.pipelines import archive, pageviews
from tests.compat.conftest import BrokerProcess
from tests.spark.support import Produced, create_topic, produce

pytestmark = pytest.mark.spark

# 2026-01-01T00:00:00Z: fixed event times, so windows are known in advance.
BASE_MS = 1_767_225_600_000


def _window_start(timestamp_ms: int) -> str:
    import datetime

    minute_ms = timestamp_ms - timestamp_ms % 60_000
    return datetime.datetime.fromtimestamp(minute_ms / 1000, tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_pageview_counts_equal_the_ground_truth(
    spark: Any, shared_broker: BrokerProcess, tmp_path: Path
) -> None:
    source, target = "page_views", "page_view_counts"
    create_topic(shared_broker.bootstrap, source, 2)
    create_topic(shared_broker.bootstrap, target, 1)
    # 1,500 events 150 ms apart: 225 s of traffic over four 1-minute windows, in order.
    events = list(page_views(1_500, seed=7, timestamp_ms=lambda index: BASE_MS + 150 * index))
    with Producer({"bootstrap.servers": shared_broker.bootstrap}) as producer:
        for event in events:
            producer.send(
                source, value=event.to_json(), key=event.user.encode(), timestamp=event.timestamp_ms
            )
        producer.flush()
    truth = Counter((event.page, _window_start(event.timestamp_ms)) for event in events)

    query = pageviews(
        spark,
        shared_broker.bootstrap,
        source,
        target,
        tmp_path / "checkpoint",
        available_now=True,
        extra_options={"maxOffsetsPerTrigger": "400"},  # several micro-batches: counts are updated
    )
    query.awaitTermination()
    assert sum(1 for progress in query.recentProgress if progress["numInputRows"]) >= 4

    written = (
        spark.read.format("strom")
        .option("bootstrap.servers", shared_broker.bootstrap)
        .option("subscribe", target)
        .load()
        .select("key", "value", "offset")
        .collect()
    )
    latest: dict[str, dict[str, Any]] = {}
    for row in sorted(written, key=lambda row: row.offset):
        latest[bytes(row.key).decode()] = json.loads(bytes(row.value))
    counts = {(value["page"], value["window_start"]): value["count"] for value in latest.values()}
    assert counts == dict(truth)
    assert set(latest) == {f"{page}|{start}" for page, start in truth}


def test_archive_twice_holds_every_record_exactly_once(
    spark: Any, shared_broker: BrokerProcess, tmp_path: Path
) -> None:
    create_topic(shared_broker.bootstrap, "orders", 2)
    create_topic(shared_broker.bootstrap, "payments", 1)
    produced = produce(shared_broker.bootstrap, "orders", [b"order-%d" % index for index in range(40)])
    produced += produce(shared_broker.bootstrap, "payments", [b"payment-%d" % index for index in range(25)])
    output = tmp_path / "archive"
    assert archive(spark, shared_broker.bootstrap, ["orders", "payments"], output) == 65
    produced += produce(shared_broker.bootstrap, "orders", [b"order-late-%d" % index for index in range(30)])
    produced += produce(
        shared_broker.bootstrap, "payments", [b"payment-late-%d" % index for index in range(10)],
        headers=[[("source", b"test")]] * 10,
    )  # fmt: skip
    assert archive(spark, shared_broker.bootstrap, ["orders", "payments"], output) == 40

    archived = spark.read.parquet(str(output)).collect()
    assert len(archived) == len(produced)
    assert sorted((row.topic, row.partition, row.offset, bytes(row.value)) for row in archived) == sorted(
        (record.topic, record.partition, record.offset, record.value) for record in produced
    )
    partition_directories = {path.name for path in output.iterdir() if path.is_dir()}
    assert {"topic=orders", "topic=payments"} <= partition_directories
    assert all(
        directory.name.startswith("date=")
        for directory in (output / "topic=orders").iterdir()
        if directory.is_dir()
    )
    late_payments = [row for row in archived if bytes(row.value).startswith(b"payment-late")]
    assert all(
        [(h.key, bytes(h.value)) for h in row.headers] == [("source", b"test")] for row in late_payments
    )


def test_pipeline_commands_parse() -> None:
    parser = argparse.ArgumentParser(prog="strom")
    add_pipeline_parser(parser.add_subparsers(dest="command"))
    archive_arguments = parser.parse_args(["pipeline", "archive", "--topics", "a,b", "--output", "/tmp/x"])
    assert (archive_arguments.topics, archive_arguments.master) == ("a,b", "local[*]")
    views = parser.parse_args(
        [
            "pipeline",
            "pageviews",
            "--from",
            "pv",
            "--to",
            "counts",
            "--checkpoint",
            "c",
            "--master",
            "spark://h:7077",
        ]
    )
    assert (views.source_topic, views.target_topic, views.master) == ("pv", "counts", "spark://h:7077")
    demo = parser.parse_args(["pipeline", "demo-events", "--topic", "pv", "--rate", "50", "--count", "10"])
    assert (demo.rate, demo.count) == (50.0, 10)


def _archived(spark: Any, output: Path) -> list[tuple[str, int, int, bytes]]:
    rows = spark.read.parquet(str(output)).select("topic", "partition", "offset", "value").collect()
    return sorted((row.topic, row.partition, row.offset, bytes(row.value)) for row in rows)


def _expected(records: list[Produced]) -> list[tuple[str, int, int, bytes]]:
    return sorted((record.topic, record.partition, record.offset, record.value or b"") for record in records)


def test_archive_with_its_checkpoint_deleted_or_restored_from_an_old_copy_archives_what_is_missing_once(
    spark: Any, shared_broker: BrokerProcess, tmp_path: Path
) -> None:
    topic = "archived-twice"
    group = "archive-rebuild-group"
    create_topic(shared_broker.bootstrap, topic, 2)
    output = tmp_path / "archive"
    checkpoint = output / "_checkpoint"

    def run() -> int:
        return archive(spark, shared_broker.bootstrap, [topic], output, group_id=group)

    def produce_both(prefix: bytes, count: int) -> list[Produced]:
        values = [prefix + b"%d" % index for index in range(count)]
        return produce(shared_broker.bootstrap, topic, values[::2], partition=0) + produce(
            shared_broker.bootstrap, topic, values[1::2], partition=1
        )

    produced = produce_both(b"a", 30)
    assert run() == 30
    old_checkpoint = tmp_path / "old-checkpoint"
    shutil.copytree(checkpoint, old_checkpoint)

    # Deleted: without a rebuild, Spark's file sink skips the new query's batch 0 (it has
    # committed a batch 0) and the run "succeeds" with the new records missing for good.
    produced += produce_both(b"b", 20)
    shutil.rmtree(checkpoint)
    assert run() == 20
    assert _archived(spark, output) == _expected(produced)

    # The rebuilt checkpoint carries on as any other.
    produced += produce_both(b"c", 15)
    assert run() == 15

    # Restored from an old copy (behind the sink's log): kept aside, rebuilt the same way.
    shutil.rmtree(checkpoint)
    shutil.copytree(old_checkpoint, checkpoint)
    produced += produce_both(b"d", 10)
    assert run() == 10
    assert _archived(spark, output) == _expected(produced)
    kept_aside = [path.name for path in output.iterdir() if path.name.startswith("_checkpoint.")]
    assert len(kept_aside) == 1 and kept_aside[0].startswith("_checkpoint.behind-"), kept_aside

    # Its progress is the group's: committed up to the end of each partition.
    with Admin({"bootstrap.servers": shared_broker.bootstrap}) as admin:
        committed = admin.list_group_offsets(group)
    ends = Counter(record.partition for record in produced)
    assert {tp.partition: committed[tp].offset for tp in committed} == dict(ends)

    # Timestamps are Parquet INT64 (microseconds, UTC), not the legacy INT96.
    for parquet_file in output.glob("topic=*/date=*/*.parquet"):
        schema = pq.ParquetFile(parquet_file).schema
        column = schema.column(schema.names.index("timestamp"))
        assert column.physical_type == "INT64", parquet_file
        logical = json.loads(column.logical_type.to_json())
        assert (logical["Type"], logical["isAdjustedToUTC"], logical["timeUnit"]) == (
            "Timestamp",
            True,
            "microseconds",
        )


def test_archive_refuses_a_directory_whose_files_it_did_not_log(
    spark: Any, shared_broker: BrokerProcess, tmp_path: Path
) -> None:
    create_topic(shared_broker.bootstrap, "not-logged", 1)
    output = tmp_path / "somebody-elses"
    (output / "topic=x").mkdir(parents=True)
    (output / "topic=x" / "part-0.parquet").write_bytes(b"PAR1")
    with pytest.raises(ArchiveStateError, match=r"holds files \(topic=x\) but no _spark_metadata"):
        archive(spark, shared_broker.bootstrap, ["not-logged"], output)
    assert sorted(path.name for path in output.iterdir()) == ["topic=x"]
