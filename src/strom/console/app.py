"""The console's pages and forms: a request in, a response out, the cluster asked through a
``ClusterSource``. Synchronous; the HTTP server runs it in a worker thread.

Security, in the order a request meets it:
- the Host header must name this console by an IP address, ``localhost`` or the host it was
  started with (a DNS-rebinding page, served under its own name, gets 421 and cannot read pages);
- every state-changing request is a POST carrying the process's CSRF token (a random value shown
  only inside the console's own pages, which another site cannot read), and, when the browser
  sends an Origin, from the console's own origin; otherwise 403;
- read-only mode draws no forms and refuses every POST (403);
- every value from the cluster is escaped (``markup``), and the answers carry a Content Security
  Policy that allows the console's own script and style only.
"""

from __future__ import annotations

import concurrent.futures
import hmac
import ipaddress
import logging
import re
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from strom.base import limits
from strom.client.admin import TopicDescription
from strom.client.cluster import TopicPartition
from strom.client.errors import KafkaError, UnsupportedVersionError
from strom.console import pages
from strom.console.http import Request, Response
from strom.console.lag import LagHistory, LagPoint, measure_lag, record_lag, total_lag
from strom.console.markup import Markup, url
from strom.console.records import FORMATS, matches, parse_time_ms
from strom.console.snapshot import Snapshot
from strom.console.source import ClusterSource, OffsetRange, ReadRequest, ReadResult
from strom.console.static import CONSOLE_CSS, CONSOLE_JS
from strom.protocol.errors import ErrorCode

__all__ = ["Console", "ConsoleOptions"]

log = logging.getLogger("strom.console")

