"""DescribeTransactions and ListTransactions (KIP-664): read-only views of the coordinator."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from strom.coordinator.transactions.metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TopicPartition,
    TransactionMetadata,
)
from strom.coordinator.transactions.runtime import PartitionStatus, TransactionRuntime
from strom.coordinator.transactions.state import PREPARE_STATES, parse_state
from strom.protocol.errors import ErrorCode


@dataclass(frozen=True)
class TransactionDescription:
    transactional_id: str
    error: ErrorCode
    state: str = ""
    timeout_ms: int = 0
    start_timestamp_ms: int = -1
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    # The open transaction's partitions; while completing, those still without their marker.
    partitions: tuple[TopicPartition, ...] = ()


@dataclass(frozen=True)
class ListedTransaction:
    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True)
class TransactionListing:
    error: ErrorCode
    unknown_state_filters: tuple[str, ...] = ()
    transactions: tuple[ListedTransaction, ...] = ()


def describe_transaction(
    transactional_id: str, ownership_error: ErrorCode | None, metadata: TransactionMetadata | None
) -> TransactionDescription:
    if ownership_error is not None:
        return TransactionDescription(transactional_id, ownership_error)
    if metadata is None or metadata.committed is None:
        return TransactionDescription(transactional_id, ErrorCode.TRANSACTIONAL_ID_NOT_FOUND)
    current = metadata.committed
    partitions = current.partitions
    if current.state in PREPARE_STATES and metadata.delivery is not None:
        partitions = frozenset(metadata.delivery.remaining)
    return TransactionDescription(
        transactional_id=transactional_id,
        error=ErrorCode.NONE,
        state=current.state.value,
        timeout_ms=current.timeout_ms,
        start_timestamp_ms=current.start_timestamp_ms,
        producer_id=current.producer_id,
        producer_epoch=current.producer_epoch,
        partitions=tuple(sorted(partitions)),
    )


def list_transactions(
    runtime: TransactionRuntime,
    state_filters: Iterable[str],
    producer_id_filters: Iterable[int],
    duration_filter_ms: int,
) -> TransactionListing:
    """Filters as ListTransactions': none given lists all; states are matched by their exact
    names (those not known are returned as unknown); a duration keeps the transactions that
    began longer ago than it (ListTransactions v1, KIP-994)."""
    state_names = list(state_filters)
    states = set()
    unknown: list[str] = []
    for name in state_names:
        state = parse_state(name)
        if state is None:
            unknown.append(name)
        else:
            states.add(state)
    if any(status is PartitionStatus.LOADING for status in runtime.partitions.values()):
        return TransactionListing(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, tuple(unknown))
    producer_ids = set(producer_id_filters)
    now_ms = runtime.now_ms()
    listed = []
    for metadata in runtime.active_transactions():
        current = metadata.committed
        if current is None:
            continue  # a new id whose first record is not written yet
        if state_names and current.state not in states:
            continue
        if producer_ids and current.producer_id not in producer_ids:
            continue
        if duration_filter_ms >= 0 and now_ms - current.start_timestamp_ms <= duration_filter_ms:
            continue
        listed.append(ListedTransaction(metadata.transactional_id, current.producer_id, current.state.value))
    listed.sort(key=lambda transaction: transaction.transactional_id)
    return TransactionListing(ErrorCode.NONE, tuple(unknown), tuple(listed))
