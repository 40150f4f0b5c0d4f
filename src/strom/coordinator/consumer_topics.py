"""What the consumer group coordinator needs to know of the cluster's topics.

The broker passes a ``TopicsView`` over its metadata to ``GroupCoordinator``; the coordinator reads
it when a member's subscription is resolved (names, and a regex matched against every topic name)
and when ``topics_changed`` says topics appeared, vanished or grew. The view is read, never kept:
the coordinator stores what it resolved (the group's subscribed topic metadata) in its records.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from strom.assignors.server import TopicSpec


class TopicsView(Protocol):
    def topic(self, name: str) -> TopicSpec | None:
        """The topic's id, partition count and partition racks, or None if it does not exist."""

    def topic_names(self) -> Iterable[str]:
        """Every topic's name (a subscription regex is matched against them)."""


class NoTopics:
    """A cluster without topics: the view of a coordinator built without one (tests of classic groups)."""

    def topic(self, name: str) -> TopicSpec | None:
        return None

    def topic_names(self) -> Iterable[str]:
        return ()


# Internal topics a regex never matches (as Kafka leaves them out of pattern subscriptions).
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
