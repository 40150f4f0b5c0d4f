"""The pipelines ``strom pipeline`` runs, as functions of a SparkSession so jobs and tests share them.

- ``archive``: the offline loader. New records since the last run, written as Parquet partitioned
  by topic and date. It is a streaming query run with ``Trigger.AvailableNow`` and a checkpoint
  under ``PATH/_checkpoint`` into Spark's file sink, which is exactly-once: a run that crashed is
  redone from the checkpoint's last committed batch, and readers of PATH see only files the sink's
  log (``PATH/_spark_metadata``) committed, so nothing is duplicated and nothing skipped. A lost
  checkpoint is rebuilt from what the archive holds (see ``archive_state``). Timestamps are written
  as Parquet INT64 (microseconds, UTC), not Spark's legacy INT96.
- ``pageviews``: page-view JSON parsed, counted per page in 1-minute tumbling event-time windows
  with a watermark, the counts written back to a topic (update mode: each micro-batch writes the
  windows whose counts changed, so the latest record per key is the current count). Spark's Python
  sinks take append mode only, so the counts go out through ``foreachBatch`` and the batch sink.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from strom.spark import register
from strom.spark.archive_state import prepare_archive

__all__ = [
    "archive",
    "default_archive_group",
    "default_pageviews_group",
    "describe_progress",
    "pageviews",
    "spark_session",
]

# Parquet's INT64 timestamps (microseconds, adjusted to UTC) instead of Spark's default, the
# legacy INT96 that other Parquet readers deprecate.
PARQUET_TIMESTAMP_TYPE = "TIMESTAMP_MICROS"


def spark_session(
    master: str = "local[*]",
    app_name: str = "strom-pipeline",
    conf: Mapping[str, str] | None = None,
) -> Any:
    """A SparkSession for the pipelines: its Python workers run this interpreter (on a cluster the
    workers need the same path, see docs/spark.md), on loopback unless ``SPARK_LOCAL_IP`` says
    otherwise, with ``format("strom")`` registered. ``conf`` wins over the defaults here."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    settings = {
        "spark.ui.enabled": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "4",
    }
    settings.update(conf or {})
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark


def default_archive_group(output: str | Path) -> str:
    """The consumer group an archive commits its progress to unless told otherwise."""
    name = PurePosixPath(str(output).rstrip("/")).name or "archive"
    return f"strom-archive-{name}"


def default_pageviews_group(target_topic: str) -> str:
    return f"strom-pageviews-{target_topic}"


def _reader(spark: Any, bootstrap_servers: str, extra_options: Mapping[str, str] | None) -> Any:
    register(spark)
    reader = spark.readStream.format("strom").option("bootstrap.servers", bootstrap_servers)
    for key, value in (extra_options or {}).items():
        reader = reader.option(key, value)
    return reader


def archive(
    spark: Any,
    bootstrap_servers: str,
    topics: list[str],
    output: str | Path,
    extra_options: Mapping[str, str] | None = None,
    *,
    group_id: str | None = None,
) -> int:
    """Load every record not yet archived into ``output``; returns how many this run archived.
    ``group_id``: commit the archive's progress to this consumer group (its lag is what is left
    to archive). Raises ``ArchiveStateError`` for a directory it cannot continue safely."""
    from pyspark.sql import functions

    output_text = str(output).rstrip("/")
    prepare_archive(spark, output_text, topics)
    reader = _reader(spark, bootstrap_servers, extra_options)
    if group_id:
        reader = reader.option("groupId", group_id)
    records = (
        reader.option("subscribe", ",".join(topics))
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
        .load()
        .withColumn("date", functions.to_date("timestamp"))
    )
    writer = (
        records.writeStream.format("parquet")
        .option("path", output_text)
        .option("checkpointLocation", f"{output_text}/_checkpoint")
        .partitionBy("topic", "date")
        .trigger(availableNow=True)
    )
    # The query takes a copy of the session's settings when it starts; the caller's stay as they were.
    timestamp_key = "spark.sql.parquet.outputTimestampType"
    previous = spark.conf.get(timestamp_key, None)
    spark.conf.set(timestamp_key, PARQUET_TIMESTAMP_TYPE)
    try:
        query = writer.start()
    finally:
        if previous is None:
            spark.conf.unset(timestamp_key)
        else:
            spark.conf.set(timestamp_key, previous)
    query.awaitTermination()
    return sum(int(progress["numInputRows"]) for progress in query.recentProgress)


