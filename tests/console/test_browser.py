"""The console in a real headless browser (Chromium through selenium), against a real ``strom
broker`` with a live producer and a consumer group that rebalances (confluent-kafka): each page
is opened and what it shows is checked against the broker's own answers (strom's admin client);
a topic is created, altered and deleted through the forms; messages are browsed and searched.
Each page's screenshot is taken; with STROM_UPDATE_SCREENSHOTS=1 they replace docs/console/*.png,
which docs/console.md shows.

One browser session and one broker for the module; the tests run in file order and share them.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import Producer as ConfluentProducer
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from strom.cli.dev_cluster import wait_until
from strom.client.admin import Admin, ConfigResource, ConfigResourceType
from strom.client.cluster import TopicPartition
from tests.compat.conftest import BrokerProcess
from tests.console.browser import ConsoleProcess, headless_chromium, screenshot

pytestmark = [pytest.mark.compat, pytest.mark.slow]

TOPIC = "orders"
GROUP = "billing"
PARTITIONS = 3
WAIT_S = 60.0


def wait_for_text(driver: WebDriver, text: str) -> None:
    """Wait for ``text`` in the page; the page's own text in the failure."""
    try:
        wait_until(lambda: text in driver.page_source, repr(text), WAIT_S)
    except TimeoutError:
        body = driver.find_element(By.TAG_NAME, "body").text
        raise AssertionError(f"{text!r} not shown at {driver.current_url}:\n{body[:3000]}") from None


def number(text: str) -> int | None:
    text = text.strip().replace(",", "")
    return None if text == "-" else int(text)


@dataclass
class LiveProducer:
    """Produces JSON orders while ``running`` is set; ``sent`` maps (partition, offset) to the value."""

    bootstrap: str
    running: threading.Event = field(default_factory=threading.Event)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    sent: dict[tuple[int, int], bytes] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.producer = ConfluentProducer({"bootstrap.servers": self.bootstrap, "linger.ms": 5})
        self.thread = threading.Thread(target=self._run, name="live-producer", daemon=True)
        self.count = 0

    def _delivered(self, error: object, message: object) -> None:
        assert error is None, error
        self.sent[(message.partition(), message.offset())] = message.value()  # type: ignore[attr-defined]

    def _run(self) -> None:
        while not self.stop.is_set():
            if not self.running.wait(0.1):
                continue
            with self.lock:
                n = self.count
                self.count += 1
                value = json.dumps({"order": n, "customer": f"c-{n % 7}", "amount": round(n * 1.25, 2)})
                self.producer.produce(
                    TOPIC,
                    value.encode(),
                    key=f"customer-{n % 7}".encode(),
                    headers=[("trace-id", f"trace-{n:05d}".encode())],
                    on_delivery=self._delivered,
                )
                self.producer.poll(0)
            time.sleep(0.02)

    def pause(self) -> None:
        """Stop producing and wait until everything produced is acknowledged."""
        self.running.clear()
        with self.lock:
            assert self.producer.flush(30) == 0

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)
        self.producer.flush(30)
        self.producer.close()  # its threads stop now, not at a garbage collection after the broker


class GroupMember:
    """A confluent-kafka member of GROUP; commits once, after ``commit_after`` records from every
    partition of TOPIC, never again (so committed offsets hold still while the test compares them)."""

    def __init__(self, bootstrap: str, client_id: str, commit_after: int | None) -> None:
        self.bootstrap = bootstrap
        self.client_id = client_id
        self.commit_after = commit_after
        self.consumed: dict[int, int] = {}
        self.committed = threading.Event()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=client_id, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        consumer = ConfluentConsumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": GROUP,
                "client.id": self.client_id,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 10_000,
                "heartbeat.interval.ms": 500,
            }
        )
        consumer.subscribe([TOPIC])
        try:
            while not self.stop.is_set():
                message = consumer.poll(0.2)
                if message is None or message.error():
                    continue
                self.consumed[message.partition()] = self.consumed.get(message.partition(), 0) + 1
                enough = len(self.consumed) == PARTITIONS and min(self.consumed.values()) >= (
                    self.commit_after or 0
                )
                if self.commit_after is not None and enough and not self.committed.is_set():
                    consumer.commit(asynchronous=False)
                    self.committed.set()
        finally:
            consumer.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)


