"""The connection budget's rules, driven with plain numbers and a manual clock (no sockets): when a
connection must drain before it is read again, how much a Fetch answer may carry, and when a
connection is idle or too slow to send a request."""

from __future__ import annotations

import pytest

from strom.base.clock import ManualClock
from strom.broker.config import BrokerConfig, help_config_text
from strom.broker.connection_budget import (
    BudgetLimits,
    ConnectionAccount,
    ConnectionBudget,
    OverdueReason,
)
from strom.broker.server import budget_limits

KIB = 1024
LIMITS = BudgetLimits(
    connection_unsent_bytes_max=100 * KIB,
    connection_unsent_bytes_resume=40 * KIB,
    broker_held_bytes_max=250 * KIB,
    connection_held_bytes_reserved=10 * KIB,
    idle_ms=10_000,
    request_receive_ms_max=3_000,
)


@pytest.fixture
def budget() -> ConnectionBudget:
    return ConnectionBudget(LIMITS)


def overdue_ids(budget: ConnectionBudget, now_ms: int) -> dict[int, OverdueReason]:
    return {account.connection_id: reason for account, reason in budget.overdue(now_ms)}


# -- what a connection may hold ---------------------------------------------------------------------


def test_a_connection_over_its_unsent_bound_drains_to_the_resume_level(budget: ConnectionBudget) -> None:
    account = budget.open(1)
    budget.hold(account, 100 * KIB, 0)
    assert budget.drain_target(account) is None  # at the bound is still allowed
    budget.hold(account, 100 * KIB + 1, 0)
    assert budget.drain_target(account) == 40 * KIB


def test_request_bytes_count_towards_the_broker_total_but_never_mute_a_connection(
    budget: ConnectionBudget,
) -> None:
    """A partly received request is finished, not starved: muting cannot shrink it."""
    reading = budget.open(1)
    budget.hold(reading, 0, 300 * KIB)
    assert budget.held_bytes == 300 * KIB
    assert budget.drain_target(reading) is None


def test_over_the_broker_budget_the_connections_holding_more_than_the_reserve_drain(
    budget: ConnectionBudget,
) -> None:
    big = [budget.open(index) for index in range(3)]
    small = budget.open(10)
    for account in big:
        budget.hold(account, 80 * KIB, 0)  # each under its own bound
    budget.hold(small, 5 * KIB, 0)
    assert budget.held_bytes == 245 * KIB
    assert [budget.drain_target(account) for account in [*big, small]] == [None] * 4
    budget.hold(small, 10 * KIB, 1 * KIB)  # 256 KiB held: over the budget
    assert [budget.drain_target(account) for account in big] == [10 * KIB] * 3
    assert budget.drain_target(small) is None  # within the reserve: always served
    budget.hold(big[0], 10 * KIB, 0)  # drained to the reserve: back under the budget
    assert budget.held_bytes == 181 * KIB
    assert [budget.drain_target(account) for account in big] == [None] * 3


def test_a_closed_connection_gives_back_what_it_held(budget: ConnectionBudget) -> None:
    first, second = budget.open(1), budget.open(2)
    budget.hold(first, 7, 3)
    budget.hold(second, 20, 0)
    budget.mute(first)
    assert (budget.held_bytes, budget.muted, len(budget)) == (30, 1, 2)
    budget.close(first)
    assert (budget.held_bytes, budget.muted, len(budget)) == (20, 0, 1)
    with pytest.raises(AssertionError):
        budget.open(2)  # ids are unique while open


def test_a_fetch_answer_gets_what_is_left_of_the_connection_bound(budget: ConnectionBudget) -> None:
    account = budget.open(1)
    assert budget.response_allowance(account) == 100 * KIB
    budget.hold(account, 30 * KIB, 0)
    assert budget.response_allowance(account) == 70 * KIB
    budget.hold(account, 120 * KIB, 0)
    assert budget.response_allowance(account) == 0  # never negative (the fetch still gets one batch)


def test_near_the_broker_budget_a_fetch_answer_gets_what_is_left_of_it_but_at_least_the_reserve(
    budget: ConnectionBudget,
) -> None:
    hog = budget.open(1)
    account = budget.open(2)
    budget.hold(hog, 0, 200 * KIB)
    assert budget.response_allowance(account) == 50 * KIB
    budget.hold(hog, 0, 249 * KIB)
    assert budget.response_allowance(account) == 10 * KIB
    budget.hold(hog, 0, 400 * KIB)
    assert budget.response_allowance(account) == 10 * KIB
    budget.hold(account, 4 * KIB, 0)
    assert budget.response_allowance(account) == 6 * KIB


