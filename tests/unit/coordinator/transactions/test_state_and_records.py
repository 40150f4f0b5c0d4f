"""The transition table, the __transaction_state record layout, and the write error mapping."""

from __future__ import annotations

import struct

import pytest

from strom.coordinator.transactions import (
    ALLOWED_PREVIOUS,
    CorruptTransactionRecord,
    IllegalTransactionTransition,
    TopicPartition,
    TransactionCoordinatorConfig,
    TransactionSnapshot,
    TransactionState,
    transaction_write_error,
)
from strom.coordinator.transactions.records import decode_key, decode_value, key_bytes, record, value_bytes
from strom.coordinator.transactions.state import STATUS_OF, check_transition, parse_state
from strom.protocol.errors import ErrorCode
from strom.protocol.transaction_records.transaction_log import TransactionLogKey, TransactionLogValue

STATES = list(TransactionState)
PAIRS = [(current, target) for current in STATES for target in STATES]


@pytest.mark.parametrize(
    ("current", "target"),
    [pair for pair in PAIRS if pair[0] in ALLOWED_PREVIOUS[pair[1]]],
    ids=lambda state: state.value,
)
def test_allowed_transitions_pass(current: TransactionState, target: TransactionState) -> None:
    check_transition("t", current, target)


@pytest.mark.parametrize(
    ("current", "target"),
    [pair for pair in PAIRS if pair[0] not in ALLOWED_PREVIOUS[pair[1]]],
    ids=lambda state: state.value,
)
def test_other_transitions_raise_naming_the_id_and_both_states(
    current: TransactionState, target: TransactionState
) -> None:
    with pytest.raises(IllegalTransactionTransition) as raised:
        check_transition("orders", current, target)
    message = str(raised.value)
    assert "'orders'" in message and current.value in message and target.value in message


def test_the_table_is_kafkas() -> None:
    def names(state: TransactionState) -> set[str]:
        return {previous.value for previous in ALLOWED_PREVIOUS[state]}

    assert names(TransactionState.EMPTY) == {"Empty", "CompleteCommit", "CompleteAbort"}
    assert names(TransactionState.ONGOING) == {"Ongoing", "Empty", "CompleteCommit", "CompleteAbort"}
    assert names(TransactionState.PREPARE_COMMIT) == {"Ongoing"}
    assert names(TransactionState.PREPARE_ABORT) == {"Ongoing", "PrepareEpochFence"}
    assert names(TransactionState.COMPLETE_COMMIT) == {"PrepareCommit"}
    assert names(TransactionState.COMPLETE_ABORT) == {"PrepareAbort"}
    assert names(TransactionState.DEAD) == {"Empty", "CompleteCommit", "CompleteAbort"}
    assert names(TransactionState.PREPARE_EPOCH_FENCE) == {"Ongoing"}


def test_status_bytes_are_kafkas_and_names_parse_exactly() -> None:
    assert [STATUS_OF[state] for state in STATES] == list(range(8))
    for state in STATES:
        assert parse_state(state.value) is state
    assert parse_state("ongoing") is None
    assert parse_state("Stable") is None


def snapshot(**changes: object) -> TransactionSnapshot:
    values: dict[str, object] = {
        "producer_id": 4000,
        "producer_epoch": 3,
        "last_producer_id": -1,
        "last_producer_epoch": -1,
        "timeout_ms": 60_000,
        "state": TransactionState.ONGOING,
        "partitions": frozenset({TopicPartition("b", 2), TopicPartition("a", 1), TopicPartition("a", 0)}),
        "start_timestamp_ms": 1_000,
        "last_update_timestamp_ms": 2_000,
    }
    values.update(changes)
    return TransactionSnapshot(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "state",
    [state for state in STATES if state not in (TransactionState.DEAD, TransactionState.PREPARE_EPOCH_FENCE)],
)
def test_a_snapshot_round_trips_through_its_record(state: TransactionState) -> None:
    partitions = frozenset() if state is TransactionState.EMPTY else snapshot().partitions
    original = snapshot(state=state, partitions=partitions, last_producer_id=3999, last_producer_epoch=32766)
    key, value = record("orders", original)
    assert decode_key(key) == "orders"
    assert value is not None
    # The last producer epoch is not in the record (Kafka's value has no field for it).
    assert decode_value(value) == original.durable()
    assert decode_value(value).last_producer_epoch == -1


