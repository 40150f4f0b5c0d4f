from __future__ import annotations

import pytest

from strom.storage.errors import (
    DuplicateSequenceError,
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
)
from strom.storage.producer_state import SEQUENCE_MODULUS

from .conftest import OpenLog
from .helpers import append, make_batch, read_all

PRODUCER_ID = 1000


def idempotent(count: int, base_sequence: int, epoch: int = 0, producer_id: int = PRODUCER_ID) -> bytes:
    return make_batch(
        [b"v"] * count, producer_id=producer_id, producer_epoch=epoch, base_sequence=base_sequence
    )


def test_in_order_batches_are_accepted_and_tracked(open_log: OpenLog) -> None:
    log = open_log()
    append(log, idempotent(3, 0))
    append(log, idempotent(2, 3))
    assert log.producer_state(PRODUCER_ID) == (0, 4)
    assert log.producer_state(7) is None


def test_duplicate_batch_reports_the_original_offsets_and_writes_nothing(open_log: OpenLog) -> None:
    log = open_log()
    append(log, make_batch([b"other"]))
    append(log, idempotent(3, 0))
    append(log, idempotent(2, 3))
    with pytest.raises(DuplicateSequenceError) as raised:
        append(log, idempotent(3, 0))
    assert (raised.value.base_offset, raised.value.last_offset) == (1, 3)
    assert log.log_end_offset == 6


def test_gap_in_sequence_is_out_of_order(open_log: OpenLog) -> None:
    log = open_log()
    append(log, idempotent(3, 0))
    with pytest.raises(OutOfOrderSequenceError):
        append(log, idempotent(1, 4))
    assert log.log_end_offset == 3


def test_an_unknown_producer_may_start_at_any_sequence(open_log: OpenLog) -> None:
    log = open_log()
    append(log, idempotent(1, 41, producer_id=2))  # its earlier batches may have been deleted
    assert log.producer_state(2) == (0, 41)
    with pytest.raises(OutOfOrderSequenceError):
        append(log, idempotent(1, 43, producer_id=2))


def test_epochs_fence_older_producers_and_restart_sequences(open_log: OpenLog) -> None:
    log = open_log()
    append(log, idempotent(2, 0, epoch=3))
    with pytest.raises(InvalidProducerEpochError):
        append(log, idempotent(1, 2, epoch=2))
    with pytest.raises(OutOfOrderSequenceError):
        append(log, idempotent(1, 5, epoch=4))
    append(log, idempotent(1, 0, epoch=4))
    assert log.producer_state(PRODUCER_ID) == (4, 0)


def test_sequences_wrap_to_zero(open_log: OpenLog) -> None:
    log = open_log()
    last = SEQUENCE_MODULUS - 1
    append(log, idempotent(1, 0))
    # Jump the state forward the way a long-lived producer would get there.
    log._producer_states.entries[PRODUCER_ID].batches[-1] = (
        log._producer_states.entries[PRODUCER_ID]
        .batches[-1]
        ._replace(first_sequence=last - 1, last_sequence=last - 1)
    )
    append(log, idempotent(3, last))  # sequences last, 0, 1
    assert log.producer_state(PRODUCER_ID) == (0, 1)
    append(log, idempotent(1, 2))


def test_a_refused_request_changes_no_state(open_log: OpenLog) -> None:
    log = open_log()
    append(log, idempotent(1, 0))
    with pytest.raises(OutOfOrderSequenceError):
        append(log, idempotent(1, 1), idempotent(1, 9))
    assert log.producer_state(PRODUCER_ID) == (0, 0)
    append(log, idempotent(1, 1))


def test_state_survives_reopen_clean_and_after_a_crash(open_log: OpenLog) -> None:
    log = open_log()
    append(log, idempotent(2, 0, epoch=1))
    log.close()
    reopened = open_log()
    assert reopened.producer_state(PRODUCER_ID) == (1, 1)
    with pytest.raises(DuplicateSequenceError):
        append(reopened, idempotent(2, 0, epoch=1))
    append(reopened, idempotent(1, 2, epoch=1))
    # No close: the snapshot covers offset 2, the batch at 2 must be replayed from the log.
    reopened.flush()
    crashed = open_log()
    assert crashed.producer_state(PRODUCER_ID) == (1, 2)
    assert [offset for offset, _, _ in read_all(crashed)] == [0, 1, 2]
