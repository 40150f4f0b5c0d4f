"""The job in docs/spark.md, run as a user runs it (a Python script, its own SparkSession, none of
the test session's environment): the batch read prints the orders, the streaming query keeps
copying page views upper-cased until it is stopped, and Spark listens on loopback only."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from strom.client.cluster import TopicPartition
from strom.client.consumer import Consumer
from strom.client.producer import Producer
from tests.compat.conftest import BrokerProcess
from tests.spark.processes import is_loopback, listening_addresses
from tests.spark.support import create_topic, produce

pytestmark = pytest.mark.spark

DOCS = Path(__file__).resolve().parents[2] / "docs" / "spark.md"
# A SparkSession starting on a loaded machine, then a few micro-batches.
JOB_DEADLINE_S = 240.0


def documented_job() -> str:
    text = DOCS.read_text()
    section = text[text.index("## Writing your own job") :]
    found = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert found is not None, "no python block under 'Writing your own job'"
    return found.group(1)


def _read_values(bootstrap: str, topic: str) -> list[bytes]:
    with Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"}) as consumer:
        partition = TopicPartition(topic, 0)
        end = consumer.end_offsets([partition])[partition]
        consumer.assign([partition])
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(values) < end and time.monotonic() < deadline:
            values += [record.value or b"" for record in consumer.poll(500)]
    return values


def test_the_documented_job_writes_until_stopped_and_listens_on_loopback_only(
    shared_broker: BrokerProcess, tmp_path: Path
) -> None:
    bootstrap = shared_broker.bootstrap
    create_topic(bootstrap, "orders", 1)
    create_topic(bootstrap, "page_views", 2)
    create_topic(bootstrap, "page_views_upper", 1)
    produce(bootstrap, "orders", [b"order-one", b"order-two"])
    script = tmp_path / "job.py"
    script.write_text(
        documented_job()
        .replace("127.0.0.1:9092", bootstrap)
        .replace("/tmp/upper-checkpoint", str(tmp_path / "upper-checkpoint"))
    )
    environment = {
        key: value for key, value in os.environ.items() if not key.startswith(("SPARK_", "PYSPARK_"))
    }
    stdout, stderr = tmp_path / "stdout", tmp_path / "stderr"
    with stdout.open("wb") as out, stderr.open("wb") as err:
        job = subprocess.Popen(
            [sys.executable, str(script)], stdout=out, stderr=err, env=environment, cwd=tmp_path
        )
    try:
        deadline = time.monotonic() + JOB_DEADLINE_S
        with Producer({"bootstrap.servers": bootstrap}) as producer:
            # The stream starts at the latest offsets: send until the first copy shows it runs.
            sent = 0
            while not _read_values(bootstrap, "page_views_upper"):
                assert job.poll() is None, f"the job exited ({job.returncode}): {stderr.read_text()[-3000:]}"
                assert time.monotonic() < deadline, f"nothing copied: {stderr.read_text()[-3000:]}"
                producer.send("page_views", value=b"warm-up %d" % sent, key=b"k")
                producer.flush()
                sent += 1
                time.sleep(1)
            listening = listening_addresses(job.pid)
            final = [b"final %d" % index for index in range(10)]
            for value in final:
                producer.send("page_views", value=value, key=b"k")
            producer.flush()
        while not set(value.upper() for value in final) <= set(_read_values(bootstrap, "page_views_upper")):
            assert job.poll() is None, f"the job exited ({job.returncode}): {stderr.read_text()[-3000:]}"
            assert time.monotonic() < deadline, "the job stopped copying"
            time.sleep(0.5)
        assert job.poll() is None  # still running: a stream runs until stopped
    finally:
        job.send_signal(signal.SIGINT)
        try:
            job.wait(60)
        except subprocess.TimeoutExpired:
            job.kill()
            job.wait()
    assert listening, "the job's JVM listens somewhere (the driver, the block manager)"
    assert all(is_loopback(address) for address in listening), listening
    printed = stdout.read_text()
    assert "order-one" in printed and "order-two" in printed
