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
    """Make ``format("strom")`` available in ``spark`` (a SparkSession). Calling it again is
    harmless: a session that has the source already keeps it (registering anew would make Spark
    log "data source strom replaced a previously registered data source")."""
    from strom.spark.source import StromDataSource

    if _registered(spark, StromDataSource.name()):
        return
    spark.dataSource.register(StromDataSource)


def _registered(spark: Any, name: str) -> bool:
    """Whether the session's data source manager knows ``name``. PySpark has no public call for
    this; the JVM session state has one, and when it cannot be reached the answer is "no" (the
    cost of a wrong "no" is one log line)."""
    try:
        manager = spark._jsparkSession.sessionState().dataSourceManager()
        return bool(manager.dataSourceExists(name))
    except Exception:
        return False
