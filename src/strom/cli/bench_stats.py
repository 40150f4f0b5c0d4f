"""Numbers of ``strom bench``: latency percentiles, throughput over time, the summary. Pure.

Percentiles are nearest-rank on the sorted samples (the p-th percentile is the smallest sample with
at least p% of the samples at or below it), so every reported latency is one that really happened.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["BenchSummary", "LatencySummary", "ThroughputTimeline", "format_rate_line", "percentile"]

# MB as BENCHMARKS.md counts it: 10^6 bytes of record values.
MEGABYTE_BYTES = 1_000_000


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of already sorted values; ``fraction`` in [0, 1]."""
    assert sorted_values, "no samples"
    assert 0.0 <= fraction <= 1.0, f"fraction {fraction} outside [0, 1]"
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[rank - 1]


@dataclass(frozen=True)
class LatencySummary:
    count: int
    average_ms: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float

    @classmethod
    def from_samples(cls, samples_ms: Sequence[float]) -> LatencySummary | None:
        if not samples_ms:
            return None
        ordered = sorted(samples_ms)
        return cls(
            count=len(ordered),
            average_ms=sum(ordered) / len(ordered),
            p50_ms=percentile(ordered, 0.50),
            p95_ms=percentile(ordered, 0.95),
            p99_ms=percentile(ordered, 0.99),
            max_ms=ordered[-1],
        )


@dataclass
class ThroughputTimeline:
    """Records counted into fixed windows from the start of the run, for the plot and the summary."""

    window_s: float = 0.1
    counts: list[int] = field(default_factory=list)

    def add(self, elapsed_s: float, records: int = 1) -> None:
        index = max(0, int(elapsed_s / self.window_s))
        if index >= len(self.counts):
            self.counts.extend([0] * (index + 1 - len(self.counts)))
        self.counts[index] += records

    def add_interval(self, start_s: float, end_s: float, records: int) -> None:
        """``records`` counted somewhere between ``start_s`` and ``end_s`` (a sampler's interval,
        which a busy machine stretches): spread evenly over the windows the interval covers, so a
        late sample does not show as a dip followed by a spike."""
        if records == 0:
            return
        if end_s <= start_s:
            self.add(start_s, records)
            return
        span_s = end_s - start_s
        placed = 0
        index = max(0, int(start_s / self.window_s))
        while True:
            window_start = index * self.window_s
            window_end = window_start + self.window_s
            if window_end >= end_s:
                self.add(window_start, records - placed)  # the rest, so the total stays exact
                return
            share = round(records * (window_end - max(start_s, window_start)) / span_s)
            share = min(share, records - placed)
            self.add(window_start, share)
            placed += share
            index += 1

    def rates(self) -> list[tuple[float, float]]:
        """(window start in seconds, records per second in that window)."""
        return [(index * self.window_s, count / self.window_s) for index, count in enumerate(self.counts)]

    def rebinned(self, points_max: int) -> ThroughputTimeline:
        """The same counts in wider windows (whole multiples), so at most ``points_max`` remain."""
        assert points_max >= 1, "need at least one point"
        factor = max(1, math.ceil(len(self.counts) / points_max))
        merged = [sum(self.counts[start : start + factor]) for start in range(0, len(self.counts), factor)]
        return ThroughputTimeline(self.window_s * factor, merged)


@dataclass(frozen=True)
class BenchSummary:
    mode: str
    client: str
    records: int
    record_bytes: int
    elapsed_s: float
    latency: LatencySummary | None
    errors: int = 0
    processes: int = 1

    @property
    def records_per_s(self) -> float:
        return self.records / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def megabytes_per_s(self) -> float:
        return self.records_per_s * self.record_bytes / MEGABYTE_BYTES

    def to_json(self) -> dict[str, Any]:
        value: dict[str, Any] = {
            "mode": self.mode,
            "client": self.client,
            "records": self.records,
            "record_bytes": self.record_bytes,
            "errors": self.errors,
            "processes": self.processes,
            "elapsed_s": round(self.elapsed_s, 3),
            "records_per_s": round(self.records_per_s, 1),
            "megabytes_per_s": round(self.megabytes_per_s, 3),
            "latency_ms": None,
        }
        if self.latency is not None:
            value["latency_ms"] = {
                "count": self.latency.count,
                "average": round(self.latency.average_ms, 3),
                "p50": round(self.latency.p50_ms, 3),
                "p95": round(self.latency.p95_ms, 3),
                "p99": round(self.latency.p99_ms, 3),
                "max": round(self.latency.max_ms, 3),
            }
        return value


def format_rate_line(
    records: int,
    total_records: int,
    elapsed_s: float,
    current_rate: float,
    record_bytes: int,
    *,
    final: bool = False,
) -> str:
    """The progress line: how far, and the rate over the last window (``final``: over the run)."""
    rate = f"{current_rate:,.0f} records/s ({current_rate * record_bytes / MEGABYTE_BYTES:.2f} MB/s)"
    if final:
        return f"{records}/{total_records} records in {elapsed_s:.1f} s, {rate} on average"
    return f"{records}/{total_records} records, {rate} at {elapsed_s:.1f} s"
