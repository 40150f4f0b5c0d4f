"""The invariants of a campaign, checked from what the clients were told (``Evidence``) and from
the log as a fresh consumer reads it back — never from a broker's view of itself.

Pure functions over plain data, so each rule is unit-tested with hand-made evidence.
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from .workload import Acked, Assigned, Committed, Processed


@dataclass
class Findings:
    acknowledged: int = 0
    # Acknowledged without an offset, found by their value in the log.
    acknowledged_without_offset: int = 0
    lost: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    consumption_gaps: list[str] = field(default_factory=list)
    unprocessed: list[str] = field(default_factory=list)
    commit_regressions: list[str] = field(default_factory=list)
    double_ownerships: list[str] = field(default_factory=list)
    not_converged: list[str] = field(default_factory=list)
    # partition -> longest time between two acknowledgements on it (seconds)
    longest_unavailability_s: dict[int, float] = field(default_factory=dict)

    @property
    def violations(self) -> dict[str, list[str]]:
        found = {
            "lost": self.lost,
            "duplicates": self.duplicates,
            "consumption gaps": self.consumption_gaps,
            "acknowledged but never processed": self.unprocessed,
            "commit regressions": self.commit_regressions,
            "double ownerships": self.double_ownerships,
            "not converged": self.not_converged,
        }
        return {name: items for name, items in found.items() if items}


def with_offsets(acked: Sequence[Acked], log: Mapping[int, Mapping[int, bytes]]) -> list[Acked]:
    """The acknowledgements, those that came without an offset given the offset their value has
    in the log (every value is unique); one whose value is not there keeps None (it is lost)."""
    if all(record.offset is not None for record in acked):
        return list(acked)
    where: dict[tuple[int, bytes], int] = {
        (partition, value): offset for partition, records in log.items() for offset, value in records.items()
    }
    return [
        record
        if record.offset is not None
        else Acked(record.partition, where.get((record.partition, record.value)), record.value, record.at)
        for record in acked
    ]


def lost_records(acked: Iterable[Acked], log: Mapping[int, Mapping[int, bytes]]) -> list[str]:
    """Acknowledged records not found, with their value, at their offset (or, acknowledged
    without an offset, anywhere in their partition)."""
    return [
        f"partition {record.partition} offset {record.offset} ({record.value!r})"
        for record in acked
        if record.offset is None or log.get(record.partition, {}).get(record.offset) != record.value
    ]


def duplicated_values(log: Mapping[int, Mapping[int, bytes]]) -> list[str]:
    """Values written more than once (every value a producer sends is unique; idempotence must
    keep a retried batch from being written twice)."""
    counts = Counter(value for records in log.values() for value in records.values())
    return [f"{value!r} x{count}" for value, count in counts.items() if count > 1]


def unprocessed_records(acked: Iterable[Acked], processed: Iterable[Processed]) -> list[str]:
    """Acknowledged records the group never processed (it runs until it has caught up)."""
    seen = {(record.partition, record.offset) for record in processed}
    return [
        f"partition {record.partition} offset {record.offset}"
        for record in acked
        if record.offset is not None and (record.partition, record.offset) not in seen
    ]


def consumption_gaps(processed: Sequence[Processed]) -> list[str]:
    """Per member and assignment, the offsets processed of a partition go up one by one; and an
    owner never starts past what earlier owners processed (no record skipped between owners)."""
    gaps: list[str] = []
    last_in_session: dict[tuple[str, int, int], int] = {}
    highest_before: dict[int, int] = {}
    for record in sorted(processed, key=lambda event: event.at):
        key = (record.member, record.session, record.partition)
        previous = last_in_session.get(key)
        if previous is None:
            highest = highest_before.get(record.partition, -1)
            if record.offset > highest + 1:
                gaps.append(
                    f"{record.member} started partition {record.partition} at {record.offset}, "
                    f"only {highest} processed before"
                )
        elif record.offset != previous + 1:
            gaps.append(
                f"{record.member} processed partition {record.partition} offset {record.offset} after {previous}"
            )
        last_in_session[key] = record.offset
        highest_before[record.partition] = max(highest_before.get(record.partition, -1), record.offset)
    return gaps


def commit_regressions(
    committed: Sequence[Committed], observed: Sequence[tuple[float, Mapping[int, int]]]
) -> list[str]:
    """Committed offsets never go backwards: neither the acknowledged commits in the order they
    were acknowledged, nor what OffsetFetch returned over time."""
    regressions: list[str] = []
    highest: dict[int, tuple[int, str]] = {}
    for commit in sorted(committed, key=lambda event: event.at):
        for partition, offset in commit.offsets:
            before = highest.get(partition)
            if before is not None and offset < before[0]:
                regressions.append(
                    f"partition {partition}: {commit.member} (generation {commit.generation}) committed "
                    f"{offset} after {before[1]} had {before[0]} acknowledged"
                )
            if before is None or offset >= before[0]:
                highest[partition] = (offset, f"{commit.member} (generation {commit.generation})")
    seen: dict[int, int] = {}
    for _at, offsets in sorted(observed, key=lambda entry: entry[0]):
        for partition, offset in offsets.items():
            if offset < seen.get(partition, -1):
                regressions.append(
                    f"partition {partition}: OffsetFetch gave {offset} after {seen[partition]}"
                )
            seen[partition] = max(seen.get(partition, -1), offset)
    return regressions


def double_ownerships(assigned: Sequence[Assigned]) -> list[str]:
    """No partition is given to two members of one generation."""
    owners: dict[tuple[int, int], set[str]] = defaultdict(set)
    for event in assigned:
        for partition in event.partitions:
            owners[(event.generation, partition)].add(event.member)
    return [
        f"generation {generation}: partition {partition} owned by {sorted(members)}"
        for (generation, partition), members in sorted(owners.items())
        if len(members) > 1
    ]


def longest_unavailability(acked: Sequence[Acked], start: float, end: float) -> dict[int, float]:
    """Per partition, the longest time without an acknowledged record between ``start`` and ``end``
    (the producers send to every partition all the time)."""
    times: dict[int, list[float]] = defaultdict(list)
    for record in acked:
        if start <= record.at <= end:
            times[record.partition].append(record.at)
    longest: dict[int, float] = {}
    for partition, moments in times.items():
        moments = [start, *sorted(moments), end]
        longest[partition] = max(later - earlier for earlier, later in itertools.pairwise(moments))
    return longest


def replicas_identical(batches: Mapping[int, Mapping[int, list[tuple[int, int, int]]]]) -> list[str]:
    """Per partition, every replica holds the same batches (base offset, last offset, CRC)."""
    differing: list[str] = []
    for partition, replicas in sorted(batches.items()):
        distinct = {tuple(found) for found in replicas.values()}
        if len(distinct) > 1:
            ends = {node: (found[-1][1] if found else -1) for node, found in replicas.items()}
            differing.append(f"partition {partition}: replicas differ (last offsets {ends})")
    return differing
