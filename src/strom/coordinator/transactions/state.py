"""The transaction states of a transactional id and the one table of allowed transitions.

A state changes only when the record that says so is durable in ``__transaction_state`` (except
PrepareEpochFence, which is never written: see its docstring). Each state's docstring says how the
coordinator answers every request in it and what moves it on.
"""

from __future__ import annotations

from enum import Enum


class TransactionState(Enum):
    EMPTY = "Empty"
    """A producer id and epoch are assigned and no transaction is open.

    InitProducerId: the epoch is bumped (or a new producer id given once the epoch is exhausted).
    AddPartitionsToTxn / AddOffsetsToTxn: the transaction begins (Ongoing, start time now).
    EndTxn: INVALID_TXN_STATE. Expires (tombstone, Dead) after transactional.id.expiration.ms idle.
    """

    ONGOING = "Ongoing"
    """A transaction is open on the partitions recorded.

    AddPartitionsToTxn: adds partitions (NONE at once if all are already in). EndTxn: PrepareCommit
    or PrepareAbort. InitProducerId: the old instance is fenced (epoch bumped through
    PrepareEpochFence), its transaction aborted, and the caller told CONCURRENT_TRANSACTIONS to
    retry. Past its timeout the coordinator does the same on its own.
    """

    PREPARE_COMMIT = "PrepareCommit"
    """The commit is decided and durable: COMMIT markers are being written to every partition.

    EndTxn(commit): CONCURRENT_TRANSACTIONS (retry until complete); EndTxn(abort): INVALID_TXN_STATE.
    InitProducerId / AddPartitionsToTxn: CONCURRENT_TRANSACTIONS. Once every partition has its
    marker, CompleteCommit is written. A coordinator loading a transaction in this state resumes
    its markers.
    """

    PREPARE_ABORT = "PrepareAbort"
    """The abort is decided and durable: ABORT markers are being written (as PrepareCommit, with
    abort and commit swapped)."""

    COMPLETE_COMMIT = "CompleteCommit"
    """Every marker of the committed transaction is written. EndTxn(commit) again: NONE (a retry);
    EndTxn(abort): INVALID_TXN_STATE. Otherwise as Empty."""

    COMPLETE_ABORT = "CompleteAbort"
    """Every marker of the aborted transaction is written. EndTxn(abort) again: NONE (a retry);
    EndTxn(commit): INVALID_TXN_STATE. Otherwise as Empty."""

    DEAD = "Dead"
    """The transactional id expired: its tombstone is being written; once durable the id is
    forgotten, and a later InitProducerId starts afresh with a new producer id."""

    PREPARE_EPOCH_FENCE = "PrepareEpochFence"
    """An Ongoing transaction whose producer is being fenced (a new instance's InitProducerId, or
    the transaction's timeout): its epoch is bumped and it goes straight on to PrepareAbort with the
    bumped epoch. It is a step of that one transition, never a resting state, and never written
    (Kafka does not write it either)."""


ALLOWED_PREVIOUS: dict[TransactionState, frozenset[TransactionState]] = {
    TransactionState.EMPTY: frozenset(
        {TransactionState.EMPTY, TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT}
    ),
    TransactionState.ONGOING: frozenset(
        {
            TransactionState.ONGOING,
            TransactionState.EMPTY,
            TransactionState.COMPLETE_COMMIT,
            TransactionState.COMPLETE_ABORT,
        }
    ),
    TransactionState.PREPARE_COMMIT: frozenset({TransactionState.ONGOING}),
    TransactionState.PREPARE_ABORT: frozenset(
        {TransactionState.ONGOING, TransactionState.PREPARE_EPOCH_FENCE}
    ),
    TransactionState.COMPLETE_COMMIT: frozenset({TransactionState.PREPARE_COMMIT}),
    TransactionState.COMPLETE_ABORT: frozenset({TransactionState.PREPARE_ABORT}),
    TransactionState.DEAD: frozenset(
        {TransactionState.EMPTY, TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT}
    ),
    TransactionState.PREPARE_EPOCH_FENCE: frozenset({TransactionState.ONGOING}),
}

# The TransactionStatus byte of a TransactionLogValue (Kafka's numbering).
STATUS_OF: dict[TransactionState, int] = {
    TransactionState.EMPTY: 0,
    TransactionState.ONGOING: 1,
    TransactionState.PREPARE_COMMIT: 2,
    TransactionState.PREPARE_ABORT: 3,
    TransactionState.COMPLETE_COMMIT: 4,
    TransactionState.COMPLETE_ABORT: 5,
    TransactionState.DEAD: 6,
    TransactionState.PREPARE_EPOCH_FENCE: 7,
}
STATE_OF_STATUS: dict[int, TransactionState] = {status: state for state, status in STATUS_OF.items()}

# Where no transaction is open and a new one may begin (and where an idle id may expire).
COMPLETED_STATES = frozenset(
    {TransactionState.EMPTY, TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT}
)
PREPARE_STATES = frozenset({TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT})


class IllegalTransactionTransition(AssertionError):
    """A programmer error: the coordinator tried a move the table forbids."""

    def __init__(self, transactional_id: str, current: TransactionState, target: TransactionState) -> None:
        super().__init__(
            f"transactional id {transactional_id!r}: illegal transition from {current.value} to "
            f"{target.value} (allowed from: {sorted(state.value for state in ALLOWED_PREVIOUS[target])})"
        )
        self.transactional_id = transactional_id
        self.current = current
        self.target = target


def check_transition(transactional_id: str, current: TransactionState, target: TransactionState) -> None:
    if current not in ALLOWED_PREVIOUS[target]:
        raise IllegalTransactionTransition(transactional_id, current, target)


def parse_state(name: str) -> TransactionState | None:
    """A state by its protocol name (ListTransactions' state filters, which Kafka matches exactly)."""
    for state in TransactionState:
        if state.value == name:
            return state
    return None
