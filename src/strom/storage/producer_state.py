"""Idempotent-producer state of one partition: per producer id, its epoch and its last 5 batches.

A producer retries a batch it got no answer for; the retry carries the same sequence numbers, so a
batch matching one of the producer's last ``PRODUCER_BATCHES_KEPT`` batches is a duplicate and is
answered with the offsets of the original. Sequences wrap from 2**31-1 to 0.

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

from strom.protocol.records.header import NO_SEQUENCE, BatchHeader
from strom.storage.errors import (
    DuplicateSequenceError,
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
)
from strom.storage.files import write_file_atomically

# Kafka keeps the last 5 batches per producer: max.in.flight.requests.per.connection may be at most
# 5 with idempotence, so a retry can only ever repeat one of these.
PRODUCER_BATCHES_KEPT = 5

SEQUENCE_MODULUS = 2**31

SNAPSHOT_FILE_NAME = "producer_state.json"


class ProducerBatch(NamedTuple):
    first_sequence: int
    last_sequence: int
    base_offset: int
    last_offset: int


@dataclass
class ProducerEntry:
    epoch: int
    batches: deque[ProducerBatch] = field(default_factory=lambda: deque(maxlen=PRODUCER_BATCHES_KEPT))
    last_timestamp_ms: int = -1

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else NO_SEQUENCE

    def copy(self) -> ProducerEntry:
        return ProducerEntry(
            self.epoch, deque(self.batches, maxlen=PRODUCER_BATCHES_KEPT), self.last_timestamp_ms
        )


def next_sequence(sequence: int) -> int:
    return (sequence + 1) % SEQUENCE_MODULUS


class ProducerStateTable:
    def __init__(self) -> None:
        self.entries: dict[int, ProducerEntry] = {}

    def get(self, producer_id: int) -> ProducerEntry | None:
        return self.entries.get(producer_id)

    def check(self, headers: list[BatchHeader], base_offsets: list[int]) -> dict[int, ProducerEntry]:
        """Validate the idempotent batches of one request; returns the updated entries to commit.

        ``base_offsets`` are the offsets the batches would get. Raises DuplicateSequenceError,
        OutOfOrderSequenceError or InvalidProducerEpochError without changing anything.
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

    def replay(self, header: BatchHeader) -> None:
        """Take a batch already in the log into account (recovery), without checking it."""
        if header.producer_id < 0 or header.base_sequence == NO_SEQUENCE:
            return
        entry = self.entries.get(header.producer_id)
        if entry is None or entry.epoch != header.producer_epoch:
            entry = ProducerEntry(header.producer_epoch)
            self.entries[header.producer_id] = entry
        entry.batches.append(
            ProducerBatch(header.base_sequence, header.last_sequence, header.base_offset, header.last_offset)
        )
        entry.last_timestamp_ms = max(entry.last_timestamp_ms, header.max_timestamp)

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
            return ProducerEntry(header.producer_epoch)
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
            }
            for producer_id, entry in self.entries.items()
        ]
        document = {"version": 1, "offset": covers_offset, "producers": producers}
        return json.dumps(document, separators=(",", ":")).encode()

    @classmethod
    def read_snapshot(cls, path: Path) -> tuple[ProducerStateTable, int] | None:
        """(table, offset it covers up to, exclusive) or None if missing or unreadable."""
        try:
            document = json.loads(path.read_bytes())
            table = cls()
            for item in document["producers"]:
                entry = ProducerEntry(int(item["epoch"]), last_timestamp_ms=int(item["last_timestamp_ms"]))
                for first, last, base, last_offset in item["batches"]:
                    entry.batches.append(ProducerBatch(int(first), int(last), int(base), int(last_offset)))
                table.entries[int(item["producer_id"])] = entry
            return table, int(document["offset"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
