"""Bench numbers: nearest-rank percentiles, the summary, the timeline, the throttle, the progress line."""

from __future__ import annotations

import io
import json

import pytest

from strom.cli.bench import Progress, Throttle, make_value, read_send_time_ns, summary_report
from strom.cli.bench_stats import BenchSummary, LatencySummary, ThroughputTimeline, percentile
from strom.cli.output import write_report


def test_percentile_is_nearest_rank() -> None:
    values = [float(value) for value in range(1, 101)]  # 1..100
    assert percentile(values, 0.50) == 50
    assert percentile(values, 0.95) == 95
    assert percentile(values, 0.99) == 99
    assert percentile(values, 1.0) == 100
    assert percentile(values, 0.0) == 1
    assert percentile([7.0], 0.99) == 7.0
    # Rank rounds up: with 10 samples p95 is the 10th, never an interpolated value.
    assert percentile([float(value) for value in range(10)], 0.95) == 9.0


def test_latency_summary_sorts_its_samples() -> None:
    summary = LatencySummary.from_samples([5.0, 1.0, 3.0, 2.0, 4.0])
    assert summary == LatencySummary(count=5, average_ms=3.0, p50_ms=3.0, p95_ms=5.0, p99_ms=5.0, max_ms=5.0)
    assert LatencySummary.from_samples([]) is None


def test_timeline_counts_per_window_and_rebins() -> None:
    timeline = ThroughputTimeline(window_s=0.5)
    timeline.add(0.1)
    timeline.add(0.4, 3)
    timeline.add(1.7, 2)
    assert timeline.counts == [4, 0, 0, 2]
    assert timeline.rates() == [(0.0, 8.0), (0.5, 0.0), (1.0, 0.0), (1.5, 4.0)]
    merged = timeline.rebinned(2)
    assert merged.window_s == 1.0
    assert merged.counts == [4, 2]
    assert timeline.rebinned(10).counts == timeline.counts


def test_timeline_spreads_an_interval_over_its_windows() -> None:
    timeline = ThroughputTimeline(window_s=0.1)
    timeline.add_interval(0.0, 0.1, 100)
    timeline.add_interval(0.1, 0.3, 200)  # a late sample: two windows' worth, spread over both
    timeline.add_interval(0.3, 0.35, 7)
    timeline.add_interval(0.35, 0.35, 3)
    timeline.add_interval(0.35, 0.4, 0)
    assert timeline.counts == [100, 100, 100, 10]
    odd = ThroughputTimeline(window_s=1.0)
    odd.add_interval(0.5, 2.0, 10)  # a third in the first window, two thirds in the second
    assert odd.counts == [3, 7] and sum(odd.counts) == 10


def test_summary_rates_and_json() -> None:
    summary = BenchSummary(
        mode="produce",
        client="strom",
        records=2_000,
        record_bytes=1_048_576 // 1_000,
        elapsed_s=2.0,
        latency=LatencySummary.from_samples([1.0, 2.0, 3.0, 4.0]),
    )
    assert summary.records_per_s == 1_000.0
    # MB as BENCHMARKS.md counts it: 10^6 bytes.
    assert summary.megabytes_per_s == pytest.approx(1_000 * 1_048 / 1_000_000)
    stream = io.StringIO()
    write_report(summary_report(summary), "json", stream)
    value = json.loads(stream.getvalue())
    assert value["records_per_s"] == 1000.0
    assert value["latency_ms"] == {"count": 4, "average": 2.5, "p50": 2.0, "p95": 4.0, "p99": 4.0, "max": 4.0}
    table = io.StringIO()
    write_report(summary_report(summary), "table", table)
    lines = table.getvalue().splitlines()
    assert lines[0] == "bench produce (strom client, 1048-byte records)"
    assert any(line.split() == ["latency", "p99", "ms", "4.000"] for line in lines)
    assert any(line.split() == ["records/s", "1000.0"] for line in lines)


def test_summary_without_latency_has_none() -> None:
    summary = BenchSummary("consume", "confluent", 10, 100, 0.0, None)
    assert summary.records_per_s == 0.0
    assert summary.to_json()["latency_ms"] is None
    table = io.StringIO()
    write_report(summary_report(summary), "table", table)
    assert "records" in table.getvalue() and "latency" not in table.getvalue()


def test_throttle_waits_only_when_ahead_of_the_rate() -> None:
    slept: list[float] = []
    throttle = Throttle(100.0, sleep=slept.append)
    assert throttle.delay_s(50, 0.2) == pytest.approx(0.3)
    assert throttle.delay_s(50, 0.9) == 0.0
    throttle.wait(10, 0.05)
    assert slept == [pytest.approx(0.05)]
    unlimited = Throttle(-1, sleep=slept.append)
    unlimited.wait(1_000_000, 0.0)
    assert len(slept) == 1


def test_progress_prints_periodic_lines_off_a_terminal() -> None:
    stream = io.StringIO()
    progress = Progress(1_000, 100, stream, is_tty=False, interval_s=1.0)
    progress.update(100, 0.5)  # too soon
    progress.update(400, 1.0)
    progress.update(500, 1.5)  # too soon
    progress.update(900, 2.0)
    progress.finish(1_000, 2.5)
    assert stream.getvalue().splitlines() == [
        "400/1000 records, 400 records/s (0.04 MB/s) at 1.0 s",
        "900/1000 records, 500 records/s (0.05 MB/s) at 2.0 s",
        "1000/1000 records in 2.5 s, 400 records/s (0.04 MB/s) on average",
    ]


def test_progress_redraws_one_line_on_a_terminal() -> None:
    stream = io.StringIO()
    progress = Progress(10, 1, stream, is_tty=True, interval_s=60.0)
    progress.update(5, 0.5)
    progress.update(8, 1.0)
    progress.finish(10, 1.25)
    text = stream.getvalue()
    # Redrawn in place; the last drawing is the final count, so no stale line stays behind.
    assert text.count("\r") == 3 and text.endswith("\n") and text.count("\n") == 1
    assert text.rsplit("\r\033[K", 1)[1] == "10/10 records in 1.2 s, 8 records/s (0.00 MB/s) on average\n"


def test_progress_that_never_printed_prints_no_final_line() -> None:
    stream = io.StringIO()
    Progress(10, 1, stream, is_tty=False, interval_s=60.0).finish(10, 0.1)
    assert stream.getvalue() == ""


def test_split_evenly_and_the_delivery_recorder() -> None:
    from strom.cli.bench import DeliveryRecorder, split_evenly

    assert split_evenly(10, 3) == [4, 3, 3] and split_evenly(2, 2) == [1, 1]
    recorder = DeliveryRecorder()
    recorder.on_delivery(None, object())
    recorder.on_delivery(RuntimeError("refused"), None)
    recorder.on_delivery(RuntimeError("again"), None)
    recorder.on_sampled_delivery(0, None, object())  # sent at the clock's zero: a long latency
    assert (recorder.done, recorder.errors, recorder.first_error) == (2, 2, "refused")
    assert len(recorder.latencies_ms) == 1 and recorder.latencies_ms[0] > 0


def test_end_to_end_values_carry_their_send_time() -> None:
    value = make_value(64, 123_456_789)
    assert len(value) == 64
    assert read_send_time_ns(value) == 123_456_789
    assert read_send_time_ns(make_value(64)) is None
    assert read_send_time_ns(b"short") is None
    assert read_send_time_ns(None) is None
