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
  Policy that allows the console's own script and style only;
- with ``login`` (``--console-login``), every page but /login needs a session: the login form
  builds the user's own clients from their SASL username and password, and every page and form of
  the session asks the cluster through them, so the brokers' ACLs decide what the user sees and
  may change (an authorization error is a 403 page saying so). The session's forms carry a CSRF
  token of the session's own; the login form the process's.
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
from strom.client.cluster import TopicPartition
from strom.client.errors import AuthenticationError, KafkaError, UnsupportedVersionError
from strom.console import pages
from strom.console.http import Request, Response
from strom.console.lag import LagHistory, LagPoint, measure_lag, record_lag, total_lag
from strom.console.markup import Markup, url
from strom.console.records import FORMATS, matches, parse_time_ms
from strom.console.sessions import Session, Sessions
from strom.console.snapshot import Snapshot
from strom.console.source import ClusterSource, OffsetRange, ReadRequest, ReadResult
from strom.console.static import CONSOLE_CSS, CONSOLE_JS
from strom.protocol.errors import ErrorCode

__all__ = ["AUTHORIZATION_ERRORS", "SESSION_COOKIE", "ClusterView", "Console", "ConsoleOptions"]

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

# The session cookie (under --console-login). Not Secure: the console serves plain HTTP only (put
# it behind a TLS proxy to serve it to a network; docs/console.md).
SESSION_COOKIE = "strom_console_session"
_COOKIE_ATTRIBUTES = "HttpOnly; SameSite=Strict; Path=/"

# The broker's answers that mean "this principal may not": shown as "Not authorized" (403).
AUTHORIZATION_ERRORS = frozenset(
    {
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        ErrorCode.GROUP_AUTHORIZATION_FAILED,
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED,
    }
)

_HOST_NAME = re.compile(r"^[A-Za-z0-9.-]+$")


class BadRequest(Exception):
    """A request the console cannot serve as asked: 400 with the message."""


@dataclass(frozen=True)
class ConsoleOptions:
    read_only: bool = False
    # Every page needs a session, opened with the user's SASL credentials (Console's login_source).
    login: bool = False
    sessions_max: int = limits.console_sessions_max
    session_idle_ms_max: int = limits.console_session_idle_ms_max
    # The host the console listens on (a name in the Host header is accepted only if it is this).
    host: str = "127.0.0.1"
    lag_sample_interval_ms: int = limits.console_lag_sample_interval_ms
    lag_window_ms: int = limits.console_lag_window_ms
    # Rows of one page of a list (topics, groups, a topic's partitions).
    page_rows: int = limits.console_page_rows
    snapshot_fresh_ms: int = limits.console_snapshot_fresh_ms
    snapshot_stale_ms: int = limits.console_snapshot_stale_ms


@dataclass(frozen=True)
class TopicFigures:
    offsets: Mapping[TopicPartition, OffsetRange]
    sizes: Mapping[TopicPartition, int] | None
    problems: list[str]


class ClusterView:
    """The cluster as one principal sees it: its source and the snapshot of every topic's
    metadata made from it (never shared between principals: it holds what that principal may
    see)."""

    def __init__(self, source: ClusterSource, console: Console) -> None:
        self.source = source
        self.topics_snapshot: Snapshot[pages.TopicsImage] = Snapshot(
            lambda: pages.TopicsImage.of(source.topics()),
            console.refresher,
            fresh_ms=console.options.snapshot_fresh_ms,
            stale_ms=console.options.snapshot_stale_ms,
        )

    def changed(self) -> None:
        """The console changed the cluster: the next views ask afresh."""
        self.topics_snapshot.invalidate()


Route = Callable[[Request, pages.PageContext, ClusterView], Response]


