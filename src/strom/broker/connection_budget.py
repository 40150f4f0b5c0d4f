"""What connections may hold, and when one is idle or too slow: pure rules, no sockets.

The connection loop in ``server.py`` reports what each connection holds (answers not yet sent,
request bytes received but not yet answered) and what it is doing; this object answers three
questions, so the rules can be driven in unit tests with plain numbers and a manual clock:

- ``drain_target(account)``: may the connection go on (read more, handle its next request), or must
  it first let its unsent answers drain, and down to how many bytes? A connection is *muted* (not
  read, as Kafka mutes a channel) while its unsent answers exceed the per-connection bound, until
  they are back under the low mark. When everything the broker holds for all connections together
  exceeds the broker-wide budget, every connection holding more than a small reserve is muted until
  it is back under the reserve: the connections holding the most stop first, and one holding
  almost nothing (a heartbeating consumer, a canary) keeps being served. Each wait is on the
  connection's own answers, so no connection waits for another and none can deadlock.
- ``response_allowance(account)``: how many bytes the next answer may add (a Fetch is cut to this,
  whole batches only and at least one, as KIP-74 allows).
- ``overdue(now_ms)``: which connections to close, and why: *idle* (no byte received and no answer
  sent for the idle time, while no request of theirs is in progress) or *slow request* (a request
  whose bytes have been trickling in for longer than the receive bound: slowloris).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = [
    "Activity",
    "BudgetLimits",
    "ConnectionAccount",
    "ConnectionBudget",
    "OverdueReason",
    "WarningLimiter",
]


class Activity(enum.Enum):
    """What a connection is doing, as far as idleness and slowness are concerned."""

    READING = "reading"  # waiting for request bytes from the peer
    HANDLING = "handling"  # a request of its is being handled (a long poll, a parked join, an fsync)
    MUTED = "muted"  # not read until its unsent answers drain


# The members as module globals: the connection loop calls into this object a few times per read,
# and a global is cheaper to reach than an enum member through its class.
_READING = Activity.READING
_HANDLING = Activity.HANDLING
_MUTED = Activity.MUTED


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
    """What one connection holds and does; fields are read by the server, changed through the budget.

    Times are stamped lazily: an event (bytes received, a change of activity) only marks a time as
    unknown (None), and the next ``ConnectionBudget.overdue`` check stamps it with its own time, so
    the connection loop never reads the clock. A stamp is thus never earlier than the event, and a
    connection is closed no sooner than its bound after it (and at most two check intervals later).
    """

    __slots__ = (
        "active_since_ms",
        "activity",
        "connection_id",
        "frame_started_ms",
        "partial_request",
        "request_bytes",
        "unsent_bytes",
    )

    def __init__(self, connection_id: int) -> None:
        self.connection_id = connection_id
        self.activity = _READING
        # The last time anything happened on the connection: bytes received, an answer finished or
        # sent onwards, a change of activity. Idleness is measured from here.
        self.active_since_ms: int | None = None
        # A request is partly received; it started arriving at frame_started_ms.
        self.partial_request = False
        self.frame_started_ms: int | None = None
        self.unsent_bytes = 0  # answers made and not yet taken by the kernel
        self.request_bytes = 0  # request bytes received and not yet answered

    @property
    def held_bytes(self) -> int:
        return self.unsent_bytes + self.request_bytes

    def __repr__(self) -> str:
        return (
            f"ConnectionAccount({self.connection_id}, {self.activity.value}, unsent={self.unsent_bytes},"
            f" requests={self.request_bytes})"
        )


class ConnectionBudget:
    """Every open connection's account and their total."""

    def __init__(self, limits: BudgetLimits) -> None:
        self.limits = limits
        self._accounts: dict[int, ConnectionAccount] = {}
        self.held_bytes = 0  # the sum of every account's held bytes
        self.muted = 0  # connections muted now

    def __len__(self) -> int:
        return len(self._accounts)

    def open(self, connection_id: int) -> ConnectionAccount:
        assert connection_id not in self._accounts, connection_id
        account = ConnectionAccount(connection_id)
        self._accounts[connection_id] = account
        return account

    def close(self, account: ConnectionAccount) -> None:
        removed = self._accounts.pop(account.connection_id)
        assert removed is account, (removed, account)
        self.held_bytes -= account.held_bytes
        if account.activity is _MUTED:
            self.muted -= 1
        account.unsent_bytes = account.request_bytes = 0

    # -- what a connection holds ------------------------------------------------------------------

    def hold(self, account: ConnectionAccount, unsent_bytes: int, request_bytes: int) -> None:
        """The connection now holds this many unsent answer bytes and unanswered request bytes."""
        assert unsent_bytes >= 0 and request_bytes >= 0, (unsent_bytes, request_bytes)
        self.held_bytes += unsent_bytes + request_bytes - account.unsent_bytes - account.request_bytes
        account.unsent_bytes = unsent_bytes
        account.request_bytes = request_bytes

    def must_drain(self, account: ConnectionAccount, unsent_bytes: int, request_bytes: int) -> bool:
        """``hold``, then whether ``drain_target`` asks the connection to drain before it goes on."""
        self.held_bytes += unsent_bytes + request_bytes - account.unsent_bytes - account.request_bytes
        account.unsent_bytes = unsent_bytes
        account.request_bytes = request_bytes
        limits = self.limits
        if unsent_bytes > limits.connection_unsent_bytes_max:
            return True
        return (
            self.held_bytes > limits.broker_held_bytes_max
            and unsent_bytes > limits.connection_held_bytes_reserved
        )

    def ready_to_read(self, account: ConnectionAccount, unsent_bytes: int, request_bytes: int) -> bool:
        """``must_drain``; when the connection need not drain, it is now ``reading`` (True).

        The connection loop calls this before every read, so it is written out flat."""
        held_bytes = (
            self.held_bytes + unsent_bytes + request_bytes - account.unsent_bytes - account.request_bytes
        )
        self.held_bytes = held_bytes
        account.unsent_bytes = unsent_bytes
        account.request_bytes = request_bytes
        limits = self.limits
        if unsent_bytes > limits.connection_held_bytes_reserved and (
            unsent_bytes > limits.connection_unsent_bytes_max or held_bytes > limits.broker_held_bytes_max
        ):
            return False
        activity = account.activity
        if activity is not _READING:
            if activity is _MUTED:
                self.muted -= 1
            account.activity = _READING
            account.active_since_ms = None
            account.frame_started_ms = None
        return True

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

    # -- what a connection does ------------------------------------------------------------------

    def reading(self, account: ConnectionAccount) -> None:
        """The connection waits for request bytes. Coming back from handling or muted, a request
        already partly received gets the whole receive bound from now: the time its connection spent
        not being read is not the peer's fault."""
        activity = account.activity
        if activity is _READING:
            return
        if activity is _MUTED:
            self.muted -= 1
        account.activity = _READING
        account.active_since_ms = None
        account.frame_started_ms = None

    def received(
        self, account: ConnectionAccount, completed: bool, partial: bool, request_bytes: int
    ) -> None:
        """Bytes arrived: ``completed`` when they completed at least one request (which the
        connection now handles), ``partial`` when a request is left partly received;
        ``request_bytes``: what the connection now holds of requests not yet answered."""
        account.active_since_ms = None
        if completed or not partial:
            account.frame_started_ms = None  # a new partial request starts its own clock
        account.partial_request = partial
        if completed:
            account.activity = _HANDLING  # only ever from reading: no muted count to adjust
        self.held_bytes += request_bytes - account.request_bytes
        account.request_bytes = request_bytes

    def handling(self, account: ConnectionAccount) -> None:
        """A request of the connection is being handled: it is neither idle nor slow meanwhile."""
        if account.activity is _MUTED:
            self.muted -= 1
        account.activity = _HANDLING

    def mute(self, account: ConnectionAccount) -> None:
        """The connection is not read until its unsent answers drain (see ``drain_target``)."""
        if account.activity is not _MUTED:
            self.muted += 1
            account.activity = _MUTED
            account.active_since_ms = None

    # -- the periodic check ---------------------------------------------------------------------

    def unsent_now(self, account: ConnectionAccount, unsent_bytes: int, now_ms: int) -> None:
        """A periodic look at the connection's unsent answers: if they shrank, the peer is reading,
        which counts as activity."""
        if unsent_bytes < account.unsent_bytes:
            account.active_since_ms = now_ms
        self.hold(account, unsent_bytes, account.request_bytes)

    def overdue(self, now_ms: int) -> list[tuple[ConnectionAccount, OverdueReason]]:
        """Connections to close now (times not yet stamped are stamped ``now_ms`` first). A
        connection handling a request (a long poll, a parked join) is never overdue; a muted one is
        idle when its answers have not moved for the idle time."""
        limits = self.limits
        idle_ms = limits.idle_ms
        found: list[tuple[ConnectionAccount, OverdueReason]] = []
        for account in self._accounts.values():
            if account.activity is _HANDLING:
                continue
            if account.active_since_ms is None:
                account.active_since_ms = now_ms
            if account.activity is _READING and account.partial_request:
                if account.frame_started_ms is None:
                    account.frame_started_ms = now_ms
                elif now_ms - account.frame_started_ms >= limits.request_receive_ms_max:
                    found.append((account, OverdueReason.SLOW_REQUEST))
            elif idle_ms is not None and now_ms - account.active_since_ms >= idle_ms:
                found.append((account, OverdueReason.IDLE))
        return found


class WarningLimiter:
    """At most ``warnings_max`` warnings per ``window_ms``; the rest are counted, and the count is
    handed to the next warning that is let through ("and N more like it")."""

    def __init__(self, warnings_max: int, window_ms: int) -> None:
        assert warnings_max > 0 and window_ms > 0
        self.warnings_max = warnings_max
        self.window_ms = window_ms
        self._window_started_ms: int | None = None
        self._in_window = 0
        self.suppressed = 0

    def allow(self, now_ms: int) -> int | None:
        """None to stay quiet; otherwise log, and mention this many suppressed since the last one."""
        if self._window_started_ms is None or now_ms - self._window_started_ms >= self.window_ms:
            self._window_started_ms = now_ms
            self._in_window = 0
        if self._in_window >= self.warnings_max:
            self.suppressed += 1
            return None
        self._in_window += 1
        suppressed, self.suppressed = self.suppressed, 0
        return suppressed
