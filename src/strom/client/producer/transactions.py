"""The transactional producer's protocol logic (KIP-98, KIP-447): its states and the requests
they need. Pure, no I/O.

The application's calls (``init_transactions``, ``begin_transaction``, ``send_offsets``,
``commit``, ``abort``) run on the producer's loop thread, change the state and return a
``TransactionResult`` the application thread waits on. The producer's sender asks
``next_request()`` for the one transactional request to send now (at most one is in flight, as in
Kafka's clients), sends it, and feeds back the answer (``on_response``) or the failure of the
exchange (``on_request_failed``). The sender core asks ``may_send(partition)`` before draining a
partition's batch: a partition is added to the transaction (AddPartitionsToTxn, every partition
found since the last request in one request) before its first batch leaves; and it reports every
failed batch (``batch_failed``).

Errors come in three kinds, as in Kafka's clients:

- **retriable** (CONCURRENT_TRANSACTIONS, COORDINATOR_LOAD_IN_PROGRESS, a lost connection, ...):
  the request is sent again after ``retry.backoff.ms``; NOT_COORDINATOR and
  COORDINATOR_NOT_AVAILABLE first find the coordinator again;
- **abortable** (a record that failed, offsets the group refused): the transaction cannot commit;
  the state is ABORTABLE_ERROR until the application calls ``abort_transaction()``;
- **fatal** (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH, TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
  UNSUPPORTED_VERSION, an answer the protocol does not allow): the producer is unusable; every
  call raises ``TransactionFatalError`` (``ProducerFencedError`` for a fenced one).

A batch that failed after it was given sequence numbers leaves a gap in its partition's
sequence; the abort that follows then bumps the producer's epoch (InitProducerId with the current
producer id and epoch, KIP-360), which restarts every sequence at 0.
"""

from __future__ import annotations

import enum
import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from strom.client.cluster import BrokerNode, TopicPartition
from strom.client.errors import (
    ClientClosedError,
    KafkaError,
    KafkaTimeoutError,
    ProducerFencedError,
    ProtocolError,
    TransactionAbortableError,
    TransactionAbortedError,
    TransactionFatalError,
    TransactionStateError,
    UnsupportedVersionError,
    describe_error_code,
)
from strom.client.group_metadata import ConsumerGroupMetadata, OffsetAndMetadata
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.add_offsets_to_txn import AddOffsetsToTxnRequest, AddOffsetsToTxnResponse
from strom.protocol.messages.add_partitions_to_txn import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
)
from strom.protocol.messages.end_txn import EndTxnRequest, EndTxnResponse
from strom.protocol.messages.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from strom.protocol.messages.init_producer_id import InitProducerIdRequest, InitProducerIdResponse
from strom.protocol.messages.txn_offset_commit import TxnOffsetCommitRequest, TxnOffsetCommitResponse

__all__ = [
    "ALLOWED_PREVIOUS",
    "RequestKind",
    "TransactionManager",
    "TransactionRequest",
    "TransactionResult",
    "TransactionState",
    "fit_transaction_request",
]

# FindCoordinator's key types.
GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1


class TransactionState(enum.Enum):
    """Where a transactional producer is.

    - UNINITIALIZED: made, ``init_transactions()`` not called yet. Sends are refused.
    - INITIALIZING: finding the coordinator and getting the producer id and epoch (InitProducerId
      fences an earlier producer with the same transactional id and aborts its open transaction).
    - READY: between transactions; ``begin_transaction()`` moves on. Sends are refused.
    - IN_TRANSACTION: sends, ``send_offsets_to_transaction()``; new partitions are added to the
      transaction before their first batch. Commit or abort end it.
    - COMMITTING: everything queued is sent (a flush), then EndTxn(commit); READY once the
      coordinator has it. A failed record makes it ABORTABLE_ERROR instead.
    - ABORTING: queued records fail (``TransactionAbortedError``), those in flight are waited for,
      then EndTxn(abort) (and an epoch bump if a sequence has a gap); READY after.
    - ABORTABLE_ERROR: the transaction cannot commit; only ``abort_transaction()`` moves on.
    - FATAL_ERROR: the producer is unusable; only ``close()`` remains.
    """

    UNINITIALIZED = "Uninitialized"
    INITIALIZING = "Initializing"
    READY = "Ready"
    IN_TRANSACTION = "InTransaction"
    COMMITTING = "Committing"
    ABORTING = "Aborting"
    ABORTABLE_ERROR = "AbortableError"
    FATAL_ERROR = "FatalError"


