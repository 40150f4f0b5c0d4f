"""InitProducerId's decision for a transactional id: bump, rotate, fence or refuse.

A pure function of the id's durable snapshot and the request, so that every rule (KIP-98 fencing,
KIP-360 recovery, epoch exhaustion) is tested on its own. The producer id allocator the broker
passes in is also defined here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from strom.coordinator.transactions.metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TransactionSnapshot,
    epoch_exhausted,
)
from strom.coordinator.transactions.state import PREPARE_STATES, TransactionState
from strom.protocol.errors import ErrorCode


class ProducerIdAllocator(Protocol):
    def allocate(self, on_allocated: Callable[[ErrorCode, int], None]) -> None:
        """A producer id never handed out before, on this broker or any other: call
        ``on_allocated(NONE, producer_id)``, now or later; or ``on_allocated(error, -1)`` when none
        can be had now (e.g. COORDINATOR_LOAD_IN_PROGRESS while the next block of ids is being
        fetched from ZooKeeper), which the client is told and retries on."""
        ...


class ProducerIdAndEpoch(NamedTuple):
    producer_id: int
    producer_epoch: int


@dataclass(frozen=True)
class Refuse:
    error: ErrorCode


@dataclass(frozen=True)
class NeedProducerId:
    """A new producer id is needed: allocate one, then decide again with it."""


@dataclass(frozen=True)
class Transit:
    """Write ``target`` (state Empty); once durable, answer its producer id and epoch."""

    target: TransactionSnapshot


@dataclass(frozen=True)
class FenceOngoing:
    """An older instance's transaction is open: fence it (epoch bump), abort its transaction, and
    tell the caller CONCURRENT_TRANSACTIONS so it retries once the abort is done."""


InitDecision = Refuse | NeedProducerId | Transit | FenceOngoing


def fresh_snapshot(producer_id: int, timeout_ms: int, now_ms: int) -> TransactionSnapshot:
    """A transactional id seen for the first time: its producer id with no epoch given yet."""
    return TransactionSnapshot(
        producer_id=producer_id,
        producer_epoch=NO_PRODUCER_EPOCH,
        last_producer_id=NO_PRODUCER_ID,
        last_producer_epoch=NO_PRODUCER_EPOCH,
        timeout_ms=timeout_ms,
        state=TransactionState.EMPTY,
        partitions=frozenset(),
        start_timestamp_ms=-1,
        last_update_timestamp_ms=now_ms,
    )


def may_claim(current: TransactionSnapshot, expected: ProducerIdAndEpoch) -> bool:
    """KIP-360: whether a producer presenting ``expected`` may have the id's producer id.

    Yes if the id was just created (no epoch given yet: the producer lost its old id, e.g. after
    INVALID_PRODUCER_ID_MAPPING, and takes the new one), if it names the current producer id (its
    epoch is checked next), or if it names the producer id before the last rotation with an
    exhausted epoch (a retry of the request that rotated it, whose answer was lost).
    """
    return (
        current.producer_epoch == NO_PRODUCER_EPOCH
        or expected.producer_id == current.producer_id
        or (expected.producer_id == current.last_producer_id and epoch_exhausted(expected.producer_epoch))
    )


def retries_last_bump(current: TransactionSnapshot, expected: ProducerIdAndEpoch) -> bool:
    """Whether ``expected`` is what a KIP-360 InitProducerId presented when it moved the id to its
    current producer id and epoch (known only while the coordinator that did it is loaded)."""
    last_epoch = current.last_producer_epoch
    if last_epoch == NO_PRODUCER_EPOCH or expected.producer_epoch != last_epoch:
        return False
    if expected.producer_id == current.producer_id:
        return current.producer_epoch == last_epoch + 1  # bumped in place
    # Rotated: the old producer id had an exhausted epoch, the new one starts at 0.
    return expected.producer_id == current.last_producer_id and current.producer_epoch == 0


def decide_init(
    transactional_id: str,
    current: TransactionSnapshot,
    expected: ProducerIdAndEpoch | None,
    timeout_ms: int,
    now_ms: int,
    new_producer_id: int | None,
) -> InitDecision:
    """What InitProducerId does for an id whose durable snapshot is ``current`` (no write pending).

    ``expected`` is the producer id and epoch the request carries (KIP-360, InitProducerId v3+),
    None when it carries none. ``new_producer_id`` is a freshly allocated id, if one was.
    """
    if expected is not None and not may_claim(current, expected):
        return Refuse(ErrorCode.PRODUCER_FENCED)
    if current.state in PREPARE_STATES:
        return Refuse(ErrorCode.CONCURRENT_TRANSACTIONS)
    if current.state is TransactionState.ONGOING:
        return FenceOngoing()
    assert current.state in (
        TransactionState.EMPTY,
        TransactionState.COMPLETE_COMMIT,
        TransactionState.COMPLETE_ABORT,
    ), f"transactional id {transactional_id!r} rests in {current.state.value}"

    def into_empty(producer_id: int, epoch: int, last_id: int, last_epoch: int) -> Transit:
        return Transit(
            current.moved_to(
                transactional_id,
                TransactionState.EMPTY,
                producer_id=producer_id,
                producer_epoch=epoch,
                last_producer_id=last_id,
                last_producer_epoch=last_epoch,
                timeout_ms=timeout_ms,
                partitions=frozenset(),
                start_timestamp_ms=-1,
                last_update_timestamp_ms=now_ms,
            )
        )

    holds_current = expected is not None and expected == (current.producer_id, current.producer_epoch)
    if epoch_exhausted(current.producer_epoch) and (expected is None or holds_current):
        # No bump left: a new producer id, epoch 0. The old (id, epoch) is remembered for a
        # KIP-360 retry of this request.
        if new_producer_id is None:
            return NeedProducerId()
        last_epoch = current.producer_epoch if expected is not None else NO_PRODUCER_EPOCH
        return into_empty(new_producer_id, 0, current.producer_id, last_epoch)
    if expected is None:
        # A new instance (or a producer without KIP-360): bump, fencing whoever held the epoch.
        return into_empty(
            current.producer_id, current.producer_epoch + 1, current.last_producer_id, NO_PRODUCER_EPOCH
        )
    if current.producer_epoch == NO_PRODUCER_EPOCH or holds_current:
        # The holder of the current epoch asks for a bump (KIP-360 recovery), or a producer takes a
        # newly made id: remember the epoch bumped from, for a retry of this request.
        return into_empty(
            current.producer_id, current.producer_epoch + 1, current.last_producer_id, current.producer_epoch
        )
    if retries_last_bump(current, expected):
        # A retry of the bump (or rotation) that already happened: the same answer again.
        return into_empty(
            current.producer_id, current.producer_epoch, current.last_producer_id, current.last_producer_epoch
        )
    return Refuse(ErrorCode.PRODUCER_FENCED)