@dataclass
class Stack:
    broker: BrokerProcess
    admin: Admin
    producer: LiveProducer
    members: list[GroupMember]
    console: ConsoleProcess
    driver: WebDriver

    def open(self, path: str) -> None:
        self.driver.get(self.console.url + path.lstrip("/"))
        assert "strom console" in self.driver.title, self.driver.page_source[:500]

    def text(self, selector: str) -> str:
        return str(self.driver.find_element(By.CSS_SELECTOR, selector).text)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    work: Path = tmp_path_factory.mktemp("console-browser")
    broker = BrokerProcess(
        work / "broker",
        {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "3"},
    )
    broker.work_dir.mkdir()
    closers: list[object] = []
    try:
        broker.start()
        admin = Admin({"bootstrap.servers": broker.bootstrap})
        closers.append(admin.close)
        from strom.client.admin import NewTopic

        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1, {"retention.ms": "86400000"})])
        producer = LiveProducer(broker.bootstrap)
        producer.thread.start()
        producer.running.set()
        closers.append(producer.close)
        wait_until(lambda: len(producer.sent) >= 60, "the producer's first records", WAIT_S)
        members = [GroupMember(broker.bootstrap, "billing-worker-1", commit_after=10)]
        closers.append(lambda: [member.close() for member in members])
        wait_until(members[0].committed.is_set, "the first member's commit", WAIT_S)
        console = ConsoleProcess(broker.bootstrap, work / "console.log", "--lag-sample-interval-ms", "1000")
        closers.append(console.stop)
        with headless_chromium() as driver:
            yield Stack(broker, admin, producer, members, console, driver)
    finally:
        for close in reversed(closers):
            close()  # type: ignore[operator]
        broker.close()


def test_cluster_page_shows_what_the_broker_says(stack: Stack) -> None:
    described = stack.admin.describe_cluster()
    stack.open("/")
    assert stack.text("#controller") == str(described.controller_id)
    assert stack.text("#cluster-id") == described.cluster_id
    rows = stack.driver.find_elements(By.CSS_SELECTOR, "#brokers tbody tr")
    assert [row.find_elements(By.TAG_NAME, "td")[0].text for row in rows] == [
        str(b.node_id) for b in described.brokers
    ]
    assert stack.text("#under-replicated-count") == "0" and stack.text("#offline-count") == "0"
    screenshot(stack.driver, "cluster")


def test_topics_and_topic_page_show_the_brokers_offsets_and_configs(stack: Stack) -> None:
    stack.producer.pause()
    try:
        partitions = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        ends = stack.admin.list_offsets(dict.fromkeys(partitions, "latest"))
        starts = stack.admin.list_offsets(dict.fromkeys(partitions, "earliest"))
        end_sum = sum(found.offset for found in ends.values() if found)

        def topics_row_cells() -> list[str]:
            stack.open("/topics")
            row = stack.driver.find_element(By.CSS_SELECTOR, f'#topics tr[data-name="{TOPIC}"]')
            return [cell.text for cell in row.find_elements(By.TAG_NAME, "td")]

        # The list's offsets are asked when it is viewed (its topics and partitions come from a
        # snapshot a few seconds old); waited for, as the producer's thread may send one more record
        # while it pauses.
        wait_until(
            lambda: number(topics_row_cells()[4]) == end_sum, "the list's snapshot to catch up", WAIT_S
        )
        cells = topics_row_cells()
        assert cells[1] == str(PARTITIONS) and number(cells[4]) == end_sum
        row = stack.driver.find_element(By.CSS_SELECTOR, f'#topics tr[data-name="{TOPIC}"]')
        # The name filter hides other rows as it is typed (the page's script).
        stack.driver.find_element(By.CSS_SELECTOR, "form.filter input[name=q]").send_keys("__consumer")
        assert not row.is_displayed()
        screenshot(stack.driver, "topics")
        stack.open(f"/topic?name={TOPIC}")
        for tp in partitions:
            found = stack.driver.find_element(
                By.CSS_SELECTOR, f'#partitions tr[data-partition="{tp.partition}"]'
            )
            assert number(found.find_element(By.CSS_SELECTOR, ".end").text) == ends[tp].offset  # type: ignore[union-attr]
            assert number(found.find_element(By.CSS_SELECTOR, ".start").text) == starts[tp].offset  # type: ignore[union-attr]
        retention = stack.driver.find_element(
            By.CSS_SELECTOR, '#configs tr[data-config="retention.ms"] .value'
        )
        assert retention.text == "86400000"
        screenshot(stack.driver, "topic")
    finally:
        stack.producer.running.set()


