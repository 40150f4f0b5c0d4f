"""strom on a real Spark standalone cluster: a master and two workers (tests/spark/standalone.py),
one for the module. format("strom") batch and streaming reads (with groupId) and the writer run
their tasks in executors on both workers and are exact; so are ``strom pipeline archive`` and a
continuous ``strom pipeline pageviews`` given ``--master spark://...``.

Each worker offers two cores: the test session takes one on each, and the two ``strom pipeline``
applications, run side by side, one each."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.client.admin import Admin
from strom.client.cluster import TopicPartition
from strom.client.consumer import Consumer
from strom.client.producer import Producer
from strom.spark.demo_events import page_views
from tests.compat.cli_support import Finished, run_strom, strom_executable
from tests.compat.conftest import BrokerProcess
from tests.spark.standalone import StandaloneCluster, start_standalone
from tests.spark.support import Produced, create_topic, produce
from tests.spark.test_pipelines import BASE_MS, _window_start

pytestmark = pytest.mark.spark

# Executors registering with a new application on a loaded machine.
EXECUTORS_DEADLINE_S = 120.0
# A whole `strom pipeline` application: its JVM, its executors, its micro-batches.
PIPELINE_DEADLINE_S = 300.0
# Spark settings for each `strom pipeline` application: one executor of one core (the test session
# shows tasks on both workers; these show the command on a cluster), small shuffles.
PIPELINE_CONF = [
    "--conf", "spark.cores.max=1", "--conf", "spark.executor.memory=512m",
    "--conf", "spark.sql.shuffle.partitions=2",
]  # fmt: skip


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    cluster = start_standalone(tmp_path_factory.mktemp("standalone"))
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def cluster_spark(standalone: StandaloneCluster) -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable  # executors run this venv's Python: strom is there
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    import strom.spark

    session = (
        SparkSession.builder.master(standalone.master_url)
        .appName("strom-standalone-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.cores.max", "2")
        .config("spark.executor.cores", "1")
        .config("spark.executor.memory", "512m")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.pollingDelay", "50ms")
        .getOrCreate()
    )
    try:
        session.sparkContext.setLogLevel("ERROR")
        strom.spark.register(session)
        deadline = time.monotonic() + EXECUTORS_DEADLINE_S
        # The driver counts itself among the block managers: two executors make three.
        while session.sparkContext._jsc.sc().getExecutorMemoryStatus().size() < 3:
            assert time.monotonic() < deadline, "two executors did not register"
            time.sleep(0.2)
        yield session
    finally:
        session.stop()


def _executor_directories(frame: Any) -> set[str]:
    """Where the tasks reading ``frame`` ran: each executor works in WORKER_DIR/APP_ID/EXECUTOR_ID."""
    return set(frame.rdd.mapPartitions(lambda rows: [os.getcwd() for _ in [sum(1 for _ in rows)]]).collect())


def test_batch_read_runs_in_executors_on_both_workers_and_is_exact(
    cluster_spark: Any, standalone: StandaloneCluster, shared_broker: BrokerProcess
) -> None:
    topic = "cluster-batch"
    create_topic(shared_broker.bootstrap, topic, 3)
    count = 600
    values: list[bytes | None] = [
        b"v%d-" % index + bytes([index % 256]) * (index % 40) for index in range(count)
    ]
    keys: list[bytes | None] = [None if index % 7 == 0 else b"k%d" % index for index in range(count)]
    headers = [[("n", b"%d" % index)] if index % 2 else [] for index in range(count)]
    produced = produce(shared_broker.bootstrap, topic, values, keys=keys, headers=headers)

    frame = (
        cluster_spark.read.format("strom")
        .option("bootstrap.servers", shared_broker.bootstrap)
        .option("subscribe", topic)
        .option("includeHeaders", "true")
        .option("minPartitions", "6")
        .load()
    )
    read = [
        Produced(
            row.topic,
            row.partition,
            row.offset,
            None if row.key is None else bytes(row.key),
            bytes(row.value),
            tuple((header.key, bytes(header.value)) for header in row.headers),
        )
        for row in frame.collect()
    ]
    assert sorted(read, key=lambda r: (r.partition, r.offset)) == sorted(
        produced, key=lambda r: (r.partition, r.offset)
    )
    directories = _executor_directories(frame)
    workers = {str(worker_dir) for worker_dir in standalone.worker_dirs}
    assert {directory.split("/app-")[0] for directory in directories} == workers, directories


def test_writer_and_streaming_read_with_group_id_on_the_cluster(
    cluster_spark: Any, shared_broker: BrokerProcess, tmp_path: Path
) -> None:
    written, copied, group = "cluster-written", "cluster-copied", "cluster-copier"
    create_topic(shared_broker.bootstrap, written, 2)
    create_topic(shared_broker.bootstrap, copied, 2)
    rows = [(b"k%d" % (index % 13), f"value-{index}", [("i", str(index).encode())]) for index in range(400)]
    # Four writing tasks, spread over both executors.
    cluster_spark.createDataFrame(
        cluster_spark.sparkContext.parallelize(rows, 4),
        "key binary, value string, headers array<struct<key: string, value: binary>>",
    ).write.format("strom").option("bootstrap.servers", shared_broker.bootstrap).option(
        "topic", written
    ).mode("append").save()

    query = (
        cluster_spark.readStream.format("strom")
        .option("bootstrap.servers", shared_broker.bootstrap)
        .option("subscribe", written)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "150")
        .option("groupId", group)
        .option("includeHeaders", "true")
        .load()
        .selectExpr("key", "upper(CAST(value AS STRING)) AS value", "headers", "partition")
        .writeStream.format("strom")
        .option("bootstrap.servers", shared_broker.bootstrap)
        .option("topic", copied)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert [progress["numInputRows"] for progress in query.recentProgress if progress["numInputRows"]] == [
        150,
        150,
        100,
    ]

    result = (
        cluster_spark.read.format("strom")
        .option("bootstrap.servers", shared_broker.bootstrap)
        .option("subscribe", copied)
        .option("includeHeaders", "true")
        .load()
        .collect()
    )
    assert sorted(
        (bytes(row.key), bytes(row.value).decode(), [(h.key, bytes(h.value)) for h in row.headers])
        for row in result
    ) == sorted((key, value.upper(), headers) for key, value, headers in rows)
    with Admin({"bootstrap.servers": shared_broker.bootstrap}) as admin:
        committed = admin.list_group_offsets(group)
        ends = admin.list_offsets({(written, 0): "latest", (written, 1): "latest"})
    assert {tp: offset.offset for tp, offset in committed.items()} == {
        TopicPartition(*tp): answer.offset for tp, answer in ends.items() if answer is not None
    }


def _latest_counts(bootstrap: str, topic: str) -> dict[tuple[str, str], int]:
    """The latest count per key of the pageviews output (one partition)."""
    latest: dict[str, dict[str, Any]] = {}
    partition = TopicPartition(topic, 0)
    with Consumer({"bootstrap.servers": bootstrap}) as consumer:
        end = consumer.end_offsets([partition])[partition]
        consumer.assign([partition])
        consumer.seek_to_beginning([partition])
        read = 0
        deadline = time.monotonic() + 30
        while read < end and time.monotonic() < deadline:
            for record in consumer.poll(500):
                read += 1
                latest[(record.key or b"").decode()] = json.loads(record.value or b"{}")
    return {(value["page"], value["window_start"]): value["count"] for value in latest.values()}


def _check_archive(
    spark: Any, finished: Finished, output: Path, produced: list[Produced], bootstrap: str
) -> None:
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert json.loads(finished.stdout) == {
        "output": str(output),
        "records_archived": len(produced),
        "group": "strom-archive-archive",
    }
    assert "unknown read option 'maxoffsetpertrigger' (did you mean maxOffsetsPerTrigger?); ignored" in (
        finished.stderr
    )
    assert "replaced a previously registered data source" not in finished.stderr
    assert "Traceback" not in finished.stderr
    archived = spark.read.parquet(str(output)).select("topic", "partition", "offset", "value").collect()
    assert sorted((row.topic, row.partition, row.offset, bytes(row.value)) for row in archived) == sorted(
        (record.topic, record.partition, record.offset, record.value) for record in produced
    )
    # Its lag, as `strom groups describe` shows it: nothing left to archive.
    described = run_strom(
        "groups", "describe", "strom-archive-archive", "--bootstrap-server", bootstrap, "--output", "json"
    )
    assert described.returncode == 0, described.stderr
    report = json.loads(described.stdout)
    group = report[0] if isinstance(report, list) else report
    ends = Counter((record.topic, record.partition) for record in produced)
    assert {(row["topic"], row["partition"]): row["committed_offset"] for row in group["offsets"]} == {
        (topic, partition): ends[(topic, partition)]
        for topic, partition in [("cluster-orders", 0), ("cluster-orders", 1), ("cluster-payments", 0)]
    }
    assert group["total_lag"] == 0


# Its own steps wait up to PIPELINE_DEADLINE_S each (the archive run, the pageviews' progress) and
# 120 s for the stop: the suite's 300 s per test cut it short on a loaded machine (two pipelines,
# two Spark workers and the test session's own Spark on two CPUs), inside the stop, with the
# pipeline's process left running.
@pytest.mark.timeout(2 * PIPELINE_DEADLINE_S + 240)
def test_strom_pipeline_archive_and_a_running_pageviews_on_the_cluster(
    cluster_spark: Any, standalone: StandaloneCluster, shared_broker: BrokerProcess, tmp_path: Path
) -> None:
    """Two `strom pipeline` applications at once beside the test session: a continuous pageviews
    (a progress line per micro-batch, exact counts, stopped by SIGTERM with a summary) and an
    archive (exact, its lag in `strom groups describe`)."""
    bootstrap = shared_broker.bootstrap
    source, target = "cluster-page-views", "cluster-page-view-counts"
    create_topic(bootstrap, source, 2)
    create_topic(bootstrap, target, 1)
    create_topic(bootstrap, "cluster-orders", 2)
    create_topic(bootstrap, "cluster-payments", 1)
    stderr_path = tmp_path / "pageviews.stderr"
    with stderr_path.open("wb") as stderr:
        command = [
            strom_executable(), "pipeline", "pageviews", "--from", source, "--to", target,
            "--checkpoint", str(tmp_path / "checkpoint"), "--bootstrap-server", bootstrap,
            "--master", standalone.master_url, *PIPELINE_CONF,
            "--option", "maxOffsetsPerTrigger=500",  # three micro-batches, three progress lines
        ]  # fmt: skip
        pageviews = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.DEVNULL)
    try:
        # Events in four 1-minute windows, sent while the pipeline starts.
        events = list(page_views(1_500, seed=11, timestamp_ms=lambda index: BASE_MS + 150 * index))
        with Producer({"bootstrap.servers": bootstrap}) as producer:
            for event in events:
                producer.send(
                    source, value=event.to_json(), key=event.user.encode(), timestamp=event.timestamp_ms
                )
            producer.flush()
        truth = Counter((event.page, _window_start(event.timestamp_ms)) for event in events)

        produced = produce(bootstrap, "cluster-orders", [b"order-%d" % index for index in range(120)])
        produced += produce(bootstrap, "cluster-payments", [b"pay-%d" % index for index in range(45)])
        output = tmp_path / "archive"
        archive = run_strom(
            "pipeline", "archive", "--topics", "cluster-orders,cluster-payments", "--output", str(output),
            "--bootstrap-server", bootstrap, "--master", standalone.master_url, *PIPELINE_CONF,
            "--option", "maxOffsetPerTrigger=50",  # misspelt: warned about, with the name meant
            timeout_s=PIPELINE_DEADLINE_S,
        )  # fmt: skip
        _check_archive(cluster_spark, archive, output, produced, bootstrap)

        deadline = time.monotonic() + PIPELINE_DEADLINE_S
        while "(1500 in all)" not in stderr_path.read_text():
            assert pageviews.poll() is None, f"pageviews exited early: {stderr_path.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"no progress to 1500: {stderr_path.read_text()[-3000:]}"
            time.sleep(0.5)
        # A line per micro-batch that read something, printed once it completed (counts written).
        progress = [
            line for line in stderr_path.read_text().splitlines() if line.startswith("pageviews: batch ")
        ]
        assert len(progress) >= 3, progress
        assert f"next offsets {source}-0: " in progress[-1]
        assert _latest_counts(bootstrap, target) == dict(truth)
    finally:
        pageviews.send_signal(signal.SIGTERM)
        try:
            stdout, _ = pageviews.communicate(timeout=120)
        finally:
            # Killed if it did not stop (or the test is cut short while waiting): a Popen left with
            # its process running is reported at garbage collection, inside whatever test runs then.
            if pageviews.poll() is None:
                pageviews.kill()
                pageviews.communicate()
    # SIGTERM stops it as Ctrl-C does: cleanly, with a summary.
    stderr_text = stderr_path.read_text()
    assert pageviews.returncode == 0, stderr_text[-3000:]
    assert "Traceback" not in stderr_text and stderr_text.rstrip().endswith("pageviews: stopped")
    assert "replaced a previously registered data source" not in stderr_text
    summary = json.loads(stdout)
    assert (summary["records_read"], summary["group"]) == (1500, f"strom-pageviews-{target}")
    # Its progress is committed to its group: nothing left to read.
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        committed = admin.list_group_offsets(summary["group"])
    assert sum(offset.offset for offset in committed.values()) == 1500
