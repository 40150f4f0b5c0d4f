"""The transaction coordinator as a single broker hosts it (``TransactionService``), through
dispatch: FindCoordinator makes ``__transaction_state``, InitProducerId / AddPartitionsToTxn /
EndTxn / DescribeTransactions are answered by the coordinator, markers are written into the
broker's own partitions, and a restart loads the transactional ids back."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from strom.protocol.errors import ErrorCode
from strom.protocol.messages.add_partitions_to_txn import AddPartitionsToTxnRequest
from strom.protocol.messages.describe_transactions import DescribeTransactionsRequest
from strom.protocol.messages.end_txn import EndTxnRequest
from strom.protocol.messages.find_coordinator import FindCoordinatorRequest
from strom.protocol.messages.init_producer_id import InitProducerIdRequest
from strom.protocol.records import build_batch
from strom.protocol.records.batch import Record
from tests.unit.broker.conftest import InProcessBroker
from tests.unit.broker.test_dispatch import create_topic, produce
from tests.unit.broker.test_transactions_read import READ_COMMITTED, fetch

TRANSACTION_KEY_TYPE = 1
# Ample for a loop that only waits for its own file writes and flushes (each a few milliseconds).
SETTLE_ROUNDS_MAX = 2_000


class TransactionBroker(InProcessBroker):
    """An in-process broker whose transaction coordinator runs (loading ``__transaction_state``
    if it exists, as a broker does at start)."""

    def __init__(self, data_dir: Path, values: dict[str, str]) -> None:
        super().__init__(data_dir, values)

        async def start_transactions() -> None:
            self.server.state.transactions.start()

        self.loop.run_until_complete(start_transactions())

    def run_until(self, condition: Callable[[], bool], what: str) -> None:
        """Run the event loop (its tasks: loading, markers, flushes) until ``condition`` holds."""
        for _ in range(SETTLE_ROUNDS_MAX):
            if condition():
                return
            self.loop.run_until_complete(asyncio.sleep(0.001))
        raise AssertionError(f"never: {what}")

    def describe(self, transactional_id: str) -> Any:
        response = self.call(DescribeTransactionsRequest(transactional_ids=[transactional_id]), 0)
        return response.transaction_states[0]


def begin(broker: TransactionBroker, transactional_id: str, topic: str) -> tuple[int, int]:
    """InitProducerId, AddPartitionsToTxn of ``topic``-0 and a transactional batch written there."""
    found = broker.call(FindCoordinatorRequest(key=transactional_id, key_type=TRANSACTION_KEY_TYPE), 3)
    assert found.error_code == ErrorCode.NONE, found
    init = broker.call(
        InitProducerIdRequest(transactional_id=transactional_id, transaction_timeout_ms=60_000), 4
    )
    assert init.error_code == ErrorCode.NONE, init
    producer_id, epoch = init.producer_id, init.producer_epoch
    add = broker.call(
        AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=transactional_id,
            v3_and_below_producer_id=producer_id,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=[
                AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=topic, partitions=[0])
            ],
        ),
        3,
    )
    assert add.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == ErrorCode.NONE
    records = build_batch(
        [Record(offset_delta=0, timestamp_delta=0, key=None, value=b"in a transaction")],
        base_timestamp=1_000,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=0,
        is_transactional=True,
    )
    assert produce(broker, topic, records).error_code == ErrorCode.NONE
    return producer_id, epoch


@pytest.mark.parametrize(("made_with", "restarted_with"), [("5", "50"), ("50", "5")])
def test_a_restart_with_another_partition_count_keeps_every_transaction(
    tmp_path: Path, made_with: str, restarted_with: str
) -> None:
    """__transaction_state made with one transaction.state.log.num.partitions, the broker restarted
    with another: the ids stay where the topic's own count puts them, so an open transaction is
    found and committed, and read_committed reads past it. (With the configured count, 5 -> 50
    skipped every id's records as misplaced and left the transaction open for good, holding the
    last stable offset; 50 -> 5 did not start: the load asserted on partition 5.)"""
    data_dir = tmp_path / "data"
    first = TransactionBroker(data_dir, {"transaction.state.log.num.partitions": made_with})
    try:
        create_topic(first, "events")
        producer_id, epoch = begin(first, "payments", "events")
    finally:
        first.close()

    restarted = TransactionBroker(data_dir, {"transaction.state.log.num.partitions": restarted_with})
    try:
        transactions = restarted.server.state.transactions
        restarted.run_until(lambda: not transactions.loading_partitions(), "__transaction_state loaded")
        described = restarted.describe("payments")
        assert (described.error_code, described.transaction_state) == (ErrorCode.NONE, "Ongoing")
        assert fetch(restarted, "events", {0: 0}, isolation_level=READ_COMMITTED)[0].last_stable_offset == 0

        end = restarted.call(
            EndTxnRequest(
                transactional_id="payments", producer_id=producer_id, producer_epoch=epoch, committed=True
            ),
            3,
        )
        assert end.error_code == ErrorCode.NONE
        restarted.run_until(
            lambda: restarted.describe("payments").transaction_state == "CompleteCommit",
            "the commit completed",
        )
        answer = fetch(restarted, "events", {0: 0}, isolation_level=READ_COMMITTED)[0]
        assert answer.last_stable_offset == answer.high_watermark == 2  # the batch and its marker
        assert transactions.coordinator.partition_count == int(made_with)
    finally:
        restarted.close()


def test_leading_a_partition_beyond_the_configured_count_is_said_not_asserted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A cluster broker configured with 5 partitions told to lead __transaction_state-7 (the topic
    made by brokers configured with more): an error naming the setting, the other partitions it
    leads still loaded — not an assertion failing the whole leadership change."""
    broker = TransactionBroker(tmp_path / "data", {"transaction.state.log.num.partitions": "5"})
    try:
        transactions = broker.server.state.transactions

        async def lead() -> None:
            transactions.become_coordinator(7, 3)
            transactions.become_coordinator(2, 3)

        broker.loop.run_until_complete(lead())
        assert transactions.loading_partitions() == [2]
        assert transactions.coordinator.coordinator_epoch(7) is None
        assert "leading __transaction_state-7, but transaction.state.log.num.partitions is 5" in caplog.text
    finally:
        broker.close()