SECURITY_HEADERS = [
    (
        "Content-Security-Policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    # Not no-referrer: under it a browser sends "Origin: null" with the console's own forms.
    ("Referrer-Policy", "same-origin"),
    ("Cache-Control", "no-store"),
]

# What a redirect after a form may ask the next page to say (never text from the request).
NOTICES = {
    "created": "Topic created.",
    "config": "Config updated.",
    "deleted": "Topic deleted.",
}

DEFAULT_RECORDS = 20

_HOST_NAME = re.compile(r"^[A-Za-z0-9.-]+$")


class BadRequest(Exception):
    """A request the console cannot serve as asked: 400 with the message."""


@dataclass(frozen=True)
class ConsoleOptions:
    read_only: bool = False
    # The host the console listens on (a name in the Host header is accepted only if it is this).
    host: str = "127.0.0.1"
    lag_sample_interval_ms: int = limits.console_lag_sample_interval_ms
    lag_window_ms: int = limits.console_lag_window_ms
    rows_max: int = limits.console_list_rows_max
    snapshot_fresh_ms: int = limits.console_snapshot_fresh_ms
    snapshot_stale_ms: int = limits.console_snapshot_stale_ms


@dataclass(frozen=True)
class TopicFigures:
    topics: dict[str, TopicDescription]
    offsets: Mapping[TopicPartition, OffsetRange]
    sizes: Mapping[TopicPartition, int] | None


class Console:
    def __init__(
        self,
        source: ClusterSource,
        options: ConsoleOptions | None = None,
        *,
        clock_ms: Callable[[], int] | None = None,
        csrf_token: str | None = None,
    ) -> None:
        self.source = source
        self.options = options or ConsoleOptions()
        self.clock_ms = clock_ms or (lambda: time.time_ns() // 1_000_000)
        # Per process: a console restarted makes the forms of pages still open fail (403) once.
        self.csrf_token = csrf_token or secrets.token_urlsafe(32)
        self.history = LagHistory(self.options.lag_sample_interval_ms, self.options.lag_window_ms)
        self.history_lock = threading.Lock()
        # Runs a page's second cluster request while the page's thread runs the first.
        self._side = concurrent.futures.ThreadPoolExecutor(
            limits.console_worker_threads, thread_name_prefix="strom-console-side"
        )
        # The snapshots' background refreshes (which use _side themselves).
        self._refresher = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="strom-console-refresh")
        self._topics_snapshot: Snapshot[dict[str, TopicDescription]] = Snapshot(
            self.source.topics,
            self._refresher,
            fresh_ms=self.options.snapshot_fresh_ms,
            stale_ms=self.options.snapshot_stale_ms,
        )
        self._figures_snapshot: Snapshot[TopicFigures] = Snapshot(
            self._all_topic_figures,
            self._refresher,
            fresh_ms=self.options.snapshot_fresh_ms,
            stale_ms=self.options.snapshot_stale_ms,
        )
        # Pages by path. A page is a route here, a render function in pages, and what it needs a
        # method of ClusterSource; the page that leads to it links to it, or NAVIGATION lists it
        # (a group's rebalance history, /group/history?id=..., is linked from the group's page).
        self._get: dict[str, Callable[[Request, pages.PageContext], Response]] = {
            "/": self._cluster,
            "/topics": self._topics,
            "/topics/new": self._new_topic,
            "/topic": self._topic,
            "/topic/delete": self._delete_topic_confirm,
            "/messages": self._messages,
            "/groups": self._groups,
            "/group": self._group,
            "/group/history": self._group_history,
        }
        self._post: dict[str, Callable[[Request, pages.PageContext], Response]] = {
            "/topics": self._create_topic,
            "/topic/config": self._set_config,
            "/topic/delete": self._delete_topic,
        }

    def close(self) -> None:
        self._refresher.shutdown()
        self._side.shutdown()

    def _changed(self) -> None:
        """The console changed the cluster: the next views ask afresh."""
        self._topics_snapshot.invalidate()
        self._figures_snapshot.invalidate()

    # -- dispatch ------------------------------------------------------------------------------

    def handle(self, request: Request) -> Response:
        started = time.perf_counter()
        response = self._dispatch(request)
        elapsed_ms = (time.perf_counter() - started) * 1000
        response.headers.append(("Server-Timing", f"page;dur={elapsed_ms:.1f}"))
        return response

    def _dispatch(self, request: Request) -> Response:
        if not self._host_allowed(request.headers.get("host", "")):
            return self._plain(421, "this console answers only to its own address (see docs/console.md)")
        if request.method == "GET" and request.path.startswith("/static/"):
            return self._static(request.path)
        notice = NOTICES.get(request.query.get("notice", ""))
        context = pages.PageContext(self.options.read_only, self.csrf_token, notice)
        if request.method == "GET":
            route = self._get.get(request.path)
        elif request.method == "POST":
            if request.path not in self._post:
                return self._page(404, pages.error_page(context, "Not found", "No such page."))
            if self.options.read_only:
                return self._page(
                    403,
                    pages.error_page(
                        context, "Read-only", "This console is read-only: nothing can be changed through it."
                    ),
                )
            if not self._csrf_ok(request):
                return self._page(
                    403,
                    pages.error_page(
                        context,
                        "Refused",
                        "The form's security token is missing or stale (was the console restarted?). Reload the page and try again.",
                    ),
                )
            route = self._post[request.path]
        else:
            return self._plain(405, "GET and POST only")
        if route is None:
            return self._page(404, pages.error_page(context, "Not found", "No such page."))
        try:
            return route(request, context)
        except BadRequest as error:
            return self._page(400, pages.error_page(context, "Bad request", str(error)))
        except KafkaError as error:
            return self._page(502, pages.error_page(context, "The cluster refused", str(error)))

    def _host_allowed(self, host_header: str) -> bool:
        host = host_header.strip()
        if host.startswith("["):
            host = host[1 : host.find("]")] if "]" in host else ""
        else:
            host = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
        if not host:
            return False
        if host.lower() in {"localhost", self.options.host.lower()}:
            return True
        try:
            ipaddress.ip_address(host)
        except ValueError:
            return False
        return True

    def _csrf_ok(self, request: Request) -> bool:
        token = request.form.get("csrf", "")
        if not hmac.compare_digest(token.encode(), self.csrf_token.encode()):
            return False
        origin = request.headers.get("origin")
        if origin is None:
            return True
        return origin == f"http://{request.headers.get('host', '')}"

    def _static(self, path: str) -> Response:
        files = {
            "/static/console.css": (CONSOLE_CSS, "text/css; charset=utf-8"),
            "/static/console.js": (CONSOLE_JS, "text/javascript; charset=utf-8"),
        }
        found = files.get(path)
        if found is None:
            return self._plain(404, "not found")
        text, content_type = found
        return Response(
            200, text.encode(), content_type, [*SECURITY_HEADERS[:-1], ("Cache-Control", "max-age=300")]
        )

    @staticmethod
    def _page(status: int, page: Markup) -> Response:
        return Response(status, page.encode("utf-8"), headers=list(SECURITY_HEADERS))

    @staticmethod
    def _plain(status: int, message: str) -> Response:
        return Response(
            status, (message + "\n").encode(), "text/plain; charset=utf-8", list(SECURITY_HEADERS)
        )

    @staticmethod
    def _redirect(location: str) -> Response:
        return Response(303, b"", "text/plain; charset=utf-8", [*SECURITY_HEADERS, ("Location", location)])

    # -- cluster and topics --------------------------------------------------------------------

    def _cluster(self, request: Request, context: pages.PageContext) -> Response:
        cluster = self.source.cluster()
        topics, as_of_ms = self._topics_snapshot.get()
        return self._page(200, pages.cluster_page(context, cluster, topics, self.options.rows_max, as_of_ms))

    def _all_topic_figures(self) -> TopicFigures:
        """Every topic with its partitions' offsets and sizes (the topics list's snapshot)."""
        topics, _ = self._topics_snapshot.get()
        return self._topic_figures(topics, every=True)

    def _topic_figures(self, topics: Mapping[str, TopicDescription], *, every: bool) -> TopicFigures:
        partitions = [
            TopicPartition(name, p.partition) for name, topic in topics.items() for p in topic.partitions
        ]
        # Sizes are asked for while the offsets are: each is a request per broker.
        asked = self._side.submit(self.source.sizes, None if every else list(topics))
        offsets = self.source.offsets(partitions)
        sizes: Mapping[TopicPartition, int] | None
        try:
            sizes = asked.result()
        except KafkaError:
            sizes = None  # a cluster without DescribeLogDirs, or a refusal: sizes show as "-"
        return TopicFigures(dict(topics), offsets, sizes)

    def _topics(self, request: Request, context: pages.PageContext) -> Response:
        query = request.query.get("q", "").strip()
        figures, as_of_ms = self._figures_snapshot.get()
        chosen = [topic for name, topic in sorted(figures.topics.items()) if query.lower() in name.lower()]
        shown = chosen[: self.options.rows_max]
        page = pages.topics_page(context, shown, len(chosen), figures.offsets, figures.sizes, query, as_of_ms)
        return self._page(200, page)

    def _topic(self, request: Request, context: pages.PageContext) -> Response:
        name = self._required(request.query, "name")
        topic = self.source.topic(name)
        partitions = [TopicPartition(name, p.partition) for p in topic.partitions]
        offsets = self.source.offsets(partitions)
        problems = []
        sizes: Mapping[TopicPartition, int] | None
        try:
            sizes = self.source.sizes([name])
        except KafkaError as error:
            sizes = None
            problems.append(f"Sizes unavailable: {error}")
        configs = None
        try:
            configs = self.source.topic_configs(name)
        except KafkaError as error:
            problems.append(f"Configs unavailable: {error}")
        return self._page(200, pages.topic_page(context, topic, offsets, sizes, configs, problems))

    def _new_topic(self, request: Request, context: pages.PageContext) -> Response:
        if context.read_only:
            return self._page(403, pages.error_page(context, "Read-only", "This console is read-only."))
        return self._page(200, pages.new_topic_page(context, {}, None))

    def _create_topic(self, request: Request, context: pages.PageContext) -> Response:
        form = request.form
        name = form.get("name", "").strip()
        try:
            if not name:
                raise BadRequest("a topic needs a name")
            partitions = self._integer(form.get("partitions", "1") or "1", "partitions", 1)
            replication = self._integer(
                form.get("replication_factor", "-1") or "-1", "replication factor", -1
            )
            configs = self._config_lines(form.get("configs", ""))
            self.source.create_topic(name, partitions, replication, configs)
            self._changed()
        except (BadRequest, KafkaError) as error:
            return self._page(
                400 if isinstance(error, BadRequest) else 409, pages.new_topic_page(context, form, str(error))
            )
        return self._redirect(url("/topic", name=name, notice="created"))

    def _set_config(self, request: Request, context: pages.PageContext) -> Response:
        name = self._required(request.form, "name")
        key = self._required(request.form, "key").strip()
        value = None if request.form.get("reset") else request.form.get("value", "")
        self.source.set_topic_config(name, key, value)
        self._changed()
        return self._redirect(url("/topic", name=name, notice="config"))

    def _delete_topic_confirm(self, request: Request, context: pages.PageContext) -> Response:
        if context.read_only:
            return self._page(403, pages.error_page(context, "Read-only", "This console is read-only."))
        name = self._required(request.query, "name")
        return self._page(200, pages.delete_topic_page(context, name, None))

    def _delete_topic(self, request: Request, context: pages.PageContext) -> Response:
        name = self._required(request.form, "name")
        if request.form.get("confirm", "") != name:
            return self._page(
                400,
                pages.delete_topic_page(context, name, "The name typed does not match: nothing was deleted."),
            )
        self.source.delete_topic(name)
        self._changed()
        return self._redirect(url("/topics", notice="deleted"))

    # -- messages ------------------------------------------------------------------------------

    def _messages(self, request: Request, context: pages.PageContext) -> Response:
        query = request.query
        name = self._required(query, "topic")
        topic = self.source.topic(name)
        partition = self._integer(query.get("partition", "0") or "0", "partition", 0)
        if partition >= len(topic.partitions):
            raise BadRequest(f"topic {name} has partitions 0 to {len(topic.partitions) - 1}")
        limit = min(
            self._integer(query.get("limit", "") or str(DEFAULT_RECORDS), "records", 1),
            limits.console_records_max,
        )
        form = query.get("format", "text")
        if form not in FORMATS:
            form = "text"
        search = query.get("search", "")
        tp = TopicPartition(name, partition)
        found = self.source.offsets([tp]).get(tp)
        log_start, log_end = (found.start, found.end) if found else (0, 0)
        browse = pages.BrowseForm(
            name,
            partition,
            len(topic.partitions),
            query.get("offset", ""),
            query.get("timestamp", ""),
            limit,
            form,
            search,
            found.start if found else None,
            found.end if found else None,
        )
        error = None
        start: int | None
        if browse.timestamp.strip():
            try:
                timestamp_ms = parse_time_ms(browse.timestamp)
            except ValueError:
                raise BadRequest(
                    f"not a time: {browse.timestamp!r} (ISO 8601, UTC unless it says, or ms)"
                ) from None
            start = self.source.offset_for_time(tp, timestamp_ms)
            if start is None:
                start = log_end
                error = "No record at or after that time."
        elif browse.start.strip():
            start = self._integer(browse.start, "offset", 0)
            if start < log_start:
                error = f"Offset {start} is no longer in the log; reading from the log start, {log_start}."
                start = log_start
        else:
            start = log_start if search else max(log_start, log_end - limit)
        result: ReadResult | None = None
        if start is not None:
            deadline = time.monotonic() + limits.console_read_ms_max / 1000
            needle = search.encode("utf-8")
            result = self.source.read(
                ReadRequest(
                    name,
                    partition,
                    start,
                    limit,
                    limits.console_search_records_max if search else limit,
                    deadline,
                    (lambda record: matches(record, needle)) if search else None,
                )
            )
        return self._page(200, pages.messages_page(context, browse, result, start, error))

    # -- groups --------------------------------------------------------------------------------

    def _groups(self, request: Request, context: pages.PageContext) -> Response:
        query = request.query.get("q", "").strip()
        listings = [g for g in self.source.groups() if query.lower() in g.group_id.lower()]
        shown = listings[: self.options.rows_max]
        with self.history_lock:
            latest: dict[str, LagPoint] = {}
            for listing in shown:
                point = self.history.latest(listing.group_id)
                if point is not None:
                    latest[listing.group_id] = point
        return self._page(
            200,
            pages.groups_page(
                context, shown, len(listings), latest, query, self.options.lag_sample_interval_ms
            ),
        )

    def _group(self, request: Request, context: pages.PageContext) -> Response:
        group_id = self._required(request.query, "id")
        group = self.source.describe_group(group_id)
        committed = self.source.committed(group_id)
        assigned = {
            TopicPartition(*tp)
            for member in group.members
            if member.assignment is not None
            for tp in member.assignment.partitions
        }
        ends = self.source.end_offsets(sorted(set(committed) | assigned))
        now_ms = self.clock_ms()
        with self.history_lock:
            points = self.history.points(group_id, now_ms)
        if committed:
            # The chart ends with the lag just computed. It is not kept: only the sampler writes
            # the history, one point an interval, however often the page is opened.
            points.append(LagPoint(now_ms, total_lag(committed, ends)))
        return self._page(
            200, pages.group_page(context, group, committed, ends, points, now_ms, self.options.lag_window_ms)
        )

    def _group_history(self, request: Request, context: pages.PageContext) -> Response:
        group_id = self._required(request.query, "id")
        try:
            entries = self.source.group_history(group_id)
        except UnsupportedVersionError:
            # Another cluster keeps no history: the page says so, and shows nothing made up.
            message = (
                "The rebalance history needs a strom broker: this group's coordinator does not keep "
                "one (it does not answer strom's StromGroupHistory request). The group's own page "
                "works against any cluster."
            )
            return self._page(200, pages.group_history_unavailable_page(context, group_id, message))
        except KafkaError as error:
            if error.code != ErrorCode.GROUP_ID_NOT_FOUND:
                raise
            message = f"The coordinator knows no group {group_id}: it has neither members, offsets nor a rebalance history."
            return self._page(404, pages.group_history_unavailable_page(context, group_id, message))
        bounds = pages.HistoryLimits(
            limits.console_history_rebalances_max,
            limits.console_history_members_max,
            limits.console_history_moves_max,
        )
        return self._page(200, pages.group_history_page(context, group_id, entries, self.clock_ms(), bounds))

    def sample_lag(self) -> int:
        """Record every group's lag now (the sampler calls this every interval)."""
        group_ids, lags = measure_lag(self.source, self.history.groups_max)
        with self.history_lock:
            record_lag(self.history, group_ids, lags, self.clock_ms())
        return len(lags)

    # -- form fields ---------------------------------------------------------------------------

    @staticmethod
    def _required(values: Mapping[str, str], key: str) -> str:
        value = values.get(key, "")
        if not value:
            raise BadRequest(f"{key} is missing")
        return value

    @staticmethod
    def _integer(text: str, what: str, minimum: int) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise BadRequest(f"{what} must be a whole number, not {text!r}") from None
        if value < minimum:
            raise BadRequest(f"{what} must be at least {minimum}, not {value}")
        return value

    @staticmethod
    def _config_lines(text: str) -> dict[str, str]:
        configs: dict[str, str] = {}
        for line in text.splitlines():
            if not line.strip():
                continue
            key, separator, value = line.partition("=")
            if not separator or not key.strip():
                raise BadRequest(f"config lines are key=value, not {line!r}")
            configs[key.strip()] = value.strip()
        return configs