_S = TransactionState
ALLOWED_PREVIOUS: dict[TransactionState, frozenset[TransactionState]] = {
    _S.UNINITIALIZED: frozenset(),
    _S.INITIALIZING: frozenset({_S.UNINITIALIZED}),
    _S.READY: frozenset({_S.INITIALIZING, _S.COMMITTING, _S.ABORTING}),
    _S.IN_TRANSACTION: frozenset({_S.READY}),
    _S.COMMITTING: frozenset({_S.IN_TRANSACTION}),
    _S.ABORTING: frozenset({_S.IN_TRANSACTION, _S.ABORTABLE_ERROR}),
    _S.ABORTABLE_ERROR: frozenset({_S.IN_TRANSACTION, _S.COMMITTING}),
    _S.FATAL_ERROR: frozenset(set(TransactionState) - {_S.FATAL_ERROR}),
}

# States in which batches may be sent (to partitions already in the transaction).
_SENDING_STATES = frozenset({_S.IN_TRANSACTION, _S.COMMITTING})


class RequestKind(enum.Enum):
    FIND_COORDINATOR = "FindCoordinator"
    INIT_PRODUCER_ID = "InitProducerId"
    ADD_PARTITIONS = "AddPartitionsToTxn"
    ADD_OFFSETS = "AddOffsetsToTxn"
    FIND_GROUP_COORDINATOR = "FindCoordinator(group)"
    TXN_OFFSET_COMMIT = "TxnOffsetCommit"
    END_TXN = "EndTxn"


@dataclass(slots=True)
class TransactionRequest:
    """Send ``request`` (newest form; ``fit_transaction_request`` fits it to the negotiated
    version) to ``coordinator``, or to any broker when None, and report back with this object."""

    kind: RequestKind
    request: Any
    coordinator: BrokerNode | None


# Requests that go to the group's coordinator (found by its own FindCoordinator), not the
# transaction's.
_TO_GROUP_COORDINATOR = frozenset({RequestKind.FIND_GROUP_COORDINATOR, RequestKind.TXN_OFFSET_COMMIT})

# -- how each answer is taken ----------------------------------------------------------------------

# The coordinator moved or is not there yet: find it again, then resend.
_COORDINATOR_MOVED = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE})
# Resend the same request after the backoff.
_RETRY = frozenset(
    {
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.OPERATION_NOT_ATTEMPTED,
        ErrorCode.NETWORK_EXCEPTION,
    }
)
# This producer is a zombie: another instance has the transactional id (or the coordinator
# aborted its transaction after transaction.timeout.ms and bumped the epoch).
_FENCED = frozenset({ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH})
# Nothing this producer does can fix these.
_FATAL = _FENCED | {
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    ErrorCode.UNSUPPORTED_VERSION,
    ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
    ErrorCode.INVALID_TXN_STATE,
    ErrorCode.INVALID_PRODUCER_ID_MAPPING,
    ErrorCode.INVALID_TRANSACTION_TIMEOUT,
}
# The transaction cannot commit, but aborting it works.
_ABORTABLE = frozenset(
    {
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        ErrorCode.GROUP_AUTHORIZATION_FAILED,
        ErrorCode.TRANSACTION_ABORTABLE,
    }
)
# TxnOffsetCommit: the consumer is no longer the group member it was (KIP-447), or the offsets
# are refused; the transaction must not commit them.
_OFFSETS_REFUSED = frozenset(
    {
        ErrorCode.ILLEGAL_GENERATION,
        ErrorCode.UNKNOWN_MEMBER_ID,
        ErrorCode.FENCED_INSTANCE_ID,
        ErrorCode.REBALANCE_IN_PROGRESS,
        ErrorCode.INVALID_GROUP_ID,
        ErrorCode.OFFSET_METADATA_TOO_LARGE,
        ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    }
)

# Batches failing with these did not fail because of this transaction: no abortable error.
_NOT_A_TRANSACTION_FAILURE = (TransactionAbortedError, TransactionFatalError, TransactionAbortableError)


class TransactionResult:
    """The outcome of one transactional call: set once on the loop thread, waited for on the
    application's. A call that timed out may be made again: it waits for the same result."""

    __slots__ = ("_event", "acknowledged", "error", "operation")

    def __init__(self, operation: str) -> None:
        self.operation = operation
        self.error: KafkaError | None = None
        # The application has seen the outcome (a wait returned or raised it): a later call of
        # the same operation is a new call, not a retry.
        self.acknowledged = False
        self._event = threading.Event()

    @property
    def done(self) -> bool:
        return self._event.is_set()

    def succeed(self) -> None:
        if not self._event.is_set():
            self._event.set()

    def fail(self, error: KafkaError) -> None:
        if not self._event.is_set():
            self.error = error
            self._event.set()

    def wait(self, timeout_s: float | None) -> None:
        """Return once it succeeded; raise its error, or ``KafkaTimeoutError`` after ``timeout_s``."""
        if not self._event.wait(timeout_s):
            raise KafkaTimeoutError(
                f"{self.operation}() did not complete within {timeout_s} s; "
                f"call {self.operation}() again to go on waiting"
            )
        self.acknowledged = True
        if self.error is not None:
            raise _fresh(self.error)


