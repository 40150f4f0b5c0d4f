"""The topics as the consumer group protocol's coordinator sees them (``TopicsView``).

The coordinator of KIP-848's groups computes assignments itself, so it needs each subscribed
topic's id, partition count and, for rack-aware assignment, the racks of each partition's
replicas. ``BrokerTopics`` answers from whatever ``Replication`` the broker has (a single node's
logs, or a cluster's metadata image), so one adapter serves both.

Racks: a single node's replicas are all on it, so every partition has this broker's
``broker.rack`` (or none); in a cluster the racks of the live brokers holding the replicas. When no
broker has a rack the partitions carry none and nothing per partition is looked up.

Internal topics (``__consumer_offsets``, ``__transaction_state``) are left out of
``topic_names()``, which a regular expression subscription is matched against: a ``.*`` pattern
does not subscribe a group to the coordinators' own topics. A member naming one explicitly still
gets it (``topic(name)``), as Kafka allows.

Answers are cached per topic; the broker calls ``forget(names)`` wherever it learns that topics
were created, deleted or grew (the same places it calls the coordinator's ``topics_changed``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from strom.assignors.server import TopicSpec
from strom.broker.replication import Replication


class BrokerTopics:
    """``strom.coordinator.consumer_topics.TopicsView`` over the broker's ``Replication``.

    ``replication`` is a function because the broker builds its group coordinator before it knows
    whether it is alone or one of a cluster (which replaces the replication). ``racks`` gives the
    rack of each broker id that has one (empty: racks are unknown)."""

    def __init__(
        self,
        replication: Callable[[], Replication],
        racks: Callable[[], dict[int, str]],
    ) -> None:
        self._replication = replication
        self._racks = racks
        self._cache: dict[str, TopicSpec | None] = {}

    def topic(self, name: str) -> TopicSpec | None:
        if name in self._cache:
            return self._cache[name]
        spec = self._describe(name)
        self._cache[name] = spec
        return spec

    def topic_names(self) -> Iterable[str]:
        replication = self._replication()
        names = []
        for name in replication.topic_names():
            found = replication.topic(name)
            if found is not None and not found.internal:
                names.append(name)
        return names

    def forget(self, names: Iterable[str] | None) -> None:
        """Topics changed (created, deleted, grew, moved): their cached answers go (all if None)."""
        if names is None:
            self._cache.clear()
            return
        for name in names:
            self._cache.pop(name, None)

    def _describe(self, name: str) -> TopicSpec | None:
        replication = self._replication()
        found = replication.topic(name)
        if found is None or found.partitions <= 0:
            return None
        racks = self._racks()
        partition_racks: tuple[frozenset[str], ...] = ()
        if racks:
            partition_racks = tuple(
                frozenset(racks[replica] for replica in view.replicas if replica in racks)
                for view in replication.describe_partitions(found, 0, found.partitions)
            )
        return TopicSpec(found.topic_id, found.name, found.partitions, partition_racks)
