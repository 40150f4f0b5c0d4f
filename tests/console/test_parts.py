"""The console's small pure parts: escaping, lag history, how bytes are shown, times."""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable

import pytest

from strom.client.errors import KafkaError
from strom.console.lag import LagHistory, partition_lag
from strom.console.markup import Markup, escape, html, join, url
from strom.console.pages import lag_chart
from strom.console.records import format_time_ms, matches, parse_time_ms, show_bytes
from strom.console.snapshot import Snapshot
from strom.console.source import BrowsedRecord


def test_html_escapes_every_value_once() -> None:
    assert html("<a title='{}'>{}</a>", "x' onmouseover='y", "<b>&") == (
        "<a title='x&#x27; onmouseover=&#x27;y'>&lt;b&gt;&amp;</a>"
    )
    inner = html("<i>{}</i>", "<")
    assert html("<p>{}</p>", inner) == "<p><i>&lt;</i></p>"  # Markup is not escaped twice
    assert join(["<", Markup("<br>")]) == "&lt;<br>"
    assert escape(3) == "3"
    assert url("/topic", name="a&b c", empty="", none=None) == "/topic?name=a%26b+c"


def test_lag_history_is_bounded_in_points_groups_and_time() -> None:
    history = LagHistory(interval_ms=1_000, window_ms=10_000, groups_max=2)
    for second in range(30):
        history.record("a", second * 1_000, second)
    points = history.points("a", 29_000)
    assert [p.lag for p in points] == list(range(19, 30))  # window / interval + 1 points
    history.record("a", 29_200, 99)  # closer than half an interval: replaces the last point
    assert [p.lag for p in history.points("a", 29_200)][-2:] == [28, 99]
    history.record("b", 0, 1)
    history.record("c", 0, 1)  # a third group is beyond the bound
    assert history.latest("c") is None and history.latest("b") is not None
    history.forget_except(["a"], now_ms=1_000)  # b is missing from one listing: kept a while
    assert history.latest("b") is not None
    history.forget_except(["a"], now_ms=2_001)  # and then dropped, freeing its slot
    assert history.latest("b") is None
    history.record("c", 0, 1)
    assert history.latest("c") is not None
    assert history.points("a", 100_000) == []  # nothing within the window any more


def test_partition_lag() -> None:
    assert partition_lag(5, 9) == 4
    assert partition_lag(10, 9) == 0
    assert partition_lag(None, 9) is None
    assert partition_lag(-1, 9) is None
    assert partition_lag(3, None) is None


@pytest.mark.parametrize(
    ("data", "form", "shown"),
    [
        (None, "text", "null"),
        (b"plain \xff", "text", "plain \\xff"),
        (b'{"a":[1,2]}', "json", '{\n  "a": [\n    1,\n    2\n  ]\n}'),
        (b"not json", "json", "not json"),
        (b"\x00\x01\xab", "hex", "00 01 ab"),
    ],
)
def test_show_bytes(data: bytes | None, form: str, shown: str) -> None:
    assert show_bytes(data, form) == shown


def test_show_bytes_cuts_long_values() -> None:
    assert show_bytes(b"x" * 100, "text", chars_max=10) == "xxxxxxxxxx… (100 bytes in all)"
    assert show_bytes(b"\x01" * 100, "hex", chars_max=8) == "01 01 01… (100 bytes in all)"
    assert show_bytes(b'"' + b"y" * 100 + b'"', "json", chars_max=10).endswith("(102 bytes in all)")


def test_search_matches_key_value_and_headers() -> None:
    record = BrowsedRecord(0, 0, b"key-1", b"value", (("trace-id", b"abc"), ("empty", None)))
    assert (
        matches(record, b"y-1")
        and matches(record, b"alu")
        and matches(record, b"trace")
        and matches(record, b"bc")
    )
    assert not matches(record, b"zzz")
    assert not matches(BrowsedRecord(0, 0, None, None, ()), b"a")