def _fresh(error: KafkaError) -> KafkaError:
    """A new exception like ``error``: raising one object again and again chains its tracebacks."""
    copy = type(error)(error.message, error.code)
    copy.__cause__ = error.__cause__
    return copy


@dataclass(slots=True)
class _OffsetsToCommit:
    """One ``send_offsets_to_transaction()``: AddOffsetsToTxn, then TxnOffsetCommit to the group's
    coordinator (found first), retried for the partitions that failed until all are in."""

    group: ConsumerGroupMetadata
    # Those still to commit (partitions leave as the coordinator takes them), and all asked for.
    offsets: dict[TopicPartition, OffsetAndMetadata]
    requested: dict[TopicPartition, OffsetAndMetadata]
    result: TransactionResult
    added: bool = False
    coordinator: BrokerNode | None = None


def find_coordinator_request(key: str, key_type: int) -> FindCoordinatorRequest:
    """The newest form (a list of keys); ``fit_transaction_request`` rewrites it for v0-3."""
    return FindCoordinatorRequest(key_type=key_type, coordinator_keys=[key])


def coordinator_from(response: FindCoordinatorResponse, key: str) -> tuple[ErrorCode, BrokerNode | None]:
    """The coordinator a FindCoordinator answer names, or its error code (either version form)."""
    if response.coordinators:
        for coordinator in response.coordinators:
            if coordinator.key == key:
                if coordinator.error_code != ErrorCode.NONE:
                    return _code(coordinator.error_code), None
                return ErrorCode.NONE, BrokerNode(coordinator.node_id, coordinator.host, coordinator.port)
        raise ProtocolError(f"FindCoordinator for {key!r}: the answer does not name it")
    if response.error_code != ErrorCode.NONE:
        return _code(response.error_code), None
    return ErrorCode.NONE, BrokerNode(response.node_id, response.host, response.port)


def fit_transaction_request(request: Any, version: int) -> Any:
    """``request`` as the manager builds it (newest form) for an older ``version``."""
    if isinstance(request, FindCoordinatorRequest) and version < 4:
        if version == 0 and request.key_type != GROUP_KEY_TYPE:
            raise UnsupportedVersionError("finding a transaction coordinator needs FindCoordinator v1+")
        return FindCoordinatorRequest(key=request.coordinator_keys[0], key_type=request.key_type)
    if isinstance(request, InitProducerIdRequest) and version < 3 and request.producer_id >= 0:
        raise UnsupportedVersionError(
            "bumping the producer epoch after an aborted transaction with a gap in its sequence "
            f"numbers needs InitProducerId v3+ (KIP-360); the broker offers v{version}"
        )
    if isinstance(request, TxnOffsetCommitRequest):
        if version < 3:
            # KIP-447's member fencing needs v3; older versions commit without a generation.
            request.generation_id = -1
            request.member_id = ""
            request.group_instance_id = None
        if version < 2:
            for topic in request.topics:
                for partition in topic.partitions:
                    partition.committed_leader_epoch = -1
    return request


def _code(value: int) -> ErrorCode:
    try:
        return ErrorCode(value)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


