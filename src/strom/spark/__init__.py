"""strom on Apache Spark: ``format("strom")`` for batch and streaming reads and writes.

    import strom.spark
    strom.spark.register(spark)
    df = spark.read.format("strom").option("bootstrap.servers", "127.0.0.1:9092").option("subscribe", "t").load()

The options and the read schema are those of Spark's built-in Kafka source (see docs/spark.md).
PySpark and pyarrow come with the ``spark`` extra; importing this package does not import them.
"""

from __future__ import annotations

from typing import Any

__all__ = ["register"]


def register(spark: Any) -> None:
    """Make ``format("strom")`` available in ``spark`` (a SparkSession)."""
    from strom.spark.source import StromDataSource

    spark.dataSource.register(StromDataSource)
