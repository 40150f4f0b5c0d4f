"""The real ``strom pipeline`` executable where it must fail: a cluster it cannot reach and topics
that do not exist give one clear line and exit 1 before Spark starts (which takes seconds), within
the user's ``--request-timeout-ms`` (a refused connection at once). The pipelines at work on a
Spark cluster are in test_standalone."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.compat.cli_support import refused_address, run_strom, silent_listener
from tests.compat.conftest import BrokerProcess
from tests.compat.test_cli_unreachable import STARTUP_ALLOWANCE_S, assert_one_clear_line
from tests.spark.support import create_topic

pytestmark = pytest.mark.spark

LONG_TIMEOUT_MS = 30_000
SHORT_TIMEOUT_MS = 2_000


def _commands(output: Path) -> dict[str, list[str]]:
    return {
        "archive": ["pipeline", "archive", "--topics", "orders", "--output", str(output / "archive")],
        "pageviews": [
            "pipeline", "pageviews", "--from", "page_views", "--to", "counts",
            "--checkpoint", str(output / "checkpoint"),
        ],
        "demo-events": ["pipeline", "demo-events", "--topic", "page_views", "--rate", "100", "--count", "5"],
    }  # fmt: skip


@pytest.mark.parametrize("name", ["archive", "pageviews", "demo-events"])
def test_a_refused_connection_is_one_line_at_once(name: str, tmp_path: Path) -> None:
    address = refused_address()
    finished = run_strom(
        *_commands(tmp_path)[name],
        "--bootstrap-server",
        address,
        "--request-timeout-ms",
        str(LONG_TIMEOUT_MS),
    )
    line = assert_one_clear_line(finished)
    assert line.startswith(f"strom: error: cannot connect to {address}: connection refused"), line
    assert finished.elapsed_s < STARTUP_ALLOWANCE_S, f"{name} took {finished.elapsed_s:.1f} s"
    assert not (tmp_path / "archive").exists() and not (tmp_path / "checkpoint").exists()


@pytest.mark.parametrize("name", ["archive", "pageviews"])
def test_a_silent_listener_is_given_up_on_after_the_request_timeout(name: str, tmp_path: Path) -> None:
    with silent_listener() as address:
        finished = run_strom(
            *_commands(tmp_path)[name],
            "--bootstrap-server",
            address,
            "--request-timeout-ms",
            str(SHORT_TIMEOUT_MS),
        )
    line = assert_one_clear_line(finished)
    assert line.startswith(f"strom: error: no answer from {address} after "), line
    stated = re.search(r"after (\d+\.\d) s", line)
    assert stated is not None and SHORT_TIMEOUT_MS / 1000 <= float(stated.group(1)) <= finished.elapsed_s, (
        line
    )
    assert finished.elapsed_s < SHORT_TIMEOUT_MS / 1000 + STARTUP_ALLOWANCE_S


def test_topics_that_do_not_exist_are_refused_before_spark_starts(
    shared_broker: BrokerProcess, tmp_path: Path
) -> None:
    create_topic(shared_broker.bootstrap, "there", 1)
    archive = run_strom(
        "pipeline", "archive", "--topics", "there,nosuchtopic,gone", "--output", str(tmp_path / "archive"),
        "--bootstrap-server", shared_broker.bootstrap,
    )  # fmt: skip
    line = assert_one_clear_line(archive)
    assert line == (
        f"strom: error: topics nosuchtopic, gone do not exist at {shared_broker.bootstrap} "
        "(`strom topics list` shows the topics there are)"
    )
    assert archive.elapsed_s < STARTUP_ALLOWANCE_S
    assert not (tmp_path / "archive").exists()
    views = run_strom(
        "pipeline", "pageviews", "--from", "nosuchtopic", "--to", "counts",
        "--checkpoint", str(tmp_path / "checkpoint"), "--bootstrap-server", shared_broker.bootstrap,
    )  # fmt: skip
    assert assert_one_clear_line(views).startswith("strom: error: topic nosuchtopic does not exist at ")
    empty = run_strom(
        "pipeline", "archive", "--topics", ",", "--output", str(tmp_path / "archive"),
        "--bootstrap-server", shared_broker.bootstrap,
    )  # fmt: skip
    assert empty.returncode == 2 and "--topics names no topic" in empty.stderr


def test_a_query_that_fails_ends_with_one_line_not_sparks_trace(
    shared_broker: BrokerProcess, tmp_path: Path
) -> None:
    create_topic(shared_broker.bootstrap, "failing-archive", 1)
    finished = run_strom(
        "pipeline", "archive", "--topics", "failing-archive", "--output", str(tmp_path / "archive"),
        "--bootstrap-server", shared_broker.bootstrap, "--master", "local[1]",
        "--option", "kafkaConsumer.pollTimeoutMs=soon",
    )  # fmt: skip
    assert finished.returncode == 1, finished
    assert finished.stdout == ""
    # Spark's log says nothing by default; the JVM itself announces an incubator module it loads.
    lines = [
        line for line in finished.stderr_lines if not line.startswith("WARNING: Using incubator modules")
    ]
    assert lines == [
        "strom: error: the archive query failed: SourceOptionsError: option kafkaConsumer.pollTimeoutMs "
        "must be an integer, not 'soon' (-v shows Spark's log)"
    ], finished.stderr
