"""DescribeTransactions and ListTransactions."""

from __future__ import annotations

from strom.coordinator.transactions import (
    ListedTransaction,
    TopicPartition,
    TransactionDescription,
    TransactionState,
)
from strom.protocol.errors import ErrorCode
from tests.unit.coordinator.transactions.harness import Harness

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def test_describe_an_open_transaction() -> None:
    harness = Harness()
    began_ms = harness.clock.wall_ms()
    producer_id, epoch = harness.begin("t", B0, A1, A0, timeout_ms=30_000)
    (description,) = harness.coordinator.describe_transactions(["t"])
    assert description == TransactionDescription(
        transactional_id="t",
        error=ErrorCode.NONE,
        state="Ongoing",
        timeout_ms=30_000,
        start_timestamp_ms=began_ms,
        producer_id=producer_id,
        producer_epoch=epoch,
        partitions=(A0, A1, B0),
    )


def test_describe_a_completing_transaction_shows_the_partitions_still_without_a_marker() -> None:
    harness = Harness()
    producer_id, epoch = harness.begin("t", A0, B0)
    harness.markers.defer = True
    harness.end_error("t", producer_id, epoch)
    (description,) = harness.coordinator.describe_transactions(["t"])
    assert (description.state, description.partitions) == ("PrepareCommit", (A0, B0))
    harness.markers.answer_deferred(1)
    assert harness.coordinator.describe_transactions(["t"])[0].partitions == (B0,)
    harness.markers.answer_deferred()
    (description,) = harness.coordinator.describe_transactions(["t"])
    assert (description.state, description.partitions) == ("CompleteCommit", ())


def test_describe_errors_per_id_in_the_order_asked() -> None:
    harness = Harness(partitions=())
    owned = harness.partition_of("t")
    harness.coordinator.load(owned, 1, [])
    harness.init_ok("t")
    other = next(
        transactional_id
        for transactional_id in (f"id-{n}" for n in range(100))
        if harness.partition_of(transactional_id) != owned
    )
    described = harness.coordinator.describe_transactions([other, "t", "unknown-but-here"])
    assert [(d.transactional_id, d.error) for d in described] == [
        (other, ErrorCode.NOT_COORDINATOR),
        ("t", ErrorCode.NONE),
        (
            "unknown-but-here",
            ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
            if harness.partition_of("unknown-but-here") == owned
            else ErrorCode.NOT_COORDINATOR,
        ),
    ]
    assert described[0] == TransactionDescription(other, ErrorCode.NOT_COORDINATOR)


def test_describe_a_new_id_whose_first_record_is_in_flight_is_not_found() -> None:
    harness = Harness()
    harness.log.defer = True
    harness.init()
    assert harness.coordinator.describe_transactions(["t"])[0].error == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND


def three_transactions(harness: Harness) -> None:
    harness.init_ok("empty")
    harness.begin("ongoing", A0)
    committed = harness.begin("committed", A0)
    harness.end_error("committed", *committed)


def test_list_everything() -> None:
    harness = Harness()
    three_transactions(harness)
    listing = harness.coordinator.list_transactions()
    assert listing.error == ErrorCode.NONE
    assert listing.transactions == (
        ListedTransaction("committed", 1002, "CompleteCommit"),
        ListedTransaction("empty", 1000, "Empty"),
        ListedTransaction("ongoing", 1001, "Ongoing"),
    )


def test_list_by_state_and_producer_id_with_unknown_states_returned() -> None:
    harness = Harness()
    three_transactions(harness)
    listing = harness.coordinator.list_transactions(["Ongoing", "Empty", "Stable"], [1001, 1002])
    assert listing.unknown_state_filters == ("Stable",)
    assert [listed.transactional_id for listed in listing.transactions] == ["ongoing"]
    # Only unknown states: nothing matches.
    assert harness.coordinator.list_transactions(["Nope"]).transactions == ()
    states = {state.value for state in TransactionState}
    assert {listed.state for listed in harness.coordinator.list_transactions().transactions} <= states


def test_list_by_duration_keeps_transactions_running_longer_than_it() -> None:
    harness = Harness()
    harness.begin("old", A0)
    harness.advance(5_000)
    harness.begin("young", A0)
    harness.advance(1_000)
    listing = harness.coordinator.list_transactions(["Ongoing"], duration_filter_ms=5_000)
    assert [listed.transactional_id for listed in listing.transactions] == ["old"]
    assert len(harness.coordinator.list_transactions(["Ongoing"], duration_filter_ms=-1).transactions) == 2


def test_list_only_what_this_coordinator_owns() -> None:
    harness = Harness()
    three_transactions(harness)
    harness.coordinator.unload(harness.partition_of("ongoing"))
    listed = {listed.transactional_id for listed in harness.coordinator.list_transactions().transactions}
    assert "ongoing" not in listed