def test_message_browser_shows_and_searches_the_records_produced(stack: Stack) -> None:
    sent = dict(stack.producer.sent)
    partition = 0
    offsets = sorted(offset for p, offset in sent if p == partition)[:5]
    assert offsets == list(range(5)), "partition 0 starts at offset 0"
    stack.open(f"/messages?topic={TOPIC}&partition={partition}&offset=0&limit=5&format=json")
    rows = stack.driver.find_elements(By.CSS_SELECTOR, "#records tbody tr")
    assert [int(row.get_attribute("data-offset")) for row in rows] == offsets
    for row, offset in zip(rows, offsets, strict=True):
        shown = row.find_element(By.CSS_SELECTOR, "pre.value").text
        assert json.loads(shown) == json.loads(sent[(partition, offset)])
        assert shown.startswith("{\n  ")  # pretty
    screenshot(stack.driver, "messages")
    # Search: one record's trace id, which only its header carries.
    offset = offsets[3]
    trace = json.loads(sent[(partition, offset)])["order"]
    stack.open(f"/messages?topic={TOPIC}&partition={partition}&search=trace-{trace:05d}")
    rows = stack.driver.find_elements(By.CSS_SELECTOR, "#records tbody tr")
    assert [int(row.get_attribute("data-offset")) for row in rows] == [offset]


def test_group_pages_show_members_offsets_lag_and_its_trend(stack: Stack) -> None:
    second = GroupMember(stack.broker.bootstrap, "billing-worker-2", commit_after=None)
    stack.members.append(second)

    def two_members_stable() -> bool:
        group = stack.admin.describe_groups([GROUP])[GROUP]
        return group.state == "Stable" and len(group.members) == 2

    try:
        wait_until(two_members_stable, "the group to rebalance to two members", WAIT_S)

        # Lag is sampled every second: samples taken while the producer runs draw a rising line.
        def chart_points() -> int:
            stack.open(f"/group?id={GROUP}")
            return len(stack.driver.find_elements(By.CSS_SELECTOR, "#lag-chart circle"))

        wait_until(lambda: chart_points() >= 6, "six lag samples", WAIT_S)
        stack.producer.pause()
        stack.open("/groups")
        row = stack.driver.find_element(By.CSS_SELECTOR, f'#groups tr[data-group="{GROUP}"]')
        assert "Stable" in row.text
        screenshot(stack.driver, "groups")
        group = stack.admin.describe_groups([GROUP])[GROUP]
        committed = stack.admin.list_group_offsets(GROUP)
        ends = stack.admin.list_offsets(dict.fromkeys(committed, "latest"))
        stack.open(f"/group?id={GROUP}")
        assert stack.text("#group-state") == "Stable"
        shown_members = {
            row.get_attribute("data-member")
            for row in stack.driver.find_elements(By.CSS_SELECTOR, "#members tbody tr")
        }
        assert shown_members == {member.member_id for member in group.members}
        total = 0
        for tp, offset in committed.items():
            row = stack.driver.find_element(
                By.CSS_SELECTOR, f'#offsets tr[data-topic="{tp.topic}"][data-partition="{tp.partition}"]'
            )
            end = ends[tp].offset  # type: ignore[union-attr]
            assert number(row.find_element(By.CSS_SELECTOR, ".committed").text) == offset.offset
            assert number(row.find_element(By.CSS_SELECTOR, ".end").text) == end
            assert number(row.find_element(By.CSS_SELECTOR, ".lag").text) == end - offset.offset
            total += end - offset.offset
        assert len(committed) == PARTITIONS and total > 0
        assert number(stack.text("#total-lag")) == total
        points = stack.driver.find_elements(By.CSS_SELECTOR, "#lag-chart circle")
        assert len(points) >= 3
        screenshot(stack.driver, "group")
    finally:
        stack.producer.running.set()


