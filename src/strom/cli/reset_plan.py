"""The offset-reset planner behind ``strom groups reset-offsets``: pure, so every rule is unit tested.

Given each partition's committed offset and log bounds, it says where the group's offset moves to.
Like Kafka's tool, a target outside the log is pulled back inside it: an offset below the log start
becomes the log start, one past the log end becomes the log end, so a reset never leaves the group
on an offset that would be OFFSET_OUT_OF_RANGE.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

__all__ = ["PlannedReset", "ResetTarget", "parse_topic_partitions", "plan_offset_reset"]

ResetKind = Literal["earliest", "latest", "datetime", "offset", "shift"]


@dataclass(frozen=True)
class ResetTarget:
    """Where to move: ``offset`` and ``shift`` use ``value`` as an offset or a signed delta; a
    ``datetime`` target's offsets come from ListOffsets by time and are passed to the planner."""

    kind: ResetKind
    value: int = 0


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
        else:
            assert target.kind == "datetime", f"unknown reset target {target.kind!r}"
            assert offsets_at_time is not None, "a datetime target needs offsets_at_time"
            found = offsets_at_time.get(key)
            wanted = end if found is None else found
        plan.append(PlannedReset(topic, partition, current, _clamp(wanted, start, end), start, end))
    return plan
