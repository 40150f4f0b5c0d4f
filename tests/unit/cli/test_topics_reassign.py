"""``strom topics reassign`` and ``strom topics reassignments`` through ``main`` against an
in-memory admin (no sockets): what is asked of the admin client, what is printed for each
partition, the exit codes of refusals and of arguments that do not fit, and the list as a table
and as JSON."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import pytest

from strom.cli import topics
from strom.cli.main import main
from strom.client.admin import PartitionDescription, PartitionReassignment, TopicDescription
from strom.client.cluster import TopicPartition
from strom.client.errors import BrokerResponseError, error_for_code
from strom.protocol.errors import ErrorCode

ORDERS = "orders"
MOVING = {
    TopicPartition(ORDERS, 1): PartitionReassignment((2, 3, 1), (3,), (1,)),
    TopicPartition("audit", 0): PartitionReassignment((1, 2, 3), (), (3,)),
}


class FakeAdmin:
    """Topics ``orders`` (3 partitions) and ``audit`` (1) on brokers 1-3; ``MOVING`` in progress."""

    def __init__(self) -> None:
        self.partitions = {ORDERS: 3, "audit": 1}
        self.asked: list[dict[TopicPartition, list[int] | None]] = []
        self.listed: list[list[TopicPartition] | None] = []

    def describe_topics(self, names: Iterable[str]) -> dict[str, TopicDescription]:
        found = {}
        for name in names:
            if name not in self.partitions:
                raise error_for_code(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, context=f"topic {name!r}")
            found[name] = TopicDescription(
                name,
                [PartitionDescription(index, 1, (1, 2), (1, 2)) for index in range(self.partitions[name])],
            )
        return found

    def alter_partition_reassignments(
        self, reassignments: Mapping[TopicPartition, Sequence[int] | None], timeout_ms: int = 30_000
    ) -> dict[TopicPartition, BrokerResponseError | None]:
        self.asked.append(
            {tp: None if target is None else list(target) for tp, target in reassignments.items()}
        )
        outcomes: dict[TopicPartition, BrokerResponseError | None] = {}
        for tp, target in reassignments.items():
            name = f"{tp.topic}-{tp.partition}"
            if tp.partition >= self.partitions.get(tp.topic, 0):
                outcomes[tp] = error_for_code(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{name} does not exist", f"reassign {name}"
                )
            elif target is None and tp not in MOVING:
                outcomes[tp] = error_for_code(
                    ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                    f"no reassignment of {name} is in progress",
                    f"cancel the reassignment of {name}",
                )
            elif target is not None and any(broker > 3 for broker in target):
                outcomes[tp] = error_for_code(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"brokers {[broker for broker in target if broker > 3]} are not registered (not alive)",
                    f"reassign {name}",
                )
            else:
                outcomes[tp] = None
        return outcomes

    def list_partition_reassignments(
        self, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, PartitionReassignment]:
        wanted = None if partitions is None else list(partitions)
        self.listed.append(wanted)
        return {tp: moving for tp, moving in MOVING.items() if wanted is None or tp in wanted}


@pytest.fixture
def admin(monkeypatch: pytest.MonkeyPatch) -> FakeAdmin:
    fake = FakeAdmin()

    @contextmanager
    def open_fake(arguments: Any) -> Iterator[FakeAdmin]:
        yield fake

    monkeypatch.setattr(topics, "open_admin", open_fake)
    return fake


def run(capsys: pytest.CaptureFixture[str], *arguments: str) -> tuple[int, str, str]:
    """``strom ARGUMENTS``: exit code, stdout, stderr (argparse's own errors exit; ours return)."""
    capsys.readouterr()
    try:
        code = main(list(arguments))
    except SystemExit as exited:
        assert isinstance(exited.code, int)
        code = exited.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# -- reassign -------------------------------------------------------------------------------------------


def test_reassign_moves_each_partition_named_to_the_replicas_given(
    admin: FakeAdmin, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(
        capsys, "topics", "reassign", ORDERS, "--partition", "2,0", "--partition", "0", "--replicas", "3,2"
    )
    assert code == 0
    assert admin.asked == [{TopicPartition(ORDERS, 0): [3, 2], TopicPartition(ORDERS, 2): [3, 2]}]
    assert out.splitlines() == [
        "reassigning orders-0 to replicas 3,2",
        "reassigning orders-2 to replicas 3,2",
    ]
    assert err == "`strom topics reassignments orders` shows the moves until they end\n"


def test_reassign_names_each_partition_refused_and_exits_1(
    admin: FakeAdmin, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "topics", "reassign", ORDERS, "--partition", "1,7", "--replicas", "2,3")
    assert code == 1
    assert out == "reassigning orders-1 to replicas 2,3\n"
    assert err.splitlines() == [
        "`strom topics reassignments orders` shows the moves until they end",
        "refused: reassign orders-7: orders-7 does not exist (UNKNOWN_TOPIC_OR_PARTITION); "
        "`strom topics list` shows the topics there are",
        "strom: error: 1 of 2 partitions reassigned",
    ]
    code, out, err = run(capsys, "topics", "reassign", ORDERS, "--partition", "0", "--replicas", "1,4")
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        "refused: reassign orders-0: brokers [4] are not registered (not alive) (INVALID_REPLICA_ASSIGNMENT)",
        "strom: error: 0 of 1 partitions reassigned",
    ]


def test_cancel_the_partitions_named_or_every_move_of_the_topic(
    admin: FakeAdmin, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "topics", "reassign", ORDERS, "--cancel")
    assert (code, out, err) == (0, "cancelled the reassignment of orders-1\n", "")
    assert admin.listed == [[TopicPartition(ORDERS, index) for index in range(3)]]
    assert admin.asked == [{TopicPartition(ORDERS, 1): None}]

    code, out, err = run(capsys, "topics", "reassign", ORDERS, "--partition", "0", "--cancel")
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        "refused: cancel the reassignment of orders-0: no reassignment of orders-0 is in progress "
        "(NO_REASSIGNMENT_IN_PROGRESS)",
        "strom: error: 0 of 1 partitions cancelled",
    ]

    admin.partitions["idle"] = 2
    code, out, err = run(capsys, "topics", "reassign", "idle", "--cancel")
    assert (code, out) == (1, "")
    assert err == "strom: error: no reassignment of topic 'idle' is in progress: nothing to cancel\n"
    assert len(admin.asked) == 2


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--replicas", "2,3"], "name the partitions to move: --partition P[,P...]"),
        (["--partition", "0"], "one of the arguments --replicas --cancel is required"),
        (["--partition", "0", "--replicas", "2", "--cancel"], "not allowed with argument"),
        (["--partition", "0", "--replicas", "2,x"], "replicas are numbers separated by commas"),
        (["--partition", "0", "--replicas", "2,3,2"], "2 named twice in '2,3,2'"),
        (["--partition", "-1", "--replicas", "2"], "partitions are numbers separated by commas"),
        (["--partition", "0,", "--replicas", "2"], "partitions are numbers separated by commas"),
    ],
)
def test_arguments_that_do_not_fit_exit_2_before_asking(
    admin: FakeAdmin, capsys: pytest.CaptureFixture[str], arguments: list[str], message: str
) -> None:
    code, out, err = run(capsys, "topics", "reassign", ORDERS, *arguments)
    assert (code, out) == (2, "")
    assert err.startswith("usage: strom topics reassign") and message in err
    assert admin.asked == admin.listed == []


