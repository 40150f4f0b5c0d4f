"""``strom consume --group`` against a real broker: it joins, prints, and commits what it printed,
as confluent-kafka sees from the group's committed offsets."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition

from strom.cli.main import main
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
