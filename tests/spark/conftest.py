"""Spark tests: a real SparkSession (``local[2]``, one per module) against a real strom broker
started by the compat harness on a free loopback port; test_standalone runs its own on a real
Spark standalone cluster (tests/spark/standalone.py)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.compat.conftest import BrokerProcess, shared_broker, shared_broker_settings

__all__ = ["BrokerProcess", "shared_broker", "shared_broker_settings", "spark"]


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
