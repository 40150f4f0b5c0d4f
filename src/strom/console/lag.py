"""Consumer lag: computed from committed and end offsets, and kept in memory for the trend chart.

``LagHistory`` is pure (times are given to it); ``sample_lag`` asks the cluster once for every
group it is given. The console's sampler calls it every ``console_lag_sample_interval_ms`` in a
worker thread; the group page draws the lag it has just computed after them (without keeping it),
so a chart has a point at once.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from strom.base import limits
from strom.client.admin import OffsetAndMetadata
from strom.client.cluster import TopicPartition
from strom.client.errors import KafkaError
from strom.console.source import ClusterSource

__all__ = ["LagHistory", "LagPoint", "measure_lag", "partition_lag", "record_lag", "total_lag"]


@dataclass(frozen=True, slots=True)
class LagPoint:
    time_ms: int
    lag: int


def partition_lag(committed: int | None, end: int | None) -> int | None:
    """Records between a committed offset and the log end (None when either is unknown; never
    negative: a commit can run ahead of a stale end offset)."""
    if committed is None or end is None or committed < 0:
        return None
    return max(end - committed, 0)


def total_lag(
    committed: Mapping[TopicPartition, OffsetAndMetadata], ends: Mapping[TopicPartition, int]
) -> int:
    total = 0
    for tp, offset in committed.items():
        lag = partition_lag(offset.offset, ends.get(tp))
        if lag is not None:
            total += lag
    return total


class LagHistory:
    """Each group's total lag over the last ``window_ms``: at most window / interval points per
    group (a point closer than half an interval to the previous one replaces it), for at most
    ``groups_max`` groups (a new group beyond that is not recorded)."""

    def __init__(
        self,
        interval_ms: int = limits.console_lag_sample_interval_ms,
        window_ms: int = limits.console_lag_window_ms,
        groups_max: int = limits.console_lag_groups_max,
    ) -> None:
        assert interval_ms > 0 and window_ms >= interval_ms and groups_max > 0
        self.interval_ms = interval_ms
        self.window_ms = window_ms
        self.groups_max = groups_max
        self._points_max = window_ms // interval_ms + 1
        self._points: dict[str, collections.deque[LagPoint]] = {}

    def record(self, group_id: str, time_ms: int, lag: int) -> None:
        points = self._points.get(group_id)
        if points is None:
            if len(self._points) >= self.groups_max:
                return
            points = self._points[group_id] = collections.deque(maxlen=self._points_max)
        if points and time_ms - points[-1].time_ms < self.interval_ms // 2:
            points.pop()
        points.append(LagPoint(time_ms, lag))

    def points(self, group_id: str, now_ms: int) -> list[LagPoint]:
        """The group's points within the window ending at ``now_ms``, oldest first."""
        since = now_ms - self.window_ms
        return [point for point in self._points.get(group_id, ()) if point.time_ms >= since]

    def latest(self, group_id: str) -> LagPoint | None:
        points = self._points.get(group_id)
        return points[-1] if points else None

    def forget_except(self, group_ids: Iterable[str], now_ms: int) -> None:
        """Drop the groups no longer in the cluster (deleted ones), freeing their slots: those not
        in ``group_ids`` and without a point for two intervals (a group a listing misses once,
        while its coordinator moves, keeps its history)."""
        keep = set(group_ids)
        since = now_ms - 2 * self.interval_ms
        for group_id in [
            group_id
            for group_id, points in self._points.items()
            if group_id not in keep and (not points or points[-1].time_ms < since)
        ]:
            del self._points[group_id]


def measure_lag(cluster: ClusterSource, groups_max: int) -> tuple[list[str], dict[str, int]]:
    """The groups of the cluster (the first ``groups_max`` by id) and the total lag of each that
    answered now (a group that cannot be asked, its coordinator moving, is left out this time)."""
    group_ids = sorted(listing.group_id for listing in cluster.groups())[:groups_max]
    committed_by_group: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
    for group_id in group_ids:
        try:
            committed_by_group[group_id] = cluster.committed(group_id)
        except KafkaError:
            continue
    wanted = {tp for committed in committed_by_group.values() for tp in committed}
    ends = cluster.end_offsets(sorted(wanted)) if wanted else {}
    return group_ids, {
        group_id: total_lag(committed, ends)
        for group_id, committed in committed_by_group.items()
        if committed
    }


def record_lag(history: LagHistory, group_ids: Iterable[str], lags: Mapping[str, int], now_ms: int) -> None:
    history.forget_except(group_ids, now_ms)
    for group_id, lag in lags.items():
        history.record(group_id, now_ms, lag)