# -- reassignments ---------------------------------------------------------------------------------------


def test_reassignments_lists_the_moves_in_progress_as_a_table_and_json(
    admin: FakeAdmin, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "topics", "reassignments")
    assert code == 0 and admin.listed == [None]
    assert out.splitlines() == [
        "TOPIC   PARTITION  REPLICAS  ADDING  REMOVING",
        "audit           0  1,2,3          -         3",
        "orders          1  2,3,1          3         1",
    ]
    code, out, _ = run(capsys, "topics", "reassignments", ORDERS, "--output", "json")
    assert code == 0
    assert admin.listed[-1] == [TopicPartition(ORDERS, index) for index in range(3)]
    assert json.loads(out) == [
        {
            "topic": ORDERS,
            "partition": 1,
            "replicas": [2, 3, 1],
            "adding_replicas": [3],
            "removing_replicas": [1],
        }
    ]


def test_reassignments_says_when_nothing_moves_and_refuses_an_unknown_topic(
    admin: FakeAdmin, capsys: pytest.CaptureFixture[str]
) -> None:
    admin.partitions["idle"] = 1
    code, out, _ = run(capsys, "topics", "reassignments", "idle")
    assert code == 0 and out.splitlines()[-1] == "no reassignments in progress"
    assert run(capsys, "topics", "reassignments", "idle", "--output", "json") == (0, "[]\n", "")
    code, out, err = run(capsys, "topics", "reassignments", "nope")
    assert (code, out) == (1, "")
    assert err.startswith(
        "strom: error: topic 'nope': no such topic or partition (UNKNOWN_TOPIC_OR_PARTITION)"
    )
