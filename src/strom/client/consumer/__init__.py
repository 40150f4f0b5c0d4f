"""The consumer: positions and buffering (pure), the fetcher (loop thread), group membership (a pure
state machine and its loop-thread shell) and the Consumer."""

from strom.client.consumer.consumer import (
    CommitCallback,
    Consumer,
    ConsumerRebalanceListener,
    GroupsNotAvailableError,
)
from strom.client.consumer.positions import ConsumerRecord

__all__ = [
    "CommitCallback",
    "Consumer",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "GroupsNotAvailableError",
]
