"""``strom transactions``: the reports from the admin client's real result types, and the commands
run through ``main`` against an in-memory admin (no sockets): tables, JSON, filters passed on,
missing ids named, and the usage errors."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from strom.cli import transactions
from strom.cli.main import main
from strom.client.admin import TransactionDescription, TransactionListing
from strom.client.cluster import TopicPartition
from strom.client.errors import error_for_code
from strom.protocol.errors import ErrorCode

NOW_MS = 1_700_000_010_000
OPEN = TransactionDescription(
    transactional_id="billing-0",
    coordinator_id=2,
    state="Ongoing",
    producer_id=7,
    producer_epoch=3,
    timeout_ms=60_000,
    start_time_ms=1_700_000_000_000,
    partitions=[TopicPartition("orders", 0), TopicPartition("orders", 2)],
)
DONE = TransactionDescription(
    transactional_id="billing-1",
    coordinator_id=1,
    state="CompleteCommit",
    producer_id=8,
    producer_epoch=0,
    timeout_ms=60_000,
    start_time_ms=1_699_999_000_000,
    partitions=[],
)


class FakeAdmin:
    def __init__(self) -> None:
        self.described = {OPEN.transactional_id: OPEN, DONE.transactional_id: DONE}
        self.list_calls: list[dict[str, Any]] = []

    def list_transactions(
        self,
        states: Iterable[str] | None = None,
        producer_ids: Iterable[int] | None = None,
        duration_ms: int | None = None,
    ) -> list[TransactionListing]:
        self.list_calls.append({"states": states, "producer_ids": producer_ids, "duration_ms": duration_ms})
        return [
            TransactionListing(description.transactional_id, description.producer_id, description.state)
            for description in reversed(self.described.values())
        ]

    def describe_transactions(self, transactional_ids: Iterable[str]) -> dict[str, TransactionDescription]:
        found = {}
        for transactional_id in transactional_ids:
            if transactional_id not in self.described:
                raise error_for_code(
                    ErrorCode.TRANSACTIONAL_ID_NOT_FOUND,
                    context=f"describe transactional id {transactional_id!r}",
                )
            found[transactional_id] = self.described[transactional_id]
        return found


@pytest.fixture
def admin(monkeypatch: pytest.MonkeyPatch) -> FakeAdmin:
    fake = FakeAdmin()

    @contextmanager
    def open_fake(arguments: Any) -> Iterator[FakeAdmin]:
        yield fake

    monkeypatch.setattr(transactions, "open_admin", open_fake)
    monkeypatch.setattr(transactions.time, "time", lambda: NOW_MS / 1000)
    return fake


def run(capsys: pytest.CaptureFixture[str], *arguments: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(arguments))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# -- reports --------------------------------------------------------------------------------------------


def test_the_list_report_is_sorted_and_says_when_empty() -> None:
    report = transactions.list_transactions_report(
        [TransactionListing("b", 2, "Ongoing"), TransactionListing("a", 1, "Empty")]
    )
    assert report.value == [
        {"transactional_id": "a", "producer_id": 1, "state": "Empty"},
        {"transactional_id": "b", "producer_id": 2, "state": "Ongoing"},
    ]
    assert transactions.list_transactions_report([]).notes == ["no transactional ids"]


def test_the_describe_report_shows_the_open_transaction_only() -> None:
    report = transactions.describe_transactions_report([OPEN, DONE], NOW_MS)
    assert report.value[0] == {
        "transactional_id": "billing-0",
        "coordinator": 2,
        "state": "Ongoing",
        "producer_id": 7,
        "producer_epoch": 3,
        "timeout_ms": 60_000,
        "start_time_ms": 1_700_000_000_000,
        "start_time": "2023-11-14T22:13:20.000Z",
        "duration_ms": 10_000,
        "partitions": [{"topic": "orders", "partition": 0}, {"topic": "orders", "partition": 2}],
    }
    done = report.value[1]
    assert (done["start_time_ms"], done["start_time"], done["duration_ms"], done["partitions"]) == (
        None,
        None,
        None,
        [],
    )


# -- commands ------------------------------------------------------------------------------------------


def test_list_prints_a_table_and_passes_the_filters_on(
    admin: FakeAdmin, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "transactions", "list")
    assert code == 0
    assert out.splitlines() == [
        "TRANSACTIONAL-ID  PRODUCER-ID  STATE",
        "billing-0                   7  Ongoing",
        "billing-1                   8  CompleteCommit",
    ]
    code, out, _ = run(
        capsys,
        "transactions",
        "list",
        "--state",
        "Ongoing",
        "--state",
        "PrepareCommit",
        "--producer-id",
        "7",
        "--older-than-ms",
        "5000",
        "--output",
        "json",
    )
    assert code == 0 and json.loads(out)[0]["transactional_id"] == "billing-0"
    assert admin.list_calls[-1] == {
        "states": ["Ongoing", "PrepareCommit"],
        "producer_ids": [7],
        "duration_ms": 5000,
    }


def test_describe_prints_one_row_per_id(admin: FakeAdmin, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "transactions", "describe", "billing-0", "billing-1")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == [
        "TRANSACTIONAL-ID",
        "COORDINATOR",
        "PRODUCER-ID",
        "EPOCH",
        "STATE",
        "TIMEOUT-MS",
        "START-TIME",
        "DURATION-MS",
        "PARTITIONS",
    ]
    assert lines[1].split() == [
        "billing-0",
        "2",
        "7",
        "3",
        "Ongoing",
        "60000",
        "2023-11-14T22:13:20.000Z",
        "10000",
        "orders-0,orders-2",
    ]
    assert lines[2].split() == ["billing-1", "1", "8", "0", "CompleteCommit", "60000", "-", "-", "-"]


def test_describe_names_the_ids_that_do_not_exist_and_exits_1(
    admin: FakeAdmin, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "transactions", "describe", "billing-0", "nope", "--output", "json")
    assert code == 1
    assert [entry["transactional_id"] for entry in json.loads(out)] == ["billing-0"]
    assert err.strip() == (
        "strom: error: transactional id 'nope' does not exist; `strom transactions list` shows the ids there are"
    )


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["transactions", "list", "--state", "Bogus"], "invalid choice: 'Bogus'"),
        (["transactions", "list", "--older-than-ms", "-1"], "--older-than-ms must not be negative"),
        (["transactions", "describe"], "the following arguments are required: ID"),
        (["transactions"], "the following arguments are required: COMMAND"),
    ],
)
def test_usage_errors_exit_2(
    admin: FakeAdmin, capsys: pytest.CaptureFixture[str], arguments: list[str], message: str
) -> None:
    try:
        code = main(arguments)
    except SystemExit as exited:  # argparse's own usage errors
        code = exited.code
    assert code == 2
    assert message in capsys.readouterr().err
    assert admin.list_calls == []


def test_consume_takes_the_isolation_level() -> None:
    from strom.cli.main import build_parser

    parsed = build_parser().parse_args(["consume", "t", "--isolation-level", "read_committed"])
    assert parsed.isolation_level == "read_committed"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["consume", "t", "--isolation-level", "serializable"])
