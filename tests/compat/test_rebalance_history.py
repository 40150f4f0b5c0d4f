"""The rebalance history against real clients and a real broker (``strom groups history``).

A classic group of a confluent-kafka member and kafka-python members: one joins, one is killed
(SIGKILL: its session expires), one changes its subscription and then leaves; the history names
each rebalance's trigger, the member that caused it and the partitions that moved, and a broker
restart keeps it. A consumer-protocol group (confluent-kafka ``group.protocol=consumer``): joins and
a leave, with the moves from the coordinator's targets. And the strom-only API key the broker now
advertises in ApiVersions (32100) is skipped by librdkafka, kafka-python and aiokafka.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from strom.client.admin import Admin
from strom.client.errors import BrokerResponseError
from strom.protocol.api import STROM_CLIENT_SOFTWARE_NAME
from strom.protocol.errors import ErrorCode
from strom.protocol.group_history import STROM_GROUP_HISTORY_API_KEY, RebalanceEntry
from strom.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from tests.compat.conftest import BrokerProcess, StartBroker
from tests.compat.consumer_protocol_support import CONSUMER_PROTOCOL_BROKER_SETTINGS, Ledger, ProtocolMember
from tests.compat.support import create_topic, unique_topic
from tests.compat.test_groups_helpers import (
    GROUP_BROKER_SETTINGS,
    HEARTBEAT_INTERVAL_MS,
    SESSION_TIMEOUT_MS,
    ConfluentMember,
    stop_all,
)
from tests.compat.wire import WireClient

# kafka-python 3 loads its protocol schemas with importlib.resources.read_text/open_text, deprecated in
# 3.11; the suite turns warnings into errors, so the import (and lazy schema loads) are let through.
KAFKA_PYTHON_WARNING = "(read|open)_text is deprecated"
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=KAFKA_PYTHON_WARNING, category=DeprecationWarning)
    from aiokafka.admin import AIOKafkaAdminClient
    from kafka import KafkaAdminClient, KafkaConsumer
    from kafka.coordinator.assignors.range import RangePartitionAssignor

pytestmark = [
    pytest.mark.compat,
    pytest.mark.filterwarnings(f"ignore:{KAFKA_PYTHON_WARNING}:DeprecationWarning"),
]

PARTITIONS = 4
# Generous for a loaded machine: a rebalance takes a heartbeat or two, an expiry the session timeout.
REBALANCE_TIMEOUT_S = 40.0

# A kafka-python member in its own process (so it can be killed): subscribes, says "ready" once it
# has partitions, polls until killed.
KAFKA_PYTHON_MEMBER = """
import sys, time
from kafka import KafkaConsumer
from kafka.coordinator.assignors.range import RangePartitionAssignor
bootstrap, group, topic, name, session_ms, heartbeat_ms = sys.argv[1:7]
consumer = KafkaConsumer(
    bootstrap_servers=bootstrap, group_id=group, client_id=name, enable_auto_commit=False,
    session_timeout_ms=int(session_ms), heartbeat_interval_ms=int(heartbeat_ms),
    partition_assignment_strategy=[RangePartitionAssignor],
)
consumer.subscribe([topic])
deadline = time.monotonic() + 30
while not consumer.partitions_for_topic(topic) and time.monotonic() < deadline:
    time.sleep(0.05)
told = False
while True:
    consumer.poll(timeout_ms=100)
    if consumer.assignment() and not told:
        print("ready", flush=True)
        told = True