class Console:
    """``source`` is the console's own view of the cluster: every page's without ``login``, the
    lag sampler's always. ``login_source(user, password)`` (needed with ``options.login``) builds
    and checks a user's own source, raising ``AuthenticationError`` for bad credentials."""

    def __init__(
        self,
        source: ClusterSource,
        options: ConsoleOptions | None = None,
        *,
        clock_ms: Callable[[], int] | None = None,
        csrf_token: str | None = None,
        login_source: Callable[[str, str], ClusterSource] | None = None,
    ) -> None:
        self.source = source
        self.options = options or ConsoleOptions()
        assert login_source is not None or not self.options.login, "login needs a login_source"
        self._login_source = login_source
        self.sessions: Sessions[ClusterView] = Sessions(
            self.options.sessions_max, self.options.session_idle_ms_max
        )
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
        self.refresher = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="strom-console-refresh")
        self._view = ClusterView(self.source, self)
        # Pages by path. A page is a route here, a render function in pages, and what it needs a
        # method of ClusterSource; the page that leads to it links to it, or NAVIGATION lists it
        # (a group's rebalance history, /group/history?id=..., is linked from the group's page).
        self._get: dict[str, Route] = {
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
        self._post: dict[str, Route] = {
            "/topics": self._create_topic,
            "/topic/config": self._set_config,
            "/topic/delete": self._delete_topic,
        }

    def prefetch(self) -> None:
        """Take the console's own snapshot of the topics' metadata in the background unless it is
        fresh, so that a view of the cluster page or the topics list does not wait for it: when
        the console starts, and then every lag-sample interval (30 s, under the snapshot's
        60 s), idle or not (not under login: pages use the sessions' views, each prefetched when
        its user logs in and refreshed behind its views)."""
        if not self.options.login:
            self._view.topics_snapshot.prefetch()

    def close(self) -> None:
        """Ends every session (closing its clients); the console's own source is its owner's."""
        self._end(self.sessions.clear())
        self.refresher.shutdown()
        self._side.shutdown()

    @staticmethod
    def _end(sessions: list[Session[ClusterView]]) -> None:
        for session in sessions:
            try:
                session.view.source.close()
            except Exception:
                log.exception("closing the clients of %s's console session failed", session.user)

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
        view = self._view
        if self.options.login:
            session, ended = self.sessions.get(self._session_token(request), self.clock_ms())
            self._end(ended)
            if request.path == "/login":
                return self._login(request, context, session)
            if session is None:
                if request.method == "GET":
                    return self._redirect("/login")
                return self._page(403, pages.login_page(context, "Your session has ended: log in again.", ""))
            context = pages.PageContext(self.options.read_only, session.csrf_token, notice, session.user)
            view = session.view
            if request.path == "/logout":
                return self._logout(request, context, session)
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
            if not self._csrf_ok(request, context.csrf_token):
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
            return route(request, context, view)
        except BadRequest as error:
            return self._page(400, pages.error_page(context, "Bad request", str(error)))
        except KafkaError as error:
            if error.code in AUTHORIZATION_ERRORS:
                return self._not_authorized(context, error)
            return self._page(502, pages.error_page(context, "The cluster refused", str(error)))

    def _not_authorized(self, context: pages.PageContext, error: KafkaError) -> Response:
        who = f"{context.user} is" if context.user else "This console is"
        return self._page(
            403, pages.error_page(context, "Not authorized", f"{who} not authorized to do this: {error}")
        )

    # -- login ---------------------------------------------------------------------------------

    @staticmethod
    def _session_token(request: Request) -> str:
        for part in request.headers.get("cookie", "").split(";"):
            name, separator, value = part.strip().partition("=")
            if separator and name == SESSION_COOKIE:
                return value
        return ""

    def _login(
        self, request: Request, context: pages.PageContext, session: Session[ClusterView] | None
    ) -> Response:
        if request.method == "GET":
            if session is not None:
                return self._redirect("/")
            return self._page(200, pages.login_page(context, None, ""))
        if request.method != "POST":
            return self._plain(405, "GET and POST only")
        if not self._csrf_ok(request, self.csrf_token):
            return self._page(
                403, pages.login_page(context, "The form's security token is stale: try again.", "")
            )
        user = request.form.get("username", "").strip()
        password = request.form.get("password", "")
        if not user or not password:
            return self._page(400, pages.login_page(context, "A username and a password, please.", user))
        assert self._login_source is not None
        try:
            source = self._login_source(user, password)
        except AuthenticationError:
            # Nothing more: neither whether the user exists nor what the broker said.
            log.info("console login of %r failed", user)
            return self._page(401, pages.login_page(context, "Login failed.", user))
        except KafkaError as error:
            log.info("console login of %r: the cluster did not answer: %s", user, error)
            return self._page(
                502, pages.login_page(context, "Login failed: the cluster did not answer; try again.", user)
            )
        if session is not None:  # a new login in the same browser ends the old session
            self._end([s for s in [self.sessions.remove(session.token)] if s is not None])
        opened, ended = self.sessions.add(user, ClusterView(source, self), self.clock_ms())
        self._end(ended)
        opened.view.topics_snapshot.prefetch()
        log.info("console login of %r", user)
        response = self._redirect("/")
        response.headers.append(("Set-Cookie", f"{SESSION_COOKIE}={opened.token}; {_COOKIE_ATTRIBUTES}"))
        return response

    def _logout(
        self, request: Request, context: pages.PageContext, session: Session[ClusterView]
    ) -> Response:
        if request.method != "POST":
            return self._plain(405, "log out with the page's Log out button (a POST)")
        if not self._csrf_ok(request, session.csrf_token):
            return self._page(
                403, pages.error_page(context, "Refused", "The form's security token is missing or stale.")
            )
        ended = self.sessions.remove(session.token)
        self._end([ended] if ended is not None else [])
        log.info("console logout of %r", session.user)
        response = self._redirect("/login")
        response.headers.append(("Set-Cookie", f"{SESSION_COOKIE}=; Max-Age=0; {_COOKIE_ATTRIBUTES}"))
        return response

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

    @staticmethod
    def _csrf_ok(request: Request, expected: str) -> bool:
        token = request.form.get("csrf", "")
        if not hmac.compare_digest(token.encode(), expected.encode()):
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

    def _cluster(self, request: Request, context: pages.PageContext, view: ClusterView) -> Response:
        # DescribeCluster is asked while the snapshot answers (or is waited for).
        asked = self._side.submit(view.source.cluster)
        image, as_of_ms = view.topics_snapshot.get()
        cluster = asked.result()
        return self._page(200, pages.cluster_page(context, cluster, image, self.options.page_rows, as_of_ms))

    def topic_figures(
        self, view: ClusterView, partitions: list[TopicPartition], topics: list[str]
    ) -> TopicFigures:
        """The offsets of ``partitions`` and the sizes of every partition of ``topics``, asked at
        once (each is a request per broker). Sizes the cluster does not give (no DescribeLogDirs,
        a refusal) are None; offsets it does not give raise, unless ``topics`` are a list page's
        rows, where a topic deleted since the snapshot leaves its figures as "-" with a note."""
        asked = self._side.submit(view.source.sizes, topics)
        problems = []
        offsets: Mapping[TopicPartition, OffsetRange]
        try:
            offsets = view.source.offsets(partitions)
        except KafkaError as error:
            if error.code in AUTHORIZATION_ERRORS or len(topics) == 1:
                asked.cancel()
                raise
            offsets = {}
            problems.append(f"Records and offsets unavailable: {error}")
        sizes: Mapping[TopicPartition, int] | None
        try:
            sizes = asked.result()
        except KafkaError as error:
            sizes = None
            problems.append(f"Sizes unavailable: {error}")
        return TopicFigures(offsets, sizes, problems)

    def _page_number(self, request: Request) -> int:
        return self._integer(request.query.get("page", "1") or "1", "page", 1)

    def _topics(self, request: Request, context: pages.PageContext, view: ClusterView) -> Response:
        query = request.query.get("q", "").strip()
        image, as_of_ms = view.topics_snapshot.get()
        needle = query.lower()
        chosen = [name for name in image.names if needle in name.lower()] if needle else image.names
        pager = pages.Pager.of(self._page_number(request), self.options.page_rows, len(chosen))
        shown = [image.topics[name] for name in chosen[pager.start : pager.end]]
        partitions = [TopicPartition(topic.name, p.partition) for topic in shown for p in topic.partitions]
        figures = (
            self.topic_figures(view, partitions, [topic.name for topic in shown])
            if shown
            else TopicFigures({}, {}, [])
        )
        page = pages.topics_page(
            context, shown, pager, figures.offsets, figures.sizes, query, as_of_ms, figures.problems
        )
        return self._page(200, page)

    def _topic(self, request: Request, context: pages.PageContext, view: ClusterView) -> Response:
        name = self._required(request.query, "name")
        topic = view.source.topic(name)
        pager = pages.Pager.of(self._page_number(request), self.options.page_rows, len(topic.partitions))
        configs_asked = self._side.submit(view.source.topic_configs, name)
        partitions = [TopicPartition(name, p.partition) for p in topic.partitions[pager.start : pager.end]]
        try:
            figures = self.topic_figures(view, partitions, [name])
        except BaseException:
            configs_asked.cancel()
            raise
        problems = list(figures.problems)
        configs = None
        try:
            configs = configs_asked.result()
        except KafkaError as error:
            problems.append(f"Configs unavailable: {error}")
        return self._page(
            200, pages.topic_page(context, topic, pager, figures.offsets, figures.sizes, configs, problems)
        )

    def _new_topic(self, request: Request, context: pages.PageContext, view: ClusterView) -> Response:
        if context.read_only:
            return self._page(403, pages.error_page(context, "Read-only", "This console is read-only."))
        return self._page(200, pages.new_topic_page(context, {}, None))

    def _create_topic(self, request: Request, context: pages.PageContext, view: ClusterView) -> Response:
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
            view.source.create_topic(name, partitions, replication, configs)
            view.changed()
        except BadRequest as error:
            return self._page(400, pages.new_topic_page(context, form, str(error)))
        except KafkaError as error:
            if error.code in AUTHORIZATION_ERRORS:
                who = context.user or "this console"
                return self._page(
                    403,
                    pages.new_topic_page(
                        context, form, f"Not authorized: {who} may not create {name}. ({error})"
                    ),
                )
            return self._page(409, pages.new_topic_page(context, form, str(error)))
        return self._redirect(url("/topic", name=name, notice="created"))

    def _set_config(self, request: Request, context: pages.PageContext, view: ClusterView) -> Response:
        name = self._required(request.form, "name")
        key = self._required(request.form, "key").strip()
        value = None if request.form.get("reset") else request.form.get("value", "")
        view.source.set_topic_config(name, key, value)
        view.changed()
        return self._redirect(url("/topic", name=name, notice="config"))

    def _delete_topic_confirm(
        self, request: Request, context: pages.PageContext, view: ClusterView
    ) -> Response:
        if context.read_only:
            return self._page(403, pages.error_page(context, "Read-only", "This console is read-only."))
        name = self._required(request.query, "name")
        return self._page(200, pages.delete_topic_page(context, name, None))

    def _delete_topic(self, request: Request, context: pages.PageContext, view: ClusterView) -> Response:
        name = self._required(request.form, "name")
        if request.form.get("confirm", "") != name:
            return self._page(
                400,
                pages.delete_topic_page(context, name, "The name typed does not match: nothing was deleted."),
            )
        view.source.delete_topic(name)
        view.changed()
        return self._redirect(url("/topics", notice="deleted"))

    # -- messages ------------------------------------------------------------------------------

    def _messages(self, request: Request, context: pages.PageContext, view: ClusterView) -> Response:
        query = request.query
        name = self._required(query, "topic")
        topic = view.source.topic(name)
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
        found = view.source.offsets([tp]).get(tp)
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
            start = view.source.offset_for_time(tp, timestamp_ms)
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
            result = view.source.read(
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

    def _groups(self, request: Request, context: pages.PageContext, view: ClusterView) -> Response:
        query = request.query.get("q", "").strip()
        # The latest sampled lag is shown for the groups this view's own ListGroups answered.
        needle = query.lower()
        listings = [g for g in view.source.groups() if needle in g.group_id.lower()]
        pager = pages.Pager.of(self._page_number(request), self.options.page_rows, len(listings))
        shown = listings[pager.start : pager.end]
        with self.history_lock:
            latest: dict[str, LagPoint] = {}
            for listing in shown:
                point = self.history.latest(listing.group_id)
                if point is not None:
                    latest[listing.group_id] = point
        return self._page(
            200,
            pages.groups_page(context, shown, pager, latest, query, self.options.lag_sample_interval_ms),
        )

    def _group(self, request: Request, context: pages.PageContext, view: ClusterView) -> Response:
        group_id = self._required(request.query, "id")
        group = view.source.describe_group(group_id)
        committed = view.source.committed(group_id)
        assigned = {
            TopicPartition(*tp)
            for member in group.members
            if member.assignment is not None
            for tp in member.assignment.partitions
        }
        ends = view.source.end_offsets(sorted(set(committed) | assigned))
        now_ms = self.clock_ms()
        # The sampler's trend (asked with the console's own config) is shown only here, after this
        # view's own requests for the group succeeded: under --console-login a user sees the trend
        # of a group their ACLs let them describe, and no other.
        with self.history_lock:
            points = self.history.points(group_id, now_ms)
        if committed:
            # The chart ends with the lag just computed. It is not kept: only the sampler writes
            # the history, one point an interval, however often the page is opened.
            points.append(LagPoint(now_ms, total_lag(committed, ends)))
        return self._page(
            200,
            pages.group_page(
                context,
                group,
                committed,
                ends,
                points,
                now_ms,
                self.options.lag_window_ms,
                self.options.page_rows,
                self._page_number(request),
            ),
        )

    def _group_history(self, request: Request, context: pages.PageContext, view: ClusterView) -> Response:
        group_id = self._required(request.query, "id")
        try:
            entries = view.source.group_history(group_id)
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
