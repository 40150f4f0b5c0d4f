"""The offset-reset planner behind ``strom groups reset-offsets``: pure, so every rule is unit tested.

Given each partition's committed offset and log bounds, it says where the group's offset moves to.
Like Kafka's tool, a target outside the log is pulled back inside it: an offset below the log start
becomes the log start, one past the log end becomes the log end, so a reset never leaves the group
on an offset that would be OFFSET_OUT_OF_RANGE.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "PlannedReset",
    "ResetTarget",
    "export_csv",
    "parse_duration_ms",
    "parse_reset_csv",
    "parse_topic_partitions",
    "plan_offset_reset",
]

ResetKind = Literal["earliest", "latest", "datetime", "offset", "shift", "current", "file"]


@dataclass(frozen=True)
class ResetTarget:
    """Where to move: ``offset`` and ``shift`` use ``value`` as an offset or a signed delta; a
    ``datetime`` target's offsets come from ListOffsets by time and are passed to the planner;
    ``current`` keeps the committed offset (the log end where nothing is committed, as Kafka's
    tool does); ``file`` takes each partition's offset from ``offsets`` (a plan read back)."""

    kind: ResetKind
    value: int = 0
    offsets: Mapping[tuple[str, int], int] | None = None


@dataclass(frozen=True)
class PlannedReset:
    topic: str
    partition: int
    current_offset: int | None
    new_offset: int
    log_start_offset: int
    log_end_offset: int


def parse_topic_partitions(text: str) -> tuple[str, list[int] | None]:
    """``topic`` (all partitions) or ``topic:0,2`` (just those)."""
    topic, separator, partitions_text = text.rpartition(":")
    if not separator:
        return text, None
    if not topic:
        raise ValueError(f"{text!r} has no topic before ':'")
    try:
        partitions = sorted({int(part) for part in partitions_text.split(",") if part.strip()})
    except ValueError:
        raise ValueError(f"{text!r}: partitions after ':' must be numbers, such as topic:0,1") from None
    if not partitions or partitions[0] < 0:
        raise ValueError(f"{text!r}: give partitions as non-negative numbers, such as topic:0,1")
    return topic, partitions


def _clamp(offset: int, low: int, high: int) -> int:
    return max(low, min(offset, high))


def plan_offset_reset(
    partitions: Iterable[tuple[str, int]],
    committed: Mapping[tuple[str, int], int | None],
    log_start_offsets: Mapping[tuple[str, int], int],
    log_end_offsets: Mapping[tuple[str, int], int],
    target: ResetTarget,
    offsets_at_time: Mapping[tuple[str, int], int | None] | None = None,
) -> list[PlannedReset]:
    """One row per partition, sorted by topic then partition.

    ``shift`` moves from the committed offset (from the log start where nothing is committed);
    ``datetime`` uses ``offsets_at_time`` (None for a partition: no record that new, so the end).
    """
    plan: list[PlannedReset] = []
    for topic, partition in sorted(set(partitions)):
        key = (topic, partition)
        start = log_start_offsets[key]
        end = log_end_offsets[key]
        assert start <= end, f"log start {start} after log end {end} for {topic}-{partition}"
        current = committed.get(key)
        if target.kind == "earliest":
            wanted = start
        elif target.kind == "latest":
            wanted = end
        elif target.kind == "offset":
            wanted = target.value
        elif target.kind == "shift":
            wanted = (start if current is None else current) + target.value
        elif target.kind == "current":
            wanted = end if current is None else current
        elif target.kind == "file":
            assert target.offsets is not None and key in target.offsets, f"no offset for {key} in the plan"
            wanted = target.offsets[key]
        else:
            assert target.kind == "datetime", f"unknown reset target {target.kind!r}"
            assert offsets_at_time is not None, "a datetime target needs offsets_at_time"
            found = offsets_at_time.get(key)
            wanted = end if found is None else found
        plan.append(PlannedReset(topic, partition, current, _clamp(wanted, start, end), start, end))
    return plan


_DURATION = re.compile(
    r"P(?:(?P<days>\d+)D)?(?:T(?:(?P<hours>\d+)H)?(?:(?P<minutes>\d+)M)?(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?"
)


def parse_duration_ms(text: str) -> int:
    """An ISO 8601 duration of days, hours, minutes and seconds (``PnDTnHnMn.nS``, as Kafka's
    ``--by-duration`` takes it: ``P1D``, ``PT1H30M``, ``PT0.5S``) in milliseconds."""
    stripped = text.strip().upper()
    match = _DURATION.fullmatch(stripped)
    if match is None or stripped in ("P", "PT") or stripped.endswith("T"):
        raise ValueError(f"{text!r} is not a duration such as PT1H30M or P1DT12H (ISO 8601: PnDTnHnMnS)")
    days = int(match["days"] or 0)
    hours = int(match["hours"] or 0)
    minutes = int(match["minutes"] or 0)
    seconds = float(match["seconds"] or 0)
    return round((((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 1000)


def export_csv(plan: Iterable[PlannedReset]) -> str:
    """The plan as Kafka's ``kafka-consumer-groups --reset-offsets --export`` writes it for one
    group: ``topic,partition,new-offset`` per line, no header."""
    return "".join(f"{row.topic},{row.partition},{row.new_offset}\n" for row in plan)


def parse_reset_csv(text: str, group_id: str) -> dict[tuple[str, int], int]:
    """A plan written by ``export_csv`` or by Kafka's tool: ``topic,partition,offset`` lines (one
    group), or ``group,topic,partition,offset`` (several groups; only ``group_id``'s rows count).
    Blank lines are skipped; anything else that does not parse is a ValueError naming its line."""
    offsets: dict[tuple[str, int], int] = {}
    other_groups = 0
    for number, raw_line in enumerate(text.splitlines(), start=1):
        line = raw_line.strip()
        if not line:
            continue
        fields = [field.strip() for field in line.split(",")]
        if len(fields) == 4:
            group, *fields = fields
            if group != group_id:
                other_groups += 1
                continue
        if len(fields) != 3:
            raise ValueError(
                f"line {number}: expected topic,partition,offset (or group,topic,partition,offset)"
            )
        topic, partition_text, offset_text = fields
        try:
            partition, offset = int(partition_text), int(offset_text)
        except ValueError:
            raise ValueError(f"line {number}: partition and offset must be numbers") from None
        if not topic or partition < 0 or offset < 0:
            raise ValueError(f"line {number}: a topic, and a partition and offset that are not negative")
        if (topic, partition) in offsets:
            raise ValueError(f"line {number}: {topic}:{partition} appears twice")
        offsets[(topic, partition)] = offset
    if not offsets:
        extra = f" ({other_groups} rows are for other groups)" if other_groups else ""
        raise ValueError(f"no offsets for group {group_id!r} in the file{extra}")
    return offsets
