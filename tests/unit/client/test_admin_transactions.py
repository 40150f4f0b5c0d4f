"""Admin transaction operations without a broker: FindCoordinator for a transactional id at every
version, a DescribeTransactions answer read into a ``TransactionDescription``, its errors raised."""

from __future__ import annotations

from typing import Any

import pytest

from strom.client.admin import (
    TRANSACTION_KEY_TYPE,
    TransactionDescription,
    coordinator_from_response,
    find_coordinator_request,
    transaction_description_from,
)
from strom.client.cluster import BrokerNode, TopicPartition
from strom.client.errors import BrokerResponseError, ProtocolError, UnsupportedVersionError
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.describe_transactions import DescribeTransactionsResponse
from strom.protocol.messages.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse


def wire(message: Any, version: int) -> Any:
    return type(message).decode(memoryview(message.encode(version)), version)


@pytest.mark.parametrize(
    "version", range(FindCoordinatorRequest.MIN_VERSION, FindCoordinatorRequest.MAX_VERSION + 1)
)
def test_find_coordinator_of_a_transactional_id(version: int) -> None:
    if version == 0:
        with pytest.raises(UnsupportedVersionError, match="v1"):
            find_coordinator_request("tx-1", version, TRANSACTION_KEY_TYPE)
        return
    sent = wire(find_coordinator_request("tx-1", version, TRANSACTION_KEY_TYPE), version)
    assert (sent.coordinator_keys if version >= 4 else [sent.key]) == ["tx-1"]
    assert sent.key_type == TRANSACTION_KEY_TYPE


def test_the_coordinator_answer_names_a_transactional_id_in_its_errors() -> None:
    response = FindCoordinatorResponse(
        coordinators=[FindCoordinatorResponse.Coordinator(key="tx-1", node_id=3, host="h", port=9092)]
    )
    assert coordinator_from_response(response, "tx-1", 4, TRANSACTION_KEY_TYPE) == BrokerNode(3, "h", 9092)
    with pytest.raises(ProtocolError, match="transactional id 'tx-2'"):
        coordinator_from_response(response, "tx-2", 4, TRANSACTION_KEY_TYPE)


def test_a_described_transaction_with_its_partitions_sorted() -> None:
    state = DescribeTransactionsResponse.TransactionState(
        transactional_id="tx-1",
        transaction_state="Ongoing",
        transaction_timeout_ms=60_000,
        transaction_start_time_ms=1_700_000_000_000,
        producer_id=12,
        producer_epoch=3,
        topics=[
            DescribeTransactionsResponse.TopicData(topic="b", partitions=[1]),
            DescribeTransactionsResponse.TopicData(topic="a", partitions=[2, 0]),
        ],
    )
    assert transaction_description_from(
        wire(DescribeTransactionsResponse(transaction_states=[state]), 0).transaction_states[0], 4
    ) == (
        TransactionDescription(
            transactional_id="tx-1",
            coordinator_id=4,
            state="Ongoing",
            producer_id=12,
            producer_epoch=3,
            timeout_ms=60_000,
            start_time_ms=1_700_000_000_000,
            partitions=[TopicPartition("a", 0), TopicPartition("a", 2), TopicPartition("b", 1)],
        )
    )


@pytest.mark.parametrize(
    ("error", "retriable"),
    [
        (ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, False),
        (ErrorCode.NOT_COORDINATOR, True),
        (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, True),
    ],
)
def test_a_described_error_raises_with_its_code(error: ErrorCode, retriable: bool) -> None:
    state = DescribeTransactionsResponse.TransactionState(error_code=error, transactional_id="tx-9")
    with pytest.raises(BrokerResponseError, match="'tx-9'") as raised:
        transaction_description_from(state, 0)
    assert raised.value.code is error and raised.value.retriable is retriable
