"""Incremental fetch sessions (Kafka's KIP-227), as the leader keeps them for its followers.

Without a session every Fetch names every partition it wants and its answer lists every one of
them, with or without news. A follower fetches all the partitions it follows from a leader in one
request, once per produce to any of them: in a cluster with many quiet partitions that was most of
the replication's cost (measured: 120 idle partitions beside the busy ones doubled the brokers' CPU
per replicated record). A session keeps the partitions and what their fetcher was last told; the
next requests name only what changed (a partition added, a new fetch offset) and say what to drop
(``forgotten_topics_data``), and the answers list only the partitions with news — records, a new
high watermark or log start, an error.

The protocol, as the client drives it with (session id, epoch):

- (0, -1): no session; a full fetch, answered in full with session id 0.
- (0, 0): a full fetch that asks for a session; the answer carries its id (0 when none could be
  made: the client goes on with full fetches).
- (id, 0): close session ``id`` and start a new one, as above.
- (id, -1): close session ``id``; a full fetch without a session.
- (id, n > 0): an incremental fetch in session ``id``, whose next epoch must be ``n``
  (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH otherwise: the client starts over).

Budget: at most ``limits.fetch_session_cache_slots`` sessions and
``limits.fetch_session_partitions_max`` partitions in all. When the cache is full, a session
unused for ``limits.fetch_session_eviction_ms`` is dropped to make room; otherwise no session is
made. Sessions are granted to followers only (a consumer gets full fetches, as before): the
replica fetcher is strom's own, and it is where sessions pay.

Pure: the handler passes the time in and does the reading.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

from strom.base import limits

NO_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_EPOCH_MAX = 2**31 - 1

PartitionKey = tuple[str, int]  # (topic name, partition)


@dataclass
class SessionPartition:
    """One partition of a session: what its fetcher asks, and what it was last told."""

    topic_id: uuid.UUID
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int
    # What the last answer that listed it said (-2: never listed).
    high_watermark: int = -2
    log_start_offset: int = -2


@dataclass
class FetchSession:
    session_id: int
    next_epoch: int
    partitions: dict[PartitionKey, SessionPartition]
    last_used_ms: int

    def keys(self) -> Iterator[PartitionKey]:
        return iter(list(self.partitions))

    def advance(self) -> None:
        self.next_epoch = 1 if self.next_epoch >= _EPOCH_MAX else self.next_epoch + 1

    def move_to_end(self, key: PartitionKey) -> None:
        """A partition that got records goes to the back: the others come first in the next
        answer's byte budget."""
        partition = self.partitions.pop(key, None)
        if partition is not None:
            self.partitions[key] = partition


@dataclass
class FetchSessionCache:
    slots: int = limits.fetch_session_cache_slots
    partitions_max: int = limits.fetch_session_partitions_max
    eviction_ms: int = limits.fetch_session_eviction_ms
    _sessions: dict[int, FetchSession] = field(default_factory=dict)
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    _partitions_total: int = 0

    def __len__(self) -> int:
        return len(self._sessions)

    @property
    def partitions_total(self) -> int:
        return self._partitions_total

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def remove(self, session_id: int) -> None:
        session = self._sessions.pop(session_id, None)
        if session is not None:
            self._partitions_total -= len(session.partitions)

    def create(self, partitions: dict[PartitionKey, SessionPartition], now_ms: int) -> FetchSession | None:
        """A new session of ``partitions`` (its first answer lists them all), or None when the
        budget has no room for it even after dropping sessions unused for ``eviction_ms``."""
        if len(partitions) > self.partitions_max:
            return None
        while (
            len(self._sessions) >= self.slots
            or self._partitions_total + len(partitions) > self.partitions_max
        ):
            stale = min(self._sessions.values(), key=lambda s: s.last_used_ms, default=None)
            if stale is None or now_ms - stale.last_used_ms < self.eviction_ms:
                return None
            self.remove(stale.session_id)
        session_id = next(self._ids) & 0x7FFFFFFF
        while session_id == NO_SESSION_ID or session_id in self._sessions:
            session_id = next(self._ids) & 0x7FFFFFFF
        session = FetchSession(session_id, 1, partitions, now_ms)
        self._sessions[session_id] = session
        self._partitions_total += len(partitions)
        return session

    def resized(self, session: FetchSession, before: int) -> bool:
        """``session`` went from ``before`` partitions to its current count: account for it;
        False (and the session dropped) when that would exceed the budget."""
        self._partitions_total += len(session.partitions) - before
        if self._partitions_total > self.partitions_max:
            self.remove(session.session_id)
            return False
        return True
