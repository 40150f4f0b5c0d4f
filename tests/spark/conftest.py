"""Spark tests: a real SparkSession (``local[2]``, one per module) against a real strom broker
started by the compat harness on a free loopback port; test_standalone runs its own on a real
Spark standalone cluster (tests/spark/standalone.py). Spark's Python workers import the installed
pyspark (``worker_site``)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.compat.conftest import BrokerProcess, shared_broker, shared_broker_settings

__all__ = ["BrokerProcess", "shared_broker", "shared_broker_settings", "spark"]


# Spark's Python workers import the installed pyspark, not the zip of it Spark puts first on their
# path (``worker_site/sitecustomize.py`` says why: a streaming query's source runner must connect
# back within a fixed 10 s).
WORKER_SITE = Path(__file__).resolve().parent / "worker_site"


@pytest.fixture(scope="module", autouse=True)
def spark_workers_import_the_installed_pyspark() -> Iterator[None]:
    """``WORKER_SITE`` first on PYTHONPATH while the Spark tests run: the Spark JVMs they start (in
    this process, which keeps its JVM for the session, and in ``strom pipeline`` and documented-job
    processes) hand it on to every Python process they start."""
    previous = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(WORKER_SITE), previous]))
    try:
        yield
    finally:
        if previous is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = previous


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    import strom.spark

    session = (
        SparkSession.builder.master("local[2]")
        .appName("strom-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.pollingDelay", "50ms")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    strom.spark.register(session)
    try:
        yield session
    finally:
        session.stop()