"""


class KafkaPythonThreadMember:
    """A kafka-python member on a thread that can change its subscription and then leave (close)."""

    def __init__(self, name: str, bootstrap: str, group: str, topics: list[str]) -> None:
        self.topics = topics
        self.new_topics: list[str] | None = None
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            client_id=name,
            enable_auto_commit=False,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
            partition_assignment_strategy=[RangePartitionAssignor],
        )
        self._thread = threading.Thread(target=self._run, name=f"member-{name}", daemon=True)

    def start(self) -> KafkaPythonThreadMember:
        self._thread.start()
        return self

    def resubscribe(self, topics: list[str]) -> None:
        self.new_topics = topics

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive(), "the kafka-python member did not close"

    def _run(self) -> None:
        consumer = self._consumer
        try:
            consumer.subscribe(self.topics)
            deadline = time.monotonic() + 30
            while not consumer.partitions_for_topic(self.topics[0]) and time.monotonic() < deadline:
                time.sleep(0.05)
            while not self._stop.is_set():
                if self.new_topics is not None:
                    consumer.subscribe(self.new_topics)
                    self.new_topics = None
                consumer.poll(timeout_ms=100)
        except Exception as error:  # reported to the test thread
            self.errors.append(f"{type(error).__name__}: {error}")
        finally:
            consumer.close(autocommit=False)


def wait_for(
    admin: Admin,
    group: str,
    condition: Callable[[list[RebalanceEntry]], RebalanceEntry | None],
    what: str,
    after: RebalanceEntry | None = None,
) -> RebalanceEntry:
    """Poll the group's history until ``condition`` picks an entry out of it (of those recorded
    after ``after``)."""
    deadline = time.monotonic() + REBALANCE_TIMEOUT_S
    entries: list[RebalanceEntry] = []
    while time.monotonic() < deadline:
        try:
            entries = admin.group_history(group)
        except BrokerResponseError as error:
            if error.code != ErrorCode.GROUP_ID_NOT_FOUND:
                raise
            entries = []  # the group has not been created yet
        found = condition([entry for entry in entries if after is None or entry.sequence > after.sequence])
        if found is not None:
            return found
        time.sleep(0.2)
    raise AssertionError(f"no {what} in the history after {REBALANCE_TIMEOUT_S} s: {entries}")


def completed(trigger: str, cause: str | None = None, members_after: int | None = None) -> Any:
    def pick(entries: list[RebalanceEntry]) -> RebalanceEntry | None:
        for entry in reversed(entries):
            if (
                entry.trigger == trigger
                and entry.outcome == "completed"
                and (cause is None or cause in entry.causes)
                and (members_after is None or len(entry.members_after) == members_after)
            ):
                return entry
        return None

    return pick


def member_ids(admin: Admin, group: str) -> dict[str, str]:
    """client id -> member id of the group's members now."""
    description = admin.describe_groups([group])[group]
    return {member.client_id: member.member_id for member in description.members}


@pytest.fixture
def broker(start_broker: StartBroker) -> BrokerProcess:
    return start_broker({**GROUP_BROKER_SETTINGS, **CONSUMER_PROTOCOL_BROKER_SETTINGS})


@pytest.fixture
def cleanup() -> Iterator[list[Any]]:
    """Members and processes a test starts: every one is stopped at the end."""
    started: list[Any] = []
    yield started
    for thing in started:
        if isinstance(thing, subprocess.Popen):
            if thing.poll() is None:
                thing.kill()
            thing.wait(10)
            if thing.stdout is not None:
                thing.stdout.close()
        elif isinstance(thing, ConfluentMember):
            if not thing.closed.is_set():
                stop_all([thing])
        else:
            thing.stop()


