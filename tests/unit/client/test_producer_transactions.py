"""The transactional producer's state machine (``TransactionManager``) driven by hand with
scripted coordinator answers and a manual clock: every transition of its table, the requests each
state sends, retriable vs abortable vs fatal errors, AddPartitionsToTxn batching, the epoch bump
after an abort with a sequence gap; then the sender core with a transaction (batches wait for
their partition to join, are marked transactional, fail when the transaction cannot send them)."""

from __future__ import annotations

from typing import Any

import pytest

from strom.base.clock import ManualClock
from strom.client.cluster import BrokerNode, TopicPartition
from strom.client.config import ProducerConfig
from strom.client.errors import (
    ConfigError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionAbortedError,
    TransactionFatalError,
    TransactionStateError,
    UnsupportedVersionError,
    error_for_code,
)
from strom.client.group_metadata import ConsumerGroupMetadata, OffsetAndMetadata
from strom.client.producer.accumulator import RecordAccumulator
from strom.client.producer.sender import SenderCore
from strom.client.producer.transactions import (
    ALLOWED_PREVIOUS,
    RequestKind,
    TransactionManager,
    TransactionRequest,
    TransactionState,
    fit_transaction_request,
)
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.add_offsets_to_txn import AddOffsetsToTxnResponse
from strom.protocol.messages.add_partitions_to_txn import AddPartitionsToTxnResponse
from strom.protocol.messages.end_txn import EndTxnResponse
from strom.protocol.messages.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from strom.protocol.messages.init_producer_id import InitProducerIdRequest, InitProducerIdResponse
from strom.protocol.messages.txn_offset_commit import TxnOffsetCommitRequest, TxnOffsetCommitResponse
from strom.protocol.records import iter_batches
from tests.unit.client.test_producer_core import FakeBroker, always_ready, cluster

S = TransactionState
TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)
OTHER = TopicPartition("u", 3)
BACKOFF_MS = 100
COORDINATOR = BrokerNode(4, "h", 9092)
GROUP_COORDINATOR = BrokerNode(5, "g", 9092)
GROUP = ConsumerGroupMetadata("billing", generation_id=7, member_id="m-1", group_instance_id=None)


# -- scripted answers -------------------------------------------------------------------------------


def found(node: BrokerNode = COORDINATOR, error: ErrorCode = ErrorCode.NONE) -> FindCoordinatorResponse:
    return FindCoordinatorResponse(error_code=error, node_id=node.node_id, host=node.host, port=node.port)


def producer_id(
    producer: int = 11, epoch: int = 0, error: ErrorCode = ErrorCode.NONE
) -> InitProducerIdResponse:
    return InitProducerIdResponse(error_code=error, producer_id=producer, producer_epoch=epoch)


def added(errors: dict[TopicPartition, ErrorCode]) -> AddPartitionsToTxnResponse:
    by_topic: dict[str, list[AddPartitionsToTxnResponse.AddPartitionsToTxnPartitionResult]] = {}
    for (topic, partition), error in errors.items():
        by_topic.setdefault(topic, []).append(
            AddPartitionsToTxnResponse.AddPartitionsToTxnPartitionResult(
                partition_index=partition, partition_error_code=error
            )
        )
    return AddPartitionsToTxnResponse(
        results_by_topic_v3_and_below=[
            AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult(name=name, results_by_partition=results)
            for name, results in by_topic.items()
        ]
    )


def ended(error: ErrorCode = ErrorCode.NONE) -> EndTxnResponse:
    return EndTxnResponse(error_code=error)


def offsets_committed(errors: dict[TopicPartition, ErrorCode]) -> TxnOffsetCommitResponse:
    by_topic: dict[str, list[TxnOffsetCommitResponse.TxnOffsetCommitResponsePartition]] = {}
    for (topic, partition), error in errors.items():
        by_topic.setdefault(topic, []).append(
            TxnOffsetCommitResponse.TxnOffsetCommitResponsePartition(
                partition_index=partition, error_code=error
            )
        )
    return TxnOffsetCommitResponse(
        topics=[
            TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic(name=name, partitions=partitions)
            for name, partitions in by_topic.items()
        ]
    )