def test_times() -> None:
    assert parse_time_ms("1700000000000") == 1_700_000_000_000
    assert parse_time_ms("2023-11-14T22:13:20") == 1_700_000_000_000
    assert parse_time_ms("2023-11-15T00:13:20+02:00") == 1_700_000_000_000
    with pytest.raises(ValueError):
        parse_time_ms("yesterday")
    assert format_time_ms(1_700_000_000_007) == "2023-11-14 22:13:20.007 UTC"
    assert format_time_ms(-1) == "-"


def test_lag_chart_draws_every_point_inside_its_box() -> None:
    from strom.console.lag import LagPoint

    assert "No lag samples yet" in lag_chart([], 0, 3_600_000)
    svg = lag_chart([LagPoint(0, 0), LagPoint(1_800_000, 50), LagPoint(3_600_000, 100)], 3_600_000, 3_600_000)
    assert svg.count("<circle") == 3
    assert 'points="30.0,130.0 300.0,80.0 570.0,30.0"' in svg
    assert ">-60 min<" in svg
    # Younger data fills the width; older than the window is pinned to its start.
    svg = lag_chart([LagPoint(40_000, 1), LagPoint(50_000, 2)], 60_000, 3_600_000)
    assert 'points="30.0,80.0 300.0,30.0"' in svg and ">-20 s<" in svg
    svg = lag_chart([LagPoint(0, 1)], 7_200_000, 3_600_000)
    assert 'points="30.0,30.0"' in svg


