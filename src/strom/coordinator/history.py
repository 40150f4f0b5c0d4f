"""The rebalance history: for each group, each rebalance as a ``RebalanceEntry`` — why it began
(``Trigger``), who caused it, when it began and ended, how long the join and the assignment phases
took, the members before and after, and which partitions moved from whom to whom.

Pure: the coordinator calls the hooks below with the wall-clock time of its injected clock;
nothing here reads a clock, arms a timer or touches the network.

* Classic groups: ``classic_started`` when the group goes to PreparingRebalance (the trigger and
  the member that caused it), ``classic_joined`` when the JoinGroup phase completes (the new
  generation), ``classic_synced`` when the leader's assignment is written. For groups of protocol
  type "consumer" the leader's assignments are decoded (``strom.assignors.protocol``) and compared
  with the previous generation's; other protocol types record no moves.
* Consumer-protocol groups (KIP-848): ``consumer_snapshot`` before a write of the group's records
  that bumps the group epoch, ``consumer_written`` after every write of its records. A rebalance
  begins with the new group epoch (the target assignment is computed in the same write, so the
  join phase is empty) and ends once every member has reconciled to the target epoch; the moves
  are those between the previous target and the new one.

Cost: a hook does O(1) work outside a rebalance, and a rebalance's work is O(members + partitions)
— what the rebalance itself costs the coordinator and the assignor already. A consumer group's
reconciliation is followed with a cursor over the members still to reconcile, so each write looks
at O(1) members amortized.

Durability: a finished entry is written to the group's partition of ``__consumer_offsets`` as a
record whose key has version ``HISTORY_KEY_VERSION`` (32100): a strom-only key version, far from
the versions Kafka uses (0-2 classic, 3-8 consumer groups, a few more for share groups and other
coordinators, all below 100). Key: int16 32100, string group id, int64 sequence; value: the entry
(``strom.protocol.group_history``). Before this module strom's loader refused such a key as it
refuses any unknown version (a corrupt record: skipped with a log line); it now reads these
(``is_history_key``), refuses a history key or value that does not parse, and still refuses every
other unknown version. Entries dropped by the bounds (``strom.base.limits``
``rebalance_history_*``) are written as tombstones in the same batch as the entry that displaced
them, so compaction drops them on disk too. Loading keeps the entries' bytes and decodes them only
when the history is read, so a load costs one key decode per entry. A rebalance still open when
the coordinator moves is not recorded; the first rebalance after a load whose cause is a member
rejoining unchanged (members whose coordinator went away) is recorded as ``coordinator-moved``.
"""

from __future__ import annotations

import bisect
import struct
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from strom.assignors.protocol import decode_assignment
from strom.base import limits
from strom.coordinator.consumer_group import Assignment, ConsumerGroup, MemberMetadata, MemberState
from strom.coordinator.consumer_records import METADATA_KEY_VERSION
from strom.coordinator.records import CorruptCoordinatorRecord, Record, consumer_subscribed_topics
from strom.protocol.group_history import PartitionMove, RebalanceEntry, decode_entry, encode_entry
from strom.protocol.primitives import DecodeError

if TYPE_CHECKING:
    from strom.coordinator.group import Group

HISTORY_KEY_VERSION = 32100
_KEY_PREFIX = struct.pack(">h", HISTORY_KEY_VERSION)
_STRING_LENGTH = struct.Struct(">h")
_SEQUENCE = struct.Struct(">q")
_EPOCH_KEY_PREFIX = struct.pack(">h", METADATA_KEY_VERSION)

# Upper bounds (ms) of the rebalance duration histogram /metrics exposes; +Inf beyond.
DURATION_BUCKETS_MS = (100, 500, 1_000, 3_000, 10_000, 30_000, 60_000, 300_000)

CLASSIC = "classic"
CONSUMER = "consumer"