class Driver:
    """A manager and the time; ``expect`` takes the next request and checks its kind."""

    def __init__(self) -> None:
        self.manager = TransactionManager("tx-1", 60_000, BACKOFF_MS)
        self.now_ms = 0
        self.batches_incomplete = False

    def next(self) -> TransactionRequest | None:
        return self.manager.next_request(self.now_ms, self.batches_incomplete)

    def expect(self, kind: RequestKind) -> TransactionRequest:
        sent = self.next()
        assert sent is not None, f"expected {kind.value}, nothing to send"
        assert sent.kind is kind, f"expected {kind.value}, got {sent.kind.value}"
        return sent

    def answer(self, kind: RequestKind, response: Any) -> TransactionRequest:
        sent = self.expect(kind)
        self.manager.on_response(sent, response, self.now_ms)
        return sent

    def wait_backoff(self) -> None:
        assert self.next() is None, "sent before the backoff"
        assert self.manager.wake_in_ms(self.now_ms) == BACKOFF_MS
        self.now_ms += BACKOFF_MS

    # Whole steps.

    def init(self) -> None:
        result = self.manager.init_transactions()
        self.answer(RequestKind.FIND_COORDINATOR, found())
        self.answer(RequestKind.INIT_PRODUCER_ID, producer_id())
        assert result.done and result.error is None
        assert self.manager.state is S.READY

    def begin_with(self, *partitions: TopicPartition) -> None:
        self.manager.begin_transaction()
        for partition in partitions:
            assert not self.manager.may_send(partition)
        self.answer(RequestKind.ADD_PARTITIONS, added(dict.fromkeys(partitions, ErrorCode.NONE)))
        for partition in partitions:
            assert self.manager.may_send(partition)


def fatal_code(code: ErrorCode) -> KafkaError:
    return error_for_code(code, context="produce")


# -- the table --------------------------------------------------------------------------------------


@pytest.mark.parametrize("target", list(TransactionState), ids=lambda state: state.value)
@pytest.mark.parametrize("source", list(TransactionState), ids=lambda state: state.value)
def test_transitions_follow_the_table(source: TransactionState, target: TransactionState) -> None:
    manager = TransactionManager("tx-1", 60_000, BACKOFF_MS)
    manager.state = source
    if source in ALLOWED_PREVIOUS[target]:
        manager.transition_to(target)
        assert manager.state is target
    else:
        with pytest.raises(TransactionStateError, match=f"from {source.value} to {target.value}"):
            manager.transition_to(target)
        assert manager.state is source


def test_every_state_is_reachable_and_has_a_way_on() -> None:
    targets = {target for target, sources in ALLOWED_PREVIOUS.items() if sources}
    assert targets == set(TransactionState) - {S.UNINITIALIZED}
    for state in set(TransactionState) - {S.FATAL_ERROR}:
        assert any(state in sources for sources in ALLOWED_PREVIOUS.values()), state


# -- the way through ---------------------------------------------------------------------------------


def test_init_finds_the_coordinator_then_gets_the_producer_id() -> None:
    driver = Driver()
    result = driver.manager.init_transactions()
    assert driver.manager.state is S.INITIALIZING
    find = driver.expect(RequestKind.FIND_COORDINATOR)
    assert find.coordinator is None
    assert isinstance(find.request, FindCoordinatorRequest)
    assert (find.request.key_type, find.request.coordinator_keys) == (1, ["tx-1"])
    assert driver.next() is None, "one request in flight at a time"
    driver.manager.on_response(find, found(), 0)
    init = driver.expect(RequestKind.INIT_PRODUCER_ID)
    assert init.coordinator == COORDINATOR
    assert isinstance(init.request, InitProducerIdRequest)
    assert (init.request.transactional_id, init.request.transaction_timeout_ms) == ("tx-1", 60_000)
    assert (init.request.producer_id, init.request.producer_epoch) == (-1, -1)
    driver.manager.on_response(init, producer_id(11, 3), 0)
    assert result.done and result.error is None
    assert (driver.manager.state, driver.manager.producer_id, driver.manager.producer_epoch) == (
        S.READY,
        11,
        3,
    )
    assert driver.next() is None


def test_a_transaction_adds_its_partitions_in_batches_and_commits_after_its_records() -> None:
    driver = Driver()
    driver.init()
    driver.manager.begin_transaction()
    assert driver.manager.state is S.IN_TRANSACTION
    assert not driver.manager.may_send(TP0)
    assert not driver.manager.may_send(TP1)
    assert not driver.manager.may_send(TP0)  # asked again: still one entry
    first = driver.expect(RequestKind.ADD_PARTITIONS)
    assert [(topic.name, topic.partitions) for topic in first.request.v3_and_below_topics] == [("t", [0, 1])]
    assert (first.request.v3_and_below_producer_id, first.request.v3_and_below_producer_epoch) == (11, 0)
    # A partition found while the first request is in flight goes in the next one.
    assert not driver.manager.may_send(OTHER)
    assert not driver.manager.may_send(TP0)
    driver.manager.on_response(first, added({TP0: ErrorCode.NONE, TP1: ErrorCode.NONE}), 0)
    assert driver.manager.may_send(TP0) and driver.manager.may_send(TP1)
    second = driver.answer(RequestKind.ADD_PARTITIONS, added({OTHER: ErrorCode.NONE}))
    assert [(topic.name, topic.partitions) for topic in second.request.v3_and_below_topics] == [("u", [3])]
    result = driver.manager.commit()
    assert driver.manager.state is S.COMMITTING
    assert driver.manager.may_send(TP0), "a commit sends what is queued first"
    driver.batches_incomplete = True
    assert driver.next() is None, "EndTxn waits for every batch"
    driver.batches_incomplete = False
    end = driver.answer(RequestKind.END_TXN, ended())
    assert end.request.committed is True
    assert result.done and result.error is None
    assert driver.manager.state is S.READY
    assert not driver.manager.may_send(TP0), "no sends between transactions"