class InlineExecutor(concurrent.futures.Executor):
    """Runs what is submitted at once, in the caller's thread (and records that it did)."""

    def __init__(self) -> None:
        self.ran = 0

    def submit(self, fn, /, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.ran += 1
        future: concurrent.futures.Future[object] = concurrent.futures.Future()
        future.set_result(fn(*args, **kwargs))
        return future


def test_snapshot_answers_fresh_refreshes_stale_and_waits_when_too_old() -> None:
    now = [0]
    fetched = [0]

    def fetch() -> int:
        fetched[0] += 1
        return fetched[0]

    executor = InlineExecutor()
    snapshot = Snapshot(
        fetch,
        executor,
        fresh_ms=5_000,
        stale_ms=60_000,
        monotonic_ms=lambda: now[0],
        wall_ms=lambda: 1_000 + now[0],
    )
    assert snapshot.get() == (1, 1_000)  # never fetched: the caller waits
    now[0] = 4_999
    assert snapshot.get() == (1, 1_000) and executor.ran == 0  # fresh
    now[0] = 5_000
    assert snapshot.get() == (1, 1_000)  # stale: answered from it, refreshed behind it
    assert executor.ran == 1 and fetched[0] == 2
    assert snapshot.get() == (2, 6_000)
    now[0] = 70_000  # too old to answer from: the caller waits
    assert snapshot.get() == (3, 71_000) and executor.ran == 1
    snapshot.invalidate()
    assert snapshot.get() == (4, 71_000)


def test_a_refresh_begun_before_an_invalidation_is_not_kept() -> None:
    values = iter(["old", "refreshed-before-the-change", "after-the-change"])
    pending: list[Callable[[], object]] = []

    class Deferred(concurrent.futures.Executor):
        def submit(self, fn, /, *args, **kwargs):  # type: ignore[no-untyped-def]
            pending.append(lambda: fn(*args, **kwargs))
            return concurrent.futures.Future()

    now = [0]
    snapshot = Snapshot(
        lambda: next(values), Deferred(), fresh_ms=1, stale_ms=100, monotonic_ms=lambda: now[0]
    )
    assert snapshot.get()[0] == "old"
    now[0] = 10
    assert snapshot.get()[0] == "old"  # refresh submitted, not run yet
    snapshot.invalidate()  # the console changed the cluster meanwhile
    pending.pop()()  # the refresh finishes now, with what it saw before the change
    assert snapshot.get()[0] == "after-the-change"


def test_a_view_without_a_value_waits_for_the_fetch_under_way() -> None:
    """A prefetch (a console starting) or a refresh already asking: a view that finds nothing to
    answer from waits for that fetch instead of asking the cluster a second time."""
    release = threading.Event()
    calls = [0]

    def fetch() -> int:
        calls[0] += 1
        assert release.wait(30)
        return calls[0]

    executor = concurrent.futures.ThreadPoolExecutor(1)
    try:
        snapshot = Snapshot(fetch, executor, fresh_ms=5_000, stale_ms=60_000)
        snapshot.prefetch()
        snapshot.prefetch()  # one under way already: nothing more
        waiting = concurrent.futures.ThreadPoolExecutor(2)
        views = [waiting.submit(snapshot.get) for _ in range(2)]
        release.set()
        assert [view.result(30)[0] for view in views] == [1, 1] and calls[0] == 1
        waiting.shutdown()
        snapshot.prefetch()  # a value is held: nothing
        assert snapshot.get()[0] == 1 and calls[0] == 1
    finally:
        executor.shutdown()


def test_prefetch_refreshes_a_value_no_longer_fresh_so_no_view_waits() -> None:
    now = [0]
    fetched = [0]

    def fetch() -> int:
        fetched[0] += 1
        return fetched[0]

    executor = InlineExecutor()
    snapshot = Snapshot(fetch, executor, fresh_ms=5_000, stale_ms=60_000, monotonic_ms=lambda: now[0])
    snapshot.prefetch()  # the console starting
    assert fetched[0] == 1
    now[0] = 4_000
    snapshot.prefetch()  # fresh: nothing
    assert fetched[0] == 1
    for step in range(1, 10):  # the console's timer, every 30 s, with no view at all
        now[0] = step * 30_000
        snapshot.prefetch()
    assert fetched[0] == 10
    now[0] += 1_000
    assert snapshot.get()[0] == 10 and executor.ran == 10  # answered from the value, no fetch
    never = Snapshot(fetch, executor, fresh_ms=0, stale_ms=0)
    never.prefetch()  # stale 0: no view would use it
    assert fetched[0] == 10


def test_a_failed_fetch_is_the_waiting_views_error_and_the_next_view_asks_again() -> None:
    answers: list[object] = [KafkaError("the cluster is down"), 7]

    def fetch() -> int:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        assert isinstance(answer, int)
        return answer

    snapshot = Snapshot(fetch, InlineExecutor(), fresh_ms=5_000, stale_ms=60_000)
    with pytest.raises(KafkaError, match="down"):
        snapshot.get()
    assert snapshot.get()[0] == 7


def test_rebalance_phases_as_drawn() -> None:
    from strom.console.pages import Phases, duration_text
    from strom.protocol.group_history import RebalanceEntry

    def entry(start: int, join_end: int, end: int) -> RebalanceEntry:
        return RebalanceEntry(0, "classic", 1, "member-joined", (), start, join_end, end, "completed", (), ())

    done = Phases.of(entry(1_000, 1_300, 1_350), now_ms=9_000)
    assert (done.join_ms, done.assignment_ms, done.duration_ms, done.under_way) == (300, 50, 350, False)
    # Under way, still waiting for joins (join_end -1): the join phase runs until now.
    waiting = Phases.of(entry(1_000, -1, -1), now_ms=4_000)
    assert (waiting.join_ms, waiting.assignment_ms, waiting.under_way) == (3_000, 0, True)
    assigning = Phases.of(entry(1_000, 2_000, -1), now_ms=4_000)
    assert (assigning.join_ms, assigning.assignment_ms) == (1_000, 2_000)
    # The console's clock behind the broker's: nothing negative is drawn.
    behind = Phases.of(entry(5_000, 6_000, -1), now_ms=4_000)
    assert (behind.join_ms, behind.assignment_ms, behind.duration_ms) == (0, 0, 0)
    assert [duration_text(ms) for ms in (7, 1_500, 125_000)] == ["7 ms", "1.5 s", "2 min 5 s"]
