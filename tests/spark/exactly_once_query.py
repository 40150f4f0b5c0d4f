"""The streaming query test_exactly_once_kill runs as a driver process of its own, kills with
SIGKILL in the middle of a micro-batch and runs again from its checkpoint:

    python exactly_once_query.py BOOTSTRAP SOURCE_TOPIC SINK_TOPIC CHECKPOINT RECORDS_PER_TRIGGER

It copies SOURCE_TOPIC to SINK_TOPIC with ``format("strom")`` and ``exactlyOnce=true``, in
micro-batches of RECORDS_PER_TRIGGER records, with ``Trigger.AvailableNow`` (it stops once it has
copied what the topic held when it started). Its producers send small batches, one request at a
time (``kafka.batch.size``, ``kafka.max.in.flight.requests.per.connection``): each write task keeps
its transaction open for a while, so the test can kill the driver while transactions are open or
while some tasks of a batch have committed and others not. (Spark hands a Python sink's task its
rows only once they are all computed, so slowing the query before the sink would not do.)
"""

from __future__ import annotations

import os
import sys

# One record per produce request, each sent once the one before is answered.
BATCH_BYTES = 1


def main() -> None:
    bootstrap, source, sink, checkpoint, per_trigger = sys.argv[1:6]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    import strom.spark

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("strom-exactly-once-kill")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.pollingDelay", "50ms")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    strom.spark.register(spark)
    query = (
        spark.readStream.format("strom")
        .option("bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", per_trigger)
        .load()
        .selectExpr("key", "value")
        .writeStream.format("strom")
        .option("bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("exactlyOnce", "true")
        .option("kafka.batch.size", str(BATCH_BYTES))
        .option("kafka.max.in.flight.requests.per.connection", "1")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