def test_the_record_layout() -> None:
    key = key_bytes("t")
    assert key == struct.pack(">hh", 0, 1) + b"t"
    value = value_bytes(snapshot(last_producer_id=3999))
    assert struct.unpack_from(">h", value)[0] == 1
    decoded = TransactionLogValue.decode(value[2:], 1)
    assert decoded.previous_producer_id == 3999
    assert decoded.next_producer_id == -1
    assert decoded.transaction_status == 1
    # Partitions grouped by topic, sorted.
    assert [(schema.topic, schema.partition_ids) for schema in decoded.transaction_partitions or []] == [
        ("a", [0, 1]),
        ("b", [2]),
    ]


def test_empty_is_written_with_null_partitions_as_kafka_does() -> None:
    value = value_bytes(snapshot(state=TransactionState.EMPTY, partitions=frozenset(), start_timestamp_ms=-1))
    assert TransactionLogValue.decode(value[2:], 1).transaction_partitions is None


def test_dead_is_a_tombstone_and_the_fence_is_never_written() -> None:
    assert record("t", snapshot(state=TransactionState.DEAD)) == (key_bytes("t"), None)
    with pytest.raises(AssertionError):
        value_bytes(snapshot(state=TransactionState.PREPARE_EPOCH_FENCE))


def test_value_version_0_is_read_without_a_previous_producer_id() -> None:
    kafka_v0 = TransactionLogValue(
        producer_id=7,
        producer_epoch=2,
        transaction_timeout_ms=10_000,
        transaction_status=4,
        transaction_partitions=[TransactionLogValue.PartitionsSchema(topic="x", partition_ids=[3])],
        transaction_last_update_timestamp_ms=20,
        transaction_start_timestamp_ms=10,
    )
    decoded = decode_value(struct.pack(">h", 0) + kafka_v0.encode(0))
    assert decoded.state is TransactionState.COMPLETE_COMMIT
    assert decoded.partitions == {TopicPartition("x", 3)}
    assert decoded.last_producer_id == -1
    assert (decoded.producer_id, decoded.producer_epoch, decoded.timeout_ms) == (7, 2, 10_000)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00",
        struct.pack(">h", 1) + TransactionLogKey(transactional_id="t").encode(0),  # unknown key version
        struct.pack(">hh", 0, 5) + b"ab",  # truncated
        key_bytes("t") + b"\x00",  # bytes left over
    ],
)
def test_corrupt_keys_raise_the_one_error(data: bytes) -> None:
    with pytest.raises(CorruptTransactionRecord):
        decode_key(data)


@pytest.mark.parametrize(
    "data",
    [
        b"\x00",
        struct.pack(">h", 2) + b"\x00" * 40,  # unknown value version
        value_bytes(snapshot())[:-3],  # truncated
        value_bytes(snapshot()) + b"\x00",  # bytes left over
    ],
)
def test_corrupt_values_raise_the_one_error(data: bytes) -> None:
    with pytest.raises(CorruptTransactionRecord):
        decode_value(data)


def test_an_unknown_status_is_corrupt() -> None:
    value = TransactionLogValue(producer_id=1, transaction_status=9)
    with pytest.raises(CorruptTransactionRecord, match="status 9"):
        decode_value(struct.pack(">h", 1) + value.encode(1))


@pytest.mark.parametrize(
    ("written", "told"),
    [
        (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.COORDINATOR_NOT_AVAILABLE),
        (ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.COORDINATOR_NOT_AVAILABLE),
        (ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.COORDINATOR_NOT_AVAILABLE),
        (ErrorCode.REQUEST_TIMED_OUT, ErrorCode.COORDINATOR_NOT_AVAILABLE),
        (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_COORDINATOR),
        (ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.NOT_COORDINATOR),
        (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.UNKNOWN_SERVER_ERROR),
        (ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.UNKNOWN_SERVER_ERROR),
        (ErrorCode.NOT_COORDINATOR, ErrorCode.NOT_COORDINATOR),
        (ErrorCode.NONE, ErrorCode.NONE),
    ],
)
def test_write_errors_map_as_kafkas(written: ErrorCode, told: ErrorCode) -> None:
    assert transaction_write_error(written) == told


def test_config_defaults_are_kafkas_and_bad_values_are_refused() -> None:
    config = TransactionCoordinatorConfig()
    assert config.transaction_state_log_num_partitions == 50
    assert config.transaction_max_timeout_ms == 900_000
    assert config.transactional_id_expiration_ms == 604_800_000
    assert config.transaction_abort_timed_out_transaction_cleanup_interval_ms == 10_000
    assert config.transaction_remove_expired_transaction_cleanup_interval_ms == 3_600_000
    with pytest.raises(ValueError, match=r"transaction\.max\.timeout\.ms"):
        TransactionCoordinatorConfig(transaction_max_timeout_ms=0)
    with pytest.raises(ValueError, match="backoff"):
        TransactionCoordinatorConfig(transaction_marker_retry_backoff_ms=-1)