def pageviews(
    spark: Any,
    bootstrap_servers: str,
    source_topic: str,
    target_topic: str,
    checkpoint: str | Path,
    *,
    watermark: str = "1 minute",
    available_now: bool = False,
    extra_options: Mapping[str, str] | None = None,
    group_id: str | None = None,
) -> Any:
    """Start the page-view count query and return it (``available_now``: stop when caught up).
    ``group_id``: commit its progress to this consumer group."""
    from pyspark.sql import functions

    reader = _reader(spark, bootstrap_servers, extra_options)
    if group_id:
        reader = reader.option("groupId", group_id)
    events = (
        reader.option("subscribe", source_topic)
        .option("startingOffsets", "earliest")
        .load()
        .select(
            functions.from_json(
                functions.col("value").cast("string"), "user string, page string, timestamp long"
            ).alias("event")
        )
        .where(functions.col("event.page").isNotNull() & functions.col("event.timestamp").isNotNull())
        .select(
            functions.col("event.page").alias("page"),
            functions.timestamp_millis(functions.col("event.timestamp")).alias("event_time"),
        )
    )
    counts = (
        events.withWatermark("event_time", watermark)
        .groupBy(functions.window("event_time", "1 minute"), functions.col("page"))
        .count()
    )
    output = counts.select(
        functions.concat_ws(
            "|", functions.col("page"), functions.date_format("window.start", "yyyy-MM-dd'T'HH:mm:ss'Z'")
        )
        .cast("binary")
        .alias("key"),
        functions.to_json(
            functions.struct(
                functions.date_format("window.start", "yyyy-MM-dd'T'HH:mm:ss'Z'").alias("window_start"),
                functions.date_format("window.end", "yyyy-MM-dd'T'HH:mm:ss'Z'").alias("window_end"),
                functions.col("page"),
                functions.col("count"),
            )
        )
        .cast("binary")
        .alias("value"),
    )

    # The client settings (security's among them) go to the producer too; the read options do not.
    client_options = {
        key: value for key, value in (extra_options or {}).items() if key.lower().startswith("kafka.")
    }

    def write_batch(batch: Any, batch_id: int) -> None:
        # Spark's Python sinks take append mode only; updated counts go out batch by batch. A
        # retried batch writes the same counts again: the latest record per key is still right.
        sink = (
            batch.write.format("strom")
            .option("bootstrap.servers", bootstrap_servers)
            .option("topic", target_topic)
        )
        for key, value in client_options.items():
            sink = sink.option(key, value)
        sink.mode("append").save()

    writer = (
        output.writeStream.outputMode("update")
        .foreachBatch(write_batch)
        .option("checkpointLocation", str(checkpoint))
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    return writer.start()


def describe_progress(progress: Mapping[str, Any], total_rows: int) -> str:
    """One line for one micro-batch of a query's progress (``total_rows``: read so far in all)."""
    rows = int(progress.get("numInputRows") or 0)
    parts = [f"batch {progress.get('batchId')}: {rows} records read ({total_rows} in all)"]
    for source in progress.get("sources") or []:
        end = source.get("endOffset")
        if isinstance(end, str):
            with contextlib.suppress(ValueError):
                end = json.loads(end)
        if isinstance(end, Mapping):
            positions = ", ".join(
                f"{topic}-{partition}: {offset}"
                for topic, partitions in sorted(end.items())
                if isinstance(partitions, Mapping)
                for partition, offset in sorted(partitions.items(), key=lambda item: int(item[0]))
            )
            parts.append(f"next offsets {positions}")
    watermark = (progress.get("eventTime") or {}).get("watermark")
    if watermark:
        parts.append(f"watermark {watermark}")
    return "; ".join(parts)