def test_a_transaction_that_sent_nothing_ends_without_end_txn() -> None:
    driver = Driver()
    driver.init()
    for end in (driver.manager.commit, driver.manager.abort):
        driver.manager.begin_transaction()
        result = end()
        assert driver.next() is None
        assert result.done and result.error is None
        assert driver.manager.state is S.READY


def test_abort_fails_queued_records_waits_for_those_in_flight_then_ends() -> None:
    driver = Driver()
    driver.init()
    driver.begin_with(TP0)
    assert driver.manager.queued_batches_error() is None
    result = driver.manager.abort()
    assert driver.manager.state is S.ABORTING
    assert isinstance(driver.manager.queued_batches_error(), TransactionAbortedError)
    assert not driver.manager.may_send(TP0)
    driver.batches_incomplete = True
    assert driver.next() is None
    driver.batches_incomplete = False
    end = driver.answer(RequestKind.END_TXN, ended())
    assert end.request.committed is False
    assert result.done and result.error is None
    assert driver.manager.state is S.READY
    assert driver.next() is None, "no epoch bump without a sequence gap"


def test_begin_after_a_commit_starts_a_fresh_transaction() -> None:
    driver = Driver()
    driver.init()
    driver.begin_with(TP0)
    driver.manager.commit()
    driver.answer(RequestKind.END_TXN, ended())
    driver.manager.begin_transaction()
    assert not driver.manager.may_send(TP0), "each transaction adds its partitions again"
    assert not driver.manager.transaction_started


# -- retriable errors --------------------------------------------------------------------------------


@pytest.mark.parametrize("error", [ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS])
def test_init_retries_after_the_backoff(error: ErrorCode) -> None:
    driver = Driver()
    result = driver.manager.init_transactions()
    driver.answer(RequestKind.FIND_COORDINATOR, found())
    driver.answer(RequestKind.INIT_PRODUCER_ID, producer_id(error=error))
    driver.wait_backoff()
    driver.answer(RequestKind.INIT_PRODUCER_ID, producer_id())
    assert result.done and result.error is None


@pytest.mark.parametrize("error", [ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE])
def test_a_moved_coordinator_is_found_again(error: ErrorCode) -> None:
    driver = Driver()
    driver.init()
    driver.manager.begin_transaction()
    driver.manager.may_send(TP0)
    driver.answer(RequestKind.ADD_PARTITIONS, added({TP0: error}))
    assert driver.manager.coordinator is None
    driver.wait_backoff()
    driver.answer(RequestKind.FIND_COORDINATOR, found(BrokerNode(6, "elsewhere", 9092)))
    again = driver.answer(RequestKind.ADD_PARTITIONS, added({TP0: ErrorCode.NONE}))
    assert again.coordinator == BrokerNode(6, "elsewhere", 9092)
    assert driver.manager.may_send(TP0)


def test_end_txn_retries_concurrent_transactions_and_a_lost_connection() -> None:
    driver = Driver()
    driver.init()
    driver.begin_with(TP0)
    result = driver.manager.commit()
    driver.answer(RequestKind.END_TXN, ended(ErrorCode.CONCURRENT_TRANSACTIONS))
    driver.wait_backoff()
    sent = driver.expect(RequestKind.END_TXN)
    driver.manager.on_request_failed(sent, KafkaConnectionError("connection reset"), driver.now_ms)
    assert driver.manager.coordinator is None
    driver.wait_backoff()
    driver.answer(RequestKind.FIND_COORDINATOR, found())
    driver.answer(RequestKind.END_TXN, ended())
    assert result.done and result.error is None


