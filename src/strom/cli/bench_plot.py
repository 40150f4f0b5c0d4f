"""``strom bench --plot``: throughput over time and the latency distribution, drawn with matplotlib
(the optional ``plot`` extra; imported only when a plot is asked for)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from strom.cli.bench_stats import BenchSummary, LatencySummary, ThroughputTimeline
from strom.cli.output import CliError

__all__ = ["draw_plot"]

# Enough bins to show the shape of a latency distribution without noise from a few samples.
LATENCY_BINS_MAX = 60
# Throughput windows drawn: fine enough to show stalls, coarse enough to stay readable.
THROUGHPUT_POINTS_MAX = 200


def draw_plot(
    path: Path, summary: BenchSummary, timeline: ThroughputTimeline, latencies_ms: Sequence[float]
) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    from matplotlib import pyplot

    figure, (throughput_axes, latency_axes) = pyplot.subplots(2, 1, figsize=(9, 7))
    try:
        rates = timeline.rebinned(THROUGHPUT_POINTS_MAX).rates()
        throughput_axes.plot(
            [start_s for start_s, _ in rates], [rate for _, rate in rates], drawstyle="steps-post"
        )
        throughput_axes.set_xlabel("time since start (s)")
        throughput_axes.set_ylabel("records/s")
        throughput_axes.set_title(
            f"bench {summary.mode} ({summary.client}): {summary.records_per_s:,.0f} records/s, "
            f"{summary.megabytes_per_s:.2f} MB/s"
        )
        throughput_axes.grid(True, alpha=0.3)
        latency = LatencySummary.from_samples(latencies_ms)
        if latency is None:
            latency_axes.text(0.5, 0.5, "no latency measured in this mode", ha="center", va="center")
            latency_axes.set_axis_off()
        else:
            latency_axes.hist(latencies_ms, bins=min(LATENCY_BINS_MAX, max(1, len(latencies_ms))))
            # The values go in a legend, not beside their lines: p99 and max are often a hair apart
            # and their labels would be drawn over each other.
            for (label, value_ms), style in zip(
                (
                    ("p50", latency.p50_ms),
                    ("p95", latency.p95_ms),
                    ("p99", latency.p99_ms),
                    ("max", latency.max_ms),
                ),
                ("--", "-.", ":", "-"),
            ):
                latency_axes.axvline(
                    value_ms, linestyle=style, linewidth=1, color="black", label=f"{label} {value_ms:.2f} ms"
                )
            latency_axes.legend(loc="upper right", fontsize=8)
            latency_axes.set_xlabel("latency (ms)")
            latency_axes.set_ylabel("sampled records")
            latency_axes.set_title(f"latency distribution ({latency.count} samples)")
        figure.tight_layout()
        try:
            figure.savefig(path, format="png")
        except OSError as error:
            raise CliError(f"cannot write {path}: {error.strerror}") from None
    finally:
        pyplot.close(figure)