class TransactionManager:
    """One transactional producer's transaction state. Lives on the producer's loop thread; the
    application thread reads ``state`` (``check_send``) and waits on results."""

    def __init__(self, transactional_id: str, transaction_timeout_ms: int, retry_backoff_ms: int) -> None:
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.state = TransactionState.UNINITIALIZED
        self.producer_id = -1
        self.producer_epoch = -1
        self.coordinator: BrokerNode | None = None
        # The abortable or fatal error, while in ABORTABLE_ERROR / FATAL_ERROR.
        self.last_error: KafkaError | None = None
        # Partitions the coordinator has in the transaction, those waiting to be added, and those
        # in the AddPartitionsToTxn in flight.
        self.partitions: set[TopicPartition] = set()
        self._to_add: set[TopicPartition] = set()
        self._adding: set[TopicPartition] = set()
        # The coordinator has the transaction open (a partition or a group was added): ending it
        # needs EndTxn; otherwise it ends here.
        self.transaction_started = False
        self._offsets: deque[_OffsetsToCommit] = deque()
        self._init_wanted = False
        # EndTxn wanted: True commit, False abort.
        self._end: bool | None = None
        # A batch failed after its sequence numbers were given: the abort bumps the epoch.
        self.epoch_bump_required = False
        self._bumping = False
        self._in_flight: TransactionRequest | None = None
        self._retry_at_ms = 0
        # The init / commit / abort in progress (one at a time; a repeated call waits for it).
        self._operation: TransactionResult | None = None

    # -- state ---------------------------------------------------------------------------------

    def transition_to(self, target: TransactionState) -> None:
        if self.state not in ALLOWED_PREVIOUS[target]:
            raise TransactionStateError(
                f"transactional producer {self.transactional_id!r}: cannot go from "
                f"{self.state.value} to {target.value}"
            )
        self.state = target

    def _raise_if_failed(self) -> None:
        # Read once each: the application thread calls this while the loop thread may move on.
        state, error = self.state, self.last_error
        if state in (_S.FATAL_ERROR, _S.ABORTABLE_ERROR) and error is not None:
            raise _fresh(error)

    def _require(self, call: str, *states: TransactionState) -> None:
        if self.state not in states:
            allowed = " or ".join(state.value for state in states)
            raise TransactionStateError(
                f"{call}() in state {self.state.value} (allowed in {allowed}){_HINTS.get(self.state, '')}"
            )

    def _start(self, operation: str) -> TransactionResult:
        result = self._operation = TransactionResult(operation)
        return result

    def _pending(self, operation: str) -> TransactionResult | None:
        """The result of the same call made last if the application has not seen its outcome (it
        timed out, and may have completed since), or None. Raises if a different call is still
        in progress: it must be completed first."""
        pending = self._operation
        if pending is None:
            return None
        if pending.acknowledged:
            self._operation = None
            return None
        if pending.operation == operation:
            return pending
        if not pending.done:
            raise TransactionStateError(
                f"{operation}() while {pending.operation}() is in progress (an earlier call timed out): "
                f"call {pending.operation}() again to complete it first"
            )
        self._operation = None
        return None

    def check_send(self) -> None:
        """Raise unless records may be sent now (any thread: reads ``state`` only)."""
        if self.state is _S.IN_TRANSACTION:
            return
        self._raise_if_failed()
        self._require("send", _S.IN_TRANSACTION)

    # -- the application's calls (loop thread) -------------------------------------------------

    def init_transactions(self) -> TransactionResult:
        pending = self._pending("init_transactions")
        if pending is not None:
            return pending
        if self.state is _S.FATAL_ERROR:
            self._raise_if_failed()
        if self.state is not _S.UNINITIALIZED:
            raise TransactionStateError(
                f"init_transactions() in state {self.state.value}: it is called once, before the first transaction"
            )
        self.transition_to(_S.INITIALIZING)
        self._init_wanted = True
        return self._start("init_transactions")

    def begin_transaction(self) -> None:
        self._pending("begin_transaction")
        self._raise_if_failed()
        self._require("begin_transaction", _S.READY)
        self.transition_to(_S.IN_TRANSACTION)
        self.partitions.clear()
        self.transaction_started = False

    def send_offsets(
        self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata], group: ConsumerGroupMetadata
    ) -> TransactionResult:
        self._pending("send_offsets_to_transaction")
        self._raise_if_failed()
        self._require("send_offsets_to_transaction", _S.IN_TRANSACTION)
        wanted = {
            tp: offset if isinstance(offset, OffsetAndMetadata) else OffsetAndMetadata(offset)
            for tp, offset in offsets.items()
        }
        if self._offsets:
            last = self._offsets[-1]
            if last.group == group and last.requested == wanted:
                return last.result  # the same call again after a timeout
        result = TransactionResult("send_offsets_to_transaction")
        if not wanted:
            result.succeed()
            return result
        self._offsets.append(_OffsetsToCommit(group, dict(wanted), wanted, result))
        return result

    def commit(self) -> TransactionResult:
        pending = self._pending("commit_transaction")
        if pending is not None:
            return pending
        self._raise_if_failed()  # an abortable error says to abort instead
        self._require("commit_transaction", _S.IN_TRANSACTION)
        self.transition_to(_S.COMMITTING)
        self._end = True
        return self._start("commit_transaction")

    def abort(self) -> TransactionResult:
        pending = self._pending("abort_transaction")
        if pending is not None:
            return pending
        if self.state is _S.FATAL_ERROR:
            self._raise_if_failed()
        self._require("abort_transaction", _S.IN_TRANSACTION, _S.ABORTABLE_ERROR)
        self.transition_to(_S.ABORTING)
        self._end = False
        self._to_add.clear()
        self._drop_offsets(
            TransactionAbortedError("the transaction was aborted before its offsets were committed")
        )
        return self._start("abort_transaction")

    def _drop_offsets(self, error: KafkaError) -> None:
        """Fail every offsets commit not in flight now (one in flight is failed by its answer)."""
        in_flight = self._in_flight_offsets()
        for entry in list(self._offsets):
            if entry is not in_flight:
                entry.result.fail(error)
                self._offsets.remove(entry)

    def _in_flight_offsets(self) -> _OffsetsToCommit | None:
        if self._in_flight is not None and self._in_flight.kind in (
            RequestKind.ADD_OFFSETS,
            RequestKind.FIND_GROUP_COORDINATOR,
            RequestKind.TXN_OFFSET_COMMIT,
        ):
            return self._offsets[0]
        return None

    # -- the sender's side ---------------------------------------------------------------------

    def may_send(self, topic_partition: TopicPartition) -> bool:
        """Whether the partition's batches may be sent now; a partition not in the transaction yet
        is queued for AddPartitionsToTxn (its batches wait)."""
        if self.state not in _SENDING_STATES:
            return False
        if topic_partition in self.partitions:
            return True
        if topic_partition not in self._adding:
            self._to_add.add(topic_partition)
        return False

    def queued_batches_error(self) -> KafkaError | None:
        """The error to fail queued (not in flight) batches with, when they must not be sent."""
        if self.state is _S.ABORTING:
            return TransactionAbortedError("the transaction was aborted before this record was sent")
        error = self.last_error
        if self.state in (_S.ABORTABLE_ERROR, _S.FATAL_ERROR) and error is not None:
            return _fresh(error)
        return None

    def batch_failed(self, error: Exception, sequenced: bool) -> Exception:
        """A batch failed for good (``sequenced``: it had sequence numbers, so its partition's
        sequence now has a gap). Returns the error its records fail with: the fatal error when
        the failure is one (a fenced producer's records say so), else ``error``."""
        if sequenced:
            self.epoch_bump_required = True
        if isinstance(error, _NOT_A_TRANSACTION_FAILURE):
            return error
        code = error.code if isinstance(error, KafkaError) else None
        if code in _FATAL:
            self._fatal(code, f"a record was refused: {error}")
            assert self.last_error is not None
            fatal = _fresh(self.last_error)
            fatal.__cause__ = error
            return fatal
        if self.state in _SENDING_STATES:
            cause = error if isinstance(error, KafkaError) else KafkaError(str(error))
            self._abortable(f"a record of the transaction failed: {cause.message}", cause.code)
        return error

    def wake_in_ms(self, now_ms: int) -> int | None:
        """When ``next_request`` may have something after a backoff (None: when woken)."""
        if self._in_flight is None and self._retry_at_ms > now_ms and self._wants_request():
            return self._retry_at_ms - now_ms
        return None

    def _wants_request(self) -> bool:
        return bool(self._init_wanted or self._to_add or self._offsets or self._end is not None)

    def next_request(self, now_ms: int, batches_incomplete: bool) -> TransactionRequest | None:
        """The transactional request to send now, if any (``batches_incomplete``: some batch is
        queued or in flight, so EndTxn must wait)."""
        if self._in_flight is not None or now_ms < self._retry_at_ms or self.state is _S.FATAL_ERROR:
            return None
        kind = self._next_kind(batches_incomplete)
        if kind is None:
            return None
        if self.coordinator is None and kind not in _TO_GROUP_COORDINATOR:
            kind = RequestKind.FIND_COORDINATOR
        request = self._build(kind)
        self._in_flight = request
        return request

    def _next_kind(self, batches_incomplete: bool) -> RequestKind | None:
        if self._init_wanted:
            return RequestKind.INIT_PRODUCER_ID
        sending = self.state in _SENDING_STATES
        if self._to_add and sending:
            return RequestKind.ADD_PARTITIONS
        if self._offsets and sending:
            entry = self._offsets[0]
            if not entry.added:
                return RequestKind.ADD_OFFSETS
            if entry.coordinator is None:
                return RequestKind.FIND_GROUP_COORDINATOR
            return RequestKind.TXN_OFFSET_COMMIT
        if self._end is not None and not batches_incomplete and not self._to_add and not self._offsets:
            if not self.transaction_started:
                self._end_completed()
                return None
            return RequestKind.END_TXN
        return None

    def _build(self, kind: RequestKind) -> TransactionRequest:
        request: Any
        coordinator = self.coordinator
        if kind is RequestKind.FIND_COORDINATOR:
            request = find_coordinator_request(self.transactional_id, TRANSACTION_KEY_TYPE)
            coordinator = None
        elif kind is RequestKind.INIT_PRODUCER_ID:
            request = InitProducerIdRequest(
                transactional_id=self.transactional_id,
                transaction_timeout_ms=self.transaction_timeout_ms,
                # With the current id and epoch (KIP-360) only this producer gets the bump: a
                # zombie sending the same is told PRODUCER_FENCED.
                producer_id=self.producer_id if self._bumping else -1,
                producer_epoch=self.producer_epoch if self._bumping else -1,
            )
        elif kind is RequestKind.ADD_PARTITIONS:
            self._adding, self._to_add = self._to_add, set()
            by_topic: dict[str, list[int]] = {}
            for topic, partition in sorted(self._adding):
                by_topic.setdefault(topic, []).append(partition)
            request = AddPartitionsToTxnRequest(
                v3_and_below_transactional_id=self.transactional_id,
                v3_and_below_producer_id=self.producer_id,
                v3_and_below_producer_epoch=self.producer_epoch,
                v3_and_below_topics=[
                    AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=topic, partitions=partitions)
                    for topic, partitions in by_topic.items()
                ],
            )
        elif kind is RequestKind.ADD_OFFSETS:
            request = AddOffsetsToTxnRequest(
                transactional_id=self.transactional_id,
                producer_id=self.producer_id,
                producer_epoch=self.producer_epoch,
                group_id=self._offsets[0].group.group_id,
            )
        elif kind is RequestKind.FIND_GROUP_COORDINATOR:
            request = find_coordinator_request(self._offsets[0].group.group_id, GROUP_KEY_TYPE)
            coordinator = None
        elif kind is RequestKind.TXN_OFFSET_COMMIT:
            entry = self._offsets[0]
            coordinator = entry.coordinator
            by_topic_offsets: dict[str, list[TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition]] = {}
            for (topic, partition), committed in sorted(entry.offsets.items()):
                by_topic_offsets.setdefault(topic, []).append(
                    TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition(
                        partition_index=partition,
                        committed_offset=committed.offset,
                        committed_metadata=committed.metadata or "",
                    )
                )
            request = TxnOffsetCommitRequest(
                transactional_id=self.transactional_id,
                group_id=entry.group.group_id,
                producer_id=self.producer_id,
                producer_epoch=self.producer_epoch,
                generation_id=entry.group.generation_id,
                member_id=entry.group.member_id,
                group_instance_id=entry.group.group_instance_id,
                topics=[
                    TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(name=topic, partitions=partitions)
                    for topic, partitions in by_topic_offsets.items()
                ],
            )
        else:
            assert kind is RequestKind.END_TXN, kind
            request = EndTxnRequest(
                transactional_id=self.transactional_id,
                producer_id=self.producer_id,
                producer_epoch=self.producer_epoch,
                committed=bool(self._end),
            )
        return TransactionRequest(kind, request, coordinator)

    # -- answers -------------------------------------------------------------------------------

    def on_request_failed(self, sent: TransactionRequest, error: KafkaError, now_ms: int) -> None:
        """The exchange failed as a whole (connection lost, timeout, no version in common)."""
        if sent is not self._in_flight:
            return
        self._in_flight = None
        if isinstance(error, ClientClosedError):
            return  # the producer is closing; ``closed()`` tells whoever waits
        if isinstance(error, UnsupportedVersionError):
            self._fatal(ErrorCode.UNSUPPORTED_VERSION, f"{sent.kind.value}: {error}")
            return
        if not error.retriable:
            self._fatal(error.code, f"{sent.kind.value} failed: {error}")
            return
        self._forget_coordinator(sent.kind)
        self._after_retriable(sent, now_ms)

    def on_response(self, sent: TransactionRequest, response: Any, now_ms: int) -> None:
        if sent is not self._in_flight:
            return
        self._in_flight = None
        kind = sent.kind
        if kind is RequestKind.FIND_COORDINATOR:
            self._on_find_coordinator(response, now_ms)
        elif kind is RequestKind.INIT_PRODUCER_ID:
            self._on_init_producer_id(response, now_ms)
        elif kind is RequestKind.ADD_PARTITIONS:
            self._on_add_partitions(response, now_ms)
        elif kind is RequestKind.ADD_OFFSETS:
            self._on_add_offsets(response, now_ms)
        elif kind is RequestKind.FIND_GROUP_COORDINATOR:
            self._on_find_group_coordinator(response, now_ms)
        elif kind is RequestKind.TXN_OFFSET_COMMIT:
            self._on_txn_offset_commit(response, now_ms)
        else:
            self._on_end_txn(response, now_ms)

    def _retry_later(self, now_ms: int) -> None:
        self._retry_at_ms = now_ms + self.retry_backoff_ms

    def _forget_coordinator(self, kind: RequestKind) -> None:
        if kind in (RequestKind.FIND_GROUP_COORDINATOR, RequestKind.TXN_OFFSET_COMMIT):
            if self._offsets:
                self._offsets[0].coordinator = None
        elif kind is not RequestKind.FIND_COORDINATOR:
            self.coordinator = None

    def _after_retriable(self, sent: TransactionRequest, now_ms: int) -> None:
        """A retriable failure: what was being sent is wanted again, after the backoff."""
        if sent.kind is RequestKind.ADD_PARTITIONS:
            self._readd(self._adding)
        self._retry_later(now_ms)

    def _readd(self, partitions: set[TopicPartition]) -> None:
        if self.state in _SENDING_STATES:
            self._to_add |= partitions - self.partitions
        self._adding = set()

    def _classify(self, kind: RequestKind, code: ErrorCode, now_ms: int, default_fatal: bool = True) -> None:
        """Act on a request's error ``code`` (not NONE)."""
        what = kind.value
        if code in _COORDINATOR_MOVED:
            self._forget_coordinator(kind)
            self._retry_later(now_ms)
        elif code in _RETRY:
            self._retry_later(now_ms)
        elif code in _FATAL or (default_fatal and code not in _ABORTABLE and code not in _OFFSETS_REFUSED):
            self._fatal(code, what)
        else:
            self._abortable(f"{what}: {describe_error_code(code)} ({code.name})", code)

    def _on_find_coordinator(self, response: FindCoordinatorResponse, now_ms: int) -> None:
        code, coordinator = coordinator_from(response, self.transactional_id)
        if code == ErrorCode.NONE:
            self.coordinator = coordinator
            return
        if code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
            self._fatal(code, "FindCoordinator")
        elif _code(code).retriable:
            self._retry_later(now_ms)
        else:
            self._fatal(code, "FindCoordinator")

    def _on_init_producer_id(self, response: InitProducerIdResponse, now_ms: int) -> None:
        code = _code(response.error_code)
        if code != ErrorCode.NONE:
            if self.state is _S.ABORTING and code not in _COORDINATOR_MOVED and code not in _RETRY:
                self._fatal(code, "bump the producer epoch after the abort")
                return
            self._classify(RequestKind.INIT_PRODUCER_ID, code, now_ms)
            return
        self._init_wanted = False
        self.producer_id = response.producer_id
        self.producer_epoch = response.producer_epoch
        self.epoch_bump_required = False
        if self.state is _S.INITIALIZING:
            self.transition_to(_S.READY)
            self._finish_operation()
        elif self.state is _S.ABORTING:
            self._bumping = False
            self._end_completed()

    def _on_add_partitions(self, response: AddPartitionsToTxnResponse, now_ms: int) -> None:
        adding, self._adding = self._adding, set()
        failed: dict[TopicPartition, ErrorCode] = {}
        answered: set[TopicPartition] = set()
        for topic in response.results_by_topic_v3_and_below:
            for result in topic.results_by_partition:
                topic_partition = TopicPartition(topic.name, result.partition_index)
                if topic_partition not in adding:
                    continue
                answered.add(topic_partition)
                code = _code(result.partition_error_code)
                if code == ErrorCode.NONE:
                    self.partitions.add(topic_partition)
                    self.transaction_started = True
                else:
                    failed[topic_partition] = code
        for topic_partition in adding - answered:
            failed[topic_partition] = ErrorCode.OPERATION_NOT_ATTEMPTED
        if not failed:
            return
        # The code that decides is the most serious; OPERATION_NOT_ATTEMPTED only says that
        # another partition failed.
        decisive = set(failed.values()) - {ErrorCode.OPERATION_NOT_ATTEMPTED}
        code = min(decisive, key=_severity) if decisive else ErrorCode.OPERATION_NOT_ATTEMPTED
        if code in _COORDINATOR_MOVED or code in _RETRY:
            self._readd(set(failed))
        elif self.state is _S.ABORTING and code not in _FATAL:
            return  # partitions the abort no longer needs
        self._classify(RequestKind.ADD_PARTITIONS, code, now_ms)

    def _on_add_offsets(self, response: AddOffsetsToTxnResponse, now_ms: int) -> None:
        entry = self._offsets[0]
        code = _code(response.error_code)
        if code == ErrorCode.NONE:
            self.transaction_started = True
            if self.state in _SENDING_STATES:
                entry.added = True
                return
        if self.state not in _SENDING_STATES:
            self._offsets.popleft()
            entry.result.fail(
                TransactionAbortedError("the transaction ended before its offsets were committed")
            )
            if code != ErrorCode.NONE and code in _FATAL:
                self._fatal(code, "AddOffsetsToTxn")
            return
        self._classify(RequestKind.ADD_OFFSETS, code, now_ms)

    def _on_find_group_coordinator(self, response: FindCoordinatorResponse, now_ms: int) -> None:
        entry = self._offsets[0]
        if self.state not in _SENDING_STATES:
            self._offsets.popleft()
            entry.result.fail(
                TransactionAbortedError("the transaction ended before its offsets were committed")
            )
            return
        code, coordinator = coordinator_from(response, entry.group.group_id)
        if code == ErrorCode.NONE:
            entry.coordinator = coordinator
        elif code.retriable:
            self._retry_later(now_ms)
        else:
            self._abortable(
                f"find the coordinator of group {entry.group.group_id!r}: "
                f"{describe_error_code(code)} ({code.name})",
                code,
            )

    def _on_txn_offset_commit(self, response: TxnOffsetCommitResponse, now_ms: int) -> None:
        entry = self._offsets[0]
        if self.state not in _SENDING_STATES:
            self._offsets.popleft()
            entry.result.fail(
                TransactionAbortedError("the transaction ended before its offsets were committed")
            )
            return
        failed: dict[TopicPartition, ErrorCode] = {}
        for topic in response.topics:
            for partition in topic.partitions:
                topic_partition = TopicPartition(topic.name, partition.partition_index)
                code = _code(partition.error_code)
                if topic_partition in entry.offsets and code == ErrorCode.NONE:
                    del entry.offsets[topic_partition]
                elif topic_partition in entry.offsets:
                    failed[topic_partition] = code
        if not entry.offsets:
            self._offsets.popleft()
            entry.result.succeed()
            return
        if not failed:
            # Partitions the answer left out: sent again.
            self._retry_later(now_ms)
            return
        code = min(failed.values(), key=_severity)
        self._classify(RequestKind.TXN_OFFSET_COMMIT, code, now_ms, default_fatal=False)

    def _on_end_txn(self, response: EndTxnResponse, now_ms: int) -> None:
        code = _code(response.error_code)
        if code == ErrorCode.NONE:
            if self._end is False and self.epoch_bump_required:
                # Aborted; now the epoch bump that closes the sequence gaps.
                self._end = None
                self._bumping = True
                self._init_wanted = True
                return
            self._end_completed()
            return
        if self.state is _S.ABORTING and code in _ABORTABLE:
            self._fatal(code, "EndTxn (abort)")
            return
        self._classify(RequestKind.END_TXN, code, now_ms)

    # -- outcomes ------------------------------------------------------------------------------

    def _end_completed(self) -> None:
        """The transaction is over (committed, aborted, or nothing to end): READY."""
        self._end = None
        self.transaction_started = False
        self.partitions.clear()
        self.transition_to(_S.READY)
        self._finish_operation()

    def _finish_operation(self, error: KafkaError | None = None) -> None:
        """Resolve the call in progress (kept until the application has seen the outcome)."""
        operation = self._operation
        if operation is None or operation.done:
            return
        if error is None:
            operation.succeed()
        else:
            operation.fail(error)

    def _abortable(self, message: str, code: ErrorCode | None) -> None:
        if self.state not in _SENDING_STATES:
            if self.state in (_S.INITIALIZING, _S.ABORTING):
                self._fatal(code, message)
            return
        error = self.last_error = TransactionAbortableError(
            f"transactional id {self.transactional_id!r}: {message}; call abort_transaction()", code
        )
        self.transition_to(_S.ABORTABLE_ERROR)
        self._end = None
        self._to_add.clear()
        self._drop_offsets(error)
        if self._operation is not None and self._operation.operation == "commit_transaction":
            self._finish_operation(error)

    def closed(self, error: KafkaError) -> None:
        """The producer closed: whoever still waits is told ``error``."""
        while self._offsets:
            self._offsets.popleft().result.fail(error)
        if self._operation is not None:
            self._operation.fail(error)

    def _fatal(self, code: ErrorCode | None, what: str) -> None:
        if self.state is _S.FATAL_ERROR:
            return
        reason = describe_error_code(code) if code is not None else "failed"
        name = f" ({code.name})" if code is not None else ""
        if code in _FENCED:
            error: KafkaError = ProducerFencedError(
                f"transactional id {self.transactional_id!r}: {what}: {reason}{name}; this producer is "
                "fenced by a newer one with the same transactional.id (or its transaction timed out): close it",
                code,
            )
        else:
            error = TransactionFatalError(
                f"transactional id {self.transactional_id!r}: {what}: {reason}{name}; the producer "
                "cannot go on: close it",
                code,
            )
        # The error first: the application thread reads the state, then the error.
        self.last_error = error
        self.transition_to(_S.FATAL_ERROR)
        self._init_wanted = False
        self._end = None
        self._to_add.clear()
        self._adding = set()
        while self._offsets:
            self._offsets.popleft().result.fail(error)
        self._finish_operation(error)


def _severity(code: ErrorCode) -> int:
    """Order in which a request's several error codes are acted on: fatal first, then abortable,
    then finding the coordinator, then plain retries."""
    if code in _FATAL:
        return 0
    if code in _ABORTABLE or code in _OFFSETS_REFUSED:
        return 1
    if code in _COORDINATOR_MOVED:
        return 2
    if code in _RETRY:
        return 3
    return 0


_HINTS: dict[TransactionState, str] = {
    _S.UNINITIALIZED: ": call init_transactions() first",
    _S.INITIALIZING: ": init_transactions() has not completed (call it again to wait)",
    _S.READY: ": call begin_transaction() first",
    _S.IN_TRANSACTION: ": the transaction is open (commit_transaction() or abort_transaction() ends it)",
    _S.COMMITTING: ": the transaction is being committed",
    _S.ABORTING: ": the transaction is being aborted",
}