def test_add_partitions_not_attempted_and_unknown_partitions_are_retried() -> None:
    driver = Driver()
    driver.init()
    driver.manager.begin_transaction()
    driver.manager.may_send(TP0)
    driver.manager.may_send(TP1)
    driver.answer(
        RequestKind.ADD_PARTITIONS,
        added({TP0: ErrorCode.OPERATION_NOT_ATTEMPTED, TP1: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}),
    )
    driver.wait_backoff()
    again = driver.answer(RequestKind.ADD_PARTITIONS, added({TP0: ErrorCode.NONE, TP1: ErrorCode.NONE}))
    assert [topic.partitions for topic in again.request.v3_and_below_topics] == [[0, 1]]
    assert driver.manager.state is S.IN_TRANSACTION


def test_a_partition_the_answer_left_out_is_added_again() -> None:
    driver = Driver()
    driver.init()
    driver.manager.begin_transaction()
    driver.manager.may_send(TP0)
    driver.manager.may_send(TP1)
    driver.answer(RequestKind.ADD_PARTITIONS, added({TP0: ErrorCode.NONE}))
    assert driver.manager.may_send(TP0) and not driver.manager.may_send(TP1)
    driver.wait_backoff()
    again = driver.answer(RequestKind.ADD_PARTITIONS, added({TP1: ErrorCode.NONE}))
    assert [topic.partitions for topic in again.request.v3_and_below_topics] == [[1]]


# -- fatal errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize("error", [ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH])
def test_fenced_on_end_txn_is_fatal_and_every_call_says_so(error: ErrorCode) -> None:
    driver = Driver()
    driver.init()
    driver.begin_with(TP0)
    result = driver.manager.commit()
    driver.answer(RequestKind.END_TXN, ended(error))
    assert driver.manager.state is S.FATAL_ERROR
    with pytest.raises(ProducerFencedError, match=r"fenced.*close it") as raised:
        result.wait(0)
    assert raised.value.code is error
    for call in (
        driver.manager.check_send,
        driver.manager.begin_transaction,
        driver.manager.abort,
        driver.manager.init_transactions,
        lambda: driver.manager.send_offsets({TP0: 1}, GROUP),
    ):
        with pytest.raises(ProducerFencedError):
            call()
    queued = driver.manager.queued_batches_error()
    assert isinstance(queued, ProducerFencedError) and str(queued) == str(driver.manager.last_error)
    assert driver.next() is None


def test_a_fenced_produce_answer_is_fatal() -> None:
    driver = Driver()
    driver.init()
    driver.begin_with(TP0)
    refused = fatal_code(ErrorCode.INVALID_PRODUCER_EPOCH)
    delivered = driver.manager.batch_failed(refused, sequenced=True)
    assert isinstance(delivered, ProducerFencedError), "the record's own error says it was fenced"
    assert delivered.__cause__ is refused
    assert driver.manager.state is S.FATAL_ERROR
    with pytest.raises(ProducerFencedError):
        driver.manager.check_send()


