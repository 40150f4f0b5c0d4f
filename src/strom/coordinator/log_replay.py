"""Reading a partition of ``__consumer_offsets`` for a load: what of its records is worth replaying.

The broker reads the partition once, in log order, and hands each record here; what is left is
the latest committed value of each key (``latest``, what compaction would keep: replayed with
``compacted_replay_order``) and the records of transactions whose marker was not read
(``open_records``: replayed as pending offsets with ``GroupCoordinator.replay_transactional``).

Transactional records (TxnOffsetCommit's batches) count only once their producer's COMMIT marker
follows them in the partition; an ABORT drops them; without a marker they stay pending. Of two
writes of one key the later one in the log wins, whatever the order of the markers:
- a non-transactional record beats every open transactional record of its key (they are earlier);
- a committed transactional record beats the open ones of its key written before it (by other
  producers), so that their COMMIT, coming later, does not lay an older value over it;
- a committed transactional record is later than everything in ``latest`` for its key (a later
  non-transactional record would have beaten it), so it replaces it.
So an aborted or still-open transactional record never wins over a committed one, and the state
replayed from here is the state of replaying the whole log in order with ``replay``,
``replay_transactional`` and ``replay_marker`` (tests/unit/coordinator prove it on random logs).

The cost of a non-transactional batch is unchanged while no transaction is open (the loader sets
``latest`` itself); while some are, each of its records costs one more dictionary lookup.
"""

from __future__ import annotations

from strom.coordinator.records import Record, compacted_replay_order


class CompactedPartition:
    def __init__(self) -> None:
        # key -> its latest committed value (None: a tombstone).
        self.latest: dict[bytes, bytes | None] = {}
        # producer id -> key -> (value, log offset): records of transactions with no marker read yet.
        self.open_transactions: dict[int, dict[bytes, tuple[bytes | None, int]]] = {}
        # key -> the producers with an open record of it.
        self._open_keys: dict[bytes, set[int]] = {}

    def plain(self, key: bytes, value: bytes | None) -> None:
        """A record of a non-transactional batch."""
        self.latest[key] = value
        producers = self._open_keys.pop(key, None)
        if producers is not None:
            for producer_id in producers:
                self._forget(producer_id, key)

    def transactional(self, producer_id: int, key: bytes, value: bytes | None, log_offset: int) -> None:
        """A record of ``producer_id``'s transactional batch, at ``log_offset``."""
        written = self.open_transactions.setdefault(producer_id, {})
        written.pop(key, None)  # written again in the same transaction: it keeps its later place
        written[key] = (value, log_offset)
        self._open_keys.setdefault(key, set()).add(producer_id)

    def marker(self, producer_id: int, commit: bool) -> None:
        """``producer_id``'s control record: COMMIT (``commit``) or ABORT of its open records."""
        written = self.open_transactions.pop(producer_id, None)
        if written is None:
            return  # nothing open (its records superseded, or before the log's start)
        for key, (value, log_offset) in written.items():
            producers = self._open_keys[key]
            producers.discard(producer_id)
            if commit:
                self.latest[key] = value
                for other in [p for p in producers if self.open_transactions[p][key][1] < log_offset]:
                    producers.discard(other)
                    self._forget(other, key)
            if not producers:
                del self._open_keys[key]

    def _forget(self, producer_id: int, key: bytes) -> None:
        written = self.open_transactions[producer_id]
        del written[key]
        if not written:
            del self.open_transactions[producer_id]

    def replay_order(self) -> list[Record]:
        """The committed records to replay (``compacted_replay_order`` of ``latest``)."""
        return compacted_replay_order(self.latest)

    def open_records(self) -> list[tuple[int, bytes, bytes | None, int]]:
        """(producer id, key, value, log offset) of the records still open, in log order."""
        records = [
            (producer_id, key, value, log_offset)
            for producer_id, written in self.open_transactions.items()
            for key, (value, log_offset) in written.items()
        ]
        records.sort(key=lambda record: record[3])
        return records
