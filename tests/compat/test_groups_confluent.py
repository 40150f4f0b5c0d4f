"""confluent-kafka (librdkafka) consumer groups against strom's group coordinator.

Groups of 1, 2 and 4 members under each assignment strategy librdkafka offers over a 6-partition
topic; static membership across a member restart; a member killed with SIGKILL; committed offsets
across a broker restart. Members run on threads (librdkafka releases the GIL) or, to be killed, in a
subprocess.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.compat.conftest import BrokerProcess, StartBroker
from tests.compat.support import (
    confluent_produce,
    confluent_producer,
    create_topic,
    make_records,
    unique_topic,
)
from tests.compat.test_groups_helpers import (
    GROUP_BROKER_SETTINGS,
    HEARTBEAT_INTERVAL_MS,
    SESSION_TIMEOUT_MS,
    ConfluentMember,
    all_partitions,
    assert_consumed_exactly_once,
    committed_offsets,
    end_offsets,
    stop_all,
    wait_for_consumed,
    wait_until,
    wait_until_stable,
)

pytestmark = pytest.mark.compat

PARTITIONS = 6
RECORDS_PER_TEST = 1_200
STRATEGIES = ("range", "roundrobin", "cooperative-sticky")
MEMBER_COUNTS = (1, 2, 4)
KILLED_MEMBER_READY_TIMEOUT_S = 40.0


@pytest.fixture(scope="module")
def shared_broker_settings() -> dict[str, str]:
    return dict(GROUP_BROKER_SETTINGS)


@pytest.fixture
def topic(shared_broker: BrokerProcess) -> str:
    name = unique_topic("groups")
    create_topic(shared_broker.bootstrap, name, PARTITIONS)
    return name


@pytest.fixture
def members() -> Iterator[list[ConfluentMember]]:
    """Members a test starts; every one still running is stopped (closed) at the end."""
    started: list[ConfluentMember] = []
    yield started
    stop_all(member for member in started if not member.closed.is_set())


@pytest.mark.parametrize("member_count", MEMBER_COUNTS)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_group_assigns_every_partition_once_and_consumes_every_record_once(
    shared_broker: BrokerProcess, topic: str, members: list[ConfluentMember], strategy: str, member_count: int
) -> None:
    group = unique_topic(f"group-{strategy}")
    for index in range(member_count):
        members.append(
            ConfluentMember(
                f"m{index}", shared_broker.bootstrap, group, [topic], partition_assignment_strategy=strategy
            ).start()
        )
    wait_until_stable(members, all_partitions(topic, PARTITIONS))
    assignments_when_stable = [member.current_assignment() for member in members]
    for member in members:  # generations count rebalances from 1 (a sanity check of their decoding too)
        assert member.generation_ids and all(1 <= generation < 100 for generation in member.generation_ids)

    sent = confluent_produce(
        confluent_producer(shared_broker.bootstrap), topic, make_records(RECORDS_PER_TEST)
    )
    assert {record.partition for record in sent} == set(range(PARTITIONS))
    wait_for_consumed(members, len(sent))
    assert_consumed_exactly_once(members, sent, topic)
    # Each record went to the member that owned its partition, and ownership did not move meanwhile.
    assert [member.current_assignment() for member in members] == assignments_when_stable
    for member, assignment in zip(members, assignments_when_stable):
        assert {(record.topic, record.partition) for record in member.snapshot().records} <= assignment

    for member in members:
        member.request_commit()
    for member in members:
        assert member.commit_done.wait(30), f"member {member.name} did not commit"
        assert not member.snapshot().errors, member.snapshot().errors
    assert committed_offsets(shared_broker.bootstrap, group, topic, PARTITIONS) == end_offsets(sent)


def test_static_member_restart_causes_no_rebalance(
    shared_broker: BrokerProcess, topic: str, members: list[ConfluentMember]
) -> None:
    """A static member (group.instance.id) that closes without leaving and comes back within the
    session timeout gets its partitions back; nobody else is revoked; the generation stays."""
    group = unique_topic("group-static")
    settings = {"partition_assignment_strategy": "range"}
    for index in range(3):
        members.append(
            ConfluentMember(
                f"s{index}",
                shared_broker.bootstrap,
                group,
                [topic],
                group_instance_id=f"instance-{index}",
                **settings,
            ).start()
        )
    wait_until_stable(members, all_partitions(topic, PARTITIONS))
    # Let any trailing rebalance settle: the assignment must hold still for a few heartbeats.
    time.sleep(1.0)
    wait_until_stable(members, all_partitions(topic, PARTITIONS))
    before = {member.name: member.current_assignment() for member in members}
    logs_before = {member.name: member.snapshot() for member in members}
    generations_before = {member.name: member.generation_ids[-1] for member in members}

    restarted = members[1]
    restarted.stop()  # a static member's close sends no LeaveGroup
    replacement = ConfluentMember(
        "s1-again", shared_broker.bootstrap, group, [topic], group_instance_id="instance-1", **settings
    ).start()
    members[1] = replacement
    wait_until_stable(members, all_partitions(topic, PARTITIONS), timeout_s=SESSION_TIMEOUT_MS / 1000 * 2)
    assert replacement.current_assignment() == before["s1"]
    assert replacement.generation_ids == [generations_before["s1"]]

    # Some heartbeats later the others have still seen no revocation and no new assignment.
    time.sleep(HEARTBEAT_INTERVAL_MS / 1000 * 5)
    for member in (members[0], members[2]):
        log = member.snapshot()
        assert log.revoked_calls == logs_before[member.name].revoked_calls, f"{member.name} was revoked"
        assert log.assigned_calls == logs_before[member.name].assigned_calls, f"{member.name} reassigned"
        assert log.lost_calls == []
        assert member.current_assignment() == before[member.name]
        assert member.generation_ids[-1] == generations_before[member.name]

    sent = confluent_produce(confluent_producer(shared_broker.bootstrap), topic, make_records(300))
    wait_for_consumed([members[0], replacement, members[2]], len(sent))
    assert_consumed_exactly_once([members[0], replacement, members[2]], sent, topic)


KILLABLE_MEMBER = textwrap.dedent(
    """
    import json, sys
    from confluent_kafka import Consumer
    bootstrap, group, topic, session_timeout_ms, heartbeat_interval_ms = sys.argv[1:6]
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "broker.address.family": "v4", "group.id": group,
        "client.id": "doomed", "auto.offset.reset": "earliest", "enable.auto.commit": False,
        "session.timeout.ms": int(session_timeout_ms), "heartbeat.interval.ms": int(heartbeat_interval_ms),
        "partition.assignment.strategy": "range",
    })
    def on_assign(consumer, partitions):
        print(json.dumps(sorted(partition.partition for partition in partitions)), flush=True)
    consumer.subscribe([topic], on_assign=on_assign)
    while True:
        consumer.poll(0.1)
    """
)


def test_killed_member_partitions_move_to_survivor(
    shared_broker: BrokerProcess, topic: str, members: list[ConfluentMember]
) -> None:
    group = unique_topic("group-kill")
    doomed = subprocess.Popen(
        [
            sys.executable,
            "-c",
            KILLABLE_MEMBER,
            shared_broker.bootstrap,
            group,
            topic,
            str(SESSION_TIMEOUT_MS),
            str(HEARTBEAT_INTERVAL_MS),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    doomed_assignments: list[list[int]] = []

    def read_assignments() -> None:
        for line in doomed.stdout or []:
            doomed_assignments.append(json.loads(line))

    reader = threading.Thread(target=read_assignments, daemon=True)
    reader.start()
    try:
        survivor = ConfluentMember(
            "survivor", shared_broker.bootstrap, group, [topic], partition_assignment_strategy="range"
        ).start()
        members.append(survivor)

        def split_between_both() -> bool:
            doomed_now = set(doomed_assignments[-1]) if doomed_assignments else set()
            survivor_now = {partition for _, partition in survivor.current_assignment()}
            return (
                bool(doomed_now)
                and bool(survivor_now)
                and doomed_now | survivor_now == set(range(PARTITIONS))
                and not (doomed_now & survivor_now)
            )

        wait_until(
            split_between_both,
            KILLED_MEMBER_READY_TIMEOUT_S,
            lambda: f"doomed {doomed_assignments}, survivor {sorted(survivor.current_assignment())}",
        )
        os.kill(doomed.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        doomed.wait(10)

        wait_until_stable(
            [survivor], all_partitions(topic, PARTITIONS), timeout_s=SESSION_TIMEOUT_MS / 1000 * 4
        )
        moved_after_s = time.monotonic() - killed_at
        # The session has to expire first; then the survivor rejoins on its next heartbeat.
        assert moved_after_s >= SESSION_TIMEOUT_MS / 1000 * 0.5, f"moved after only {moved_after_s:.1f} s"

        sent = confluent_produce(confluent_producer(shared_broker.bootstrap), topic, make_records(300))
        wait_for_consumed([survivor], len(sent))
        assert_consumed_exactly_once([survivor], sent, topic)
    finally:
        if doomed.poll() is None:
            doomed.kill()
            doomed.wait(10)
        reader.join(10)  # the pipe is at its end once the process is gone
        if doomed.stdout is not None:
            doomed.stdout.close()


def test_committed_offsets_survive_broker_restart(start_broker: StartBroker) -> None:
    broker = start_broker(GROUP_BROKER_SETTINGS)
    topic = unique_topic("restart")
    group = unique_topic("group-restart")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    sent = confluent_produce(confluent_producer(broker.bootstrap), topic, make_records(600))
    committed = {partition: offset // 2 for partition, offset in end_offsets(sent).items()}

    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "broker.address.family": "v4", "group.id": group}
    )
    try:
        consumer.commit(
            offsets=[TopicPartition(topic, partition, offset) for partition, offset in committed.items()],
            asynchronous=False,
        )
    finally:
        consumer.close()
    assert committed_offsets(broker.bootstrap, group, topic, PARTITIONS) == committed

    broker.restart()
    assert committed_offsets(broker.bootstrap, group, topic, PARTITIONS) == committed

    member = ConfluentMember(
        "resumer", broker.bootstrap, group, [topic], partition_assignment_strategy="range"
    )
    member.start()
    try:
        expected = [record for record in sent if record.offset >= committed[record.partition]]
        wait_for_consumed([member], len(expected))
        time.sleep(0.5)  # nothing below the committed offsets arrives late either
        assert_consumed_exactly_once([member], expected, topic)
    finally:
        member.stop()
