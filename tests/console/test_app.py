"""The console's pages and forms against an in-memory cluster: what each page shows, that
everything from the cluster is escaped, CSRF, the Host check, read-only mode and delete's
confirmation."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

import pytest

from strom.client.cluster import TopicPartition
from strom.console import pages
from strom.console.app import Console, ConsoleOptions
from strom.console.http import Request, Response, parse_head
from strom.console.source import BrowsedRecord
from strom.protocol.group_history import PartitionMove, RebalanceEntry
from tests.console.fakes import FakeGroup, FakeSource

TOKEN = "test-token-0123456789"
HOST = "127.0.0.1:8080"

# What an attacker puts wherever the cluster lets them: group ids, client ids, keys, values,
# header names and values. Kafka refuses such topic names, but another cluster might not.
EVIL = "\"'><script>alert(1)</script><img src=x onerror=alert(2)>"


def make_console(
    source: FakeSource | None = None, *, read_only: bool = False, now_ms: int = 1_700_000_000_000
) -> Console:
    # No snapshot (stale 0): every view asks the fake cluster, as a test changes it between views.
    options = ConsoleOptions(read_only=read_only, snapshot_fresh_ms=0, snapshot_stale_ms=0)
    return Console(source or FakeSource(), options, clock_ms=lambda: now_ms, csrf_token=TOKEN)


def get(console: Console, target: str, host: str = HOST) -> Response:
    method, path, query, headers = parse_head(f"GET {target} HTTP/1.1\r\nHost: {host}".encode())
    return console.handle(Request(method, path, query, headers))


def post(
    console: Console,
    path: str,
    form: dict[str, str],
    *,
    host: str = HOST,
    origin: str | None = None,
    token: str | None = TOKEN,
) -> Response:
    headers = {"host": host, "content-type": "application/x-www-form-urlencoded"}
    if origin is not None:
        headers["origin"] = origin
    fields = dict(form)
    if token is not None:
        fields["csrf"] = token
    return console.handle(Request("POST", path, {}, headers, fields))


def text(response: Response) -> str:
    return response.body.decode()


def location(response: Response) -> tuple[str, dict[str, list[str]]]:
    value = dict(response.headers)["Location"]
    split = urlsplit(value)
    return split.path, parse_qs(split.query)


@pytest.fixture
def source() -> FakeSource:
    source = FakeSource()
    source.add_topic("orders", partitions=3, records=30)
    source.add_topic("payments", partitions=1, records=5)
    source.group_table["billing"] = FakeGroup(
        members={
            "member-1": ("client-a", "/10.0.0.1", [TopicPartition("orders", 0), TopicPartition("orders", 1)])
        },
        committed={TopicPartition("orders", 0): 25, TopicPartition("orders", 1): 30},
    )
    return source


def test_cluster_page_shows_brokers_controller_and_partition_health(source: FakeSource) -> None:
    from strom.client.admin import PartitionDescription

    source.topic_partitions["orders"][1] = PartitionDescription(1, 1, (1, 2), (1,))
    source.topic_partitions["orders"][2] = PartitionDescription(2, -1, (1, 2), ())
    page = text(get(make_console(source), "/"))
    assert "id=controller>1</dd>" in page
    assert "broker-1.example" in page and "rack-a" in page and "controller" in page
    assert "id=under-replicated-count>1<" in page
    assert "id=offline-count>1<" in page
    under = page.split('id="under-replicated"')[1].split("</table>")[0]
    assert "<td>1</td><td>1</td><td>1, 2</td><td>1</td>" in under


def test_topics_page_lists_partitions_records_and_sizes_and_filters(source: FakeSource) -> None:
    console = make_console(source)
    page = text(get(console, "/topics"))
    row = re.search(r'<tr data-name="orders">.*?</tr>', page)
    assert row is not None
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(0))
    assert cells[1:] == ["3", "2", "90", "90", "8.8 KiB"]
    filtered = text(get(console, "/topics?q=PAY"))
    assert 'data-name="payments"' in filtered and 'data-name="orders"' not in filtered
    source.sizes_fail = True
    assert "<td class=num>-</td></tr>" in text(get(console, "/topics"))


def test_topic_page_shows_partitions_offsets_and_configs(source: FakeSource) -> None:
    source.log_start[TopicPartition("orders", 2)] = 7
    page = text(get(make_console(source), "/topic?name=orders"))
    row = re.search(r'<tr data-partition="2">.*?</tr>', page)
    assert row is not None
    assert '<td class="num start">7</td><td class="num end">30</td>' in row.group(0)
    assert (
        '<tr data-config="retention.ms" class="set"><td>retention.ms</td><td class=value>3600000</td><td>topic</td>'
        in page
    )
    assert 'href="/messages?topic=orders&amp;partition=2"' in page


def test_unknown_topic_is_the_clusters_answer_not_a_crash(source: FakeSource) -> None:
    response = get(make_console(source), "/topic?name=nope")
    assert response.status == 502
    assert "UNKNOWN_TOPIC_OR_PARTITION" in text(response) or "nope" in text(response)


def test_everything_from_the_cluster_is_escaped(source: FakeSource) -> None:
    source.add_topic(EVIL, partitions=1)
    source.append(
        TopicPartition(EVIL, 0),
        BrowsedRecord(0, 1_700_000_000_000, EVIL.encode(), EVIL.encode(), ((EVIL, EVIL.encode()),)),
    )
    source.group_table[EVIL] = FakeGroup(
        members={EVIL: (EVIL, EVIL, [TopicPartition(EVIL, 0)])},
        committed={TopicPartition(EVIL, 0): 0},
    )
    console = make_console(source)
    pages = [
        get(console, "/"),
        get(console, "/topics"),
        get(console, "/topic?" + _query(name=EVIL)),
        get(console, "/topic/delete?" + _query(name=EVIL)),
        get(console, "/messages?" + _query(topic=EVIL, format="text")),
        get(console, "/messages?" + _query(topic=EVIL, format="json")),
        get(console, "/groups"),
        get(console, "/group?" + _query(id=EVIL)),
    ]
    for response in pages:
        page = text(response)
        assert response.status == 200, page
        assert "<script>alert" not in page and "<img src=x" not in page
        assert "onerror=alert" not in page.replace("onerror=alert(2)&gt;", "")  # only inside escaped text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text(pages[4])  # the record is shown, as text
    assert "&#x27;&gt;" in text(pages[7]) or "&#x27;" in text(pages[7])


def _query(**values: str) -> str:
    from urllib.parse import urlencode

    return urlencode(values)


def test_every_form_carries_the_token_and_every_post_needs_it(source: FakeSource) -> None:
    console = make_console(source)
    for target in ["/topics/new", "/topic?name=orders", "/topic/delete?name=orders"]:
        page = text(get(console, target))
        forms = re.findall(r"<form method=post.*?</form>", page)
        assert forms, target
        for form in forms:
            assert f'name=csrf value="{TOKEN}"' in form
    assert post(console, "/topic/delete", {"name": "orders", "confirm": "orders"}, token=None).status == 403
    assert (
        post(console, "/topic/delete", {"name": "orders", "confirm": "orders"}, token="stale").status == 403
    )
    foreign = post(
        console, "/topic/delete", {"name": "orders", "confirm": "orders"}, origin="http://evil.example"
    )
    assert foreign.status == 403
    assert source.deleted == []
    assert (
        post(
            console, "/topic/delete", {"name": "orders", "confirm": "orders"}, origin=f"http://{HOST}"
        ).status
        == 303
    )
    assert source.deleted == ["orders"]


def test_delete_needs_the_name_typed_and_get_deletes_nothing(source: FakeSource) -> None:
    console = make_console(source)
    confirm = get(console, "/topic/delete?name=orders")
    assert confirm.status == 200 and "Type the topic's name to confirm" in text(confirm)
    wrong = post(console, "/topic/delete", {"name": "orders", "confirm": "order"})
    assert wrong.status == 400 and "nothing was deleted" in text(wrong)
    assert source.deleted == []
    done = post(console, "/topic/delete", {"name": "orders", "confirm": "orders"})
    assert done.status == 303 and location(done) == ("/topics", {"notice": ["deleted"]})
    assert "Topic deleted." in text(get(console, "/topics?notice=deleted"))


def test_create_topic_and_set_and_reset_a_config(source: FakeSource) -> None:
    console = make_console(source)
    created = post(
        console,
        "/topics",
        {
            "name": "audit",
            "partitions": "4",
            "replication_factor": "-1",
            "configs": "retention.ms=1000\n\ncleanup.policy = compact",
        },
    )
    assert created.status == 303
    assert location(created) == ("/topic", {"name": ["audit"], "notice": ["created"]})
    assert source.created == [("audit", 4, -1, {"retention.ms": "1000", "cleanup.policy": "compact"})]
    again = post(console, "/topics", {"name": "audit", "partitions": "1"})
    assert again.status == 409 and "TOPIC_ALREADY_EXISTS" in text(again)
    assert 'value="audit"' in text(again)  # the form comes back filled in
    bad = post(console, "/topics", {"name": "x", "partitions": "zero"})
    assert bad.status == 400 and "partitions must be a whole number" in text(bad)
    assert (
        post(console, "/topic/config", {"name": "audit", "key": "retention.ms", "value": "5"}).status == 303
    )
    assert (
        post(console, "/topic/config", {"name": "audit", "key": "retention.ms", "reset": "1"}).status == 303
    )
    assert source.config_changes == [("audit", "retention.ms", "5"), ("audit", "retention.ms", None)]


def test_read_only_draws_no_forms_and_refuses_every_post(source: FakeSource) -> None:
    console = make_console(source, read_only=True)
    for target in [
        "/",
        "/topics",
        "/topic?name=orders",
        "/messages?topic=orders",
        "/groups",
        "/group?id=billing",
    ]:
        page = text(get(console, target))
        assert "method=post" not in page, target
        assert TOKEN not in page
        assert "read-only" in page
    assert get(console, "/topics/new").status == 403
    assert get(console, "/topic/delete?name=orders").status == 403
    for path, form in [
        ("/topics", {"name": "x"}),
        ("/topic/config", {"name": "orders", "key": "retention.ms", "value": "1"}),
        ("/topic/delete", {"name": "orders", "confirm": "orders"}),
    ]:
        assert post(console, path, form).status == 403
    assert source.created == [] and source.config_changes == [] and source.deleted == []


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("127.0.0.1:8080", True),
        ("localhost:8080", True),
        ("[::1]:8080", True),
        ("10.1.2.3", True),
        ("evil.example:8080", False),
        ("evil.example", False),
        ("", False),
    ],
)
def test_host_header_check_stops_dns_rebinding(source: FakeSource, host: str, allowed: bool) -> None:
    response = get(make_console(source), "/", host=host)
    assert (response.status == 200) is allowed, (host, response.status)
    if not allowed:
        assert response.status == 421


def test_answers_carry_a_content_security_policy(source: FakeSource) -> None:
    headers = dict(get(make_console(source), "/").headers)
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    assert "default-src 'none'" in headers["Content-Security-Policy"]
    assert headers["X-Frame-Options"] == "DENY"
    assert headers["Server-Timing"].startswith("page;dur=")
    assert get(make_console(source), "/static/console.js").status == 200
    assert get(make_console(source), "/static/nothing.js").status == 404


def test_message_browser_reads_latest_by_default_from_an_offset_or_a_time(source: FakeSource) -> None:
    console = make_console(source)
    page = text(get(console, "/messages?topic=orders&partition=1&limit=5"))
    assert re.findall(r'<tr data-offset="(\d+)"', page) == ["25", "26", "27", "28", "29"]
    page = text(get(console, "/messages?topic=orders&partition=1&offset=3&limit=2"))
    assert re.findall(r'<tr data-offset="(\d+)"', page) == ["3", "4"]
    assert "id=next-page" in page and "offset=5" in page
    page = text(get(console, "/messages?topic=orders&partition=1&timestamp=1700000000010&limit=2"))
    assert re.findall(r'<tr data-offset="(\d+)"', page) == ["10", "11"]
    page = text(get(console, "/messages?topic=orders&partition=1&timestamp=2023-11-14T22:13:20.020&limit=1"))
    assert re.findall(r'<tr data-offset="(\d+)"', page) == ["20"]
    assert get(console, "/messages?topic=orders&partition=9").status == 400
    assert get(console, "/messages?topic=orders&timestamp=yesterday").status == 400


def test_message_browser_bounds_the_records_and_searches_a_range(
    source: FakeSource, monkeypatch: pytest.MonkeyPatch
) -> None:
    from strom.base import limits

    console = make_console(source)
    monkeypatch.setattr(limits, "console_records_max", 7)
    page = text(get(console, "/messages?topic=orders&offset=0&limit=100000"))
    assert len(re.findall(r"<tr data-offset=", page)) == 7
    page = text(get(console, "/messages?topic=orders&search=v2&limit=3"))
    assert re.findall(r'<tr data-offset="(\d+)"', page) == ["2", "20", "21"]
    assert "stopped at the number of records asked for" in page
    monkeypatch.setattr(limits, "console_search_records_max", 10)
    page = text(get(console, "/messages?topic=orders&search=v2"))
    assert re.findall(r'<tr data-offset="(\d+)"', page) == ["2"]
    assert "stopped at the most records a search scans" in page


def test_message_browser_shows_hex_and_pretty_json(source: FakeSource) -> None:
    tp = TopicPartition("payments", 0)
    source.append(
        tp,
        BrowsedRecord(
            5, 1_700_000_000_005, None, b'{"amount": 3, "who": "\xc3\xa9"}', (("trace", b"\x00\xff"),)
        ),
    )
    console = make_console(source)
    json_page = text(get(console, "/messages?topic=payments&offset=5&format=json"))
    assert "{\n  &quot;amount&quot;: 3,\n  &quot;who&quot;: &quot;é&quot;\n}" in json_page
    hex_page = text(get(console, "/messages?topic=payments&offset=5&format=hex"))
    assert "<b>trace</b>: 00 ff" in hex_page
    assert "7b 22 61 6d" in hex_page
    assert "<pre class=key>null</pre>" in hex_page


def test_groups_and_group_page_show_members_assignment_and_lag(source: FakeSource) -> None:
    console = make_console(source)
    listing = text(get(console, "/groups"))
    assert re.search(r'<tr data-group="billing">.*?<td>classic</td><td>Stable</td><td>consumer</td>', listing)
    page = text(get(console, "/group?id=billing"))
    assert "id=member-count>1<" in page
    assert "client-a" in page and "orders [0, 1]" in page
    row0 = re.search(r'<tr data-topic="orders" data-partition="0">.*?</tr>', page)
    assert row0 is not None
    assert (
        '<td class="num committed">25</td><td class="num end">30</td><td class="num lag">5</td>'
        in row0.group(0)
    )
    assert "id=total-lag>5<" in page
    assert "<svg id=lag-chart" in page and page.count("<circle") == 1  # the lag just computed
    again = text(get(console, "/group?id=billing"))
    assert again.count("<circle") == 1  # ... which is not kept: opening the page again adds none
    assert "<td class=num>-</td>" in text(get(console, "/groups"))  # no sample yet
    console.sample_lag()
    assert re.search(r'<tr data-group="billing">.*?<td class=num>5</td>', text(get(console, "/groups")))


def test_the_lag_sampler_feeds_the_chart(source: FakeSource) -> None:
    now = [1_700_000_000_000]
    console = Console(source, ConsoleOptions(), clock_ms=lambda: now[0], csrf_token=TOKEN)
    assert console.sample_lag() == 1
    source.append(TopicPartition("orders", 0), BrowsedRecord(30, 0, None, b"x", ()))
    now[0] += 60_000
    console.sample_lag()
    points = console.history.points("billing", now[0])
    assert [point.lag for point in points] == [5, 6]
    page = text(get(console, "/group?id=billing"))
    assert page.count("<circle") == 3  # two samples and the lag now


def test_post_to_unknown_path_and_other_methods(source: FakeSource) -> None:
    console = make_console(source)
    assert post(console, "/nothing", {}).status == 404
    assert console.handle(Request("DELETE", "/topics", {}, {"host": HOST})).status == 405


def test_list_pages_answer_from_a_snapshot_the_consoles_own_changes_invalidate(source: FakeSource) -> None:
    console = Console(source, ConsoleOptions(), csrf_token=TOKEN)  # the default: fresh for 5 s
    try:
        assert 'data-name="audit"' not in text(get(console, "/topics"))
        source.add_topic("behind-its-back")
        page = text(get(console, "/topics"))
        assert 'data-name="behind-its-back"' not in page and "id=as-of>Topics and partitions as of" in page
        assert post(console, "/topics", {"name": "audit", "partitions": "1"}).status == 303
        page = text(get(console, "/topics"))
        assert 'data-name="audit"' in page and 'data-name="behind-its-back"' in page
        assert get(console, "/topic?name=behind-its-back").status == 200  # a topic's page is live
    finally:
        console.close()


def test_lists_are_paged_and_a_page_asks_only_about_its_rows() -> None:
    source = FakeSource()
    for index in range(25):
        source.add_topic(f"topic-{index:02d}", partitions=3, records=index)
    for index in range(12):
        source.group_table[f"group-{index:02d}"] = FakeGroup()
    options = ConsoleOptions(page_rows=10, snapshot_fresh_ms=0, snapshot_stale_ms=0)
    console = Console(source, options, csrf_token=TOKEN)
    try:
        first = text(get(console, "/topics"))
        assert re.findall(r'<tr data-name="([^"]+)"', first) == [f"topic-{i:02d}" for i in range(10)]
        assert "Showing topics 1 to 10 of <span class=total>25</span>." in first
        assert 'href="/topics?page=2" id=next-page' in first and "previous-page" not in first
        # The figures of the page's 10 topics (30 partitions) only: offsets and sizes asked once.
        assert source.asked == [("sizes", 10), ("offsets", 30)] or source.asked == [
            ("offsets", 30),
            ("sizes", 10),
        ]
        last = text(get(console, "/topics?page=3"))
        assert re.findall(r'<tr data-name="([^"]+)"', last) == [f"topic-{i:02d}" for i in range(20, 25)]
        row = re.search(r'<tr data-name="topic-24">.*?</tr>', last)
        assert row is not None and re.findall(r"<td[^>]*>(.*?)</td>", row.group(0))[3:5] == ["72", "72"]
        assert 'href="/topics?page=2" id=previous-page' in last and "next-page" not in last
        # Past the end: the last page. The filter is kept in the links.
        assert re.findall(r'<tr data-name="([^"]+)"', text(get(console, "/topics?page=99"))) == [
            f"topic-{i:02d}" for i in range(20, 25)
        ]
        filtered = text(get(console, "/topics?q=topic-1"))
        assert (
            len(re.findall(r"<tr data-name=", filtered)) == 10
            and "of <span class=total>10</span>" not in filtered
        )
        assert get(console, "/topics?page=0").status == 400
        assert get(console, "/topics?page=x").status == 400
        groups = text(get(console, "/groups?page=2"))
        assert re.findall(r'<tr data-group="([^"]+)"', groups) == ["group-10", "group-11"]
        assert 'href="/groups?page=1" id=previous-page' in groups
        source.add_topic("wide", partitions=25, records=1)
        source.asked.clear()
        topic = text(get(console, "/topic?name=wide&page=3"))
        assert re.findall(r'<tr data-partition="(\d+)"', topic) == [str(p) for p in range(20, 25)]
        assert ("offsets", 5) in source.asked
        assert 'href="/topic?name=wide&amp;page=2" id=previous-page' in topic
    finally:
        console.close()


def test_group_page_pages_its_partitions_and_sums_the_lag_of_all() -> None:
    source = FakeSource()
    source.add_topic("wide", partitions=12, records=10)
    source.group_table["reader"] = FakeGroup(committed={TopicPartition("wide", p): p % 10 for p in range(12)})
    options = ConsoleOptions(page_rows=5, snapshot_fresh_ms=0, snapshot_stale_ms=0)
    console = Console(source, options, csrf_token=TOKEN)
    try:
        page = text(get(console, "/group?id=reader&page=3"))
    finally:
        console.close()
    assert re.findall(r'<tr data-topic="wide" data-partition="(\d+)"', page) == ["10", "11"]
    # The total is over every partition, not the page's: lag 10 - p % 10.
    assert f"id=total-lag>{sum(10 - p % 10 for p in range(12))}<" in page
    assert 'href="/group?id=reader&amp;page=2" id=previous-page' in page


def test_cluster_page_lists_the_first_page_of_unhealthy_partitions() -> None:
    from strom.client.admin import PartitionDescription

    source = FakeSource()
    source.add_topic("sick", partitions=15)
    source.topic_partitions["sick"] = [PartitionDescription(p, -1, (1, 2), ()) for p in range(15)]
    options = ConsoleOptions(page_rows=10, snapshot_fresh_ms=0, snapshot_stale_ms=0)
    console = Console(source, options, csrf_token=TOKEN)
    try:
        page = text(get(console, "/"))
    finally:
        console.close()
    assert "id=offline-count>15<" in page
    assert page.split('id="offline"')[1].split("<tbody>")[1].split("</table>")[0].count("<tr>") == 10
    assert "Showing the first 10 of 15" in page


def test_a_topic_deleted_behind_the_snapshot_leaves_its_row_without_figures(source: FakeSource) -> None:
    console = Console(source, ConsoleOptions(), csrf_token=TOKEN)  # the default: fresh for 5 s
    try:
        assert 'data-name="payments"' in text(get(console, "/topics"))
        source.delete_topic("payments")  # by another client: the snapshot still lists it
        response = get(console, "/topics")
        assert response.status == 200
        page = text(response)
        assert "Records and offsets unavailable" in page and 'data-name="payments"' in page
    finally:
        console.close()


# -- a group's rebalance history ---------------------------------------------------------------

NOW_MS = 1_700_000_000_000


def rebalance(
    sequence: int,
    generation: int,
    trigger: str,
    causes: tuple[str, ...],
    start_ms: int,
    join_ms: int,
    assignment_ms: int | None,
    before: tuple[str, ...],
    after: tuple[str, ...],
    moves: tuple[PartitionMove, ...] = (),
    *,
    protocol: str = "classic",
    outcome: str = "completed",
) -> RebalanceEntry:
    """An entry as the coordinator records it; ``assignment_ms`` None: still under way."""
    end_ms = -1 if assignment_ms is None else start_ms + join_ms + assignment_ms
    return RebalanceEntry(
        sequence,
        protocol,
        generation,
        trigger,
        causes,
        start_ms,
        start_ms + join_ms,
        end_ms,
        "in-progress" if assignment_ms is None else outcome,
        before,
        () if assignment_ms is None else after,
        moves,
    )


@pytest.fixture
def history_source(source: FakeSource) -> FakeSource:
    source.histories["billing"] = [
        rebalance(
            0,
            1,
            "member-joined",
            ("member-1",),
            NOW_MS - 60_000,
            1_000,
            50,
            (),
            ("member-1",),
            (PartitionMove("orders", 0, None, "member-1"), PartitionMove("orders", 1, None, "member-1")),
        ),
        rebalance(
            1,
            2,
            "member-joined",
            ("member-2",),
            NOW_MS - 30_000,
            3_000,
            100,
            ("member-1",),
            ("member-1", "member-2"),
            (PartitionMove("orders", 1, "member-1", "member-2"),),
        ),
        rebalance(
            2, 3, "session-expired", ("member-2",), NOW_MS - 5_000, 1_000, None, ("member-1", "member-2"), ()
        ),
    ]
    return source


def svg_rows(page: str) -> list[str]:
    timeline = page.split("<svg id=rebalance-timeline")[1].split("</svg>")[0]
    return re.findall(r'<g class="rebalance[^"]*".*?</g>', timeline)


def table_rows(page: str) -> list[str]:
    found = page.split('id="rebalances"')[1].split("</table>")[0]
    return re.findall(r"<tr data-sequence=.*?</tr>", found)


def test_group_page_links_to_its_rebalance_history(history_source: FakeSource) -> None:
    page = text(get(make_console(history_source), "/group?id=billing"))
    assert 'href="/group/history?id=billing" id=history-link>' in page


def test_history_page_draws_each_rebalance_with_its_phases_newest_first(history_source: FakeSource) -> None:
    response = get(make_console(history_source, now_ms=NOW_MS), "/group/history?id=billing")
    assert response.status == 200
    page = text(response)
    rows = svg_rows(page)
    assert [re.search(r'data-generation="(\d+)"', row).group(1) for row in rows] == ["3", "2", "1"]  # type: ignore[union-attr]
    assert [re.search(r'data-trigger="([^"]+)"', row).group(1) for row in rows] == [  # type: ignore[union-attr]
        "session-expired",
        "member-joined",
        "member-joined",
    ]

    def widths(row: str) -> tuple[float, float]:
        join_width = float(re.search(r'class=join [^>]*width="([\d.]+)"', row).group(1))  # type: ignore[union-attr]
        assignment = float(re.search(r'class=assignment [^>]*width="([\d.]+)"', row).group(1))  # type: ignore[union-attr]
        return join_width, assignment

    # The longest (the one under way: 5 s so far, 1 s of it waiting for joins) fills the bar.
    bar = pages._BAR_X1 - pages._BAR_X0
    assert widths(rows[0]) == pytest.approx((bar / 5, bar * 4 / 5), abs=0.1)
    assert widths(rows[1]) == pytest.approx((bar * 3_000 / 5_000, bar * 100 / 5_000), abs=0.1)
    assert 'class="rebalance under-way"' in rows[0] and 'class="rebalance"' in rows[1]
    # Each trigger in its colour, in both phases (the join phase lighter), and named in the legend.
    assert rows[0].count(f'fill="{pages.TRIGGER_COLOURS["session-expired"]}"') == 2
    assert rows[1].count(f'fill="{pages.TRIGGER_COLOURS["member-joined"]}"') == 2
    assert f'fill-opacity="{pages.JOIN_OPACITY}"' in rows[1]
    legend = page.split("id=timeline-legend>")[1].split("</p>")[0]
    assert "member-joined" in legend and "session-expired" in legend
    assert "generation 2" in rows[1] and "member-joined · completed · 3.1 s · by member-2" in rows[1]
    assert "session-expired · in progress · 5.0 s · by member-2" in rows[0]
    # The overview: a mark per rebalance on one time axis.
    assert page.count("<rect class=mark") == 3

    cells = [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in table_rows(page)]
    assert [row[0] for row in cells] == ["generation 3", "generation 2", "generation 1"]
    newest, middle, oldest = cells
    assert newest[5:9] == ["1.0 s", "4.0 s", "5.0 s so far", "in progress"]
    assert "before (2): member-1, member-2" in newest[9] and "after (-): not yet known" in newest[9]
    assert middle[1:9] == [
        "classic",
        "<span class=trigger>member-joined</span>",
        "member-2",
        "2023-11-14 22:12:50.000 UTC",
        "3.0 s",
        "100 ms",
        "3.1 s",
        "completed",
    ]
    assert middle[9] == (
        '<div>before (1): member-1</div><div>after (2): member-1, <span class="joined" title="joined">member-2</span></div>'
    )
    assert "<li>orders-1: member-1 → member-2</li>" in middle[10]
    assert "<li>orders-0: nobody → member-1</li><li>orders-1: nobody → member-1</li>" in oldest[10]


def test_history_page_names_a_consumer_groups_epochs_and_an_unknown_trigger(source: FakeSource) -> None:
    source.histories["billing"] = [
        rebalance(0, 7, "something-newer", (), NOW_MS - 1_000, 0, 400, ("a",), ("a",), protocol="consumer"),
        rebalance(1, 8, "member-left", ("b",), NOW_MS - 500, 0, 0, ("a", "b"), ("a",), outcome="superseded"),
    ]
    page = text(get(make_console(source, now_ms=NOW_MS), "/group/history?id=billing"))
    rows = svg_rows(page)
    assert "epoch 7" in rows[1] and f'fill="{pages.OTHER_COLOUR}"' in rows[1]
    assert 'class="rebalance superseded"' in rows[0]
    assert "member-left · superseded · 0 ms · by b" in rows[0]
    left = table_rows(page)[0]
    assert '<div>before (2): a, <span class="left" title="left">b</span></div><div>after (1): a</div>' in left
    assert "<td>none</td>" not in page  # no moves recorded is "none" in the moves column only
    assert [re.findall(r"<td[^>]*>(.*?)</td>", row)[-1] for row in table_rows(page)] == ["none", "none"]


def test_history_page_escapes_member_ids_topic_names_and_triggers(source: FakeSource) -> None:
    source.group_table[EVIL] = FakeGroup()
    source.histories[EVIL] = [
        rebalance(
            0,
            1,
            EVIL,
            (EVIL,),
            NOW_MS - 2_000,
            1_000,
            100,
            (EVIL,),
            ("member-2",),
            (PartitionMove(EVIL, 0, EVIL, "member-2"),),
        )
    ]
    console = make_console(source, now_ms=NOW_MS)
    for target in ["/group/history?" + _query(id=EVIL), "/group?" + _query(id=EVIL)]:
        response = get(console, target)
        page = text(response)
        assert response.status == 200, page
        assert "<script>alert" not in page and "<img src=x" not in page
        assert "onerror=alert" not in page.replace("onerror=alert(2)&gt;", "")
    page = text(get(console, "/group/history?" + _query(id=EVIL)))
    escaped = "&quot;&#x27;&gt;&lt;script&gt;alert(1)&lt;/script&gt;"
    (row,) = svg_rows(page)
    assert f'data-trigger="{escaped}' in row and f"<title>generation 1 · {escaped}" in row
    assert f"by {escaped}" in row  # the cause, cut to the row's width but escaped
    (listed,) = table_rows(page)
    assert f"<li>{escaped}&lt;img src=x onerror=alert(2)&gt;-0: {escaped}" in listed
    assert f"<td class=causes>{escaped}" in listed
    assert f'before (1): <span class="left" title="left">{escaped}' in listed  # left the group
    assert "<svg class=swatch" in page and f"</svg> {escaped}" in page  # the legend names it, escaped


def test_history_page_says_plainly_it_needs_a_strom_broker(history_source: FakeSource) -> None:
    history_source.history_supported = False
    response = get(make_console(history_source), "/group/history?id=billing")
    page = text(response)
    assert response.status == 200
    assert "The rebalance history needs a strom broker" in page and "id=history-unavailable" in page
    assert "<svg" not in page and 'id="rebalances"' not in page  # nothing made up
    missing = get(make_console(history_source.__class__()), "/group/history?id=nobody")
    assert missing.status == 404 and "knows no group nobody" in text(missing)
    assert get(make_console(history_source), "/group/history").status == 400


def test_history_page_of_a_group_without_rebalances(source: FakeSource) -> None:
    page = text(get(make_console(source), "/group/history?id=billing"))
    assert "id=no-rebalances>No rebalance recorded" in page and "<svg" not in page


def test_history_page_is_bounded_and_says_what_it_left_out(source: FakeSource) -> None:
    from strom.base import limits

    members = tuple(f"member-{n:03d}" for n in range(limits.console_history_members_max + 30))
    moves = tuple(PartitionMove("orders", p, "member-000", "member-001") for p in range(100))
    entries = limits.console_history_rebalances_max + 10
    source.histories["billing"] = [
        rebalance(
            n,
            n + 1,
            "member-joined",
            members,
            NOW_MS - 1_000_000 + n * 1_000,
            10,
            10,
            members,
            members,
            moves,
        )
        for n in range(entries)
    ]
    page = text(get(make_console(source, now_ms=NOW_MS), "/group/history?id=billing"))
    shown = limits.console_history_rebalances_max
    assert len(svg_rows(page)) == shown and len(table_rows(page)) == shown
    assert f"Showing the newest {shown} of {entries} rebalances" in page
    assert table_rows(page)[0].startswith(f'<tr data-sequence="{entries - 1}"')  # the newest
    assert page.count("<li>") == limits.console_history_moves_max
    assert f"… and 100 more (a page lists at most {limits.console_history_moves_max:,} moves)" in page
    assert "member-049 … and 30 more" in page and "member-050" not in page
