"""read_committed decoding: the records of aborted transactions (as the Fetch answer lists them)
and every control batch stay out of what the application gets, positions still move past them;
against a model over random interleavings of several producers' transactions."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from strom.client.cluster import TopicPartition
from strom.client.consumer.decode import decode_partition_records
from strom.protocol.messages.fetch import FetchResponse
from strom.protocol.records import Record, build_batch
from strom.protocol.records.control import build_end_txn_marker

TP = TopicPartition("orders", 0)


class Log:
    """A partition's batches as a broker would store them, and what the model says of them."""

    def __init__(self) -> None:
        self.payload = b""
        self.next_offset = 0
        # (producer id, first offset, marker offset) of each aborted transaction.
        self.aborted: list[tuple[int, int, int]] = []
        # Offset -> value of each record a read_committed reader must see.
        self.committed: dict[int, bytes] = {}
        # Offset -> value of every data record (read_uncommitted sees them all).
        self.every: dict[int, bytes] = {}
        # Per producer, its open transaction: first offset and the offsets of its records.
        self._open: dict[int, tuple[int, list[int]]] = {}

    def data(self, producer_id: int, count: int) -> None:
        """A batch of ``count`` records: transactional for producer ids >= 0, plain for -1."""
        base = self.next_offset
        values = [f"p{producer_id}@{base + index}".encode() for index in range(count)]
        self.payload += build_batch(
            [
                Record(offset_delta=index, timestamp_delta=0, key=None, value=value)
                for index, value in enumerate(values)
            ],
            base_offset=base,
            base_timestamp=1_700_000_000_000,
            producer_id=producer_id if producer_id >= 0 else -1,
            producer_epoch=0 if producer_id >= 0 else -1,
            base_sequence=0 if producer_id >= 0 else -1,
            is_transactional=producer_id >= 0,
        )
        offsets = list(range(base, base + count))
        for offset, value in zip(offsets, values):
            self.every[offset] = value
        if producer_id < 0:
            self.committed.update(zip(offsets, values))
        else:
            _, pending = self._open.setdefault(producer_id, (base, []))
            pending.extend(offsets)
        self.next_offset += count

    def end(self, producer_id: int, commit: bool) -> None:
        marker_offset = self.next_offset
        self.payload += build_end_txn_marker(
            producer_id=producer_id,
            producer_epoch=0,
            commit=commit,
            coordinator_epoch=0,
            timestamp_ms=1_700_000_000_000,
            base_offset=marker_offset,
        )
        self.next_offset += 1
        opened = self._open.pop(producer_id, None)
        if opened is None:
            return
        first, offsets = opened
        if commit:
            for offset in offsets:
                self.committed[offset] = self.every[offset]
        else:
            self.aborted.append((producer_id, first, marker_offset))

    def open_producers(self) -> list[int]:
        return sorted(self._open)

    def listed(self, fetch_offset: int) -> list[FetchResponse.AbortedTransaction]:
        """What the broker lists: the aborted transactions that overlap [fetch offset, end)."""
        return [
            FetchResponse.AbortedTransaction(producer_id=producer_id, first_offset=first)
            for producer_id, first, last in self.aborted
            if last >= fetch_offset
        ]


def test_aborted_records_and_markers_are_dropped_and_the_position_moves_past_them() -> None:
    log = Log()
    log.data(1, 3)  # 0-2, aborted
    log.data(2, 2)  # 3-4, committed
    log.data(-1, 1)  # 5, plain
    log.data(1, 2)  # 6-7, aborted
    log.end(1, commit=False)  # 8
    log.end(2, commit=True)  # 9
    log.data(1, 2)  # 10-11: the producer's next transaction, committed
    log.end(1, commit=True)  # 12
    fetched = decode_partition_records(TP, 0, log.payload, aborted_transactions=log.listed(0))
    assert [(record.offset, record.value) for record in fetched.records] == [
        (3, b"p2@3"),
        (4, b"p2@4"),
        (5, b"p-1@5"),
        (10, b"p1@10"),
        (11, b"p1@11"),
    ]
    assert fetched.next_offset == 13
    everything = decode_partition_records(TP, 0, log.payload)
    assert [record.offset for record in everything.records] == [0, 1, 2, 3, 4, 5, 6, 7, 10, 11]


def test_a_fetch_of_only_aborted_records_and_markers_returns_none_and_moves_on() -> None:
    log = Log()
    log.data(7, 4)
    log.end(7, commit=False)
    fetched = decode_partition_records(TP, 0, log.payload, aborted_transactions=log.listed(0))
    assert fetched.records == [] and fetched.next_offset == 5


def test_a_transaction_starting_after_the_fetch_offset_is_skipped_only_from_its_first_offset() -> None:
    log = Log()
    log.data(3, 2)  # 0-1 committed later
    log.end(3, commit=True)  # 2
    log.data(3, 2)  # 3-4 aborted
    log.end(3, commit=False)  # 5
    fetched = decode_partition_records(TP, 0, log.payload, aborted_transactions=log.listed(0))
    assert [record.offset for record in fetched.records] == [0, 1]


@dataclass(frozen=True)
class Step:
    producer_id: int  # -1: a plain (non-transactional) batch
    action: str  # "data", "commit", "abort"
    count: int


steps = st.lists(
    st.builds(
        Step,
        producer_id=st.integers(min_value=-1, max_value=3),
        action=st.sampled_from(["data", "data", "commit", "abort"]),
        count=st.integers(min_value=1, max_value=4),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(steps, st.data())
def test_random_interleavings_read_as_the_model_says(plan: list[Step], data: st.DataObject) -> None:
    log = Log()
    for step in plan:
        if step.producer_id < 0 or step.action == "data":
            log.data(step.producer_id, step.count)
        else:
            log.end(step.producer_id, commit=step.action == "commit")
    for producer_id in log.open_producers():  # the broker stops at the LSO: close them for the model
        log.end(producer_id, commit=data.draw(st.booleans()))
    fetch_offset = data.draw(st.integers(min_value=0, max_value=max(log.next_offset - 1, 0)))
    fetched = decode_partition_records(
        TP, fetch_offset, log.payload, aborted_transactions=log.listed(fetch_offset)
    )
    assert [(record.offset, record.value) for record in fetched.records] == sorted(
        (offset, value) for offset, value in log.committed.items() if offset >= fetch_offset
    )
    assert fetched.next_offset == max(log.next_offset, fetch_offset)
    uncommitted = decode_partition_records(TP, fetch_offset, log.payload)
    assert [record.offset for record in uncommitted.records] == sorted(
        offset for offset in log.every if offset >= fetch_offset
    )
