"""The console's pages and forms against an in-memory cluster: what each page shows, that
everything from the cluster is escaped, CSRF, the Host check, read-only mode and delete's
confirmation."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

import pytest

from strom.client.cluster import TopicPartition
from strom.console.app import Console, ConsoleOptions
from strom.console.http import Request, Response, parse_head
from strom.console.source import BrowsedRecord
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
        assert 'data-name="behind-its-back"' not in page and "id=as-of>Figures as of" in page
        assert post(console, "/topics", {"name": "audit", "partitions": "1"}).status == 303
        page = text(get(console, "/topics"))
        assert 'data-name="audit"' in page and 'data-name="behind-its-back"' in page
        assert get(console, "/topic?name=behind-its-back").status == 200  # a topic's page is live
    finally:
        console.close()
