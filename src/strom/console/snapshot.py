"""A cluster-wide answer kept for a few seconds, so the pages that need every partition (the
cluster page, the topics list) do not each ask the cluster for all of it.

At 10,000 partitions one Metadata or ListOffsets round for all of them costs the broker and the
client more than a page may take (benchmarks/console.py). A ``Snapshot`` answers from what it
holds while it is younger than ``fresh_ms``; older but younger than ``stale_ms`` it still answers
from it and refreshes it in the background (one refresh at a time, on ``executor``, which must
not be the one ``fetch`` itself waits on); older still, or never fetched, the caller waits for a
fresh one (``stale_ms`` 0: every call fetches). The console's own changes (create, delete, alter)
invalidate it, so they show at once; other clients' changes show within ``fresh_ms`` on the next
view. Pages say how old their figures are.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["Snapshot"]

log = logging.getLogger("strom.console")

T = TypeVar("T")


class Snapshot(Generic[T]):
    def __init__(
        self,
        fetch: Callable[[], T],
        executor: concurrent.futures.Executor,
        *,
        fresh_ms: int,
        stale_ms: int,
        monotonic_ms: Callable[[], int] | None = None,
        wall_ms: Callable[[], int] | None = None,
    ) -> None:
        assert 0 <= fresh_ms <= stale_ms
        self._fetch = fetch
        self._executor = executor
        self.fresh_ms = fresh_ms
        self.stale_ms = stale_ms
        self._monotonic_ms = monotonic_ms or (lambda: time.monotonic_ns() // 1_000_000)
        self._wall_ms = wall_ms or (lambda: time.time_ns() // 1_000_000)
        self._lock = threading.Lock()
        self._value: T | None = None
        self._fetched_monotonic_ms = 0
        self._fetched_wall_ms = 0
        self._generation = 0  # bumped by invalidate(): a refresh begun before it is not kept
        self._refreshing = False

    def get(self) -> tuple[T, int]:
        """The value and when it was fetched (ms since the epoch)."""
        refresh = False
        with self._lock:
            value = self._value
            age_ms = self._monotonic_ms() - self._fetched_monotonic_ms
            generation = self._generation
            if value is not None and age_ms < self.stale_ms:
                if age_ms >= self.fresh_ms and not self._refreshing:
                    self._refreshing = refresh = True
                answer = value, self._fetched_wall_ms
            else:
                answer = None
        if refresh:
            self._executor.submit(self._refresh, generation)  # outside the lock: it takes it
        if answer is not None:
            return answer
        return self._store(self._fetch(), generation)

    def invalidate(self) -> None:
        with self._lock:
            self._value = None
            self._generation += 1

    def _store(self, value: T, generation: int) -> tuple[T, int]:
        with self._lock:
            wall_ms = self._wall_ms()
            if generation == self._generation:
                self._value = value
                self._fetched_monotonic_ms = self._monotonic_ms()
                self._fetched_wall_ms = wall_ms
            return value, wall_ms

    def _refresh(self, generation: int) -> None:
        try:
            self._store(self._fetch(), generation)
        except Exception as error:  # the next view that finds it too old asks again, and says why
            log.info("console: background refresh failed: %s", error)
        finally:
            with self._lock:
                self._refreshing = False