def test_limits_that_contradict_each_other_are_refused() -> None:
    with pytest.raises(AssertionError):
        BudgetLimits(
            connection_unsent_bytes_max=10,
            connection_unsent_bytes_resume=20,
            broker_held_bytes_max=100,
            connection_held_bytes_reserved=5,
            idle_ms=1,
            request_receive_ms_max=1,
        )


# -- idle and slow connections ----------------------------------------------------------------------


class Peer:
    """What the periodic check sees of one connection: the decoder's running totals, the bytes of a
    request not yet whole, the unsent answers. ``look()`` is one periodic check at the clock's time."""

    def __init__(self, budget: ConnectionBudget, clock: ManualClock, connection_id: int = 1) -> None:
        self.budget = budget
        self.clock = clock
        self.account = budget.open(connection_id)
        self.bytes_received = 0
        self.requests = 0
        self.partial_bytes = 0
        self.unsent_bytes = 0

    def receive(self, byte_count: int, *, completes: int = 0, partial_bytes: int = 0) -> None:
        self.bytes_received += byte_count
        self.requests += completes
        self.partial_bytes = partial_bytes

    def look(self) -> OverdueReason | None:
        return self.budget.observe(
            self.account,
            self.clock.monotonic_ms(),
            unsent_bytes=self.unsent_bytes,
            partial_bytes=self.partial_bytes,
            bytes_received=self.bytes_received,
            requests_received=self.requests,
        )

    def look_every(self, step_ms: int, until_ms: int) -> list[OverdueReason | None]:
        """Checks every ``step_ms`` until the clock reads ``until_ms``."""
        seen = []
        while self.clock.monotonic_ms() + step_ms <= until_ms:
            self.clock.advance(step_ms)
            seen.append(self.look())
        return seen


def test_a_connection_waiting_for_requests_is_idle_after_the_idle_time(budget: ConnectionBudget) -> None:
    clock = ManualClock()
    peer = Peer(budget, clock)
    assert peer.look() is None  # stamps the start
    clock.advance(4_000)
    peer.receive(60, completes=1)
    assert peer.look() is None  # the request arrived since the last look: active from now
    assert set(peer.look_every(500, 13_500)) == {None}
    clock.advance(500)
    assert peer.look() is OverdueReason.IDLE


def test_an_event_between_checks_counts_from_the_check_that_sees_it_so_nothing_closes_early(
    budget: ConnectionBudget,
) -> None:
    clock = ManualClock()
    peer = Peer(budget, clock)
    assert peer.look() is None
    clock.advance(9_000)
    peer.receive(60, completes=1)  # at 9,000, seen at 9,999
    clock.advance(999)
    assert peer.look() is None
    clock.advance(9_999)
    assert peer.look() is None
    clock.advance(1)
    assert peer.look() is OverdueReason.IDLE


def test_a_connection_with_a_request_in_progress_is_never_idle(budget: ConnectionBudget) -> None:
    """A long poll or a parked JoinGroup may take as long as the client asked; idleness counts from
    the first look after it is answered."""
    clock = ManualClock()
    peer = Peer(budget, clock)
    peer.receive(60, completes=1)
    peer.account.handling = True
    assert set(peer.look_every(1_000, 100_000)) == {None}
    peer.account.handling = False
    assert set(peer.look_every(1_000, 110_000)) == {None}  # stamped at 101,000
    clock.advance(1_000)
    assert peer.look() is OverdueReason.IDLE


def test_unsent_answers_moving_out_count_as_activity(budget: ConnectionBudget) -> None:
    clock = ManualClock()
    peer = Peer(budget, clock)
    peer.unsent_bytes = 900 * KIB
    assert peer.look() is None
    for unsent_kib in (800, 500, 100):  # a slow reader takes its answers, no new request
        clock.advance(9_000)
        peer.unsent_bytes = unsent_kib * KIB
        assert peer.look() is None
    clock.advance(10_000)
    assert peer.look() is OverdueReason.IDLE


def test_a_muted_connection_is_idle_only_while_its_answers_do_not_move(budget: ConnectionBudget) -> None:
    clock = ManualClock()
    peer = Peer(budget, clock)
    peer.account.handling = True  # muted in the middle of a batch of pipelined requests
    peer.unsent_bytes = 150 * KIB
    peer.partial_bytes = 30  # a request partly read: its clock does not run while muted
    budget.mute(peer.account)
    assert budget.muted == 1 and "muted" in repr(peer.account)
    assert peer.look() is None
    for unsent_kib in (140, 90, 60):  # the peer reads, slowly
        clock.advance(9_000)
        peer.unsent_bytes = unsent_kib * KIB
        assert peer.look() is None
    assert set(peer.look_every(1_000, 27_000 + 9_000)) == {None}  # stuck: the peer stopped reading
    clock.advance(1_000)
    assert peer.look() is OverdueReason.IDLE
    budget.unmute(peer.account)
    assert budget.muted == 0


