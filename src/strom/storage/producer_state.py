"""Producer state of one partition: per producer id, its epoch, its last 5 batches, and its
transaction (the first offset of the one in progress, the coordinator epoch of its last marker).

A producer retries a batch it got no answer for; the retry carries the same sequence numbers, so a
batch matching one of the producer's last ``PRODUCER_BATCHES_KEPT`` batches is a duplicate and is
answered with the offsets of the original. Sequences wrap from 2**31-1 to 0.

Transactions (KIP-98): a transactional data batch starts a transaction of its producer when none is
in progress (its base offset is the transaction's first offset); the producer's next COMMIT or ABORT
marker ends it (``replay_marker``). ``ongoing`` maps the producers with a transaction in progress to
its first offset: the partition's last stable offset is the lowest of them. A marker is refused when
its producer epoch is older than the producer's (a fenced producer) or its coordinator epoch older
than the one of the producer's last marker (a zombie coordinator): ``check_marker``.

The state is checked for a whole append request first (``check``) and committed only once the bytes
are written (``commit``), so a refused request leaves no trace. It is snapshotted to
``producer_state.json`` (atomically) with the log end offset it covers; on open the batches after
that offset are replayed.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from strom.protocol.records.control import EndTxnMarker
from strom.protocol.records.header import NO_SEQUENCE, TRANSACTIONAL_BIT, BatchHeader
from strom.storage.errors import (
    DuplicateSequenceError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from strom.storage.files import write_file_atomically

# Kafka keeps the last 5 batches per producer: max.in.flight.requests.per.connection may be at most
# 5 with idempotence, so a retry can only ever repeat one of these.
PRODUCER_BATCHES_KEPT = 5

SEQUENCE_MODULUS = 2**31

SNAPSHOT_FILE_NAME = "producer_state.json"
# Version 2 added each producer's "coordinator_epoch" and "txn_first_offset"; a version 1 snapshot
# (without them) loads with neither (-1).
SNAPSHOT_VERSION = 2
# An entry field's value for "none": no transaction in progress, no marker seen yet.
NONE = -1


class ProducerBatch(NamedTuple):
    first_sequence: int
    last_sequence: int
    base_offset: int
    last_offset: int


class CompletedTxn(NamedTuple):
    """A transaction a marker ended. ``first_offset`` is the marker's own offset when no
    transaction was in progress; ``last_stable_offset`` is the partition's first unstable offset
    right after it (the lowest first offset of the transactions still in progress, else the
    marker's offset + 1), not capped by the high watermark."""

    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    commit: bool
    last_stable_offset: int


@dataclass
class ProducerEntry:
    epoch: int
    batches: deque[ProducerBatch] = field(default_factory=lambda: deque(maxlen=PRODUCER_BATCHES_KEPT))
    last_timestamp_ms: int = -1
    coordinator_epoch: int = NONE  # of the producer's last marker
    txn_first_offset: int = NONE  # first offset of the transaction in progress

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else NO_SEQUENCE

    def copy(self) -> ProducerEntry:
        return ProducerEntry(
            self.epoch,
            deque(self.batches, maxlen=PRODUCER_BATCHES_KEPT),
            self.last_timestamp_ms,
            self.coordinator_epoch,
            self.txn_first_offset,
        )

    def set_epoch(self, epoch: int) -> None:
        """A new producer epoch: its sequence numbers start over (the transaction and the
        coordinator epoch stay, as in Kafka)."""
        if epoch != self.epoch:
            self.epoch = epoch
            self.batches.clear()


def next_sequence(sequence: int) -> int:
    return (sequence + 1) % SEQUENCE_MODULUS


class ProducerStateTable:
    def __init__(self, entries: dict[int, ProducerEntry] | None = None) -> None:
        self.entries: dict[int, ProducerEntry] = entries if entries is not None else {}
        # Producers with a transaction in progress -> its first offset (kept with ``entries``).
        self.ongoing: dict[int, int] = {
            producer_id: entry.txn_first_offset
            for producer_id, entry in self.entries.items()
            if entry.txn_first_offset >= 0
        }

    def get(self, producer_id: int) -> ProducerEntry | None:
        return self.entries.get(producer_id)

    def first_unstable_offset(self) -> int | None:
        """The lowest first offset of the transactions in progress, None when there is none."""
        ongoing = self.ongoing
        return min(ongoing.values()) if ongoing else None

    def check(self, headers: list[BatchHeader], base_offsets: list[int]) -> dict[int, ProducerEntry]:
        """Validate the idempotent batches of one request; returns the updated entries to commit.

        ``base_offsets`` are the offsets the batches would get. A transactional batch starts its
        producer's transaction if none is in progress. Raises DuplicateSequenceError,
        OutOfOrderSequenceError, InvalidProducerEpochError or InvalidTxnStateError (a
        non-transactional batch from a producer in the middle of a transaction) without changing
        anything.
        """
        pending: dict[int, ProducerEntry] = {}
        for header, base_offset in zip(headers, base_offsets):
            if header.producer_id < 0 or header.base_sequence == NO_SEQUENCE:
                continue
            entry = pending.get(header.producer_id)
            if entry is None:
                current = self.entries.get(header.producer_id)
                entry = current.copy() if current is not None else None
            entry = self._check_one(header, entry)
            if header.attributes & TRANSACTIONAL_BIT:
                if entry.txn_first_offset < 0:
                    entry.txn_first_offset = base_offset
            elif entry.txn_first_offset >= 0:
                raise InvalidTxnStateError(
                    f"producer {header.producer_id} sent a non-transactional batch in the middle of "
                    f"its transaction (started at offset {entry.txn_first_offset})"
                )
            entry.batches.append(
                ProducerBatch(
                    header.base_sequence,
                    header.last_sequence,
                    base_offset,
                    base_offset + header.last_offset_delta,
                )
            )
            entry.last_timestamp_ms = max(entry.last_timestamp_ms, header.max_timestamp)
            pending[header.producer_id] = entry
        return pending

    def commit(self, pending: dict[int, ProducerEntry]) -> None:
        self.entries.update(pending)
        for producer_id, entry in pending.items():
            if entry.txn_first_offset >= 0:
                self.ongoing[producer_id] = entry.txn_first_offset

    def replay(self, header: BatchHeader) -> None:
        """Take a data batch already in the log into account (recovery, a follower), without
        checking it. Control batches go to ``replay_marker``."""
        producer_id = header.producer_id
        if producer_id < 0 or header.base_sequence == NO_SEQUENCE:
            return
        entry = self.entries.get(producer_id)
        if entry is None:
            entry = self.entries[producer_id] = ProducerEntry(header.producer_epoch)
        elif entry.epoch != header.producer_epoch:
            entry.set_epoch(header.producer_epoch)
        entry.batches.append(
            ProducerBatch(header.base_sequence, header.last_sequence, header.base_offset, header.last_offset)
        )
        entry.last_timestamp_ms = max(entry.last_timestamp_ms, header.max_timestamp)
        if header.attributes & TRANSACTIONAL_BIT and entry.txn_first_offset < 0:
            entry.txn_first_offset = self.ongoing[producer_id] = header.base_offset

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """Raise InvalidProducerEpochError (the producer was fenced: a newer epoch wrote here) or
        TransactionCoordinatorFencedError (an older coordinator than the one of the producer's last
        marker) for a marker the leader is asked to write."""
        entry = self.entries.get(producer_id)
        if entry is None:
            return
        if producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"marker for producer {producer_id} epoch {producer_epoch}: the producer is at epoch {entry.epoch}"
            )
        if coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"marker for producer {producer_id} from coordinator epoch {coordinator_epoch}: its last "
                f"marker came from coordinator epoch {entry.coordinator_epoch}"
            )

    def replay_marker(
        self, header: BatchHeader, marker: EndTxnMarker, *, recovering: bool = False
    ) -> CompletedTxn:
        """A COMMIT or ABORT marker (at ``header.base_offset``) ends its producer's transaction
        (written by the leader after ``check_marker``, or replayed): no check."""
        producer_id = header.producer_id
        offset = header.base_offset
        entry = self.entries.get(producer_id)
        first_offset, last_stable = self.completion(producer_id, offset)
        self.ongoing.pop(producer_id, None)
        if entry is None and recovering:
            # Rebuilding from the log, no batch of this producer came before its marker (none
            # written here, or compaction or retention removed them): no entry is made, so its
            # next batch is taken at any sequence, as an unknown producer's is. An entry without
            # batches would want sequence 0, and a producer whose aborted or superseded batches
            # were compacted away would be refused after a restart.
            return CompletedTxn(producer_id, first_offset, offset, marker.commit, last_stable)
        if entry is None:
            entry = self.entries[producer_id] = ProducerEntry(header.producer_epoch)
        entry.set_epoch(header.producer_epoch)
        entry.txn_first_offset = NONE
        entry.coordinator_epoch = marker.coordinator_epoch
        entry.last_timestamp_ms = max(entry.last_timestamp_ms, header.max_timestamp)
        return CompletedTxn(producer_id, first_offset, offset, marker.commit, last_stable)

    def completion(self, producer_id: int, marker_offset: int) -> tuple[int, int]:
        """(first offset, last stable offset) of the transaction a marker of ``producer_id`` at
        ``marker_offset`` would end now (see ``CompletedTxn``), changing nothing."""
        first_offset = marker_offset
        last_stable = marker_offset + 1
        for other, other_first in self.ongoing.items():
            if other == producer_id:
                first_offset = other_first
            elif other_first < last_stable:
                last_stable = other_first
        return first_offset, last_stable

    @staticmethod
    def _check_one(header: BatchHeader, entry: ProducerEntry | None) -> ProducerEntry:
        producer_id = header.producer_id
        if entry is None:
            # A producer not known here is accepted at any sequence, as Kafka does since KIP-360:
            # its earlier batches may be gone with segments that retention or DeleteRecords removed.
            return ProducerEntry(header.producer_epoch)
        if header.producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {producer_id} epoch {header.producer_epoch} is older than {entry.epoch}"
            )
        if header.producer_epoch > entry.epoch:
            if header.base_sequence != 0:
                raise OutOfOrderSequenceError(
                    f"producer {producer_id} new epoch {header.producer_epoch} starts at sequence "
                    f"{header.base_sequence}, expected 0"
                )
            entry.set_epoch(header.producer_epoch)  # entry is a copy: nothing changes until commit
            return entry
        for batch in entry.batches:
            if batch.first_sequence == header.base_sequence and batch.last_sequence == header.last_sequence:
                raise DuplicateSequenceError(batch.base_offset, batch.last_offset)
        expected = next_sequence(entry.last_sequence) if entry.batches else 0
        if header.base_sequence != expected:
            raise OutOfOrderSequenceError(
                f"producer {producer_id} epoch {header.producer_epoch}: sequence {header.base_sequence}, "
                f"expected {expected}"
            )
        return entry

    # ---- snapshots ---------------------------------------------------------------------------

    def write_snapshot(self, path: Path, covers_offset: int, *, sync: bool = True) -> None:
        write_file_atomically(path, self.snapshot_bytes(covers_offset), sync=sync)

    def snapshot_bytes(self, covers_offset: int) -> bytes:
        """The snapshot as written to disk: the state of every batch below ``covers_offset``."""
        producers: list[dict[str, Any]] = [
            {
                "producer_id": producer_id,
                "epoch": entry.epoch,
                "last_timestamp_ms": entry.last_timestamp_ms,
                "batches": [list(batch) for batch in entry.batches],
                "coordinator_epoch": entry.coordinator_epoch,
                "txn_first_offset": entry.txn_first_offset,
            }
            for producer_id, entry in self.entries.items()
        ]
        document = {"version": SNAPSHOT_VERSION, "offset": covers_offset, "producers": producers}
        return json.dumps(document, separators=(",", ":")).encode()

    @classmethod
    def read_snapshot(cls, path: Path) -> tuple[ProducerStateTable, int] | None:
        """(table, offset it covers up to, exclusive) or None if missing or unreadable."""
        try:
            document = json.loads(path.read_bytes())
            entries: dict[int, ProducerEntry] = {}
            for item in document["producers"]:
                entry = ProducerEntry(
                    int(item["epoch"]),
                    last_timestamp_ms=int(item["last_timestamp_ms"]),
                    coordinator_epoch=int(item.get("coordinator_epoch", NONE)),
                    txn_first_offset=int(item.get("txn_first_offset", NONE)),
                )
                for first, last, base, last_offset in item["batches"]:
                    entry.batches.append(ProducerBatch(int(first), int(last), int(base), int(last_offset)))
                entries[int(item["producer_id"])] = entry
            return cls(entries), int(document["offset"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