class Trigger(StrEnum):
    MEMBER_JOINED = "member-joined"
    MEMBER_LEFT = "member-left"
    SESSION_EXPIRED = "session-expired"
    # A known member sent JoinGroup again with the same protocols (e.g. a leader forcing a rebalance).
    MEMBER_REJOINED = "member-rejoined"
    # A known member sent JoinGroup with other protocol metadata but the same topics.
    REJOINED_NEW_METADATA = "rejoined-with-new-metadata"
    # A member's subscribed topics changed (classic: its JoinGroup's; consumer protocol: its heartbeat's).
    SUBSCRIPTION_CHANGED = "subscription-changed"
    # The group was loaded by this coordinator (a restart or a move) and members rejoined.
    COORDINATOR_MOVED = "coordinator-moved"
    # Consumer protocol: the subscribed topics' metadata changed (created, deleted, more partitions).
    TOPIC_METADATA_CHANGED = "topic-metadata-changed"
    # Classic: members did not send SyncGroup within the rebalance timeout and were dropped.
    SYNC_TIMED_OUT = "sync-timed-out"
    # Consumer protocol: a member did not revoke its partitions within its rebalance timeout.
    REBALANCE_TIMED_OUT = "rebalance-timed-out"
    # Classic: writing the leader's assignment failed.
    ASSIGNMENT_WRITE_FAILED = "assignment-write-failed"
    OTHER = "other"


def history_key_bytes(group_id: str, sequence: int) -> bytes:
    encoded = group_id.encode()
    return _KEY_PREFIX + _STRING_LENGTH.pack(len(encoded)) + encoded + _SEQUENCE.pack(sequence)


def is_history_key(key: bytes) -> bool:
    return key[:2] == _KEY_PREFIX


def decode_history_key(key: bytes) -> tuple[str, int]:
    """(group id, sequence); raises ``CorruptCoordinatorRecord`` for a key of another layout."""
    if len(key) < 4 or key[:2] != _KEY_PREFIX:
        raise CorruptCoordinatorRecord(f"history key of {len(key)} bytes is not one")
    (length,) = _STRING_LENGTH.unpack_from(key, 2)
    if length < 0 or 4 + length + _SEQUENCE.size != len(key):
        raise CorruptCoordinatorRecord(f"history key of {len(key)} bytes has a group id of {length} bytes")
    try:
        group_id = key[4 : 4 + length].decode()
    except UnicodeDecodeError as error:
        raise CorruptCoordinatorRecord(f"history key: {error}") from error
    (sequence,) = _SEQUENCE.unpack_from(key, 4 + length)
    if sequence < 0:
        raise CorruptCoordinatorRecord(f"history key with sequence {sequence}")
    return group_id, sequence


Owners = dict[tuple[str, int], str]


@dataclass(frozen=True)
class ConsumerSnapshot:
    """A consumer group just before a write that bumps its epoch."""

    epoch: int
    members: dict[str, MemberMetadata]
    targets: dict[str, Assignment]
    names: dict[uuid.UUID, str]


@dataclass
class _Open:
    """A rebalance under way."""

    protocol: str
    trigger: str
    causes: list[str]
    start_ms: int
    members_before: tuple[str, ...]
    # Who owned each partition before it (None: unknown, no moves are recorded).
    owners_before: Owners | None
    generation: int = -1
    join_end_ms: int = -1
    # Consumer protocol: the members to reconcile, and how many of them are known to have.
    pending: list[str] = field(default_factory=list)
    cursor: int = 0
    # Consumer protocol: the new target's owners (computed when the rebalance begins).
    owners_after: Owners | None = None


@dataclass
class _GroupHistory:
    # sequence -> the entry, or its bytes as loaded (decoded when read).
    entries: dict[int, RebalanceEntry | bytes] = field(default_factory=dict)
    next_sequence: int = 0
    open: _Open | None = None
    # The assignment after the last finished rebalance, and its members (None: not known yet).
    owners: Owners | None = None
    members: tuple[str, ...] | None = None
    # Loaded from the log, no rebalance since.
    loaded: bool = False