def test_a_request_trickling_in_is_dropped_after_the_receive_bound(budget: ConnectionBudget) -> None:
    """Every byte is activity, so the slowloris never looks idle; its request is what is too slow."""
    clock = ManualClock()
    peer = Peer(budget, clock)
    peer.receive(1, partial_bytes=1)  # the first byte
    assert peer.look() is None
    for sent in range(2, 31):
        clock.advance(100)
        peer.receive(1, partial_bytes=sent)
        assert peer.look() is None
    assert peer.account.frame_started_ms == 0
    clock.advance(100)
    assert peer.look() is OverdueReason.SLOW_REQUEST


def test_each_request_gets_the_whole_receive_bound_counted_while_it_is_read(budget: ConnectionBudget) -> None:
    clock = ManualClock()
    peer = Peer(budget, clock)
    peer.receive(10, partial_bytes=10)
    assert peer.look() is None
    clock.advance(2_900)
    # The first request completes and the next one starts arriving in the same read; the first
    # is a long poll: not the peer's time.
    peer.receive(100, completes=1, partial_bytes=4)
    peer.account.handling = True
    assert set(peer.look_every(1_000, 52_900)) == {None}
    peer.account.handling = False
    assert peer.look() is None  # the receive clock starts now
    assert set(peer.look_every(1_000, 54_900)) == {None}
    clock.advance(1_000)
    assert peer.look() is OverdueReason.SLOW_REQUEST
    peer.receive(30, completes=1)
    assert peer.look() is None
    assert peer.account.frame_started_ms is None


def test_without_an_idle_limit_only_slow_requests_are_closed() -> None:
    budget = ConnectionBudget(
        BudgetLimits(
            connection_unsent_bytes_max=100,
            connection_unsent_bytes_resume=10,
            broker_held_bytes_max=1_000,
            connection_held_bytes_reserved=1,
            idle_ms=None,
            request_receive_ms_max=1_000,
        )
    )
    clock = ManualClock()
    idle, slow = Peer(budget, clock, 1), Peer(budget, clock, 2)
    slow.receive(5, partial_bytes=5)
    assert (idle.look(), slow.look()) == (None, None)
    clock.advance(10**9)
    assert (idle.look(), slow.look()) == (None, OverdueReason.SLOW_REQUEST)


def test_the_check_records_what_each_connection_holds(budget: ConnectionBudget) -> None:
    clock = ManualClock()
    first, second = Peer(budget, clock, 1), Peer(budget, clock, 2)
    first.unsent_bytes, first.partial_bytes, second.unsent_bytes = 7, 3, 20
    first.look()
    second.look()
    assert (budget.held_bytes, first.account.held_bytes) == (30, 10)


# -- the configuration ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "idle_ms", "receive_ms"),
    [(None, 600_000, 30_000), ("2000", 2_000, 2_000), ("-1", None, 30_000), ("45000", 45_000, 30_000)],
)
def test_connections_max_idle_ms_sets_the_idle_bound_and_caps_the_receive_bound(
    value: str | None, idle_ms: int | None, receive_ms: int
) -> None:
    config = BrokerConfig(values={} if value is None else {"connections.max.idle.ms": value})
    bounds = budget_limits(config)
    assert (bounds.idle_ms, bounds.request_receive_ms_max) == (idle_ms, receive_ms)
    assert "connections.max.idle.ms" in help_config_text()


def test_account_repr_names_the_connection() -> None:
    account = ConnectionAccount(7)
    assert "ConnectionAccount(7, reading" in repr(account)
    account.handling = True
    assert "ConnectionAccount(7, handling" in repr(account)


def test_must_drain_records_the_unsent_answers_and_applies_both_rules(budget: ConnectionBudget) -> None:
    hog, account = budget.open(1), budget.open(2)
    assert not budget.must_drain(account, 100 * KIB)
    assert budget.must_drain(account, 100 * KIB + 1)
    assert (account.unsent_bytes, budget.held_bytes) == (100 * KIB + 1, 100 * KIB + 1)
    budget.hold(hog, 0, 240 * KIB)  # request bytes (a large request arriving): never muted
    assert budget.drain_target(hog) is None
    assert budget.must_drain(account, 20 * KIB)  # over the broker budget and over the reserve
    assert budget.drain_target(account) == 10 * KIB
    assert not budget.must_drain(account, 10 * KIB)
    assert budget.held_bytes == 250 * KIB
