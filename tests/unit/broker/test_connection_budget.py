"""The connection budget's rules, driven with plain numbers and a manual clock (no sockets): when a
connection must drain before it is read again, how much a Fetch answer may carry, and when a
connection is idle or too slow to send a request."""

from __future__ import annotations

import pytest

from strom.base.clock import ManualClock
from strom.broker.config import BrokerConfig, help_config_text
from strom.broker.connection_budget import (
    Activity,
    BudgetLimits,
    ConnectionAccount,
    ConnectionBudget,
    OverdueReason,
    WarningLimiter,
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
# The loop never reads the clock: events leave their time unknown and the periodic check (overdue)
# stamps it. ``check`` below is that periodic check, run right after the events it should stamp.


def check(budget: ConnectionBudget, clock: ManualClock) -> dict[int, OverdueReason]:
    return {account.connection_id: reason for account, reason in budget.overdue(clock.monotonic_ms())}


def test_a_connection_waiting_for_requests_is_idle_after_the_idle_time(budget: ConnectionBudget) -> None:
    clock = ManualClock()
    account = budget.open(1)
    clock.advance(4_000)
    budget.received(account, True, False, 0)
    budget.handling(account)
    clock.advance(500)
    budget.reading(account)
    assert check(budget, clock) == {}  # stamps the end of the handling
    clock.advance(9_999)
    assert check(budget, clock) == {}
    clock.advance(1)
    assert check(budget, clock) == {1: OverdueReason.IDLE}


def test_an_event_between_checks_counts_from_the_next_check_so_never_closes_early(
    budget: ConnectionBudget,
) -> None:
    clock = ManualClock()
    account = budget.open(1)
    assert check(budget, clock) == {}
    clock.advance(9_000)
    budget.received(account, True, False, 0)  # at 9,000, seen by the check at 9,500
    budget.reading(account)
    clock.advance(500)
    assert check(budget, clock) == {}
    clock.advance(9_999)
    assert check(budget, clock) == {}
    clock.advance(1)
    assert check(budget, clock) == {1: OverdueReason.IDLE}


def test_a_connection_with_a_request_in_progress_is_never_idle(budget: ConnectionBudget) -> None:
    """A long poll or a parked JoinGroup may take as long as the client asked."""
    clock = ManualClock()
    account = budget.open(1)
    budget.received(account, True, False, 0)
    for _ in range(10):
        clock.advance(LIMITS.request_receive_ms_max + (LIMITS.idle_ms or 0))
        assert check(budget, clock) == {}
    assert account.activity is Activity.HANDLING


def test_a_muted_connection_is_idle_only_while_its_answers_do_not_move(budget: ConnectionBudget) -> None:
    clock = ManualClock()
    account = budget.open(1)
    budget.hold(account, 150 * KIB, 0)
    budget.mute(account)
    assert account.activity is Activity.MUTED and budget.muted == 1
    assert check(budget, clock) == {}
    for unsent_kib in (140, 90, 60):  # the peer reads, slowly
        clock.advance(9_000)
        budget.unsent_now(account, unsent_kib * KIB, clock.monotonic_ms())
        assert check(budget, clock) == {}
    clock.advance(9_000)
    budget.unsent_now(account, 60 * KIB, clock.monotonic_ms())  # stuck: the peer stopped reading
    assert check(budget, clock) == {}
    clock.advance(1_000)
    assert check(budget, clock) == {1: OverdueReason.IDLE}
    budget.reading(account)
    assert budget.muted == 0


def test_a_request_trickling_in_is_dropped_after_the_receive_bound(budget: ConnectionBudget) -> None:
    """Every byte is activity, so the slowloris never looks idle; its request is what is too slow."""
    clock = ManualClock()
    account = budget.open(1)
    budget.received(account, False, True, 1)  # the first byte
    assert check(budget, clock) == {}
    for sent in range(2, 31):
        clock.advance(100)
        budget.received(account, False, True, sent)
        budget.reading(account)  # still reading: the request's clock keeps running
        assert check(budget, clock) == {}
    assert account.frame_started_ms == 0
    clock.advance(100)
    assert check(budget, clock) == {1: OverdueReason.SLOW_REQUEST}


def test_each_request_gets_the_whole_receive_bound(budget: ConnectionBudget) -> None:
    clock = ManualClock()
    account = budget.open(1)
    budget.received(account, False, True, 10)
    assert check(budget, clock) == {}
    clock.advance(2_900)
    # The first request completes and the next one starts arriving in the same read.
    budget.received(account, True, True, 10)
    clock.advance(50_000)  # a long poll: not the peer's time
    assert check(budget, clock) == {}
    budget.reading(account)
    assert check(budget, clock) == {}
    clock.advance(2_999)
    assert check(budget, clock) == {}
    clock.advance(1)
    assert check(budget, clock) == {1: OverdueReason.SLOW_REQUEST}
    budget.received(account, True, False, 0)
    assert (account.partial_request, account.frame_started_ms) == (False, None)
    assert check(budget, clock) == {}


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
    idle, slow = budget.open(1), budget.open(2)
    budget.received(slow, False, True, 5)
    assert budget.overdue(0) == []
    assert overdue_ids(budget, 10**9) == {2: OverdueReason.SLOW_REQUEST}
    assert idle.activity is Activity.READING


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


# -- rate-limited warnings --------------------------------------------------------------------------


def test_warnings_beyond_the_rate_are_counted_and_reported_with_the_next_one() -> None:
    limiter = WarningLimiter(warnings_max=2, window_ms=1_000)
    assert [limiter.allow(now_ms) for now_ms in (0, 10, 20, 30, 999)] == [0, 0, None, None, None]
    assert limiter.allow(1_000) == 3
    assert limiter.allow(1_001) == 0
    assert limiter.allow(1_002) is None


def test_account_repr_names_the_connection() -> None:
    assert "ConnectionAccount(7, reading" in repr(ConnectionAccount(7))


def test_must_drain_records_the_holdings_and_applies_both_rules(budget: ConnectionBudget) -> None:
    hog, account = budget.open(1), budget.open(2)
    assert not budget.must_drain(account, 100 * KIB, 0)
    assert budget.must_drain(account, 100 * KIB + 1, 0)
    assert (account.unsent_bytes, budget.held_bytes) == (100 * KIB + 1, 100 * KIB + 1)
    assert not budget.must_drain(hog, 0, 240 * KIB)  # request bytes: never muted
    assert budget.must_drain(account, 20 * KIB, 0)  # over the broker budget and over the reserve
    assert budget.drain_target(account) == 10 * KIB
    assert not budget.must_drain(account, 10 * KIB, 0)


def test_bytes_that_complete_a_request_put_the_connection_to_handling(budget: ConnectionBudget) -> None:
    account = budget.open(1)
    budget.received(account, False, True, 3)
    assert (account.activity, budget.held_bytes) == (Activity.READING, 3)
    budget.received(account, True, False, 40)
    assert (account.activity, budget.held_bytes) == (Activity.HANDLING, 40)


def test_ready_to_read_puts_the_connection_to_reading_unless_it_must_drain(budget: ConnectionBudget) -> None:
    account = budget.open(1)
    budget.received(account, True, False, 8)
    assert not budget.ready_to_read(account, 100 * KIB + 1, 0)
    assert account.activity is Activity.HANDLING
    budget.mute(account)
    assert budget.ready_to_read(account, 40 * KIB, 0)
    assert (account.activity, budget.muted) == (Activity.READING, 0)
