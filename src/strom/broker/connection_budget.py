"""What connections may hold, and when one is idle or too slow: pure rules, no sockets.

The connection loop in ``server.py`` keeps its hot path to a few integer comparisons: it asks this
object only when a connection holds more than a small reserve of unsent answers, and otherwise
just flags what it is doing (handling a request, muted). A periodic check looks at every connection
(bytes received and requests completed so far, unsent answers, a request partly received) and hands
what it saw to ``observe``. The rules, driven in unit tests with plain numbers and a manual clock:

- ``must_drain`` / ``drain_target``: may the connection go on (read more, handle its next request),
  or must it first let its unsent answers drain, and down to how many bytes? A connection is
  *muted* (not read, as Kafka mutes a channel) while its unsent answers exceed the per-connection
  bound, until they are back under the low mark. When everything the broker holds for all
  connections together exceeds the broker-wide budget, every connection holding more than a small
  reserve is muted until it is back under the reserve: the connections holding the most stop
  first, and one holding almost nothing (a heartbeating consumer, a canary) keeps being served.
  Each wait is on the connection's own answers, so no connection waits for another: no deadlock.
- ``response_allowance``: how many bytes the next answer may add (a Fetch is cut to this, whole
  batches only and at least one, as KIP-74 allows).
- ``observe``: close the connection, and why? *Idle*: nothing received and no answer sent onwards
  for the idle time, while no request of it is in progress (a muted connection counts as idle when
  its answers have not moved). *Slow request*: a request whose bytes have been trickling in for
  longer than the receive bound (slowloris), counted only while the connection is being read.

Times are stamped by the check that sees a change, never by the loop: a stamp is never earlier than
the event, so a connection is closed no sooner than its bound after it, and at most two check
intervals later.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = [
    "BudgetLimits",
    "ConnectionAccount",
    "ConnectionBudget",
    "OverdueReason",
]


class OverdueReason(enum.Enum):
    IDLE = "idle"
    SLOW_REQUEST = "slow_request"


@dataclass(frozen=True)
class BudgetLimits:
    """The bounds the rules apply (defaults in ``strom.base.limits``, idle time from the config)."""

    connection_unsent_bytes_max: int  # muted above this many unsent answer bytes...
    connection_unsent_bytes_resume: int  # ...until back at or below this many
    broker_held_bytes_max: int  # unsent answers + unanswered request bytes of all connections
    connection_held_bytes_reserved: int  # a connection holding no more than this is never muted
    idle_ms: int | None  # connections.max.idle.ms; None: idle connections are never closed
    request_receive_ms_max: int  # the bytes of one request must all arrive within this

    def __post_init__(self) -> None:
        assert 0 <= self.connection_unsent_bytes_resume <= self.connection_unsent_bytes_max, self
        assert 0 <= self.connection_held_bytes_reserved <= self.connection_unsent_bytes_resume, self
        assert self.broker_held_bytes_max >= self.connection_unsent_bytes_max, self
        assert (self.idle_ms is None or self.idle_ms > 0) and self.request_receive_ms_max > 0, self


class ConnectionAccount:
    """One connection: what it holds (kept by the budget) and what it does (flags set by the loop)."""

    __slots__ = (
        "active_since_ms",
        "connection_id",
        "frame_started_ms",
        "handling",
        "muted",
        "request_bytes",
        "seen_bytes_received",
        "seen_requests",
        "unsent_bytes",
    )

    def __init__(self, connection_id: int) -> None:
        self.connection_id = connection_id
        # Set by the connection loop while it handles the requests it read (a long poll, a parked
        # join, an fsync may take long: the connection is then neither idle nor slow).
        self.handling = False
        self.muted = False  # not read until its unsent answers drain (set through the budget)
        self.unsent_bytes = 0  # answers made and not yet taken by the kernel, as last looked at
        self.request_bytes = 0  # bytes of a request not yet whole, as last looked at
        # What the periodic check saw last, and the times it stamped (None: not stamped yet).
        self.seen_bytes_received = 0
        self.seen_requests = 0
        self.active_since_ms: int | None = None  # idleness is measured from here
        self.frame_started_ms: int | None = None  # the partly received request started arriving

    @property
    def held_bytes(self) -> int:
        return self.unsent_bytes + self.request_bytes

    def __repr__(self) -> str:
        doing = "muted" if self.muted else "handling" if self.handling else "reading"
        return (
            f"ConnectionAccount({self.connection_id}, {doing}, unsent={self.unsent_bytes},"
            f" requests={self.request_bytes})"
        )


class ConnectionBudget:
    """Every open connection's account and their total."""

    def __init__(self, limits: BudgetLimits) -> None:
        self.limits = limits
        self._accounts: dict[int, ConnectionAccount] = {}
        self.held_bytes = 0  # the sum of every account's held bytes

    def __len__(self) -> int:
        return len(self._accounts)

    @property
    def muted(self) -> int:
        """Connections muted now."""
        return sum(1 for account in self._accounts.values() if account.muted)

    def open(self, connection_id: int) -> ConnectionAccount:
        assert connection_id not in self._accounts, connection_id
        account = ConnectionAccount(connection_id)
        self._accounts[connection_id] = account
        return account

    def close(self, account: ConnectionAccount) -> None:
        removed = self._accounts.pop(account.connection_id)
        assert removed is account, (removed, account)
        self.held_bytes -= account.held_bytes
        account.unsent_bytes = account.request_bytes = 0

    # -- what a connection holds ------------------------------------------------------------------

    def hold(self, account: ConnectionAccount, unsent_bytes: int, request_bytes: int) -> None:
        """The connection now holds this many unsent answer bytes and unanswered request bytes."""
        assert unsent_bytes >= 0 and request_bytes >= 0, (unsent_bytes, request_bytes)
        self.held_bytes += unsent_bytes + request_bytes - account.unsent_bytes - account.request_bytes
        account.unsent_bytes = unsent_bytes
        account.request_bytes = request_bytes

    def must_drain(self, account: ConnectionAccount, unsent_bytes: int) -> bool:
        """Records the connection's unsent answers; must it drain them before it goes on?

        Never when they are within the reserve: the loop asks only above it (or on the way down)."""
        self.held_bytes += unsent_bytes - account.unsent_bytes
        account.unsent_bytes = unsent_bytes
        limits = self.limits
        if unsent_bytes > limits.connection_unsent_bytes_max:
            return True
        return (
            self.held_bytes > limits.broker_held_bytes_max
            and unsent_bytes > limits.connection_held_bytes_reserved
        )

    def drain_target(self, account: ConnectionAccount) -> int | None:
        """None when the connection may go on; otherwise the number of unsent answer bytes it must
        first drain down to (it is muted until then)."""
        limits = self.limits
        unsent = account.unsent_bytes
        if unsent > limits.connection_unsent_bytes_max:
            return limits.connection_unsent_bytes_resume
        if self.held_bytes > limits.broker_held_bytes_max and unsent > limits.connection_held_bytes_reserved:
            return limits.connection_held_bytes_reserved
        return None

    def response_allowance(self, account: ConnectionAccount) -> int:
        """Bytes the connection's next answer may add: what is left of its own bound, and of the
        broker-wide budget (but always up to the reserve). Never negative."""
        limits = self.limits
        unsent = account.unsent_bytes
        room = limits.connection_unsent_bytes_max - unsent
        shared_room = limits.broker_held_bytes_max - self.held_bytes
        if shared_room < room:
            reserve_room = limits.connection_held_bytes_reserved - unsent
            room = shared_room if shared_room > reserve_room else reserve_room
        return room if room > 0 else 0

    def mute(self, account: ConnectionAccount) -> None:
        """The connection is not read until its unsent answers drain (see ``drain_target``)."""
        if not account.muted:
            account.muted = True
            account.active_since_ms = None

    def unmute(self, account: ConnectionAccount) -> None:
        account.muted = False

    # -- the periodic check ---------------------------------------------------------------------

    def observe(
        self,
        account: ConnectionAccount,
        now_ms: int,
        *,
        unsent_bytes: int,
        partial_bytes: int,
        bytes_received: int,
        requests_received: int,
    ) -> OverdueReason | None:
        """What the periodic check sees of a connection now: its unsent answers, the bytes of a
        request not yet whole, and its running totals of bytes received and requests cut. Records
        the holdings, stamps what changed, and says whether to close the connection."""
        progressed = unsent_bytes < account.unsent_bytes  # the peer reads its answers
        self.hold(account, unsent_bytes, partial_bytes)
        received = bytes_received != account.seen_bytes_received
        completed = requests_received != account.seen_requests
        account.seen_bytes_received = bytes_received
        account.seen_requests = requests_received
        limits = self.limits
        idle_ms = limits.idle_ms
        if account.muted:
            # Not read: only its answers moving shows the peer is there.
            account.frame_started_ms = None
            if account.active_since_ms is None or progressed:
                account.active_since_ms = now_ms
            elif idle_ms is not None and now_ms - account.active_since_ms >= idle_ms:
                return OverdueReason.IDLE
            return None
        if account.handling:
            account.active_since_ms = account.frame_started_ms = None  # stamped once it is over
            return None
        if account.active_since_ms is None or received or progressed:
            account.active_since_ms = now_ms
        if partial_bytes:
            if account.frame_started_ms is None or completed:
                account.frame_started_ms = now_ms  # a request that started arriving since the last look
            elif now_ms - account.frame_started_ms >= limits.request_receive_ms_max:
                return OverdueReason.SLOW_REQUEST
            return None
        account.frame_started_ms = None
        if idle_ms is not None and now_ms - account.active_since_ms >= idle_ms:
            return OverdueReason.IDLE
        return None