def test_group_history_page_shows_the_rebalances_the_coordinator_recorded(stack: Stack) -> None:
    """The second member's joining (the test before) rebalanced the group: the history page,
    reached from the group's page, shows what the broker's StromGroupHistory answers."""
    driver = stack.driver

    def expected() -> list[tuple[str, str, str]]:
        entries = stack.admin.group_history(GROUP)
        return [(str(e.sequence), str(e.generation), e.trigger) for e in reversed(entries)]

    def shown(selector: str) -> list[tuple[str, str, str]]:
        return [
            (
                str(row.get_attribute("data-sequence")),
                str(row.get_attribute("data-generation")),
                str(row.get_attribute("data-trigger")),
            )
            for row in driver.find_elements(By.CSS_SELECTOR, selector)
        ]

    def page_matches_the_broker() -> bool:
        # The history only grows: equal before and after the page, the page showed that one.
        before = expected()
        stack.open(f"/group?id={GROUP}")
        driver.find_element(By.ID, "history-link").click()
        table, timeline = shown("#rebalances tbody tr"), shown("#rebalance-timeline g.rebalance")
        return before == table == timeline == expected()

    wait_until(page_matches_the_broker, "the history page to show the broker's history", WAIT_S)
    entries = stack.admin.group_history(GROUP)
    assert len(entries) >= 2 and "member-joined" in {entry.trigger for entry in entries}
    assert entries[-1].outcome == "completed"  # the group is Stable
    group = stack.admin.describe_groups([GROUP])[GROUP]
    assert set(entries[-1].members_after) == {member.member_id for member in group.members}
    # The second member's joining: it took partitions from the first, and the page lists them.
    joined = next(e for e in entries if len(e.members_before) == 1 and len(e.members_after) == 2)
    assert joined.trigger == "member-joined" and joined.moves
    row = driver.find_element(By.CSS_SELECTOR, f'#rebalances tr[data-sequence="{joined.sequence}"]')
    assert row.find_element(By.CSS_SELECTOR, ".generation").text == f"generation {joined.generation}"
    moved = [item.text for item in row.find_elements(By.CSS_SELECTOR, ".moved li")]
    assert moved == [
        f"{m.topic}-{m.partition}: {m.from_member or 'nobody'} → {m.to_member or 'nobody'}"
        for m in joined.moves
    ]
    screenshot(driver, "group-history")


def test_create_alter_and_delete_a_topic_through_the_forms(stack: Stack) -> None:
    name = "made-in-the-browser"
    driver = stack.driver
    stack.open("/topics")
    driver.find_element(By.ID, "create-topic").click()
    form = driver.find_element(By.ID, "new-topic")
    form.find_element(By.NAME, "name").send_keys(name)
    count = form.find_element(By.NAME, "partitions")
    count.clear()
    count.send_keys("2")
    form.find_element(By.NAME, "configs").send_keys("cleanup.policy=compact")
    screenshot(driver, "create-topic")
    driver.find_element(By.ID, "new-topic").submit()
    wait_for_text(driver, "Topic created.")
    described = stack.admin.describe_topics([name])[name]
    assert len(described.partitions) == 2
    resource = ConfigResource(ConfigResourceType.TOPIC, name)
    assert stack.admin.describe_configs([resource])[resource]["cleanup.policy"].value == "compact"

    setter = driver.find_element(By.ID, "set-config")
    setter.find_element(By.NAME, "key").send_keys("retention.ms")
    setter.find_element(By.NAME, "value").send_keys("123456")
    setter.submit()
    wait_for_text(driver, "Config updated.")
    assert stack.admin.describe_configs([resource])[resource]["retention.ms"].value == "123456"

    driver.find_element(By.ID, "delete-topic").click()
    confirm = driver.find_element(By.ID, "delete-form")
    confirm.find_element(By.NAME, "confirm").send_keys(name[:-1])  # a typo: nothing is deleted
    confirm.submit()
    wait_for_text(driver, "nothing was deleted")
    assert name in stack.admin.list_topics()
    confirm = driver.find_element(By.ID, "delete-form")
    confirm.find_element(By.NAME, "confirm").send_keys(name)
    screenshot(driver, "delete-topic")
    confirm.submit()
    wait_for_text(driver, "Topic deleted.")
    wait_until(lambda: name not in stack.admin.list_topics(), "the topic to be gone", WAIT_S)
