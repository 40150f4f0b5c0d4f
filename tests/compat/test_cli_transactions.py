"""``strom transactions list | describe`` and ``strom consume --isolation-level`` against a real broker
with a live transaction (a strom transactional producer holding one open), run as the installed
``strom`` executable."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from strom.client.producer import Producer
from tests.compat.cli_support import run_strom
from tests.compat.conftest import BrokerProcess
from tests.compat.support import create_topic, unique_topic

pytestmark = pytest.mark.compat

TIMEOUT_S = 30.0


@pytest.fixture
def live_transaction(shared_broker: BrokerProcess) -> Iterator[tuple[str, str, Producer]]:
    """A topic with one committed transaction (c-0..c-3) and one still open (o-0, o-1), and the
    producer holding it."""
    topic = unique_topic("cli-txn")
    create_topic(shared_broker.bootstrap, topic, 2)
    transactional_id = f"cli-{topic}"
    producer = Producer({"bootstrap.servers": shared_broker.bootstrap, "transactional.id": transactional_id})
    try:
        producer.init_transactions(TIMEOUT_S)
        producer.begin_transaction()
        for index in range(4):
            producer.send(topic, f"c-{index}", partition=0)
        producer.commit_transaction(TIMEOUT_S)
        producer.begin_transaction()
        producer.send(topic, "o-0", partition=0)
        producer.send(topic, "o-1", partition=1)
        producer.flush(TIMEOUT_S)
        yield topic, transactional_id, producer
    finally:
        producer.close(TIMEOUT_S)


def test_list_and_describe_show_the_open_transaction(
    shared_broker: BrokerProcess, live_transaction: tuple[str, str, Producer]
) -> None:
    topic, transactional_id, producer = live_transaction
    server = ["--bootstrap-server", shared_broker.bootstrap]

    listed = run_strom("transactions", "list", *server)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[0].split() == ["TRANSACTIONAL-ID", "PRODUCER-ID", "STATE"]
    row = next(line.split() for line in listed.stdout.splitlines() if line.startswith(transactional_id))
    assert row[2] == "Ongoing"

    ongoing = run_strom("transactions", "list", "--state", "Ongoing", "--output", "json", *server)
    assert transactional_id in [entry["transactional_id"] for entry in json.loads(ongoing.stdout)]
    committed = run_strom("transactions", "list", "--state", "CompleteCommit", "--output", "json", *server)
    assert transactional_id not in [entry["transactional_id"] for entry in json.loads(committed.stdout)]

    described = run_strom("transactions", "describe", transactional_id, "--output", "json", *server)
    assert described.returncode == 0, described.stderr
    [entry] = json.loads(described.stdout)
    assert entry["state"] == "Ongoing"
    assert entry["producer_epoch"] == 0 and entry["producer_id"] == int(row[1])
    assert entry["partitions"] == [{"topic": topic, "partition": 0}, {"topic": topic, "partition": 1}]
    assert entry["duration_ms"] >= 0 and entry["timeout_ms"] == 60_000

    table = run_strom("transactions", "describe", transactional_id, *server)
    assert table.returncode == 0
    assert f"{topic}-0,{topic}-1" in table.stdout

    producer.commit_transaction(TIMEOUT_S)
    after = run_strom("transactions", "describe", transactional_id, "--output", "json", *server)
    [entry] = json.loads(after.stdout)
    assert (entry["state"], entry["partitions"], entry["duration_ms"]) == ("CompleteCommit", [], None)

    missing = run_strom("transactions", "describe", "no-such-id", *server)
    assert missing.returncode == 1
    assert missing.stderr.strip() == (
        "strom: error: transactional id 'no-such-id' does not exist; "
        "`strom transactions list` shows the ids there are"
    )


def test_consume_read_committed_stops_at_the_open_transaction(
    shared_broker: BrokerProcess, live_transaction: tuple[str, str, Producer]
) -> None:
    topic, _, producer = live_transaction
    base = ["consume", topic, "--from-beginning", "--bootstrap-server", shared_broker.bootstrap]

    committed = run_strom(*base, "--isolation-level", "read_committed", "--until", "end")
    assert committed.returncode == 0, committed.stderr
    assert sorted(committed.stdout.splitlines()) == ["c-0", "c-1", "c-2", "c-3"]

    everything = run_strom(*base, "--until", "end")
    assert sorted(everything.stdout.splitlines()) == ["c-0", "c-1", "c-2", "c-3", "o-0", "o-1"]

    producer.abort_transaction(TIMEOUT_S)
    after_abort = run_strom(*base, "--isolation-level", "read_committed", "--until", "end")
    assert sorted(after_abort.stdout.splitlines()) == ["c-0", "c-1", "c-2", "c-3"]
