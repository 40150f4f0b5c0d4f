"""``strom consume --group`` and ``strom groups`` against a real broker: consume joins, prints, and
commits what it printed; the groups commands list, describe (with lag), refuse to touch an active
group, reset offsets (dry run and each target) and delete — checked with confluent-kafka and the
strom Admin client."""

from __future__ import annotations

import datetime
import json
import time
import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition

from strom.cli.main import main
from strom.client.admin import Admin
from tests.compat.conftest import BrokerProcess
from tests.compat.support import confluent_producer, create_topic, unique_topic

pytestmark = pytest.mark.compat


def test_consume_with_a_group_commits_what_it_printed(
    shared_broker: BrokerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = unique_topic("cli-group")
    group = f"cli-group-{uuid.uuid4().hex[:8]}"
    create_topic(shared_broker.bootstrap, topic, 1)
    producer = confluent_producer(shared_broker.bootstrap)
    for index in range(8):
        producer.produce(topic, value=b"v%d" % index)
    assert producer.flush(30) == 0
    base = ["--group", group, "--bootstrap-server", shared_broker.bootstrap]

    assert main(["consume", topic, "--from-beginning", "--max-messages", "5", *base]) == 0
    assert capsys.readouterr().out.splitlines() == ["v0", "v1", "v2", "v3", "v4"]
    # The group resumes where it committed; --from-beginning only applies where nothing is committed.
    assert main(["consume", topic, "--from-beginning", "--timeout-ms", "1500", *base]) == 0
    assert capsys.readouterr().out.splitlines() == ["v5", "v6", "v7"]

    checker = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": group})
    try:
        [committed] = checker.committed([TopicPartition(topic, 0)], timeout=30)
    finally:
        checker.close()
    assert committed.offset == 8


# -- strom groups against a live confluent-kafka group -------------------------------------------

GROUP_PARTITIONS = 2
RECORDS_PER_PARTITION = 10
# The first half of each partition is an hour old, the second half half an hour old, so
# --to-datetime has a boundary to find.
OLD_RECORDS = 5
# What the group "processed" before the tool looks at it, per partition.
COMMITTED = {0: 4, 1: 7}
JOIN_TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def shared_broker_settings() -> dict[str, str]:
    return {"group.initial.rebalance.delay.ms": "0"}


def run_cli(capsys: pytest.CaptureFixture[str], *arguments: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(arguments))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def group_consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "broker.address.family": "v4",
            "group.id": group,
            "client.id": "cli-groups-test",
            "enable.auto.commit": False,
            # Where nothing is committed a consumer would start at the end: reading a record at all
            # shows the group's committed offset was used.
            "auto.offset.reset": "latest",
        }
    )


