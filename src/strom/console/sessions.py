"""The console's login sessions (``--console-login``): a table from a random token to the user's
own view of the cluster, bounded in count and in idle time. Pure: time comes in as ``now_ms``,
nothing here does I/O. What leaves the table (logged out, idle too long, pushed out by a newer
login) is handed back to the caller, who closes its clients outside the table's lock.

The token is the session's only secret: 32 random bytes (``secrets.token_urlsafe``), sent to the
browser in an HttpOnly, SameSite=Strict cookie and compared here by dictionary lookup (a timing
difference in a hash lookup tells nothing about a 256-bit random key). Each session has its own
CSRF token for its forms, so a form of one session cannot be replayed in another.
"""

from __future__ import annotations

import secrets
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Generic, TypeVar

__all__ = ["Session", "Sessions"]

View = TypeVar("View")


@dataclass
class Session(Generic[View]):
    token: str
    user: str
    csrf_token: str
    view: View
    last_used_ms: int
    # The groups whose own requests succeeded in this session: only their lag trend is shown.
    groups_seen: set[str] = field(default_factory=set)


class Sessions(Generic[View]):
    """At most ``sessions_max`` sessions, each ended after ``idle_ms_max`` without a request. A
    login beyond the count ends the least recently used session (a forgotten tab, not a new
    login, is what gives way). Thread-safe."""

    def __init__(self, sessions_max: int, idle_ms_max: int) -> None:
        assert sessions_max > 0 and idle_ms_max > 0
        self.sessions_max = sessions_max
        self.idle_ms_max = idle_ms_max
        self._lock = threading.Lock()
        # Least recently used first.
        self._table: OrderedDict[str, Session[View]] = OrderedDict()

    def __len__(self) -> int:
        with self._lock:
            return len(self._table)

    def add(self, user: str, view: View, now_ms: int) -> tuple[Session[View], list[Session[View]]]:
        """A new session for ``user``, and the sessions it pushed out (idle or over the count)."""
        session = Session(secrets.token_urlsafe(32), user, secrets.token_urlsafe(32), view, now_ms)
        with self._lock:
            ended = self._expire_locked(now_ms)
            while len(self._table) >= self.sessions_max:
                ended.append(self._table.popitem(last=False)[1])
            self._table[session.token] = session
        return session, ended

    def get(self, token: str, now_ms: int) -> tuple[Session[View] | None, list[Session[View]]]:
        """The live session of ``token`` (its idle time starts again), and the sessions that
        expired meanwhile (that of ``token`` among them if it was idle too long)."""
        with self._lock:
            ended = self._expire_locked(now_ms)
            session = self._table.get(token) if token else None
            if session is not None:
                session.last_used_ms = now_ms
                self._table.move_to_end(token)
        return session, ended

    def remove(self, token: str) -> Session[View] | None:
        with self._lock:
            return self._table.pop(token, None)

    def clear(self) -> list[Session[View]]:
        with self._lock:
            ended = list(self._table.values())
            self._table.clear()
        return ended

    def _expire_locked(self, now_ms: int) -> list[Session[View]]:
        ended: list[Session[View]] = []
        while self._table:
            oldest = next(iter(self._table.values()))
            if now_ms - oldest.last_used_ms < self.idle_ms_max:
                break
            ended.append(self._table.popitem(last=False)[1])
        return ended