class RebalanceHistory:
    def __init__(
        self,
        partition_of: Callable[[str], int],
        write: Callable[[str, list[Record]], None],
        *,
        per_group_max: int = limits.rebalance_history_per_group_max,
        total_max: int = limits.rebalance_history_total_max,
    ) -> None:
        """``write(group_id, records)`` appends records to the group's partition (whatever the outcome)."""
        self._partition_of = partition_of
        self._write = write
        self.per_group_max = per_group_max
        self.total_max = total_max
        self._groups: dict[str, _GroupHistory] = {}
        self._by_partition: dict[int, set[str]] = {}
        self.total = 0
        # (group id, sequence) in the order entries were added: the oldest go first past total_max.
        self._order: deque[tuple[str, int]] = deque()
        # For /metrics: finished rebalances by trigger, and their durations.
        self.finished_by_trigger: dict[str, int] = {}
        self.duration_bucket_counts = [0] * (len(DURATION_BUCKETS_MS) + 1)
        self.duration_sum_ms = 0

    # ================================================================ reading
    def entries(self, group_id: str) -> list[RebalanceEntry]:
        """The group's finished rebalances, oldest first (decoding loaded ones now)."""
        history = self._groups.get(group_id)
        if history is None:
            return []
        result = []
        for sequence in sorted(history.entries):
            entry = history.entries[sequence]
            if not isinstance(entry, RebalanceEntry):
                try:
                    entry = decode_entry(entry)
                except DecodeError:
                    continue  # checked when loaded; unreachable unless the bytes changed since
                history.entries[sequence] = entry
            result.append(entry)
        return result

    def in_progress(self, group_id: str) -> RebalanceEntry | None:
        """The rebalance under way, as an entry with ``end_ms`` -1 and outcome "in-progress"."""
        history = self._groups.get(group_id)
        if history is None or history.open is None:
            return None
        return self._entry(history, history.open, -1, "in-progress", (), None)

    def group_ids(self) -> list[str]:
        return [group_id for group_id, history in self._groups.items() if history.entries]

    # ================================================================ classic groups
    def classic_started(self, group: Group, trigger: Trigger, causes: Iterable[str], now_ms: int) -> None:
        """The group goes to PreparingRebalance; ``causes`` are the members that moved it."""
        history = self._history(group.group_id)
        causes = list(causes)
        if history.loaded and trigger is Trigger.MEMBER_REJOINED:
            trigger = Trigger.COORDINATOR_MOVED
        history.loaded = False
        superseded = history.open
        if superseded is not None:
            self._finish(group.group_id, history, superseded, now_ms, "superseded", (), None)
            owners_before = superseded.owners_before
            members_before = superseded.members_before
        else:
            owners_before = history.owners
            if owners_before is None:
                owners_before = self._decode_owners(
                    group, {m.member_id: m.assignment for m in group.members.values()}
                )
            members_before = (
                history.members
                if history.members is not None
                else self._members_before(group, trigger, causes)
            )
        history.open = _Open(CLASSIC, trigger, causes, now_ms, members_before, owners_before)

    def classic_joined_during(self, group: Group, trigger: Trigger, member_id: str) -> None:
        """A member joined (or rejoined with other metadata) while the group waits for joins: it
        is one of the rebalance's causes too (a member rejoining unchanged is not)."""
        history = self._groups.get(group.group_id)
        if history is None or history.open is None or trigger is Trigger.MEMBER_REJOINED:
            return
        causes = history.open.causes
        if len(causes) < limits.rebalance_history_members_max and member_id not in causes:
            causes.append(member_id)

    def classic_joined(self, group: Group, now_ms: int) -> None:
        """The JoinGroup phase completed: the new generation (with no member left: the end)."""
        history = self._groups.get(group.group_id)
        if history is None or history.open is None:
            return
        history.open.generation = group.generation_id
        history.open.join_end_ms = now_ms
        if not group.members:
            self._finish(group.group_id, history, history.open, now_ms, "completed", (), {})

    def classic_synced(self, group: Group, assignments: Mapping[str, bytes], now_ms: int) -> None:
        """The leader's assignment is written: the group is Stable."""
        history = self._groups.get(group.group_id)
        if history is None or history.open is None:
            return
        owners = self._decode_owners(group, assignments)
        self._finish(group.group_id, history, history.open, now_ms, "completed", group.members, owners)

    def _decode_owners(self, group: Group, assignments: Mapping[str, bytes]) -> Owners | None:
        if group.protocol_type != "consumer":
            return None
        owners: Owners = {}
        for member_id, data in assignments.items():
            if not data or member_id not in group.members:
                continue
            try:
                assignment = decode_assignment(data)
            except ValueError:
                return None  # not the consumer protocol's layout: no moves for this one
            for topic, partition in assignment.partitions:
                owners[(topic, partition)] = member_id
        return owners

    @staticmethod
    def _members_before(group: Group, trigger: Trigger, causes: list[str]) -> tuple[str, ...]:
        members = list(group.members)
        if trigger is Trigger.MEMBER_JOINED:
            members = [member_id for member_id in members if member_id not in causes]
        elif trigger in (Trigger.MEMBER_LEFT, Trigger.SESSION_EXPIRED):
            members.extend(member_id for member_id in causes if member_id not in group.members)
        return tuple(members)

    @staticmethod
    def classic_trigger(
        group: Group, old_protocols: list[tuple[str, bytes]], new_protocols: list[tuple[str, bytes]]
    ) -> Trigger:
        """Why a known member's JoinGroup rebalances: its metadata, or its topics, changed, or neither."""
        if old_protocols == new_protocols:
            return Trigger.MEMBER_REJOINED
        if group.protocol_type == "consumer" and old_protocols and new_protocols:
            old_topics = consumer_subscribed_topics(old_protocols[0][1])
            new_topics = consumer_subscribed_topics(new_protocols[0][1])
            if old_topics != new_topics:
                return Trigger.SUBSCRIPTION_CHANGED
        return Trigger.REJOINED_NEW_METADATA

    # ================================================================ consumer-protocol groups
    @staticmethod
    def consumer_snapshot(consumer: ConsumerGroup, records: list[Record]) -> ConsumerSnapshot | None:
        """Before writing ``records``: if they set the group epoch, what the rebalance compares
        with afterwards (the epoch, members, targets and topic names before); else None. O(records)."""
        for key, value in records:
            if value is not None and key[:2] == _EPOCH_KEY_PREFIX:
                return ConsumerSnapshot(
                    consumer.group_epoch,
                    dict(consumer.members),
                    dict(consumer.targets),
                    {spec.topic_id: spec.name for spec in consumer.subscription_metadata.values()},
                )
        return None

    def consumer_written(
        self,
        consumer: ConsumerGroup,
        snapshot: ConsumerSnapshot | None,
        hint: Trigger | None,
        now_ms: int,
    ) -> None:
        """The group's records were written (and applied); ``hint`` says why members were removed
        (None: they left)."""
        group_id = consumer.group_id
        if snapshot is not None and consumer.exists and consumer.group_epoch > snapshot.epoch:
            self._consumer_started(consumer, snapshot, hint, now_ms)
        history = self._groups.get(group_id)
        if history is None or history.open is None or history.open.protocol != CONSUMER:
            return
        open_ = history.open
        pending = open_.pending
        target_epoch = consumer.target_epoch
        members = consumer.members
        while open_.cursor < len(pending):
            member_id = pending[open_.cursor]
            if member_id in members:
                current = consumer.current.get(member_id)
                if (
                    current is None
                    or current.member_epoch != target_epoch
                    or current.state is not MemberState.STABLE
                ):
                    return
            open_.cursor += 1
        self._finish(group_id, history, open_, now_ms, "completed", members, open_.owners_after)

    def _consumer_started(
        self,
        consumer: ConsumerGroup,
        snapshot: ConsumerSnapshot,
        hint: Trigger | None,
        now_ms: int,
    ) -> None:
        members_before = snapshot.members
        names = dict(snapshot.names)
        for spec in consumer.subscription_metadata.values():
            names[spec.topic_id] = spec.name
        members_after = consumer.members
        added = [member_id for member_id in members_after if member_id not in members_before]
        removed = [member_id for member_id in members_before if member_id not in members_after]
        changed = [
            member_id
            for member_id, metadata in members_after.items()
            if member_id in members_before and metadata.subscription_differs(members_before[member_id])
        ]
        if removed and hint is not None:
            trigger, causes = hint, removed
        elif added:
            trigger, causes = Trigger.MEMBER_JOINED, added
        elif removed:
            trigger, causes = Trigger.MEMBER_LEFT, removed
        elif changed:
            trigger, causes = Trigger.SUBSCRIPTION_CHANGED, changed
        else:
            trigger, causes = Trigger.TOPIC_METADATA_CHANGED, []
        history = self._history(consumer.group_id)
        history.loaded = False
        if history.open is not None:
            self._finish(consumer.group_id, history, history.open, now_ms, "superseded", (), None)

        def owners_of(targets: Mapping[str, Assignment]) -> Owners:
            owners: Owners = {}
            for member_id, assignment in targets.items():
                for topic_id, partitions in assignment.items():
                    name = names.get(topic_id, str(topic_id))
                    for partition in partitions:
                        owners[(name, partition)] = member_id
            return owners

        open_ = _Open(
            CONSUMER,
            trigger,
            causes,
            now_ms,
            tuple(members_before),
            owners_of(snapshot.targets),
            generation=consumer.group_epoch,
            join_end_ms=now_ms,
            pending=list(members_after),
            owners_after=owners_of(consumer.targets),
        )
        history.open = open_

    # ================================================================ finishing
    def _entry(
        self,
        history: _GroupHistory,
        open_: _Open,
        end_ms: int,
        outcome: str,
        members_after: Iterable[str],
        owners_after: Owners | None,
    ) -> RebalanceEntry:
        moves: list[PartitionMove] = []
        if open_.owners_before is not None and owners_after is not None:
            before = open_.owners_before
            for partition in before.keys() | owners_after.keys():
                old, new = before.get(partition), owners_after.get(partition)
                if old != new:
                    moves.append(PartitionMove(partition[0], partition[1], old, new))
            moves.sort(key=lambda move: (move.topic, move.partition))
        members_max = limits.rebalance_history_members_max
        moves_max = limits.rebalance_history_moves_max
        return RebalanceEntry(
            sequence=history.next_sequence,
            protocol=open_.protocol,
            generation=open_.generation,
            trigger=str(open_.trigger),
            causes=tuple(open_.causes[:members_max]),
            start_ms=open_.start_ms,
            join_end_ms=open_.join_end_ms if open_.join_end_ms >= 0 else end_ms,
            end_ms=end_ms,
            outcome=outcome,
            members_before=tuple(sorted(open_.members_before)[:members_max]),
            members_after=tuple(sorted(members_after)[:members_max]),
            moves=tuple(moves[:moves_max]),
            moves_omitted=max(len(moves) - moves_max, 0),
        )

    def _finish(
        self,
        group_id: str,
        history: _GroupHistory,
        open_: _Open,
        now_ms: int,
        outcome: str,
        members: Iterable[str],
        owners_after: Owners | None,
    ) -> None:
        history.open = None
        entry = self._entry(history, open_, now_ms, outcome, members, owners_after)
        if outcome == "completed":
            history.owners = owners_after
            history.members = entry.members_after
        self._count(entry)
        records = self._add(group_id, history, entry)
        self._write(group_id, records[group_id])
        for other_group, other_records in records.items():
            if other_group != group_id:
                self._write(other_group, other_records)

    def _count(self, entry: RebalanceEntry) -> None:
        self.finished_by_trigger[entry.trigger] = self.finished_by_trigger.get(entry.trigger, 0) + 1
        duration_ms = entry.duration_ms
        self.duration_bucket_counts[bisect.bisect_left(DURATION_BUCKETS_MS, duration_ms)] += 1
        self.duration_sum_ms += duration_ms

    def _add(self, group_id: str, history: _GroupHistory, entry: RebalanceEntry) -> dict[str, list[Record]]:
        """Keep ``entry``; the records to write, by group: it, and tombstones of what it displaced."""
        sequence = entry.sequence
        history.next_sequence = sequence + 1
        history.entries[sequence] = entry
        self.total += 1
        self._order.append((group_id, sequence))
        records: dict[str, list[Record]] = {
            group_id: [(history_key_bytes(group_id, sequence), encode_entry(entry))]
        }
        while len(history.entries) > self.per_group_max:
            oldest = min(history.entries)
            self._drop(group_id, history, oldest)
            records[group_id].append((history_key_bytes(group_id, oldest), None))
        while self.total > self.total_max:
            evicted = self._evict_oldest()
            if evicted is None:
                break
            records.setdefault(evicted[0], []).append((history_key_bytes(*evicted), None))
        if len(self._order) > 2 * self.total_max + 16:
            self._order = deque(
                (gid, seq) for gid, seq in self._order if seq in self._groups.get(gid, _EMPTY).entries
            )
        return records

    def _drop(self, group_id: str, history: _GroupHistory, sequence: int) -> None:
        del history.entries[sequence]
        self.total -= 1

    def _evict_oldest(self) -> tuple[str, int] | None:
        while self._order:
            group_id, sequence = self._order.popleft()
            history = self._groups.get(group_id)
            if history is not None and sequence in history.entries:
                self._drop(group_id, history, sequence)
                return group_id, sequence
        return None

    def _history(self, group_id: str) -> _GroupHistory:
        history = self._groups.get(group_id)
        if history is None:
            history = self._groups[group_id] = _GroupHistory()
            self._by_partition.setdefault(self._partition_of(group_id), set()).add(group_id)
        return history

    # ================================================================ loading and unloading
    def replay(self, key: bytes, value: bytes | None, *, loading: bool) -> None:
        """A history record of ``__consumer_offsets``. Live, the entry is already held (it was
        added before it was written); loading, its bytes are kept and decoded when read. A value
        whose header is not an entry's is refused (``CorruptCoordinatorRecord``)."""
        group_id, sequence = decode_history_key(key)
        if not loading:
            return
        history = self._groups.get(group_id)
        if value is None:
            if history is not None and sequence in history.entries:
                self._drop(group_id, history, sequence)
            return
        if (
            len(value) < 2 + _SEQUENCE.size
            or value[:2] != b"\x00\x00"
            or _SEQUENCE.unpack_from(value, 2)[0] != sequence
        ):
            raise CorruptCoordinatorRecord(
                f"history record {sequence} of group {group_id!r} has no entry of it"
            )
        history = self._history(group_id)
        if sequence not in history.entries:
            self.total += 1
            self._order.append((group_id, sequence))
        history.entries[sequence] = value
        history.next_sequence = max(history.next_sequence, sequence + 1)
        history.loaded = True

    def loaded(self, group_ids: Iterable[str]) -> None:
        """The groups were loaded (a restart or a move): their next rebalance by a member that
        rejoins unchanged is recorded as coordinator-moved."""
        for group_id in group_ids:
            self._history(group_id).loaded = True

    def unload(self, partition: int) -> None:
        """The partition moved away: its groups' history goes with it (its new owner loads it)."""
        for group_id in self._by_partition.pop(partition, set()):
            history = self._groups.pop(group_id)
            self.total -= len(history.entries)


_EMPTY = _GroupHistory()
