"""Server time of every console page on a large cluster: the bar is 200 ms a page with 1,000
topics, 10,000 partitions and 1,000 consumer groups (issue 15).

``python -m benchmarks.console [--topics N] [--partitions-per-topic P] [--groups G] [--rounds R]
[--output BENCHMARKS.md] [--no-write]``

Two measurements, side by side in one run:

- **End to end.** One ``strom broker`` on 127.0.0.1 holding N topics of P partitions (records in
  the first topic's first partition, for the message browser) and G groups, each with offsets
  committed for one partition of each of a few topics (groups without members: 1,000 live
  consumers are a benchmark of their own). The console runs in this process on strom's client
  (``ClientSource``) and each page is asked R times through ``Console.handle``, the function the
  HTTP server runs in its worker thread: its time is the page's server time (the Server-Timing
  header), cluster requests and rendering together. The lag sampler's round over every group is
  timed too (it runs in the background, not on a page).
- **Rendering alone.** The same pages on an in-memory cluster of the same size
  (``tests.console.fakes.FakeSource``): what the console itself costs, without the cluster's
  answers.

The broker needs one open file per partition and at least its own handful (``strom broker`` logs
how many partitions its open-files limit allows): the full size needs a limit above ~20,100
(1,000 x 10 partitions and __consumer_offsets' 10); under a hard limit of 20,000 the largest is
``--topics 995``. ``--beside`` says what else ran on the machine (the report gives the load).
The results replace the section between ``<!-- console:start -->`` and ``<!-- console:end -->``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import resource
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlencode

from benchmarks.harness import Broker
from benchmarks.report import replace_section
from benchmarks.run import machine_description
from strom.base import limits
from strom.client.admin import Admin, NewTopic, OffsetAndMetadata
from strom.client.cluster import TopicPartition
from strom.client.producer import Producer
from strom.console.app import Console, ConsoleOptions
from strom.console.http import Request
from strom.console.source import ClientSource, ClusterSource
from tests.console.fakes import FakeGroup, FakeSource

BAR_MS = 200.0
TOPICS_PER_CREATE = 100
BROWSED_RECORDS = 2_000
GROUP_TOPICS = 5


def topic_name(index: int) -> str:
    return f"bench-topic-{index:04d}"


def group_name(index: int) -> str:
    return f"bench-group-{index:04d}"


def pages(topics: int) -> list[tuple[str, str]]:
    """(what, target) of every page measured."""
    first = topic_name(0)
    return [
        ("cluster", "/"),
        ("topics", "/topics"),
        ("topics, page 5", "/topics?page=5"),
        ("topics, filtered", "/topics?" + urlencode({"q": "topic-00"})),
        ("topic", "/topic?" + urlencode({"name": topic_name(topics // 2)})),
        ("messages (latest 20)", "/messages?" + urlencode({"topic": first, "partition": 0})),
        (
            "messages (100, json)",
            "/messages?" + urlencode({"topic": first, "offset": 0, "limit": 100, "format": "json"}),
        ),
        (
            "messages (search)",
            "/messages?" + urlencode({"topic": first, "search": f"order-{BROWSED_RECORDS - 1}"}),
        ),
        ("groups", "/groups"),
        ("groups, page 5", "/groups?page=5"),
        ("group", "/group?" + urlencode({"id": group_name(0)})),
    ]


def time_pages(console: Console, targets: list[tuple[str, str]], rounds: int) -> dict[str, list[float]]:
    from strom.console.http import parse_head

    times: dict[str, list[float]] = {what: [] for what, _ in targets}
    for _ in range(rounds):
        for what, target in targets:
            method, path, query, headers = parse_head(f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1".encode())
            started = time.perf_counter()
            response = console.handle(Request(method, path, query, headers))
            times[what].append((time.perf_counter() - started) * 1000)
            assert response.status == 200, (target, response.status, response.body[:2000])
    return times


def fill_broker(bootstrap: str, topics: int, partitions: int, groups: int) -> None:
    with Admin({"bootstrap.servers": bootstrap, "request.timeout.ms": 120_000}) as admin:
        for start in range(0, topics, TOPICS_PER_CREATE):
            admin.create_topics(
                [
                    NewTopic(topic_name(i), partitions, 1)
                    for i in range(start, min(start + TOPICS_PER_CREATE, topics))
                ],
                timeout_ms=120_000,
            )
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        try:
            for n in range(BROWSED_RECORDS):
                producer.send(
                    topic_name(0), value=f'{{"order": "order-{n}", "amount": {n}}}'.encode(), partition=0
                )
            producer.flush(60)
        finally:
            producer.close()
        for g in range(groups):
            offsets = {
                TopicPartition(topic_name((g + k) % topics), g % partitions): OffsetAndMetadata(0)
                for k in range(min(GROUP_TOPICS, topics))
            }
            admin.alter_group_offsets(group_name(g), offsets)


def fake_cluster(topics: int, partitions: int, groups: int) -> FakeSource:
    source = FakeSource()
    for i in range(topics):
        source.add_topic(topic_name(i), partitions, records=0)
    tp = TopicPartition(topic_name(0), 0)
    from strom.console.source import BrowsedRecord

    source.records[tp] = [
        BrowsedRecord(n, 1_700_000_000_000 + n, None, f'{{"order": "order-{n}", "amount": {n}}}'.encode(), ())
        for n in range(BROWSED_RECORDS)
    ]
    for g in range(groups):
        source.group_table[group_name(g)] = FakeGroup(
            state="Empty",
            committed={
                TopicPartition(topic_name((g + k) % topics), g % partitions): 0
                for k in range(min(GROUP_TOPICS, topics))
            },
        )
    return source


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=1_000)
    parser.add_argument("--partitions-per-topic", type=int, default=10)
    parser.add_argument("--groups", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--output", type=Path, default=Path("BENCHMARKS.md"))
    parser.add_argument("--no-write", action="store_true", help="print the section, do not write it")
    parser.add_argument(
        "--rendering-only",
        action="store_true",
        help="only the in-memory cluster (no broker); implies --no-write",
    )
    parser.add_argument(
        "--beside",
        default="",
        help="what else ran on the machine meanwhile (a sentence for the report beside the load averages)",
    )
    arguments = parser.parse_args()
    load_before = os.getloadavg()
    topics, partitions, groups = arguments.topics, arguments.partitions_per_topic, arguments.groups
    targets = pages(topics)

    rendering = time_pages(
        Console(fake_cluster(topics, partitions, groups), ConsoleOptions()), targets, arguments.rounds
    )

    if arguments.rendering_only:
        for what, _ in targets:
            print(
                f"{what:24} median {statistics.median(rendering[what]):7.1f} ms  worst {max(rendering[what]):7.1f} ms"
            )
        return

    with tempfile.TemporaryDirectory(prefix="strom-bench-console-") as work:
        broker = Broker(Path(work), {"offsets.topic.num.partitions": "10"})
        try:
            started = time.perf_counter()
            fill_broker(broker.bootstrap, topics, partitions, groups)
            fill_s = time.perf_counter() - started
            source: ClusterSource = ClientSource(lambda: {"bootstrap.servers": broker.bootstrap})
            console = Console(source, ConsoleOptions())
            try:
                time_pages(console, targets, 1)  # connections made, snapshots taken: not measured
                end_to_end = time_pages(console, targets, arguments.rounds)
                # A first view, before any snapshot (stale 0: every view asks the cluster), as in a
                # console just started: the refresh the views above left running behind them (on
                # the same client, in this process) is let finish first.
                console.refresher.submit(lambda: None).result()
                cold = Console(source, ConsoleOptions(snapshot_fresh_ms=0, snapshot_stale_ms=0))
                try:
                    cold_targets = [(f"{what} (no snapshot)", target) for what, target in targets[:2]]
                    end_to_end.update(time_pages(cold, cold_targets, arguments.rounds))
                finally:
                    cold.close()
                sample_ms = [timed(console.sample_lag) for _ in range(max(1, arguments.rounds // 2))]
            finally:
                console.close()
                source.close()
        finally:
            broker.stop()

    load_after = os.getloadavg()
    load = (
        f"Load average (1, 5, 15 min) {', '.join(f'{x:.1f}' for x in load_before)} at the start and "
        f"{', '.join(f'{x:.1f}' for x in load_after)} at the end, on {os.cpu_count()} CPUs"
        + (f": {arguments.beside}" if arguments.beside else "")
        + "."
    )
    lines = [
        "## Console: server time of each page",
        "",
        f"Run {datetime.date.today().isoformat()} on {machine_description()}: `python -m benchmarks.console "
        f"--topics {topics} --partitions-per-topic {partitions} --groups {groups} --rounds {arguments.rounds}` "
        f"({topics:,} topics, {topics * partitions:,} partitions, {groups:,} groups; the broker filled in {fill_s:.0f} s; "
        f"open-files hard limit {resource.getrlimit(resource.RLIMIT_NOFILE)[1]:,}, which bounds the partitions a broker "
        "accepts: 1,000 x 10 and __consumer_offsets' 10 need ~20,100).",
        load,
        f"Bar: every page at most {BAR_MS:.0f} ms of server time. Median and worst of {arguments.rounds} rounds, ms.",
        "",
        "| page | end to end, median | worst | rendering alone, median | worst | bar |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for what in end_to_end:
        worst = max(end_to_end[what])
        alone = rendering.get(what)
        alone_text = f"{statistics.median(alone):.1f} | {max(alone):.1f}" if alone else "- | -"
        lines.append(
            f"| {what} | {statistics.median(end_to_end[what]):.1f} | {worst:.1f} | {alone_text} | "
            f"{'met' if worst <= BAR_MS else 'NOT met'} |"
        )
    lines += [
        "",
        f"Lists are paged ({limits.console_page_rows} rows a page) and a page asks the cluster only about "
        f"its rows: the topics list the offsets and sizes of its {limits.console_page_rows} topics' partitions (one ListOffsets round for earliest and "
        "one for latest, one DescribeLogDirs, each a request per broker), a topic's page those of its "
        "page of partitions. The cluster page and the topics list take the topics and their partitions "
        "from a snapshot of the cluster's metadata, fresh for 5 s and refreshed behind the page after "
        "that (strom.console.snapshot), and taken in the background when the console starts and every 30 s "
        "after; the rows marked (no snapshot) are a view that waits for it (only a view in the moment "
        "after the console starts; under --console-login, a session's view after a minute without one), "
        "measured on a second console once the first one's background refresh has finished.",
        "",
        f"The lag sampler's round over all {groups:,} groups (in the background, every 30 s): "
        f"median {statistics.median(sample_ms):.0f} ms.",
    ]
    section = "\n".join(lines) + "\n"
    print(section)
    if not arguments.no_write:
        replace_section(arguments.output, "console", section)


if __name__ == "__main__":
    main()