@pytest.mark.parametrize(
    ("kind", "error"),
    [
        (RequestKind.FIND_COORDINATOR, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
        (RequestKind.INIT_PRODUCER_ID, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
        (RequestKind.INIT_PRODUCER_ID, ErrorCode.INVALID_TRANSACTION_TIMEOUT),
        (RequestKind.INIT_PRODUCER_ID, ErrorCode.UNKNOWN_SERVER_ERROR),
    ],
)
def test_init_errors_no_retry_can_fix_are_fatal(kind: RequestKind, error: ErrorCode) -> None:
    driver = Driver()
    result = driver.manager.init_transactions()
    if kind is RequestKind.FIND_COORDINATOR:
        driver.answer(kind, found(error=error))
    else:
        driver.answer(RequestKind.FIND_COORDINATOR, found())
        driver.answer(kind, producer_id(error=error))
    assert driver.manager.state is S.FATAL_ERROR
    with pytest.raises(TransactionFatalError, match=error.name) as raised:
        result.wait(0)
    assert not isinstance(raised.value, ProducerFencedError)


def test_a_broker_without_the_version_is_fatal() -> None:
    driver = Driver()
    result = driver.manager.init_transactions()
    sent = driver.expect(RequestKind.FIND_COORDINATOR)
    driver.manager.on_request_failed(sent, UnsupportedVersionError("broker offers none"), 0)
    with pytest.raises(TransactionFatalError, match="UNSUPPORTED_VERSION"):
        result.wait(0)


@pytest.mark.parametrize(
    "error",
    [ErrorCode.INVALID_TXN_STATE, ErrorCode.INVALID_PRODUCER_ID_MAPPING, ErrorCode.UNKNOWN_SERVER_ERROR],
)
def test_add_partitions_answers_the_protocol_does_not_allow_are_fatal(error: ErrorCode) -> None:
    driver = Driver()
    driver.init()
    driver.manager.begin_transaction()
    driver.manager.may_send(TP0)
    driver.manager.may_send(TP1)
    driver.answer(RequestKind.ADD_PARTITIONS, added({TP0: error, TP1: ErrorCode.OPERATION_NOT_ATTEMPTED}))
    assert driver.manager.state is S.FATAL_ERROR


# -- abortable errors --------------------------------------------------------------------------------


def test_a_failed_record_makes_the_transaction_abortable_and_abort_bumps_the_epoch() -> None:
    driver = Driver()
    driver.init()
    driver.begin_with(TP0)
    driver.manager.batch_failed(fatal_code(ErrorCode.MESSAGE_TOO_LARGE), sequenced=True)
    assert driver.manager.state is S.ABORTABLE_ERROR
    assert isinstance(driver.manager.queued_batches_error(), TransactionAbortableError)
    with pytest.raises(TransactionAbortableError, match="abort_transaction"):
        driver.manager.check_send()
    with pytest.raises(
        TransactionAbortableError, match=r"cannot commit.*MESSAGE_TOO_LARGE|abort_transaction"
    ):
        driver.manager.commit()
    with pytest.raises(TransactionAbortableError):
        driver.manager.begin_transaction()
    result = driver.manager.abort()
    driver.answer(RequestKind.END_TXN, ended())
    assert not result.done, "the epoch bump comes first"
    bump = driver.expect(RequestKind.INIT_PRODUCER_ID)
    assert (bump.request.producer_id, bump.request.producer_epoch) == (11, 0), (
        "KIP-360: the current id and epoch"
    )
    driver.manager.on_response(bump, producer_id(11, 1), driver.now_ms)
    assert result.done and result.error is None
    assert (driver.manager.state, driver.manager.producer_epoch) == (S.READY, 1)
    assert not driver.manager.epoch_bump_required


def test_a_record_failing_while_committing_fails_the_commit() -> None:
    driver = Driver()
    driver.init()
    driver.begin_with(TP0)
    result = driver.manager.commit()
    driver.batches_incomplete = True
    driver.manager.batch_failed(KafkaTimeoutError("1 records for t-0 expired"), sequenced=False)
    assert driver.manager.state is S.ABORTABLE_ERROR
    with pytest.raises(TransactionAbortableError, match="expired"):
        result.wait(0)
    driver.batches_incomplete = False
    assert driver.next() is None, "no EndTxn(commit) after the failure"
    driver.manager.abort()
    driver.answer(RequestKind.END_TXN, ended())
    assert driver.next() is None, "no bump: the batch had no sequence numbers"
    assert driver.manager.state is S.READY


def test_records_failed_by_the_abort_itself_are_no_new_error() -> None:
    driver = Driver()
    driver.init()
    driver.begin_with(TP0)
    driver.manager.abort()
    driver.manager.batch_failed(TransactionAbortedError("aborted"), sequenced=True)
    assert driver.manager.state is S.ABORTING
    driver.answer(RequestKind.END_TXN, ended())
    driver.answer(RequestKind.INIT_PRODUCER_ID, producer_id(11, 1))
    assert driver.manager.state is S.READY


def test_a_zombie_asking_for_the_bump_is_fenced() -> None:
    driver = Driver()
    driver.init()
    driver.begin_with(TP0)
    driver.manager.batch_failed(fatal_code(ErrorCode.NOT_ENOUGH_REPLICAS), sequenced=True)
    result = driver.manager.abort()
    driver.answer(RequestKind.END_TXN, ended())
    driver.answer(RequestKind.INIT_PRODUCER_ID, producer_id(error=ErrorCode.PRODUCER_FENCED))
    with pytest.raises(ProducerFencedError):
        result.wait(0)


@pytest.mark.parametrize("error", [ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.TRANSACTION_ABORTABLE])
def test_add_partitions_abortable_answers(error: ErrorCode) -> None:
    driver = Driver()
    driver.init()
    driver.manager.begin_transaction()
    driver.manager.may_send(TP0)
    driver.answer(RequestKind.ADD_PARTITIONS, added({TP0: error}))
    assert driver.manager.state is S.ABORTABLE_ERROR
    assert driver.manager.last_error is not None and driver.manager.last_error.code is error


# -- offsets in the transaction -----------------------------------------------------------------------


def test_send_offsets_adds_the_group_then_commits_to_its_coordinator() -> None:
    driver = Driver()
    driver.init()
    driver.manager.begin_transaction()
    result = driver.manager.send_offsets({TP0: 42, TP1: 7}, GROUP)
    add = driver.answer(RequestKind.ADD_OFFSETS, AddOffsetsToTxnResponse())
    assert (add.request.group_id, add.coordinator) == ("billing", COORDINATOR)
    find = driver.answer(RequestKind.FIND_GROUP_COORDINATOR, found(GROUP_COORDINATOR))
    assert (find.request.key_type, find.request.coordinator_keys) == (0, ["billing"])
    commit = driver.expect(RequestKind.TXN_OFFSET_COMMIT)
    request = commit.request
    assert commit.coordinator == GROUP_COORDINATOR
    assert (request.group_id, request.generation_id, request.member_id) == ("billing", 7, "m-1")
    assert (request.producer_id, request.producer_epoch, request.transactional_id) == (11, 0, "tx-1")
    assert [
        (topic.name, [(p.partition_index, p.committed_offset) for p in topic.partitions])
        for topic in request.topics
    ] == [("t", [(0, 42), (1, 7)])]
    # One partition refused for now: only that one is sent again.
    driver.manager.on_response(
        commit, offsets_committed({TP0: ErrorCode.NONE, TP1: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}), 0
    )
    assert not result.done
    driver.wait_backoff()
    again = driver.answer(RequestKind.TXN_OFFSET_COMMIT, offsets_committed({TP1: ErrorCode.NONE}))
    assert [[p.partition_index for p in topic.partitions] for topic in again.request.topics] == [[1]]
    assert result.done and result.error is None
    assert driver.manager.transaction_started
    commit_result = driver.manager.commit()
    driver.answer(RequestKind.END_TXN, ended())
    assert commit_result.done and commit_result.error is None


def test_send_offsets_commits_the_metadata_given_with_an_offset() -> None:
    driver = Driver()
    driver.init()
    driver.manager.begin_transaction()
    result = driver.manager.send_offsets({TP0: OffsetAndMetadata(42, "batch 41"), TP1: 7}, GROUP)
    driver.answer(RequestKind.ADD_OFFSETS, AddOffsetsToTxnResponse())
    driver.answer(RequestKind.FIND_GROUP_COORDINATOR, found(GROUP_COORDINATOR))
    commit = driver.answer(
        RequestKind.TXN_OFFSET_COMMIT, offsets_committed({TP0: ErrorCode.NONE, TP1: ErrorCode.NONE})
    )
    assert [
        (p.partition_index, p.committed_offset, p.committed_metadata)
        for topic in commit.request.topics
        for p in topic.partitions
    ] == [(0, 42, "batch 41"), (1, 7, "")]
    assert result.done and result.error is None


def test_offsets_wait_for_a_moved_group_coordinator() -> None:
    driver = Driver()
    driver.init()
    driver.manager.begin_transaction()
    result = driver.manager.send_offsets({TP0: 1}, GROUP)
    driver.answer(RequestKind.ADD_OFFSETS, AddOffsetsToTxnResponse())
    driver.answer(RequestKind.FIND_GROUP_COORDINATOR, found(GROUP_COORDINATOR))
    driver.answer(RequestKind.TXN_OFFSET_COMMIT, offsets_committed({TP0: ErrorCode.NOT_COORDINATOR}))
    driver.wait_backoff()
    driver.answer(RequestKind.FIND_GROUP_COORDINATOR, found(GROUP_COORDINATOR))
    driver.answer(RequestKind.TXN_OFFSET_COMMIT, offsets_committed({TP0: ErrorCode.NONE}))
    assert result.done and result.error is None


@pytest.mark.parametrize(
    "error", [ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID]
)
def test_offsets_of_a_member_no_longer_in_the_generation_make_the_transaction_abortable(
    error: ErrorCode,
) -> None:
    driver = Driver()
    driver.init()
    driver.manager.begin_transaction()
    result = driver.manager.send_offsets({TP0: 1}, GROUP)
    driver.answer(RequestKind.ADD_OFFSETS, AddOffsetsToTxnResponse())
    driver.answer(RequestKind.FIND_GROUP_COORDINATOR, found(GROUP_COORDINATOR))
    driver.answer(RequestKind.TXN_OFFSET_COMMIT, offsets_committed({TP0: error}))
    assert driver.manager.state is S.ABORTABLE_ERROR
    with pytest.raises(TransactionAbortableError, match=error.name):
        result.wait(0)
    abort = driver.manager.abort()
    driver.answer(RequestKind.END_TXN, ended())
    assert abort.done and abort.error is None


def test_add_offsets_fenced_is_fatal() -> None:
    driver = Driver()
    driver.init()
    driver.manager.begin_transaction()
    result = driver.manager.send_offsets({TP0: 1}, GROUP)
    driver.answer(RequestKind.ADD_OFFSETS, AddOffsetsToTxnResponse(error_code=ErrorCode.PRODUCER_FENCED))
    with pytest.raises(ProducerFencedError):
        result.wait(0)


def test_abort_drops_offsets_not_yet_sent() -> None:
    driver = Driver()
    driver.init()
    driver.manager.begin_transaction()
    result = driver.manager.send_offsets({TP0: 1}, GROUP)
    driver.manager.abort()
    with pytest.raises(TransactionAbortedError):
        result.wait(0)
    assert driver.next() is None, "nothing reached the coordinator: nothing to end"
    assert driver.manager.state is S.READY


def test_empty_offsets_need_no_request() -> None:
    driver = Driver()
    driver.init()
    driver.manager.begin_transaction()
    result = driver.manager.send_offsets({}, GROUP)
    assert result.done and result.error is None
    assert driver.next() is None


# -- calls out of order and calls again after a timeout ----------------------------------------------


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ("check_send", "call init_transactions"),
        ("begin_transaction", "call init_transactions"),
        ("commit", "call init_transactions"),
        ("abort", "call init_transactions"),
    ],
)
def test_calls_before_init_are_refused(call: str, message: str) -> None:
    manager = TransactionManager("tx-1", 60_000, BACKOFF_MS)
    with pytest.raises(TransactionStateError, match=message):
        getattr(manager, call)()
    assert manager.state is S.UNINITIALIZED


