"""The pipelines ``strom pipeline`` runs, as functions of a SparkSession so jobs and tests share them.

- ``archive``: the offline loader. New records since the last run, written as Parquet partitioned
  by topic and date. It is a streaming query run with ``Trigger.AvailableNow`` and a checkpoint
  under ``PATH/_checkpoint`` into Spark's file sink, which is exactly-once: a run that crashed is
  redone from the checkpoint's last committed batch, and readers of PATH see only files the sink's
  log (``PATH/_spark_metadata``) committed, so nothing is duplicated and nothing skipped.
- ``pageviews``: page-view JSON parsed, counted per page in 1-minute tumbling event-time windows
  with a watermark, the counts written back to a topic (update mode: each micro-batch writes the
  windows whose counts changed, so the latest record per key is the current count). Spark's Python
  sinks take append mode only, so the counts go out through ``foreachBatch`` and the batch sink.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from strom.spark import register

__all__ = ["archive", "local_session", "pageviews"]


def local_session(master: str = "local[*]", app_name: str = "strom-pipeline") -> Any:
    """A SparkSession whose Python workers run this interpreter, listening on loopback only."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "4")
        .getOrCreate()
    )
    register(spark)
    return spark


def _reader(spark: Any, bootstrap_servers: str, extra_options: dict[str, str] | None) -> Any:
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
    extra_options: dict[str, str] | None = None,
) -> int:
    """Load every record not yet archived into ``output``; returns how many this run archived."""
    from pyspark.sql import functions

    output_path = Path(output)
    records = (
        _reader(spark, bootstrap_servers, extra_options)
        .option("subscribe", ",".join(topics))
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
        .load()
        .withColumn("date", functions.to_date("timestamp"))
    )
    query = (
        records.writeStream.format("parquet")
        .option("path", str(output_path))
        .option("checkpointLocation", str(output_path / "_checkpoint"))
        .partitionBy("topic", "date")
        .trigger(availableNow=True)
        .start()
    )
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
    extra_options: dict[str, str] | None = None,
) -> Any:
    """Start the page-view count query and return it (``available_now``: stop when caught up)."""
    from pyspark.sql import functions

    events = (
        _reader(spark, bootstrap_servers, extra_options)
        .option("subscribe", source_topic)
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

    def write_batch(batch: Any, batch_id: int) -> None:
        # Spark's Python sinks take append mode only; updated counts go out batch by batch. A
        # retried batch writes the same counts again: the latest record per key is still right.
        batch.write.format("strom").option("bootstrap.servers", bootstrap_servers).option(
            "topic", target_topic
        ).mode("append").save()

    writer = (
        output.writeStream.outputMode("update")
        .foreachBatch(write_batch)
        .option("checkpointLocation", str(checkpoint))
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    return writer.start()
