"""A cluster-wide answer kept for a few seconds, so the pages that need every partition (the
cluster page, the topics list) do not each ask the cluster for all of it.

At 10,000 partitions one Metadata or ListOffsets round for all of them costs the broker and the
client more than a page may take (benchmarks/console.py). A ``Snapshot`` answers from what it
holds while it is younger than ``fresh_ms``; older but younger than ``stale_ms`` it still answers
from it and refreshes it in the background (one refresh at a time, on ``executor``, which must
not be the one ``fetch`` itself waits on); older still, or never fetched, the caller waits for a
fresh one, sharing the fetch already under way if there is one (``stale_ms`` 0: every call
fetches). ``prefetch`` fetches in the background before anyone asks (a console starting). The console's own changes (create, delete, alter)
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
        # The fetch under way (foreground or background), which callers without a value wait on,
        # and the generation it began in.
        self._pending: concurrent.futures.Future[tuple[T, int]] | None = None
        self._pending_generation = 0

    def get(self) -> tuple[T, int]:
        """The value and when it was fetched (ms since the epoch). With no value young enough to
        answer from, the caller waits: for the fetch already under way (a prefetch, a background
        refresh) if one is, else for its own."""
        refresh = False
        own: concurrent.futures.Future[tuple[T, int]] | None = None
        pending: concurrent.futures.Future[tuple[T, int]] | None = None
        answer: tuple[T, int] | None = None
        with self._lock:
            value = self._value
            age_ms = self._monotonic_ms() - self._fetched_monotonic_ms
            generation = self._generation
            if value is not None and age_ms < self.stale_ms:
                if age_ms >= self.fresh_ms and self._pending is None:
                    refresh = True
                    pending = self._pending = concurrent.futures.Future()
                    self._pending_generation = generation
                answer = value, self._fetched_wall_ms
            else:
                pending = self._pending
                # Stale 0 asks afresh every time: a fetch begun before this call may predate what
                # its caller just changed.
                if pending is None or self._pending_generation != generation or self.stale_ms == 0:
                    pending = own = self._pending = concurrent.futures.Future()
                    self._pending_generation = generation
        if answer is not None:
            if refresh:
                assert pending is not None
                self._executor.submit(self._refresh, pending, generation)  # outside the lock: it takes it
            return answer
        assert pending is not None
        if own is not None:
            self._run(own, generation)
        return pending.result()

    def prefetch(self) -> None:
        """Fetch now in the background unless the value is fresh or a fetch is under way (a
        console starting: its first view then finds the value; a console's timer, every
        interval shorter than ``stale_ms``: no view finds the value too old to answer from).
        Nothing with stale 0 (no view would use it)."""
        with self._lock:
            age_ms = self._monotonic_ms() - self._fetched_monotonic_ms
            if (
                (self._value is not None and age_ms < self.fresh_ms)
                or self._pending is not None
                or self.stale_ms == 0
            ):
                return
            pending = self._pending = concurrent.futures.Future()
            self._pending_generation = generation = self._generation
        self._executor.submit(self._refresh, pending, generation)

    def invalidate(self) -> None:
        with self._lock:
            self._value = None
            self._generation += 1

    def _run(self, pending: concurrent.futures.Future[tuple[T, int]], generation: int) -> None:
        """Fetch, keep the value unless invalidated since, and hand it to whoever waits."""
        try:
            fetched = self._fetch()
        except BaseException as error:
            with self._lock:
                if self._pending is pending:
                    self._pending = None
            pending.set_exception(error)
            if not isinstance(error, Exception):
                raise
            return
        with self._lock:
            wall_ms = self._wall_ms()
            if generation == self._generation:
                self._value = fetched
                self._fetched_monotonic_ms = self._monotonic_ms()
                self._fetched_wall_ms = wall_ms
            if self._pending is pending:
                self._pending = None
        pending.set_result((fetched, wall_ms))

    def _refresh(self, pending: concurrent.futures.Future[tuple[T, int]], generation: int) -> None:
        self._run(pending, generation)
        error = pending.exception()
        if error is not None:  # the next view that finds it too old asks again, and says why
            log.info("console: background refresh failed: %s", error)
