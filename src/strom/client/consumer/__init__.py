"""The consumer: positions and buffering (pure), the fetcher (loop thread), group membership (a pure
state machine and its loop-thread shell) and the Consumer."""

from strom.client.consumer.consumer import (
    CommitCallback,
    Consumer,
    ConsumerRebalanceListener,
    GroupsNotAvailableError,
)
from strom.client.consumer.positions import ConsumerRecord
from strom.client.group_metadata import ConsumerGroupMetadata

__all__ = [
    "CommitCallback",
    "Consumer",
    "ConsumerGroupMetadata",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "GroupsNotAvailableError",
]
