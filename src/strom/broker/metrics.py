"""Broker metrics in the Prometheus text format, served over HTTP at ``/metrics``.

Counters and histograms are plain numbers updated on the event loop (no locks: one owner). Gauges
that describe state (log sizes, groups by state, members, connections) are computed when the page
is scraped, from the objects that own that state, so they can never drift from it.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
from collections import defaultdict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from strom.broker.connection_budget import ConnectionBudget
    from strom.broker.state import BrokerState

log = logging.getLogger("strom.broker.metrics")

# Request latency buckets in seconds: a produce with fsync lands in the middle, a long-polling
# fetch at the top.
LATENCY_BUCKETS_SECONDS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
# The metrics request is a GET line and a few headers; anything longer is not a scraper.
HTTP_REQUEST_BYTES_MAX = 8192


class Histogram:
    __slots__ = ("bucket_counts", "count", "total")

    def __init__(self) -> None:
        self.bucket_counts = [0] * len(LATENCY_BUCKETS_SECONDS)
        self.count = 0
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        index = bisect.bisect_left(LATENCY_BUCKETS_SECONDS, seconds)
        if index < len(self.bucket_counts):
            self.bucket_counts[index] += 1
        self.count += 1
        self.total += seconds


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class BrokerMetrics:
    def __init__(self) -> None:
        self.requests_total: dict[tuple[str, int], int] = defaultdict(int)
        self.request_errors_total: dict[str, int] = defaultdict(int)
        self.request_latency: dict[str, Histogram] = defaultdict(Histogram)
        self.bytes_in_total = 0
        self.bytes_out_total = 0
        self.connections_open = 0
        self.connections_total = 0
        self.connections_closed_total: dict[str, int] = defaultdict(int)  # by reason: idle, slow request
        self.connection_budget: ConnectionBudget | None = None  # the server's, read when scraped

    def observe_request(self, api_name: str, version: int, seconds: float) -> None:
        self.requests_total[(api_name, version)] += 1
        self.request_latency[api_name].observe(seconds)

    def render(self, state: BrokerState) -> str:
        lines: list[str] = []

        def family(name: str, kind: str, help_text: str) -> None:
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} {kind}")

        family("strom_requests_total", "counter", "Requests handled, by API and version.")
        for (api, version), count in sorted(self.requests_total.items()):
            lines.append(f'strom_requests_total{{api="{api}",version="{version}"}} {count}')
        family("strom_request_failures_total", "counter", "Requests that closed their connection, by API.")
        for api, count in sorted(self.request_errors_total.items()):
            lines.append(f'strom_request_failures_total{{api="{api}"}} {count}')
        family(
            "strom_request_latency_seconds",
            "histogram",
            "Time from a request's arrival to its response, by API.",
        )
        for api, histogram in sorted(self.request_latency.items()):
            cumulative = 0
            for bound, count in zip(LATENCY_BUCKETS_SECONDS, histogram.bucket_counts, strict=True):
                cumulative += count
                lines.append(f'strom_request_latency_seconds_bucket{{api="{api}",le="{bound}"}} {cumulative}')
            lines.append(f'strom_request_latency_seconds_bucket{{api="{api}",le="+Inf"}} {histogram.count}')
            lines.append(f'strom_request_latency_seconds_sum{{api="{api}"}} {histogram.total}')
            lines.append(f'strom_request_latency_seconds_count{{api="{api}"}} {histogram.count}')
        family("strom_bytes_in_total", "counter", "Request bytes received.")
        lines.append(f"strom_bytes_in_total {self.bytes_in_total}")
        family("strom_bytes_out_total", "counter", "Response bytes sent.")
        lines.append(f"strom_bytes_out_total {self.bytes_out_total}")
        family("strom_connections", "gauge", "Client connections open now.")
        lines.append(f"strom_connections {self.connections_open}")
        family("strom_connections_accepted_total", "counter", "Client connections accepted.")
        lines.append(f"strom_connections_accepted_total {self.connections_total}")
        family(
            "strom_connections_closed_total",
            "counter",
            "Connections the broker closed because they were idle or sent a request too slowly.",
        )
        for reason in ("idle", "slow_request"):
            lines.append(
                f'strom_connections_closed_total{{reason="{reason}"}} {self.connections_closed_total[reason]}'
            )
        budget = self.connection_budget
        if budget is not None:
            family(
                "strom_connections_muted",
                "gauge",
                "Connections not read now because their unsent answers are over their budget.",
            )
            lines.append(f"strom_connections_muted {budget.muted}")
            family(
                "strom_connection_held_bytes",
                "gauge",
                "Unsent answers and unanswered request bytes of all connections (as last looked at).",
            )
            lines.append(f"strom_connection_held_bytes {budget.held_bytes}")

        logs = sorted(state.logs.logs(), key=lambda item: (item.topic, item.partition))
        labels = [f'topic="{_escape(item.topic)}",partition="{item.partition}"' for item in logs]
        family("strom_log_size_bytes", "gauge", "Bytes on disk of each partition's log.")
        lines.extend(
            f"strom_log_size_bytes{{{label}}} {item.size_bytes}" for label, item in zip(labels, logs)
        )
        family("strom_log_end_offset", "gauge", "Next offset to be written, per partition.")
        lines.extend(
            f"strom_log_end_offset{{{label}}} {item.log_end_offset}" for label, item in zip(labels, logs)
        )
        family("strom_log_start_offset", "gauge", "First offset kept, per partition.")
        lines.extend(
            f"strom_log_start_offset{{{label}}} {item.log_start_offset}" for label, item in zip(labels, logs)
        )

        coordinator = state.groups.coordinator
        family("strom_groups", "gauge", "Consumer groups by state.")
        by_state: dict[str, int] = defaultdict(int)
        members = 0
        for group_id, group_state in coordinator.group_states().items():
            by_state[group_state] += 1
            group = coordinator.group(group_id)
            members += len(group.members) if group is not None else 0
        for group_state in ("Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"):
            lines.append(f'strom_groups{{state="{group_state}"}} {by_state.get(group_state, 0)}')
        family("strom_group_members", "gauge", "Members of all consumer groups.")
        lines.append(f"strom_group_members {members}")
        family("strom_rebalances_total", "counter", "Rebalances started.")
        lines.append(f"strom_rebalances_total {coordinator.rebalances_total}")
        return "\n".join(lines) + "\n"


class MetricsServer:
    """A minimal HTTP/1.0 server: ``GET /metrics`` answers the page, anything else 404."""

    def __init__(self, metrics: BrokerMetrics, state: BrokerState, host: str, port: int) -> None:
        self._metrics = metrics
        self._state = state
        self._host = host
        self._port = port
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self._host, self._port)
        log.info("metrics on http://%s:%d/metrics", self._host, self.port)

    @property
    def port(self) -> int:
        assert self._server is not None and self._server.sockets
        return int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=5)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
            writer.close()
            return
        request_line = head[:HTTP_REQUEST_BYTES_MAX].split(b"\r\n", 1)[0].decode("latin-1")
        parts = request_line.split()
        if len(parts) >= 2 and parts[0] == "GET" and parts[1].split("?")[0] == "/metrics":
            body = self._metrics.render(self._state).encode()
            status = "200 OK"
            content_type = "text/plain; version=0.0.4; charset=utf-8"
        else:
            body = b"not found: the metrics are at /metrics\n"
            status = "404 Not Found"
            content_type = "text/plain; charset=utf-8"
        writer.write(
            f"HTTP/1.0 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n".encode()
            + body
        )
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        writer.close()
