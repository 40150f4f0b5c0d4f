"""The consumer: positions and buffering (pure), the fetcher (loop thread) and the Consumer."""

from strom.client.consumer.consumer import Consumer, GroupsNotAvailableError
from strom.client.consumer.positions import ConsumerRecord

__all__ = ["Consumer", "ConsumerRecord", "GroupsNotAvailableError"]
