"""Partition reassignment on a single real broker, through strom's own admin client and
``strom topics reassign`` / ``strom topics reassignments``: the one broker holds every partition
already, so a move to it is accepted, any other broker id is refused as not registered, there is
never a move to cancel, and the list of moves in progress is empty."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from strom.cli.main import main
from strom.client.admin import Admin
from strom.client.cluster import TopicPartition
from strom.protocol.errors import ErrorCode
from tests.compat.conftest import BrokerProcess
from tests.compat.support import create_topic, unique_topic

pytestmark = pytest.mark.compat


@pytest.fixture
def admin(shared_broker: BrokerProcess) -> Iterator[Admin]:
    with Admin({"bootstrap.servers": shared_broker.bootstrap}) as client:
        yield client


def only_broker(admin: Admin, topic: str) -> int:
    """The node id of the broker holding every partition of ``topic`` (its one replica)."""
    replicas = {partition.replicas for partition in admin.describe_topics([topic])[topic].partitions}
    [[node]] = replicas
    return node


def run_cli(capsys: pytest.CaptureFixture[str], broker: BrokerProcess, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([*argv, "--bootstrap-server", broker.bootstrap])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_admin_client_reassigns_on_a_single_node(shared_broker: BrokerProcess, admin: Admin) -> None:
    topic = unique_topic("reassign-admin")
    create_topic(shared_broker.bootstrap, topic, 1)
    node = only_broker(admin, topic)
    tp = TopicPartition(topic, 0)

    assert admin.alter_partition_reassignments({tp: [node]}) == {tp: None}

    refused = admin.alter_partition_reassignments({tp: [node, node + 1], TopicPartition(topic, 3): [node]})
    other = refused[tp]
    assert other is not None and other.code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert str(other).startswith(f"reassign {topic}-0: ")
    assert f"broker {node} is the only one registered" in str(other)
    missing = refused[TopicPartition(topic, 3)]
    assert missing is not None and missing.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    cancelled = admin.alter_partition_reassignments({tp: None})[tp]
    assert cancelled is not None and cancelled.code == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
    assert str(cancelled).startswith(f"cancel the reassignment of {topic}-0: ")

    assert admin.list_partition_reassignments() == {}
    assert admin.list_partition_reassignments([tp]) == {}
    assert admin.describe_topics([topic])[topic].partitions[0].replicas == (node,)


def test_the_cli_reassigns_on_a_single_node(
    shared_broker: BrokerProcess, admin: Admin, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = unique_topic("reassign-cli")
    create_topic(shared_broker.bootstrap, topic, 2)
    node = only_broker(admin, topic)

    code, out, err = run_cli(
        capsys, shared_broker, "topics", "reassign", topic, "--partition", "0,1", "--replicas", str(node)
    )
    assert code == 0, err
    assert out.splitlines() == [
        f"reassigning {topic}-0 to replicas {node}",
        f"reassigning {topic}-1 to replicas {node}",
    ]

    code, out, err = run_cli(
        capsys, shared_broker, "topics", "reassign", topic, "--partition", "1", "--replicas", f"{node + 1}"
    )
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        f"refused: reassign {topic}-1: replicas [{node + 1}]: broker {node} is the only one registered "
        "(INVALID_REPLICA_ASSIGNMENT)",
        "strom: error: 0 of 1 partitions reassigned",
    ]

    code, out, err = run_cli(
        capsys, shared_broker, "topics", "reassign", topic, "--partition", "0", "--cancel"
    )
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        f"refused: cancel the reassignment of {topic}-0: no reassignment of {topic}-0 is in progress "
        "(NO_REASSIGNMENT_IN_PROGRESS)",
        "strom: error: 0 of 1 partitions cancelled",
    ]
    code, _, err = run_cli(capsys, shared_broker, "topics", "reassign", topic, "--cancel")
    assert (code, err) == (
        1,
        f"strom: error: no reassignment of topic {topic!r} is in progress: nothing to cancel\n",
    )

    code, out, _ = run_cli(capsys, shared_broker, "topics", "reassignments")
    assert code == 0 and out.splitlines()[-1] == "no reassignments in progress"
    code, out, _ = run_cli(capsys, shared_broker, "topics", "reassignments", topic, "--output", "json")
    assert (code, json.loads(out)) == (0, [])
    code, _, err = run_cli(capsys, shared_broker, "topics", "reassignments", unique_topic("absent"))
    assert code == 1 and "(UNKNOWN_TOPIC_OR_PARTITION)" in err
