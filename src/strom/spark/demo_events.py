"""Synthetic page-view events for the page-view pipeline: JSON ``{"user", "page", "timestamp"}``
(timestamp in ms since the epoch, also the record's timestamp), keyed by user."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from strom.client.producer import Producer

__all__ = ["PAGES", "PageView", "page_views", "produce_page_views"]

PAGES = ("/", "/home", "/search", "/cart", "/checkout", "/product/1", "/product/2", "/about")
USERS_COUNT = 500


@dataclass(frozen=True)
class PageView:
    user: str
    page: str
    timestamp_ms: int

    def to_json(self) -> bytes:
        return json.dumps({"user": self.user, "page": self.page, "timestamp": self.timestamp_ms}).encode()


def page_views(count: int | None, seed: int, timestamp_ms: Callable[[int], int]) -> Iterator[PageView]:
    """``count`` events (forever when None); event ``index`` happens at ``timestamp_ms(index)``.
    Pages are skewed (lower-numbered pages are visited more), as real traffic is."""
    generator = random.Random(seed)
    weights = [1 / (rank + 1) for rank in range(len(PAGES))]
    index = 0
    while count is None or index < count:
        page = generator.choices(PAGES, weights)[0]
        yield PageView(f"user-{generator.randrange(USERS_COUNT)}", page, timestamp_ms(index))
        index += 1


def produce_page_views(
    producer: Producer, topic: str, rate_per_s: float, count: int | None, seed: int = 0
) -> int:
    """Send events at about ``rate_per_s`` (paced against the wall clock), stamped with the time
    each is sent. Returns how many were sent (all acknowledged)."""
    start_s = time.monotonic()
    sent = 0
    for event in page_views(count, seed, lambda _index: int(time.time() * 1000)):
        due_s = start_s + sent / rate_per_s
        delay_s = due_s - time.monotonic()
        if delay_s > 0:
            time.sleep(delay_s)
        producer.send(topic, value=event.to_json(), key=event.user.encode(), timestamp=event.timestamp_ms)
        sent += 1
    producer.flush()
    return sent