def test_classic_group_history_names_triggers_members_and_moves_and_survives_a_restart(
    broker: BrokerProcess, cleanup: list[Any]
) -> None:
    topic, other_topic = unique_topic("history"), unique_topic("history-other")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    create_topic(broker.bootstrap, other_topic, 2)
    group = unique_topic("group-history")
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        # 1. A confluent-kafka member joins an empty group: every partition goes to it.
        first = ConfluentMember(
            "first", broker.bootstrap, group, [topic], partition_assignment_strategy="range"
        ).start()
        cleanup.append(first)
        created = wait_for(admin, group, completed("member-joined", members_after=1), "first join")
        first_id = member_ids(admin, group)["first"]
        assert created.causes == (first_id,) and created.protocol == "classic"
        assert {(move.topic, move.partition, move.from_member, move.to_member) for move in created.moves} == {
            (topic, partition, None, first_id) for partition in range(PARTITIONS)
        }

        # 2. A kafka-python member (a process) joins: half the partitions move to it.
        doomed = subprocess.Popen(
            [
                sys.executable,
                "-c",
                KAFKA_PYTHON_MEMBER,
                broker.bootstrap,
                group,
                topic,
                "doomed",
                str(SESSION_TIMEOUT_MS),
                str(HEARTBEAT_INTERVAL_MS),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        cleanup.append(doomed)
        joined = wait_for(admin, group, completed("member-joined", members_after=2), "second join", created)
        doomed_id = member_ids(admin, group)["doomed"]
        assert doomed_id in joined.causes
        assert joined.members_before == (first_id,)
        assert set(joined.members_after) == {first_id, doomed_id}
        assert {(move.from_member, move.to_member) for move in joined.moves} == {(first_id, doomed_id)}
        assert len(joined.moves) == PARTITIONS // 2
        assert joined.join_ms >= 0 and joined.assignment_ms >= 0 and joined.end_ms >= joined.start_ms

        # 3. The kafka-python process is killed: its session expires, its partitions go back.
        os.kill(doomed.pid, signal.SIGKILL)
        doomed.wait(10)
        expired = wait_for(admin, group, completed("session-expired", doomed_id), "session expiry", joined)
        assert expired.members_after == (first_id,)
        assert {(move.from_member, move.to_member) for move in expired.moves} == {(doomed_id, first_id)}

        # 4. A kafka-python member joins, changes its subscription, then leaves.
        changer = KafkaPythonThreadMember("changer", broker.bootstrap, group, [topic]).start()
        cleanup.append(changer)
        third = wait_for(admin, group, completed("member-joined", members_after=2), "third join", expired)
        changer_id = member_ids(admin, group)["changer"]
        changer.resubscribe([topic, other_topic])
        changed = wait_for(
            admin, group, completed("subscription-changed", changer_id), "subscription change", third
        )
        assert {move.topic for move in changed.moves if move.from_member is None} == {other_topic}
        changer.stop()
        left = wait_for(admin, group, completed("member-left", changer_id), "leave", changed)
        assert left.members_after == (first_id,)
        assert all(move.from_member == changer_id for move in left.moves)
        assert not changer.errors, changer.errors
        before_restart = admin.group_history(group)
        triggers = [entry.trigger for entry in before_restart]
        assert "other" not in triggers, triggers
        sequences = [entry.sequence for entry in before_restart]
        assert sequences == sorted(set(sequences))

    # 5. The broker restarts: the history is read back from __consumer_offsets.
    first.stop()
    broker.restart()
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        deadline = time.monotonic() + REBALANCE_TIMEOUT_S
        after_restart: list[RebalanceEntry] = []
        while time.monotonic() < deadline:
            after_restart = [entry for entry in admin.group_history(group) if entry.end_ms >= 0]
            if len(after_restart) >= len(before_restart):
                break
            time.sleep(0.2)
        assert after_restart[: len(before_restart)] == before_restart

    # The command prints the same as JSON.
    finished = subprocess.run(
        [
            sys.executable,
            "-m",
            "strom.cli.main",
            "groups",
            "history",
            group,
            "--output",
            "json",
            "--bootstrap-server",
            broker.bootstrap,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert finished.returncode == 0, finished.stderr
    printed = json.loads(finished.stdout)
    assert printed["group"] == group
    assert [entry["trigger"] for entry in printed["rebalances"]][: len(before_restart)] == triggers


def test_consumer_protocol_group_history_from_the_coordinators_targets(
    broker: BrokerProcess, cleanup: list[Any]
) -> None:
    topic = unique_topic("history-kip848")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    group = unique_topic("group-history-kip848")
    ledger = Ledger()
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        first = ProtocolMember("first", broker.bootstrap, group, [topic], ledger).start()
        cleanup.append(first)
        created = wait_for(admin, group, completed("member-joined", members_after=1), "first join")
        assert created.protocol == "consumer" and created.join_ms == 0
        [first_id] = created.causes
        assert {(move.partition, move.to_member) for move in created.moves} == {
            (partition, first_id) for partition in range(PARTITIONS)
        }
        second = ProtocolMember("second", broker.bootstrap, group, [topic], ledger).start()
        cleanup.append(second)
        joined = wait_for(admin, group, completed("member-joined", members_after=2), "second join", created)
        [second_id] = joined.causes
        assert joined.generation > created.generation
        assert {(move.from_member, move.to_member) for move in joined.moves} == {(first_id, second_id)}
        second.stop()
        left = wait_for(admin, group, completed("member-left", second_id), "leave", joined)
        assert left.members_after == (first_id,)
        assert {(move.from_member, move.to_member) for move in left.moves} == {(second_id, first_id)}
        assert not ledger.double_ownership()


def test_kafka_clients_skip_the_strom_only_api_key(broker: BrokerProcess) -> None:
    """API key 32100 is listed to strom's client only; librdkafka, kafka-python (api_versions()
    too, which fails on a key Kafka does not have) and aiokafka talk to the broker."""

    def advertised(request: ApiVersionsRequest) -> dict[int, tuple[int, int]]:
        with WireClient(broker.port) as wire:
            response: ApiVersionsResponse = wire.round_trip(request, ApiVersionsResponse, 3)
        return {entry.api_key: (entry.min_version, entry.max_version) for entry in response.api_keys}

    strom_client = ApiVersionsRequest(
        client_software_name=STROM_CLIENT_SOFTWARE_NAME, client_software_version="0"
    )
    assert advertised(strom_client)[STROM_GROUP_HISTORY_API_KEY] == (0, 0)
    assert STROM_GROUP_HISTORY_API_KEY not in advertised(ApiVersionsRequest())

    # librdkafka: its ApiVersions request, then Metadata.
    metadata = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=30)
    assert metadata.brokers

    kafka_python = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        assert isinstance(kafka_python.list_topics(), list)
        assert kafka_python.api_versions()
    finally:
        kafka_python.close()

    async def aiokafka_topics() -> list[str]:
        client = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await client.start()
        try:
            return list(await client.list_topics())
        finally:
            await client.close()

    assert isinstance(asyncio.run(aiokafka_topics()), list)
