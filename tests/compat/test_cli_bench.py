"""``strom bench`` against a real broker with both clients: the summary, and the plot as a real PNG."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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
    assert isinstance(latency, dict) and latency["count"] == RECORDS
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
    # stderr is not a terminal here: whole progress lines, no carriage returns.
    progress = [line for line in captured.err.splitlines() if "records/s" in line]
    assert progress and "\r" not in captured.err