def test_calls_between_transactions_are_refused() -> None:
    driver = Driver()
    driver.init()
    with pytest.raises(TransactionStateError, match="begin_transaction"):
        driver.manager.check_send()
    with pytest.raises(TransactionStateError, match=r"commit_transaction\(\) in state Ready"):
        driver.manager.commit()
    with pytest.raises(TransactionStateError, match="init_transactions"):
        driver.manager.init_transactions()
    driver.manager.begin_transaction()
    with pytest.raises(TransactionStateError, match="transaction is open"):
        driver.manager.begin_transaction()


def test_a_call_that_timed_out_is_made_again_and_waits_for_the_same_result() -> None:
    driver = Driver()
    driver.init()
    driver.begin_with(TP0)
    result = driver.manager.commit()
    with pytest.raises(KafkaTimeoutError, match=r"call commit_transaction\(\) again"):
        result.wait(0)
    assert driver.manager.commit() is result
    with pytest.raises(TransactionStateError, match=r"commit_transaction\(\) is in progress"):
        driver.manager.abort()
    driver.answer(RequestKind.END_TXN, ended())
    assert driver.manager.commit() is result, "completed since: the same (successful) result"
    result.wait(0)
    with pytest.raises(TransactionStateError, match="in state Ready"):
        driver.manager.commit()  # its outcome was seen: this is a new commit, out of place
    driver.manager.begin_transaction()
    assert driver.manager.commit() is not result, "a new transaction: a new commit"


