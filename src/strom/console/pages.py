"""The console's pages, rendered from what the cluster answered. Pure: data in, ``Markup`` out.

Every value from the cluster goes through ``markup.html``/``markup.join`` (escaped); forms are
drawn only when the console is not read-only, each with the process's CSRF token.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import quote

from strom.client.admin import (
    ClusterDescription,
    ConfigEntry,
    GroupDescription,
    GroupListing,
    OffsetAndMetadata,
    PartitionDescription,
    TopicDescription,
)
from strom.client.cluster import TopicPartition
from strom.console.lag import LagPoint, partition_lag
from strom.console.markup import Markup, html, join, url
from strom.console.records import FORMATS, format_time_ms, show_bytes
from strom.console.source import OffsetRange, ReadResult
from strom.protocol.group_history import PartitionMove, RebalanceEntry

__all__ = ["NAVIGATION", "PageContext"]

# The navigation bar: (path, label). A page of one thing links from that thing's page (a group's
# rebalance history from the group's); a top-level one adds itself here.
NAVIGATION: list[tuple[str, str]] = [("/", "Cluster"), ("/topics", "Topics"), ("/groups", "Groups")]

# Names of config sources (DescribeConfigs' ConfigSource).
CONFIG_SOURCES = {
    0: "unknown",
    1: "topic",
    2: "broker (dynamic)",
    3: "broker default (dynamic)",
    4: "broker (static)",
    5: "default",
    6: "broker logger",
    7: "client metrics",
    8: "group",
}


@dataclass(frozen=True)
class PageContext:
    read_only: bool
    csrf_token: str
    # A message to show at the top (after a create, alter or delete); from a fixed set.
    notice: str | None = None
    # The logged-in user (--console-login), shown with a Log out button; None: no login.
    user: str | None = None


def layout(context: PageContext, title: str, active: str, body: Markup) -> Markup:
    nav = join(
        html('<a href="{}"{}>{}</a>', path, Markup(' class="active"' if path == active else ""), label)
        for path, label in NAVIGATION
    )
    badge = Markup('<span class="badge">read-only</span>') if context.read_only else Markup("")
    if context.user is not None:
        badge = Markup(
            badge
            + html(
                '<form method=post action="/logout" class=logout><span class=user>{}</span>{}'
                "<button type=submit>Log out</button></form>",
                context.user,
                csrf_field(context),
            )
        )
    notice = html('<p class="notice" role="status">{}</p>', context.notice) if context.notice else Markup("")
    return html(
        "<!doctype html>\n<html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width, initial-scale=1">'
        "<title>{} · strom console</title>"
        '<link rel=stylesheet href="/static/console.css"><script src="/static/console.js" defer></script>'
        "</head><body><header><span class=brand>strom console</span><nav>{}</nav>{}</header>"
        "<main><h1>{}</h1>{}{}</main></body></html>\n",
        title,
        nav,
        badge,
        title,
        notice,
        body,
    )


def csrf_field(context: PageContext) -> Markup:
    return html('<input type=hidden name=csrf value="{}">', context.csrf_token)


def table(
    headers: Sequence[str], rows: Iterable[Markup], *, table_id: str = "", empty: str = "none"
) -> Markup:
    head = join(html("<th>{}</th>", header) for header in headers)
    body = join(rows)
    if not body:
        body = html('<tr><td colspan="{}" class=empty>{}</td></tr>', len(headers), empty)
    id_attribute = html(' id="{}"', table_id) if table_id else Markup("")
    return html("<table{}><thead><tr>{}</tr></thead><tbody>{}</tbody></table>", id_attribute, head, body)


def cells(*values: object) -> Markup:
    return html("<tr>{}</tr>", join(html("<td>{}</td>", value) for value in values))


def number(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def size_text(size: int | None) -> str:
    if size is None:
        return "-"
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= factor:
            return f"{size / factor:.1f} {unit}"
    return f"{size} B"


def ids(values: Iterable[int]) -> str:
    return ", ".join(str(value) for value in values)


def topic_link(name: str) -> Markup:
    # Not url(): one quote() is a third of urlencode's time, and list pages make thousands.
    return html('<a href="/topic?name={}">{}</a>', quote(name, safe=""), name)


def group_link(group_id: str) -> Markup:
    return html('<a href="/group?id={}">{}</a>', quote(group_id, safe=""), group_id)


def cut_note(shown: int, total: int, where: str) -> Markup:
    if shown >= total:
        return Markup("")
    return html("<p class=note>Showing the first {} of {}; {}.</p>", number(shown), number(total), where)


@dataclass(frozen=True)
class Pager:
    """Which rows of a list a page shows: page ``number`` (from 1) of ``rows`` rows each, out of
    ``total``; a number past the last page shows the last."""

    number: int
    rows: int
    total: int

    @classmethod
    def of(cls, requested: int, rows: int, total: int) -> Pager:
        pages = max((total + rows - 1) // rows, 1)
        return cls(min(max(requested, 1), pages), rows, total)

    @property
    def start(self) -> int:
        return (self.number - 1) * self.rows

    @property
    def end(self) -> int:
        return min(self.start + self.rows, self.total)

    def links(self, path: str, what: str, **query: object) -> Markup:
        """Where the page is in the list and links to the previous and next pages (``query``: the
        rest of the page's query, kept); nothing when the list fits on one page."""
        if self.total <= self.rows:
            return Markup("")
        previous = (
            html(
                ' <a href="{}" id=previous-page rel=prev>← previous</a>',
                url(path, **query, page=self.number - 1),
            )
            if self.number > 1
            else Markup("")
        )
        following = (
            html(' <a href="{}" id=next-page rel=next>next →</a>', url(path, **query, page=self.number + 1))
            if self.end < self.total
            else Markup("")
        )
        return html(
            "<p class=pager>Showing {} {} to {} of <span class=total>{}</span>.{}{}</p>",
            what,
            number(self.start + 1),
            number(self.end),
            number(self.total),
            previous,
            following,
        )


def as_of(time_ms: int, what: str) -> Markup:
    return html(
        "<p class=note id=as-of>{} as of {} (asked again at most every few seconds; a topic's own page is live).</p>",
        what,
        format_time_ms(time_ms),
    )


def filter_form(path: str, query: str, placeholder: str) -> Markup:
    return html(
        '<form method=get action="{}" class=filter><input type=search name=q value="{}" placeholder="{}" '
        'aria-label="{}"><button>Filter</button></form>',
        path,
        query,
        placeholder,
        placeholder,
    )


# -- cluster -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TopicsImage:
    """Every topic as one Metadata answer described them, with what the cluster page and the
    topics list need of all of them worked out once (when the snapshot is taken, in the
    background), so a view does work only for the rows it shows."""

    topics: Mapping[str, TopicDescription]
    names: Sequence[str]  # sorted
    partition_count: int
    under_replicated: Sequence[tuple[str, PartitionDescription]]
    offline: Sequence[tuple[str, PartitionDescription]]

    @classmethod
    def of(cls, topics: Mapping[str, TopicDescription]) -> TopicsImage:
        names = sorted(topics)
        under: list[tuple[str, PartitionDescription]] = []
        offline: list[tuple[str, PartitionDescription]] = []
        count = 0
        for name in names:
            partitions = topics[name].partitions
            count += len(partitions)
            for p in partitions:
                if p.leader < 0:
                    offline.append((name, p))
                elif len(p.isr) < len(p.replicas):
                    under.append((name, p))
        return cls(dict(topics), names, count, under, offline)


def cluster_page(
    context: PageContext,
    cluster: ClusterDescription,
    image: TopicsImage,
    rows: int,
    as_of_ms: int,
) -> Markup:
    """The brokers, and the first ``rows`` under-replicated and offline partitions."""
    brokers = table(
        ["Id", "Host", "Port", "Rack", "Role"],
        (
            cells(
                b.node_id,
                b.host,
                b.port,
                b.rack or "-",
                "controller" if b.node_id == cluster.controller_id else "",
            )
            for b in sorted(cluster.brokers, key=lambda b: b.node_id)
        ),
        table_id="brokers",
    )
    under, offline = image.under_replicated, image.offline

    def partition_rows(found: Sequence[tuple[str, PartitionDescription]]) -> Iterable[Markup]:
        for name, p in found[:rows]:
            yield cells(
                topic_link(name),
                p.partition,
                p.leader if p.leader >= 0 else "none",
                ids(p.replicas),
                ids(p.isr),
            )

    summary = html(
        "<dl class=summary><dt>Cluster id</dt><dd id=cluster-id>{}</dd><dt>Controller</dt><dd id=controller>{}</dd>"
        "<dt>Brokers</dt><dd>{}</dd><dt>Topics</dt><dd id=topic-count>{}</dd><dt>Partitions</dt><dd id=partition-count>{}</dd>"
        "<dt>Under-replicated</dt><dd id=under-replicated-count>{}</dd><dt>Offline</dt><dd id=offline-count>{}</dd></dl>",
        cluster.cluster_id or "-",
        cluster.controller_id if cluster.controller_id >= 0 else "none",
        len(cluster.brokers),
        number(len(image.names)),
        number(image.partition_count),
        number(len(under)),
        number(len(offline)),
    )
    headers = ["Topic", "Partition", "Leader", "Replicas", "In-sync replicas"]
    body = html(
        "{}{}<h2>Brokers</h2>{}<h2>Under-replicated partitions</h2>{}{}<h2>Offline partitions</h2>{}{}",
        summary,
        as_of(as_of_ms, "Partitions"),
        brokers,
        table(headers, partition_rows(under), table_id="under-replicated"),
        cut_note(min(len(under), rows), len(under), "a topic's page shows all of its partitions"),
        table(headers, partition_rows(offline), table_id="offline"),
        cut_note(min(len(offline), rows), len(offline), "a topic's page shows all of its partitions"),
    )
    return layout(context, "Cluster", "/", body)


# -- topics --------------------------------------------------------------------------------------


def topics_page(
    context: PageContext,
    topics: Sequence[TopicDescription],
    pager: Pager,
    offsets: Mapping[TopicPartition, OffsetRange],
    sizes: Mapping[TopicPartition, int] | None,
    query: str,
    as_of_ms: int,
    problems: Sequence[str],
) -> Markup:
    """One page of the topics list: ``topics`` (the page's rows), with ``offsets`` and ``sizes``
    of their partitions."""
    # One pass over the partitions' answers, summed by topic.
    answered: dict[str, int] = {}
    records_by_topic: dict[str, int] = {}
    ends_by_topic: dict[str, int] = {}
    for (name, _), found in offsets.items():
        answered[name] = answered.get(name, 0) + 1
        records_by_topic[name] = records_by_topic.get(name, 0) + found.end - found.start
        ends_by_topic[name] = ends_by_topic.get(name, 0) + found.end
    size_by_topic: dict[str, int] = {}
    for (name, _), size in (sizes or {}).items():
        size_by_topic[name] = size_by_topic.get(name, 0) + size
    rows = []
    for topic in topics:
        complete = answered.get(topic.name, 0) == len(topic.partitions)
        replication = max((len(p.replicas) for p in topic.partitions), default=0)
        rows.append(
            html(
                '<tr data-name="{}"><td>{}{}</td><td class=num>{}</td><td class=num>{}</td><td class=num>{}</td>'
                "<td class=num>{}</td><td class=num>{}</td></tr>",
                topic.name,
                topic_link(topic.name),
                Markup(" <span class=tag>internal</span>") if topic.is_internal else Markup(""),
                len(topic.partitions),
                replication,
                number(records_by_topic.get(topic.name, 0) if complete else None),
                number(ends_by_topic.get(topic.name, 0) if complete else None),
                size_text(size_by_topic.get(topic.name, 0) if sizes is not None else None),
            )
        )
    create = (
        Markup("")
        if context.read_only
        else Markup('<p><a class=button href="/topics/new" id=create-topic>Create a topic</a></p>')
    )
    body = html(
        "{}{}{}{}{}{}",
        create,
        filter_form("/topics", query, "topic name contains"),
        html(
            "<p class=note id=as-of>Topics and partitions as of {} (asked again at most every few "
            "seconds); records, offsets and sizes asked now.</p>",
            format_time_ms(as_of_ms),
        ),
        join(html("<p class=warning>{}</p>", problem) for problem in problems),
        table(
            ["Topic", "Partitions", "Replicas", "Records", "End offsets (sum)", "Size"],
            rows,
            table_id="topics",
            empty="no topics",
        ),
        pager.links("/topics", "topics", q=query),
    )
    return layout(context, "Topics", "/topics", body)


def topic_page(
    context: PageContext,
    topic: TopicDescription,
    pager: Pager,
    offsets: Mapping[TopicPartition, OffsetRange],
    sizes: Mapping[TopicPartition, int] | None,
    configs: Mapping[str, ConfigEntry] | None,
    problems: Sequence[str],
) -> Markup:
    """The topic with the partitions of ``pager``'s page (``offsets`` and ``sizes`` of those)."""
    rows = []
    for p in topic.partitions[pager.start : pager.end]:
        tp = TopicPartition(topic.name, p.partition)
        found = offsets.get(tp)
        rows.append(
            html(
                '<tr data-partition="{}"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class="num start">{}</td>'
                '<td class="num end">{}</td><td class=num>{}</td><td><a href="{}">browse</a></td></tr>',
                p.partition,
                p.partition,
                p.leader if p.leader >= 0 else "none",
                ids(p.replicas),
                ids(p.isr),
                number(found.start if found else None),
                number(found.end if found else None),
                size_text(sizes.get(tp) if sizes is not None else None),
                url("/messages", topic=topic.name, partition=p.partition),
            )
        )
    partitions = table(
        ["Partition", "Leader", "Replicas", "In-sync replicas", "Log start", "Log end", "Size", ""],
        rows,
        table_id="partitions",
    )
    actions = Markup("")
    config_form = Markup("")
    if not context.read_only:
        actions = html(
            '<p><a class="button danger" id=delete-topic href="{}">Delete this topic…</a></p>',
            url("/topic/delete", name=topic.name),
        )
        names = join(html('<option value="{}">', name) for name in sorted(configs or {}))
        config_form = html(
            '<form method=post action="/topic/config" class=inline id=set-config>{}<input type=hidden name=name value="{}">'
            "<input name=key list=config-names placeholder=key required aria-label=key>"
            "<datalist id=config-names>{}</datalist>"
            "<input name=value placeholder=value aria-label=value><button>Set</button></form>",
            csrf_field(context),
            topic.name,
            names,
        )
    config_rows = []
    for name, entry in sorted((configs or {}).items()):
        value = "(sensitive)" if entry.is_sensitive else ("null" if entry.value is None else entry.value)
        reset = Markup("")
        if not context.read_only and entry.source == 1:
            reset = html(
                '<form method=post action="/topic/config" class=inline>{}<input type=hidden name=name value="{}">'
                '<input type=hidden name=key value="{}"><input type=hidden name=reset value=1>'
                "<button>reset to default</button></form>",
                csrf_field(context),
                topic.name,
                name,
            )
        config_rows.append(
            html(
                '<tr data-config="{}"{}><td>{}</td><td class=value>{}</td><td>{}</td><td>{}</td></tr>',
                name,
                Markup(' class="set"') if entry.source == 1 else Markup(""),
                name,
                value,
                CONFIG_SOURCES.get(entry.source, str(entry.source)),
                reset,
            )
        )
    config_table = (
        table(["Key", "Value", "Source", ""], config_rows, table_id="configs")
        if configs is not None
        else Markup("<p class=note>The cluster did not describe this topic's configs.</p>")
    )
    warnings = join(html("<p class=warning>{}</p>", problem) for problem in problems)
    summary = html(
        "<dl class=summary><dt>Topic id</dt><dd>{}</dd><dt>Partitions</dt><dd>{}</dd><dt>Internal</dt><dd>{}</dd></dl>",
        topic.topic_id or "-",
        len(topic.partitions),
        "yes" if topic.is_internal else "no",
    )
    body = html(
        "{}{}{}<h2>Partitions</h2>{}{}<h2>Configs</h2>{}{}",
        warnings,
        summary,
        actions,
        partitions,
        pager.links("/topic", "partitions", name=topic.name),
        config_form,
        config_table,
    )
    return layout(context, f"Topic {topic.name}", "/topics", body)


def new_topic_page(context: PageContext, values: Mapping[str, str], error: str | None) -> Markup:
    problem = html("<p class=error role=alert>{}</p>", error) if error else Markup("")
    body = html(
        '{}<form method=post action="/topics" class=stacked id=new-topic>{}'
        '<label>Name <input name=name required maxlength=249 value="{}" pattern="[a-zA-Z0-9._\\-]+"></label>'
        '<label>Partitions <input name=partitions type=number min=1 value="{}"></label>'
        '<label>Replication factor <input name=replication_factor type=number min=-1 value="{}">'
        "<small>-1: the broker's default</small></label>"
        "<label>Configs, one key=value a line <textarea name=configs rows=4>{}</textarea></label>"
        "<button>Create</button></form>",
        problem,
        csrf_field(context),
        values.get("name", ""),
        values.get("partitions", "1"),
        values.get("replication_factor", "-1"),
        values.get("configs", ""),
    )
    return layout(context, "Create a topic", "/topics", body)


def delete_topic_page(context: PageContext, name: str, error: str | None) -> Markup:
    problem = html("<p class=error role=alert>{}</p>", error) if error else Markup("")
    body = html(
        "{}<p>Deleting topic <strong>{}</strong> removes its partitions and every record in them. It "
        "cannot be undone.</p>"
        '<form method=post action="/topic/delete" class=stacked id=delete-form>{}<input type=hidden name=name value="{}">'
        "<label>Type the topic's name to confirm <input name=confirm autocomplete=off required></label>"
        '<button class=danger>Delete topic</button> <a href="{}">Cancel</a></form>',
        problem,
        name,
        csrf_field(context),
        name,
        url("/topic", name=name),
    )
    return layout(context, f"Delete topic {name}?", "/topics", body)


# -- messages ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BrowseForm:
    topic: str
    partition: int
    partitions: int
    start: str  # as typed: an offset, or empty
    timestamp: str  # as typed, or empty
    limit: int
    form: str
    search: str
    log_start: int | None
    log_end: int | None


def messages_page(
    context: PageContext,
    browse: BrowseForm,
    result: ReadResult | None,
    start_offset: int | None,
    error: str | None,
) -> Markup:
    partition_options = join(
        html(
            '<option value="{}"{}>{}</option>',
            p,
            Markup(" selected") if p == browse.partition else Markup(""),
            p,
        )
        for p in range(browse.partitions)
    )
    format_options = join(
        html("<option{}>{}</option>", Markup(" selected") if f == browse.form else Markup(""), f)
        for f in FORMATS
    )
    form = html(
        '<form method=get action="/messages" class=browse id=browse>'
        '<input type=hidden name=topic value="{}">'
        "<label>Partition <select name=partition>{}</select></label>"
        '<label>From offset <input name=offset value="{}" size=10 placeholder="{}"></label>'
        '<label>or time <input name=timestamp value="{}" size=22 placeholder="2026-01-31T12:00:00 (UTC)"></label>'
        '<label>Records <input name=limit type=number min=1 value="{}" size=5></label>'
        "<label>Show as <select name=format>{}</select></label>"
        '<label>Search <input type=search name=search value="{}" placeholder="substring"></label>'
        "<button>Read</button></form>",
        browse.topic,
        partition_options,
        browse.start,
        number(browse.log_start),
        browse.timestamp,
        browse.limit,
        format_options,
        browse.search,
    )
    info = html(
        "<p class=note>Partition {} holds offsets <span id=log-start>{}</span> to <span id=log-end>{}</span> (exclusive).</p>",
        browse.partition,
        number(browse.log_start),
        number(browse.log_end),
    )
    parts = [form, info]
    if error:
        parts.append(html("<p class=error role=alert>{}</p>", error))
    if result is not None:
        reasons = {
            "limit": "the number of records asked for",
            "end": "the end of the partition",
            "scan": "the most records a search scans",
            "time": "the time a read may take",
        }
        parts.append(
            html(
                "<p class=note id=read-summary>{} records from offset {} ({} read); stopped at {}.{}</p>",
                number(len(result.records)),
                number(start_offset),
                number(result.scanned),
                reasons.get(result.stopped_by, result.stopped_by),
                html(
                    ' <a href="{}" id=next-page>Next records →</a>',
                    url(
                        "/messages",
                        topic=browse.topic,
                        partition=browse.partition,
                        offset=result.next_offset,
                        limit=browse.limit,
                        format=browse.form,
                        search=browse.search,
                    ),
                )
                if browse.log_end is not None and result.next_offset < browse.log_end
                else Markup(""),
            )
        )
        rows = []
        for record in result.records:
            headers = join(
                (
                    html("<div><b>{}</b>: {}</div>", name, show_bytes(value, browse.form))
                    for name, value in record.headers
                ),
            )
            rows.append(
                html(
                    '<tr data-offset="{}"><td class=num>{}</td><td>{}</td><td><pre class=key>{}</pre></td>'
                    "<td><pre class=value>{}</pre></td><td class=headers>{}</td></tr>",
                    record.offset,
                    record.offset,
                    format_time_ms(record.timestamp_ms),
                    show_bytes(record.key, browse.form),
                    show_bytes(record.value, browse.form),
                    headers,
                )
            )
        parts.append(
            table(
                ["Offset", "Timestamp", "Key", "Value", "Headers"],
                rows,
                table_id="records",
                empty="no records",
            )
        )
    back = html('<p><a href="{}">← topic {}</a></p>', url("/topic", name=browse.topic), browse.topic)
    return layout(context, f"Messages of {browse.topic}", "/topics", html("{}{}", back, join(parts)))


# -- groups --------------------------------------------------------------------------------------


def groups_page(
    context: PageContext,
    groups: Sequence[GroupListing],
    pager: Pager,
    latest_lag: Mapping[str, LagPoint],
    query: str,
    sample_interval_ms: int,
) -> Markup:
    rows = [
        html(
            '<tr data-group="{}"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=num>{}</td></tr>',
            listing.group_id,
            group_link(listing.group_id),
            listing.group_type or "-",
            listing.state or "-",
            listing.protocol_type or "-",
            number(latest_lag[listing.group_id].lag) if listing.group_id in latest_lag else "-",
        )
        for listing in groups
    ]
    body = html(
        "{}{}{}<p class=note>Lag: the console's last sample (taken every {} s) of the records between "
        "each partition's committed offset and its end, summed over the group's partitions.</p>",
        filter_form("/groups", query, "group id contains"),
        table(["Group", "Type", "State", "Protocol type", "Lag"], rows, table_id="groups", empty="no groups"),
        pager.links("/groups", "groups", q=query),
        f"{sample_interval_ms / 1000:g}",
    )
    return layout(context, "Consumer groups", "/groups", body)


def span_text(span_ms: int) -> str:
    if span_ms >= 120_000:
        return f"-{span_ms // 60_000} min"
    return f"-{span_ms // 1000} s"


def lag_chart(points: Sequence[LagPoint], now_ms: int, window_ms: int) -> Markup:
    """An inline SVG line of total lag (no script, no external file). The time axis runs from the
    first sample within the window (at most ``window_ms`` back) to now."""
    width, height, pad = 600, 160, 30
    if not points:
        return Markup("<p class=note id=lag-chart>No lag samples yet.</p>")
    lag_max = max(point.lag for point in points) or 1
    span_ms = max(now_ms - max(points[0].time_ms, now_ms - window_ms), 1_000)
    start_ms = now_ms - span_ms

    def x(time_ms: int) -> float:
        return pad + (width - 2 * pad) * min(max(0, time_ms - start_ms), span_ms) / span_ms

    def y(lag: int) -> float:
        return height - pad - (height - 2 * pad) * lag / lag_max

    line = " ".join(f"{x(p.time_ms):.1f},{y(p.lag):.1f}" for p in points)
    dots = join(
        html(
            '<circle cx="{}" cy="{}" r="2.5"><title>{}: {}</title></circle>',
            f"{x(p.time_ms):.1f}",
            f"{y(p.lag):.1f}",
            format_time_ms(p.time_ms),
            number(p.lag),
        )
        for p in points
    )
    return html(
        '<svg id=lag-chart class=chart viewBox="0 0 {} {}" role=img aria-label="total lag over time">'
        '<line x1="{}" y1="{}" x2="{}" y2="{}" class=axis></line>'
        '<line x1="{}" y1="{}" x2="{}" y2="{}" class=axis></line>'
        '<text x="{}" y="{}" class=label>{}</text><text x="{}" y="{}" class=label>0</text>'
        '<text x="{}" y="{}" class=label>{}</text><text x="{}" y="{}" class=label text-anchor=end>now</text>'
        '<polyline points="{}" class=line></polyline>{}</svg>',
        width,
        height,
        pad,
        height - pad,
        width - pad,
        height - pad,
        pad,
        pad,
        pad,
        height - pad,
        2,
        pad - 6,
        number(lag_max),
        2,
        height - pad,
        pad,
        height - 8,
        span_text(span_ms),
        width - pad,
        height - 8,
        line,
        dots,
    )


def group_page(
    context: PageContext,
    group: GroupDescription,
    committed: Mapping[TopicPartition, OffsetAndMetadata],
    ends: Mapping[TopicPartition, int],
    points: Sequence[LagPoint],
    now_ms: int,
    window_ms: int,
    rows: int,
    page: int,
) -> Markup:
    """The group, its total lag over every partition, and the partitions of page ``page`` (of
    ``rows`` each) with their offsets and lag."""
    owner: dict[TopicPartition, str] = {}
    member_rows = []
    for member in group.members:
        assigned = [TopicPartition(*tp) for tp in member.assignment.partitions] if member.assignment else []
        for tp in assigned:
            owner[tp] = member.member_id
        by_topic: dict[str, list[int]] = {}
        for tp in sorted(assigned):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        member_rows.append(
            html(
                '<tr data-member="{}"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=assignment>{}</td></tr>',
                member.member_id,
                member.member_id,
                member.group_instance_id or "-",
                member.client_id,
                member.host,
                "; ".join(f"{topic} [{ids(numbers)}]" for topic, numbers in by_topic.items()) or "-",
            )
        )
    partitions = sorted(set(committed) | set(owner))
    total = 0
    for tp in partitions:
        offset = committed.get(tp)
        total += partition_lag(offset.offset if offset else None, ends.get(tp)) or 0
    pager = Pager.of(page, rows, len(partitions))
    partition_rows = []
    for tp in partitions[pager.start : pager.end]:
        offset = committed.get(tp)
        lag = partition_lag(offset.offset if offset else None, ends.get(tp))
        partition_rows.append(
            html(
                '<tr data-topic="{}" data-partition="{}"><td>{}</td><td>{}</td><td class=member>{}</td>'
                '<td class="num committed">{}</td><td class="num end">{}</td><td class="num lag">{}</td></tr>',
                tp.topic,
                tp.partition,
                topic_link(tp.topic),
                tp.partition,
                owner.get(tp, "-"),
                number(offset.offset if offset else None),
                number(ends.get(tp)),
                number(lag),
            )
        )
    summary = html(
        "<dl class=summary><dt>State</dt><dd id=group-state>{}</dd><dt>Protocol type</dt><dd>{}</dd>"
        "<dt>Assignor</dt><dd>{}</dd><dt>Members</dt><dd id=member-count>{}</dd><dt>Total lag</dt><dd id=total-lag>{}</dd></dl>",
        group.state,
        group.protocol_type or "-",
        group.protocol or "-",
        len(group.members),
        number(total),
    )
    refresh = Markup("<label class=refresh><input type=checkbox id=auto-refresh> refresh every 5 s</label>")
    history = html(
        '<p><a href="{}" id=history-link>Rebalance history: when and why it rebalanced, and which partitions moved →</a></p>',
        url("/group/history", id=group.group_id),
    )
    body = html(
        "{}{}{}<h2>Members</h2>{}<h2>Committed offsets and lag</h2>{}{}<h2>Total lag (up to the last hour)</h2>{}",
        refresh,
        summary,
        history,
        table(
            ["Member", "Instance id", "Client id", "Host", "Assignment"],
            member_rows,
            table_id="members",
            empty="no members",
        ),
        table(
            ["Topic", "Partition", "Member", "Committed", "Log end", "Lag"],
            partition_rows,
            table_id="offsets",
            empty="nothing committed",
        ),
        pager.links("/group", "partitions", id=group.group_id),
        lag_chart(points, now_ms, window_ms),
    )
    return layout(context, f"Group {group.group_id}", "/groups", body)


# -- a group's rebalance history -----------------------------------------------------------------

# The colour of each trigger strom records (strom.coordinator.history.Trigger); a trigger this
# console does not know (a newer broker's) is drawn in OTHER_COLOUR. Fixed values, never a name
# from the cluster, go into the SVG's attributes.
TRIGGER_COLOURS: dict[str, str] = {
    "member-joined": "#2f9e44",
    "member-left": "#e8590c",
    "session-expired": "#c92a2a",
    "member-rejoined": "#1971c2",
    "rejoined-with-new-metadata": "#7048e8",
    "subscription-changed": "#0c8599",
    "coordinator-moved": "#364fc7",
    "topic-metadata-changed": "#f08c00",
    "sync-timed-out": "#a61e4d",
    "rebalance-timed-out": "#862e9c",
    "assignment-write-failed": "#495057",
}
OTHER_COLOUR = "#868e96"
# The join phase is drawn lighter than the assignment phase, in the trigger's colour.
JOIN_OPACITY = "0.4"

# The timeline's geometry (SVG user units; the picture scales to the page's width).
_WIDTH = 1000
_BAR_X0 = 200
_BAR_X1 = 590
_TEXT_X = 600
_ROW_HEIGHT = 26
_OVERVIEW_HEIGHT = 80
_ROW_TEXT_CHARS = 62


@dataclass(frozen=True)
class HistoryLimits:
    """What one history page shows at most (``strom.base.limits.console_history_*``)."""

    rebalances: int
    members: int
    moves: int


@dataclass(frozen=True)
class Phases:
    """A rebalance's times as drawn: one under way ends now (its join phase too, if it still waits
    for joins)."""

    start_ms: int
    join_end_ms: int
    end_ms: int
    under_way: bool

    @staticmethod
    def of(entry: RebalanceEntry, now_ms: int) -> Phases:
        if entry.end_ms >= 0:
            end = max(entry.end_ms, entry.start_ms)
            return Phases(entry.start_ms, min(max(entry.join_end_ms, entry.start_ms), end), end, False)
        end = max(now_ms, entry.start_ms)
        join_end = entry.join_end_ms if entry.join_end_ms >= 0 else end
        return Phases(entry.start_ms, min(max(join_end, entry.start_ms), end), end, True)

    @property
    def join_ms(self) -> int:
        return self.join_end_ms - self.start_ms

    @property
    def assignment_ms(self) -> int:
        return self.end_ms - self.join_end_ms

    @property
    def duration_ms(self) -> int:
        return self.end_ms - self.start_ms


def duration_text(ms: int) -> str:
    if ms < 1_000:
        return f"{ms} ms"
    if ms < 120_000:
        return f"{ms / 1000:.1f} s"
    return f"{ms // 60_000} min {ms % 60_000 // 1000} s"


def generation_text(entry: RebalanceEntry) -> str:
    """ "generation 4" (classic) or "epoch 4" (consumer protocol); "-" before it is known."""
    what = "epoch" if entry.protocol == "consumer" else "generation"
    return f"{what} {entry.generation}" if entry.generation >= 0 else f"{what} -"


def trigger_colour(trigger: str) -> str:
    return TRIGGER_COLOURS.get(trigger, OTHER_COLOUR)


def outcome_text(entry: RebalanceEntry) -> str:
    return "in progress" if entry.end_ms < 0 else entry.outcome


def cut(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[: chars - 1] + "…"


def member_list(members: Sequence[str], members_max: int) -> str:
    shown = ", ".join(members[:members_max])
    if len(members) > members_max:
        shown += f" … and {len(members) - members_max:,} more"
    return shown or "none"


def member_changes(
    members: Sequence[str], other: Sequence[str] | None, mark: str, members_max: int
) -> Markup:
    """``members`` listed (at most ``members_max``), each not in ``other`` marked ``mark``
    ("joined" or "left"); ``other`` None: nothing to compare with (a rebalance under way)."""
    others = set(other) if other is not None else set(members)
    listed = join(
        (
            html('<span class="{}" title="{}">{}</span>', mark, mark, member)
            if member not in others
            else member
            for member in members[:members_max]
        ),
        ", ",
    )
    if len(members) > members_max:
        listed = html("{} … and {} more", listed, f"{len(members) - members_max:,}")
    return listed or Markup("none")


def rebalance_timeline(entries: Sequence[RebalanceEntry], now_ms: int, members_max: int) -> Markup:
    """The rebalances (newest first) as an inline SVG, no script: above, when each happened on one
    time axis (a mark per rebalance, in its trigger's colour); below, a row per rebalance with its
    bar from start to end split into its phases, on a scale shared by the rows (the longest
    rebalance fills it), and its generation or epoch, start, trigger, outcome and causes."""
    phases = [Phases.of(entry, now_ms) for entry in entries]
    first_ms = min(p.start_ms for p in phases)
    last_ms = max(p.end_ms for p in phases)
    span_ms = max(last_ms - first_ms, 1)
    longest_ms = max(max(p.duration_ms for p in phases), 1)
    left, right = 10, _WIDTH - 10

    def overview_x(time_ms: int) -> float:
        return left + (right - left) * (time_ms - first_ms) / span_ms

    def bar_width(ms: int) -> float:
        return (_BAR_X1 - _BAR_X0) * ms / longest_ms

    marks = []
    labelled_x = -100.0
    for entry, p in zip(reversed(entries), reversed(phases), strict=True):
        x = overview_x(p.start_ms)
        if x - labelled_x >= 24 and entry.generation >= 0:  # its number above it, where there is room
            marks.append(html('<text x="{}" y="27" class=label>{}</text>', f"{x:.1f}", entry.generation))
            labelled_x = x
        marks.append(
            html(
                '<rect class=mark x="{}" y="31" width="{}" height="14" fill="{}"><title>{} · {} · {}</title></rect>',
                f"{x:.1f}",
                f"{max(overview_x(p.end_ms) - x, 3):.1f}",
                trigger_colour(entry.trigger),
                generation_text(entry),
                entry.trigger,
                format_time_ms(p.start_ms),
            )
        )
    overview = html(
        '<text x="{}" y="12" class=label>when, oldest to newest (a mark per rebalance, its generation or epoch above it)</text>'
        '<line x1="{}" y1="47" x2="{}" y2="47" class=axis></line>{}'
        '<text x="{}" y="61" class=label>{}</text><text x="{}" y="61" class=label text-anchor=end>{}</text>',
        left,
        left,
        right,
        join(marks),
        left,
        format_time_ms(first_ms),
        right,
        format_time_ms(last_ms),
    )
    rows = []
    for index, (entry, p) in enumerate(zip(entries, phases, strict=True)):
        y = _OVERVIEW_HEIGHT + index * _ROW_HEIGHT
        colour = trigger_colour(entry.trigger)
        join_width = bar_width(p.join_ms)
        total_width = max(bar_width(p.duration_ms), 2)
        assignment_width = max(total_width - join_width, 0)
        causes = member_list(entry.causes, members_max) if entry.causes else ""
        summary = f"{entry.trigger} · {outcome_text(entry)} · {duration_text(p.duration_ms)}"
        if causes:
            summary += f" · by {causes}"
        classes = (
            "rebalance"
            + (" under-way" if p.under_way else "")
            + (" superseded" if entry.outcome == "superseded" else "")
        )
        rows.append(
            html(
                '<g class="{}" data-sequence="{}" data-generation="{}" data-trigger="{}">'
                "<title>{} · {} · started {} · waiting for joins {} · waiting for the assignment {} · {}{}</title>"
                '<text x="8" y="{}" class=gen>{}</text><text x="112" y="{}" class=label>{}</text>'
                '<rect class=track x="{}" y="{}" width="{}" height="14"></rect>'
                '<rect class=join x="{}" y="{}" width="{}" height="14" fill="{}" fill-opacity="{}"></rect>'
                '<rect class=assignment x="{}" y="{}" width="{}" height="14" fill="{}"></rect>'
                '<rect class=outline x="{}" y="{}" width="{}" height="14" stroke="{}"></rect>'
                '<text x="{}" y="{}" class=summary>{}</text></g>',
                classes,
                entry.sequence,
                entry.generation,
                entry.trigger,
                generation_text(entry),
                entry.trigger,
                format_time_ms(p.start_ms),
                duration_text(p.join_ms),
                duration_text(p.assignment_ms),
                outcome_text(entry),
                f" · caused by {causes}" if causes else "",
                y + 15,
                generation_text(entry),
                y + 15,
                format_time_ms(p.start_ms)[11:23],
                _BAR_X0,
                y + 4,
                _BAR_X1 - _BAR_X0,
                f"{_BAR_X0:.1f}",
                y + 4,
                f"{join_width:.1f}",
                colour,
                JOIN_OPACITY,
                f"{_BAR_X0 + join_width:.1f}",
                y + 4,
                f"{assignment_width:.1f}",
                colour,
                _BAR_X0,
                y + 4,
                f"{total_width:.1f}",
                colour,
                _TEXT_X,
                y + 15,
                cut(summary, _ROW_TEXT_CHARS),
            )
        )
    scale_y = _OVERVIEW_HEIGHT + len(entries) * _ROW_HEIGHT + 12
    scale = html(
        '<line x1="{}" y1="{}" x2="{}" y2="{}" class=axis></line>'
        '<text x="{}" y="{}" class=label>0</text><text x="{}" y="{}" class=label text-anchor=end>{}</text>',
        _BAR_X0,
        scale_y - 10,
        _BAR_X1,
        scale_y - 10,
        _BAR_X0,
        scale_y + 4,
        _BAR_X1,
        scale_y + 4,
        duration_text(longest_ms),
    )
    return html(
        '<svg id=rebalance-timeline class="chart timeline" viewBox="0 0 {} {}" role=img '
        'aria-label="the group\'s rebalances on a timeline">{}{}{}</svg>',
        _WIDTH,
        scale_y + 10,
        overview,
        join(rows),
        scale,
    )


def timeline_legend(entries: Sequence[RebalanceEntry]) -> Markup:
    """The phases' shades and the colours of the triggers shown (as small SVGs: the console's
    policy allows no inline style)."""

    def swatch(colour: str, opacity: str = "1") -> Markup:
        return html(
            '<svg class=swatch viewBox="0 0 14 14" aria-hidden=true><rect width="14" height="14" fill="{}" fill-opacity="{}"></rect></svg>',
            colour,
            opacity,
        )

    triggers = sorted({entry.trigger for entry in entries})
    return html(
        "<p class=legend id=timeline-legend>{} waiting for joins {} waiting for the assignment "
        "(consumer protocol: members reconciling) · triggers: {}</p>",
        swatch(OTHER_COLOUR, JOIN_OPACITY),
        swatch(OTHER_COLOUR),
        join(
            (html("<span class=trigger>{} {}</span>", swatch(trigger_colour(t)), t) for t in triggers),
            " ",
        ),
    )


def move_text(move: PartitionMove) -> str:
    return f"{move.topic}-{move.partition}: {move.from_member or 'nobody'} → {move.to_member or 'nobody'}"


def group_history_page(
    context: PageContext,
    group_id: str,
    entries: Sequence[RebalanceEntry],
    now_ms: int,
    bounds: HistoryLimits,
) -> Markup:
    """``entries`` oldest first, as the coordinator answers; shown newest first, the newest
    ``bounds.rebalances`` of them."""
    newest = list(reversed(entries))
    shown = newest[: bounds.rebalances]
    back = html('<p><a href="{}">← group {}</a></p>', url("/group", id=group_id), group_id)
    refresh = Markup("<label class=refresh><input type=checkbox id=auto-refresh> refresh every 5 s</label>")
    explained = Markup(
        "<p class=note>Each rebalance as the group's coordinator recorded it: why it began (its trigger "
        "and the members that caused it), how long it waited for members to join and then for the "
        "assignment (classic protocol: JoinGroup, then SyncGroup until the leader's assignment is "
        "written; consumer protocol: the target assignment is computed at once, then members "
        "reconcile to it), the members before and after (those that joined in green, those that left struck "
        "through), and the partitions that changed owner. "
        "The coordinator keeps a group's recent rebalances only (strom: the last 50). Times are UTC.</p>"
    )
    if not shown:
        body = html(
            "{}{}<p class=note id=no-rebalances>No rebalance recorded for this group.</p>{}",
            back,
            refresh,
            explained,
        )
        return layout(context, f"Rebalances of {group_id}", "/groups", body)
    moves_left = bounds.moves
    rows = []
    for entry in shown:
        p = Phases.of(entry, now_ms)
        listed = entry.moves[: max(moves_left, 0)]
        moves_left -= len(listed)
        moves = join(html("<li>{}</li>", move_text(move)) for move in listed)
        notes = []
        if len(listed) < len(entry.moves):
            notes.append(
                f"… and {len(entry.moves) - len(listed):,} more (a page lists at most {bounds.moves:,} moves)"
            )
        if entry.moves_omitted:
            notes.append(
                f"{entry.moves_omitted:,} more not recorded (the history bounds one rebalance's moves)"
            )
        moves_cell = html(
            "<ul class=moves>{}</ul>{}",
            moves,
            join(html("<div class=note>{}</div>", note) for note in notes),
        )
        if not entry.moves and not entry.moves_omitted:
            moves_cell = Markup("none") if entry.end_ms >= 0 else Markup("-")
        rows.append(
            html(
                '<tr data-sequence="{}" data-generation="{}" data-trigger="{}"><td class=generation>{}</td>'
                "<td>{}</td><td><span class=trigger>{}</span></td><td class=causes>{}</td><td>{}</td>"
                "<td class=num>{}</td><td class=num>{}</td><td class=num>{}</td><td class=outcome>{}</td>"
                "<td class=members><div>before ({}): {}</div><div>after ({}): {}</div></td>"
                "<td class=moved>{}</td></tr>",
                entry.sequence,
                entry.generation,
                entry.trigger,
                generation_text(entry),
                entry.protocol,
                entry.trigger,
                member_list(entry.causes, bounds.members) if entry.causes else "-",
                format_time_ms(p.start_ms),
                duration_text(p.join_ms),
                duration_text(p.assignment_ms),
                duration_text(p.duration_ms) + (" so far" if p.under_way else ""),
                outcome_text(entry),
                number(len(entry.members_before)),
                member_changes(
                    entry.members_before, None if p.under_way else entry.members_after, "left", bounds.members
                ),
                "-" if p.under_way else number(len(entry.members_after)),
                "not yet known"
                if p.under_way
                else member_changes(entry.members_after, entry.members_before, "joined", bounds.members),
                moves_cell,
            )
        )
    cut_text = (
        html(
            "<p class=note id=history-cut>Showing the newest {} of {} rebalances the coordinator keeps.</p>",
            number(len(shown)),
            number(len(entries)),
        )
        if len(shown) < len(entries)
        else Markup("")
    )
    body = html(
        "{}{}{}<h2>Timeline</h2>{}{}{}<h2>Rebalances, newest first</h2>{}",
        back,
        refresh,
        explained,
        timeline_legend(shown),
        rebalance_timeline(shown, now_ms, bounds.members),
        cut_text,
        table(
            [
                "Generation / epoch",
                "Protocol",
                "Trigger",
                "Caused by",
                "Start",
                "Waiting for joins",
                "Waiting for the assignment",
                "Total",
                "Outcome",
                "Members before → after",
                "Moved partitions (topic-partition: from → to)",
            ],
            rows,
            table_id="rebalances",
        ),
    )
    return layout(context, f"Rebalances of {group_id}", "/groups", body)


def group_history_unavailable_page(context: PageContext, group_id: str, message: str) -> Markup:
    """The history cannot be shown: ``message`` says why (no strom broker, no such group)."""
    back = html('<p><a href="{}">← group {}</a></p>', url("/group", id=group_id), group_id)
    body = html("{}<p class=warning id=history-unavailable>{}</p>", back, message)
    return layout(context, f"Rebalances of {group_id}", "/groups", body)


def error_page(context: PageContext, title: str, message: str) -> Markup:
    return layout(context, title, "", html("<p class=error role=alert>{}</p>", message))


def login_page(context: PageContext, problem: str | None, user: str) -> Markup:
    """The login form (--console-login): a SASL username and password, checked by the cluster.
    The password is never written back into the page."""
    error = html("<p class=error role=alert>{}</p>", problem) if problem else Markup("")
    form = html(
        '<form method=post action="/login" class=login>{}'
        '<label>Username <input name=username autocomplete=username required value="{}"></label>'
        "<label>Password <input name=password type=password autocomplete=current-password required></label>"
        "<button type=submit>Log in</button></form>"
        "<p>The cluster checks these credentials (SASL); what you see and may change is what its "
        "ACLs allow this user.</p>",
        csrf_field(context),
        user,
    )
    return layout(context, "Log in", "", html("{}{}", error, form))
