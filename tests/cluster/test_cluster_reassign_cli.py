"""``strom topics reassign`` and strom's own admin client on three real brokers and a real
ZooKeeper: a partition of a replication-factor-2 topic on brokers [1, 2] (1 leading) moves to
[2, 3] with the CLI, pointed at a broker that is not the controller; within a bounded wait
Metadata (``strom topics describe``) names replicas and ISR [2, 3] with a leader among them, the
list of moves in progress is empty again, and every record acknowledged with acks=all before the
move is read back once, in order. And the way to the controller: an admin client whose metadata
names a broker that is not the controller (a stale view) is answered NOT_CONTROLLER, looks the
controller up again and gets its answer."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from strom.cli.dev_cluster import LocalCluster
from strom.cli.main import main
from strom.client.admin import Admin, NewTopic
from strom.client.cluster import TopicPartition
from strom.protocol.errors import ErrorCode

from .cluster_support import wait_until
from .workload import produce_all, read_log

RECORDS = 500
# A copy of a few hundred records and the writes that end the move, on a loaded machine.
MOVE_WAIT_S = 30.0
SOURCE = [1, 2]
TARGET = [2, 3]


@pytest.fixture
def admin(cluster: LocalCluster) -> Iterator[Admin]:
    with Admin({"bootstrap.servers": cluster.bootstrap}) as client:
        yield client


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_cli_moves_a_replica_and_every_acknowledged_record_stays(
    cluster: LocalCluster, admin: Admin, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = f"reassign-cli-{time.monotonic_ns()}"
    admin.create_topics([NewTopic(topic, replica_assignment={0: SOURCE})])
    wait_until(
        lambda: sorted(admin.describe_topics([topic])[topic].partitions[0].isr) == SOURCE,
        f"{topic}-0 led with ISR {SOURCE}",
    )
    values = [b"record-%d" % index for index in range(RECORDS)]
    deliveries = produce_all(cluster.bootstrap, topic, values, acks="all")
    assert deliveries.errors == [] and deliveries.count == RECORDS
    acknowledged = deliveries.acknowledged[0]

    controller = admin.describe_cluster().controller_id
    elsewhere = next(node for node in sorted(cluster.brokers) if node != controller)
    bootstrap = cluster.brokers[elsewhere].address
    code, out, err = run_cli(
        capsys,
        "topics",
        "reassign",
        topic,
        "--partition",
        "0",
        "--replicas",
        ",".join(map(str, TARGET)),
        "--bootstrap-server",
        bootstrap,
    )
    assert (code, out) == (0, f"reassigning {topic}-0 to replicas 2,3\n"), err

    def moved() -> bool:
        [partition] = admin.describe_topics([topic])[topic].partitions
        return list(partition.replicas) == TARGET and sorted(partition.isr) == TARGET

    wait_until(moved, f"{topic}-0 on replicas and ISR {TARGET}", timeout_s=MOVE_WAIT_S)
    wait_until(
        lambda: admin.list_partition_reassignments([TopicPartition(topic, 0)]) == {},
        f"the move of {topic}-0 to end",
        timeout_s=MOVE_WAIT_S,
    )

    code, out, err = run_cli(
        capsys, "topics", "describe", topic, "--output", "json", "--bootstrap-server", bootstrap
    )
    assert code == 0, err
    [partition] = json.loads(out)[0]["partitions"]
    assert (partition["replicas"], sorted(partition["isr"])) == (TARGET, TARGET)
    assert partition["leader"] in TARGET
    code, out, _ = run_cli(capsys, "topics", "reassignments", topic, "--bootstrap-server", bootstrap)
    assert code == 0 and out.splitlines()[-1] == "no reassignments in progress"

    assert read_log(cluster.bootstrap, topic, 0) == acknowledged


def test_a_stale_controller_is_looked_up_again(
    cluster: LocalCluster, admin: Admin, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = f"reassign-stale-{time.monotonic_ns()}"
    admin.create_topics([NewTopic(topic, replica_assignment={0: SOURCE})])
    controller = admin.describe_cluster().controller_id
    transport = admin._transport  # the client's view, made stale on purpose
    answers: list[tuple[int, str]] = []
    send = transport.send

    async def recording(node_id: int, request: Any, **options: Any) -> Any:
        response = await send(node_id, request, **options)
        if "Reassignments" in type(request).__name__:
            answers.append((node_id, ErrorCode(response.error_code).name))
        return response

    monkeypatch.setattr(transport, "send", recording)
    admin.list_topics()
    stale = next(node for node in sorted(transport.metadata.brokers) if node != controller)

    transport.metadata.controller_id = stale
    answers.clear()
    assert admin.list_partition_reassignments() == {}
    assert answers == [(stale, "NOT_CONTROLLER"), (controller, "NONE")]

    transport.metadata.controller_id = stale
    answers.clear()
    tp = TopicPartition(topic, 0)
    outcome = admin.alter_partition_reassignments({tp: None})[tp]  # nothing to cancel: changes nothing
    assert outcome is not None and outcome.code == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
    assert answers == [(stale, "NOT_CONTROLLER"), (controller, "NONE")]
