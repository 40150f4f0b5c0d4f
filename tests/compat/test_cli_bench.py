"""``strom bench`` against a real broker with both clients: the summary, and the plot as a real PNG."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from strom.cli.bench import LATENCY_SAMPLE_EVERY
from strom.cli.main import main
from tests.compat.conftest import BrokerProcess
from tests.compat.support import unique_topic

pytestmark = pytest.mark.compat

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
RECORDS = 3_000


def bench(capsys: pytest.CaptureFixture[str], broker: BrokerProcess, *argv: str) -> dict[str, object]:
    code = main(["bench", *argv, "--bootstrap-server", broker.bootstrap, "--output", "json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary: dict[str, object] = json.loads(captured.out)
    return summary


def assert_png(path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import image

    assert path.read_bytes()[:8] == PNG_SIGNATURE
    pixels = image.imread(path)
    assert pixels.ndim == 3 and pixels.shape[0] > 100 and pixels.shape[1] > 100


@pytest.mark.parametrize("client", ["strom", "confluent"])
def test_bench_produce_consume_end_to_end(
    client: str, shared_broker: BrokerProcess, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    topic = unique_topic(f"cli-bench-{client}")
    common = ("--topic", topic, "--client", client, "--record-size", "64")
    produced = bench(
        capsys, shared_broker, "produce", *common, "--records", str(RECORDS), "--partitions", "2",
        "--compression", "lz4", "--plot", str(tmp_path / "produce.png"),
    )  # fmt: skip
    assert produced["records"] == RECORDS and produced["errors"] == 0
    assert isinstance(produced["records_per_s"], float) and produced["records_per_s"] > 0
    latency = produced["latency_ms"]
    # Latency from one record in LATENCY_SAMPLE_EVERY (the first of each run).
    assert isinstance(latency, dict) and latency["count"] == -(-RECORDS // LATENCY_SAMPLE_EVERY)
    assert 0 <= latency["p50"] <= latency["p95"] <= latency["p99"] <= latency["max"]
    assert_png(tmp_path / "produce.png")

    consumed = bench(capsys, shared_broker, "consume", *common, "--records", str(RECORDS))
    assert consumed["records"] == RECORDS and consumed["latency_ms"] is None

    # Throttled: 1000 records at 2000 records/s take at least half a second.
    end_to_end = bench(
        capsys, shared_broker, "end-to-end", *common, "--records", "1000", "--throughput", "2000",
        "--plot", str(tmp_path / "e2e.png"),
    )  # fmt: skip
    assert end_to_end["records"] == 1000
    assert isinstance(end_to_end["elapsed_s"], float) and end_to_end["elapsed_s"] >= 0.45
    latency = end_to_end["latency_ms"]
    assert isinstance(latency, dict) and latency["count"] == 1000 and latency["max"] > 0
    assert_png(tmp_path / "e2e.png")


def test_bench_table_output_and_periodic_progress(
    shared_broker: BrokerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = unique_topic("cli-bench-table")
    code = main(
        [
            *("bench", "produce", "--topic", topic, "--records", "2000", "--throughput", "4000"),
            *("--report-interval-ms", "100", "--bootstrap-server", shared_broker.bootstrap),
        ]
    )
    captured = capsys.readouterr()
    assert code == 0
    metrics = {" ".join(line.split()[:-1]): line.split()[-1] for line in captured.out.splitlines()[2:]}
    assert metrics["records"] == "2000"
    assert {
        "records/s",
        "MB/s",
        "latency p50 ms",
        "latency p95 ms",
        "latency p99 ms",
        "latency max ms",
    } <= set(metrics)
    # stderr is not a terminal here: whole progress lines, no carriage returns; the last line is
    # the final count, not the last periodic one.
    progress = [line for line in captured.err.splitlines() if "records/s" in line]
    assert progress and "\r" not in captured.err
    assert progress[-1].startswith("2000/2000 records in ") and progress[-1].endswith(" on average")


@pytest.mark.parametrize("client", ["strom", "confluent"])
def test_bench_in_several_processes_with_client_settings(
    client: str, shared_broker: BrokerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = unique_topic(f"cli-bench-processes-{client}")
    common = ("--topic", topic, "--client", client, "--processes", "2")
    produced = bench(
        capsys, shared_broker, "produce", *common, "--records", "4001", "--partitions", "2",
        "-X", "linger.ms=20", "-X", "batch.size=65536" if client == "strom" else "batch.num.messages=500",
    )  # fmt: skip
    assert (produced["records"], produced["errors"], produced["processes"]) == (4001, 0, 2)
    latency = produced["latency_ms"]
    assert (
        isinstance(latency, dict)
        and latency["count"] == 2001 // LATENCY_SAMPLE_EVERY + 1 + 2000 // LATENCY_SAMPLE_EVERY
    )
    consumed = bench(capsys, shared_broker, "consume", *common, "--records", "4001")
    assert (consumed["records"], consumed["processes"]) == (4001, 2)
    code = main(
        [
            "bench",
            "produce",
            "--topic",
            topic,
            "-X",
            "linger.msec=5",
            "--bootstrap-server",
            shared_broker.bootstrap,
        ]
    )
    assert code == 2 and "did you mean linger.ms" in capsys.readouterr().err