def first_offsets_read(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """Join the group with a fresh confluent-kafka consumer; the first offset it reads per partition."""
    consumer = group_consumer(bootstrap, group)
    first: dict[int, int] = {}
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + JOIN_TIMEOUT_S
        while len(first) < GROUP_PARTITIONS and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None or message.error() is not None:
                continue
            partition, offset = message.partition(), message.offset()
            assert partition is not None and offset is not None
            first.setdefault(partition, offset)
    finally:
        consumer.close()
    return first


def committed_by_admin(bootstrap: str, group: str) -> dict[int, int]:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        offsets = admin.list_group_offsets(group)
    return {topic_partition.partition: committed.offset for topic_partition, committed in offsets.items()}


def test_groups_list_describe_reset_delete_against_a_confluent_group(
    shared_broker: BrokerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    bootstrap = shared_broker.bootstrap
    topic = unique_topic("cli-groups")
    group = f"cli-groups-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, GROUP_PARTITIONS)
    now_ms = int(time.time() * 1000)
    old_ms, newer_ms = now_ms - 3_600_000, now_ms - 1_800_000
    producer = confluent_producer(bootstrap)
    for partition in range(GROUP_PARTITIONS):
        for index in range(RECORDS_PER_PARTITION):
            timestamp_ms = old_ms if index < OLD_RECORDS else newer_ms
            producer.produce(topic, value=b"r%d" % index, partition=partition, timestamp=timestamp_ms)
    assert producer.flush(30) == 0
    connection = ["--bootstrap-server", bootstrap]

    consumer = group_consumer(bootstrap, group)
    consumer.subscribe([topic])
    try:
        # Join and read until the group has assigned both partitions, then commit part of each.
        deadline = time.monotonic() + JOIN_TIMEOUT_S
        while len(consumer.assignment()) < GROUP_PARTITIONS and time.monotonic() < deadline:
            consumer.poll(0.2)
        assert len(consumer.assignment()) == GROUP_PARTITIONS
        consumer.commit(
            offsets=[TopicPartition(topic, partition, offset) for partition, offset in COMMITTED.items()],
            asynchronous=False,
        )

        code, out, _ = run_cli(capsys, "groups", "list", *connection)
        assert code == 0
        assert [group, "classic", "Stable", "consumer"] in [line.split() for line in out.splitlines()]
        code, out, _ = run_cli(capsys, "groups", "list", "--output", "json", *connection)
        assert {
            "group": group,
            "type": "classic",
            "state": "Stable",
            "protocol_type": "consumer",
        } in json.loads(out)

        code, out, _ = run_cli(capsys, "groups", "describe", group, "--output", "json", *connection)
        assert code == 0
        [described] = json.loads(out)
        assert (described["state"], described["protocol"], described["protocol_type"]) == (
            "Stable",
            "range",
            "consumer",
        )
        [member] = described["members"]
        assert member["client_id"] == "cli-groups-test"
        assert "127.0.0.1" in member["host"]
        assert member["assignment"] == [{"topic": topic, "partition": p} for p in range(GROUP_PARTITIONS)]
        rows = {row["partition"]: row for row in described["offsets"]}
        for partition, offset in COMMITTED.items():
            assert rows[partition]["committed_offset"] == offset
            assert rows[partition]["log_end_offset"] == RECORDS_PER_PARTITION
            assert rows[partition]["lag"] == RECORDS_PER_PARTITION - offset
            assert rows[partition]["member_id"] == member["member_id"]
        assert described["total_lag"] == sum(RECORDS_PER_PARTITION - offset for offset in COMMITTED.values())

        code, out, _ = run_cli(capsys, "groups", "describe", group, *connection)
        lines = out.splitlines()
        assert lines[1].split()[:5] == ["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"]
        assert lines[2].split()[:5] == [topic, "0", "4", "10", "6"]
        assert lines[3].split()[:5] == [topic, "1", "7", "10", "3"]

        # While the consumer is in the group the tool refuses to move or delete it.
        reset = ["groups", "reset-offsets", group, "--topic", topic]
        code, out, err = run_cli(capsys, *reset, "--to-earliest", "--execute", *connection)
        assert (code, out) == (1, "")
        assert "active member(s) (state Stable); stop its consumers first" in err
        code, _, err = run_cli(capsys, "groups", "delete", group, *connection)
        assert code == 1 and "cannot delete group" in err
        assert committed_by_admin(bootstrap, group) == COMMITTED
    finally:
        consumer.close()

    # Dry run: the plan is printed, nothing moves.
    code, out, _ = run_cli(capsys, *reset, "--to-earliest", *connection)
    assert code == 0
    lines = out.splitlines()
    assert lines[2].split() == [topic, "0", "4", "0", "0", "10"]
    assert lines[3].split() == [topic, "1", "7", "0", "0", "10"]
    assert lines[-1].startswith("dry run: nothing changed")
    assert committed_by_admin(bootstrap, group) == COMMITTED

    def execute(*target: str) -> dict[int, int]:
        code, out, err = run_cli(capsys, *reset, *target, "--execute", "--output", "json", *connection)
        assert code == 0, err
        planned = json.loads(out)
        assert planned["executed"] is True
        return {row["partition"]: row["new_offset"] for row in planned["partitions"]}

    assert execute("--to-earliest") == {0: 0, 1: 0}
    assert committed_by_admin(bootstrap, group) == {0: 0, 1: 0}
    assert first_offsets_read(bootstrap, group, topic) == {0: 0, 1: 0}

    assert execute("--to-latest") == {0: 10, 1: 10}
    assert committed_by_admin(bootstrap, group) == {0: 10, 1: 10}

    newer_iso = datetime.datetime.fromtimestamp(newer_ms / 1000, datetime.UTC).isoformat()
    assert execute("--to-datetime", newer_iso) == {0: OLD_RECORDS, 1: OLD_RECORDS}
    assert committed_by_admin(bootstrap, group) == {0: OLD_RECORDS, 1: OLD_RECORDS}

    assert execute("--to-offset", "8") == {0: 8, 1: 8}
    assert committed_by_admin(bootstrap, group) == {0: 8, 1: 8}

    assert execute("--shift-by", "-6") == {0: 2, 1: 2}
    assert committed_by_admin(bootstrap, group) == {0: 2, 1: 2}
    assert first_offsets_read(bootstrap, group, topic) == {0: 2, 1: 2}

    # Empty now: deleted, with its offsets.
    code, out, _ = run_cli(capsys, "groups", "delete", group, *connection)
    assert (code, out) == (0, f"deleted group {group!r}\n")
    code, out, _ = run_cli(capsys, "groups", "list", "--output", "json", *connection)
    assert group not in {row["group"] for row in json.loads(out)}
    assert committed_by_admin(bootstrap, group) == {}
    code, _, err = run_cli(capsys, "groups", "describe", group, *connection)
    assert code == 1 and f"group {group!r} does not exist" in err