def test_send_offsets_again_after_a_timeout_waits_for_the_same_commit() -> None:
    driver = Driver()
    driver.init()
    driver.manager.begin_transaction()
    result = driver.manager.send_offsets({TP0: 1}, GROUP)
    assert driver.manager.send_offsets({TP0: 1}, GROUP) is result
    assert driver.manager.send_offsets({TP0: 2}, GROUP) is not result


def test_closing_tells_whoever_waits() -> None:
    driver = Driver()
    driver.init()
    driver.begin_with(TP0)
    offsets = driver.manager.send_offsets({TP0: 1}, GROUP)
    commit = driver.manager.commit()
    driver.manager.closed(KafkaError("closed"))
    for result in (offsets, commit):
        with pytest.raises(KafkaError, match="closed"):
            result.wait(0)


# -- requests fitted to older versions ---------------------------------------------------------------


@pytest.mark.parametrize(
    "version", range(FindCoordinatorRequest.MIN_VERSION, FindCoordinatorRequest.MAX_VERSION + 1)
)
def test_find_coordinator_fits_every_version(version: int) -> None:
    request = FindCoordinatorRequest(key_type=1, coordinator_keys=["tx-1"])
    if version == 0:
        with pytest.raises(UnsupportedVersionError):
            fit_transaction_request(request, version)
        return
    fitted = fit_transaction_request(request, version)
    fitted.encode(version)
    if version < 4:
        assert (fitted.key, fitted.key_type) == ("tx-1", 1)


def test_txn_offset_commit_below_v3_carries_no_member() -> None:
    request = TxnOffsetCommitRequest(
        transactional_id="tx-1",
        group_id="g",
        producer_id=1,
        producer_epoch=0,
        generation_id=4,
        member_id="m",
        group_instance_id="i",
        topics=[
            TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(
                name="t",
                partitions=[
                    TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition(
                        partition_index=0, committed_offset=5, committed_leader_epoch=3
                    )
                ],
            )
        ],
    )
    fitted = fit_transaction_request(request, 1)
    fitted.encode(1)
    assert (fitted.generation_id, fitted.member_id, fitted.group_instance_id) == (-1, "", None)


def test_the_epoch_bump_needs_init_producer_id_v3() -> None:
    request = InitProducerIdRequest(
        transactional_id="tx-1", transaction_timeout_ms=1, producer_id=5, producer_epoch=0
    )
    with pytest.raises(UnsupportedVersionError, match="KIP-360"):
        fit_transaction_request(request, 2)
    fit_transaction_request(request, 3).encode(3)


# -- configuration -----------------------------------------------------------------------------------


def test_transactional_id_implies_idempotence_and_refuses_what_conflicts() -> None:
    config = ProducerConfig.from_settings({"transactional.id": "tx-1"})
    assert config.enable_idempotence and config.transaction_timeout_ms == 60_000
    with pytest.raises(ConfigError, match=r"requires enable\.idempotence"):
        ProducerConfig.from_settings({"transactional.id": "tx-1", "enable.idempotence": False})
    with pytest.raises(ConfigError, match=r"transactional\.id requires acks=all, not acks=1"):
        ProducerConfig.from_settings({"transactional.id": "tx-1", "acks": 1})
    with pytest.raises(ConfigError, match="must not be empty"):
        ProducerConfig.from_settings({"transactional.id": ""})
    with pytest.raises(ConfigError, match="must be positive"):
        ProducerConfig.from_settings({"transactional.id": "tx-1", "transaction.timeout.ms": 0})


# -- the sender core in a transaction ----------------------------------------------------------------


def transactional_core() -> tuple[RecordAccumulator, SenderCore, ManualClock, Driver]:
    config = ProducerConfig.from_settings(linger_ms=0, batch_size=1000, transactional_id="tx-1")
    clock = ManualClock()
    accumulator = RecordAccumulator(batch_size=1000, linger_ms=0, compression="none", clock=clock)
    driver = Driver()
    core = SenderCore(config, accumulator, cluster(), transactions=driver.manager)
    return accumulator, core, clock, driver


def test_batches_wait_for_their_partition_to_join_and_are_transactional() -> None:
    accumulator, core, clock, driver = transactional_core()
    assert not core.needs_producer_id, "the transaction's InitProducerId gives the id"
    driver.init()
    core.set_producer_id(driver.manager.producer_id, driver.manager.producer_epoch)
    driver.manager.begin_transaction()
    future = accumulator.append(TP0, clock.wall_ms(), None, b"a", (), None)
    jobs, _ = core.collect(clock.monotonic_ms(), always_ready)
    assert jobs == []
    driver.answer(RequestKind.ADD_PARTITIONS, added({TP0: ErrorCode.NONE}))
    jobs, _ = core.collect(clock.monotonic_ms(), always_ready)
    (job,) = jobs
    (batch,) = iter_batches(bytes(job.request.topic_data[0].partition_data[0].records or b""))
    assert batch.header.is_transactional and (batch.header.producer_id, batch.header.base_sequence) == (11, 0)
    core.on_response(job, FakeBroker().handle(job), clock.monotonic_ms())
    assert future.result(0).offset == 0


def test_a_failed_batch_reaches_the_manager_and_queued_ones_fail_with_the_abort() -> None:
    accumulator, core, clock, driver = transactional_core()
    driver.init()
    core.set_producer_id(driver.manager.producer_id, driver.manager.producer_epoch)
    driver.begin_with(TP0)
    first = accumulator.append(TP0, clock.wall_ms(), None, b"a", (), None)
    (job,), _ = core.collect(clock.monotonic_ms(), always_ready)
    broker = FakeBroker()
    broker.fail_next = [ErrorCode.MESSAGE_TOO_LARGE]
    second = accumulator.append(TP0, clock.wall_ms(), None, b"b", (), None)
    core.on_response(job, broker.handle(job), clock.monotonic_ms())
    assert isinstance(first.exception(0), KafkaError)
    assert driver.manager.state is S.ABORTABLE_ERROR
    assert driver.manager.epoch_bump_required
    error = driver.manager.queued_batches_error()
    assert error is not None
    core.fail_queued(error)
    assert isinstance(second.exception(0), TransactionAbortableError)
    assert accumulator.incomplete == 0
