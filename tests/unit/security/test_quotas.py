"""The quota core: entities, §2.9.3's precedence, windowed rates and throttle times, with a fake clock."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.base.clock import ManualClock
from strom.security.quotas import (
    CONSUMER_BYTE_RATE,
    ENTITY_CLIENT_ID,
    ENTITY_USER,
    MATCH_ANY,
    MATCH_DEFAULT,
    MATCH_EXACT,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    Credit,
    FilterComponent,
    GroupKey,
    QuotaEntity,
    QuotaError,
    QuotaManager,
    QuotaWindow,
    WindowedRate,
    check_filter,
    check_quota_value,
    matches,
)

# The eight levels of §2.9.3, most specific first, for user "alice" with client id "app".
LEVELS = [
    (QuotaEntity.user_client("alice", "app"), ("alice", "app")),
    (QuotaEntity.user_client("alice", None), ("alice", "app")),
    (QuotaEntity.user("alice"), ("alice", "")),
    (QuotaEntity.user_client(None, "app"), ("alice", "app")),
    (QuotaEntity.user_client(None, None), ("alice", "app")),
    (QuotaEntity.user(None), ("alice", "")),
    (QuotaEntity.client("app"), ("", "app")),
    (QuotaEntity.client(None), ("", "app")),
]


@pytest.mark.parametrize("level", range(len(LEVELS)))
def test_the_most_specific_configured_level_wins(level: int) -> None:
    manager = QuotaManager()
    # Every level from this one down is configured; the bound names the level.
    manager.replace_all(
        {
            entity: {PRODUCER_BYTE_RATE: 1000.0 + index}
            for index, (entity, _) in enumerate(LEVELS)
            if index >= level
        }
    )
    resolution = manager.resolve(PRODUCER_BYTE_RATE, "alice", "app")
    assert resolution is not None
    entity, (user, client_id) = LEVELS[level]
    assert resolution.entity == entity
    assert resolution.bound == 1000.0 + level
    assert resolution.key == GroupKey(PRODUCER_BYTE_RATE, user, client_id)


def test_each_quota_type_is_resolved_on_its_own() -> None:
    manager = QuotaManager()
    manager.replace_all(
        {
            QuotaEntity.user("alice"): {PRODUCER_BYTE_RATE: 100.0},
            QuotaEntity.client(None): {CONSUMER_BYTE_RATE: 200.0},
        }
    )
    produce = manager.resolve(PRODUCER_BYTE_RATE, "alice", "app")
    fetch = manager.resolve(CONSUMER_BYTE_RATE, "alice", "app")
    assert produce is not None and produce.entity == QuotaEntity.user("alice")
    assert fetch is not None and fetch.entity == QuotaEntity.client(None)
    assert manager.resolve(REQUEST_PERCENTAGE, "alice", "app") is None
    assert manager.resolve(PRODUCER_BYTE_RATE, "bob", "app") is None
    assert manager.enabled(PRODUCER_BYTE_RATE) and not manager.enabled(REQUEST_PERCENTAGE)


def test_anonymous_is_a_user_like_any_other() -> None:
    manager = QuotaManager()
    manager.replace_all({QuotaEntity.user(None): {PRODUCER_BYTE_RATE: 100.0}})
    resolution = manager.resolve(PRODUCER_BYTE_RATE, "ANONYMOUS", "app")
    assert resolution is not None and resolution.key == GroupKey(PRODUCER_BYTE_RATE, "ANONYMOUS", "")


def test_a_user_quota_is_shared_by_its_client_ids_a_client_default_is_not() -> None:
    clock = ManualClock()
    manager = QuotaManager(QuotaWindow(samples=2, sample_ms=1000))
    manager.replace_all({QuotaEntity.user("alice"): {PRODUCER_BYTE_RATE: 1000.0}})
    assert manager.record(PRODUCER_BYTE_RATE, "alice", "a", 600, clock.monotonic_ms()) == 0
    assert manager.record(PRODUCER_BYTE_RATE, "alice", "b", 600, clock.monotonic_ms()) > 0  # shared
    manager.replace_all({QuotaEntity.client(None): {PRODUCER_BYTE_RATE: 1000.0}})
    assert manager.record(PRODUCER_BYTE_RATE, "alice", "c", 600, clock.monotonic_ms()) == 0
    assert manager.record(PRODUCER_BYTE_RATE, "alice", "d", 600, clock.monotonic_ms()) == 0  # its own


def test_throttle_time_is_how_long_until_the_usage_is_back_within_the_quota() -> None:
    window = QuotaWindow(samples=11, sample_ms=1000)
    credit = Credit(window, 1000.0, 0)
    # A new client has ten samples' worth (10,000 bytes at 1,000 B/s); 20,000 leave it 10,000 in debt.
    assert credit.spend(20_000, 1000.0, 0) == 10_000
    # After those 10 s it is even: 1,000 bytes more cost a second.
    assert credit.spend(1_000, 1000.0, 10_000) == 1_000
    # Credit accrues at the quota, no more than ten samples' worth.
    assert credit.spend(10_000, 1000.0, 1_000_000) == 0
    assert credit.spend(1, 1000.0, 1_000_000) == 1
    # The throttle of one request never exceeds the whole window, and the debt is bounded.
    fresh = Credit(window, 1000.0, 0)
    assert fresh.spend(10**9, 1000.0, 0) == window.throttle_ms_max
    assert fresh.spend(0, 1000.0, 10_000) == 0  # ten samples' worth of debt at most, paid in 10 s


def test_the_windowed_rate_counts_at_least_the_floor_at_most_the_window() -> None:
    rate = WindowedRate(QuotaWindow(samples=11, sample_ms=1000))
    rate.record(20_000, 0)
    assert rate.rate_per_s(0) == 2000.0  # over the 10 s floor
    rate.record(20_000, 10_500)
    assert rate.rate_per_s(10_500) == 40_000 / 10.5
    assert rate.rate_per_s(10_999) == 40_000 / 10.999
    assert rate.rate_per_s(11_000) == 20_000 / 11.0  # the first sample expired; still the whole window


def test_samples_expire_after_the_window() -> None:
    window = QuotaWindow(samples=3, sample_ms=100)
    rate = WindowedRate(window)
    rate.record(300, 0)
    assert rate.rate_per_s(0) == 300 * 1000 / 200
    assert rate.rate_per_s(299) == 300 * 1000 / 299
    assert rate.rate_per_s(300) == 0.0  # the sample begun at 0 is older than 3 samples


def test_groups_idle_for_an_hour_are_forgotten() -> None:
    manager = QuotaManager()
    manager.replace_all({QuotaEntity.client(None): {PRODUCER_BYTE_RATE: 1000.0}})
    for client in range(100):
        manager.record(PRODUCER_BYTE_RATE, "ANONYMOUS", f"c{client}", 1, 0)
    assert len(list(manager.groups())) == 100
    manager.record(PRODUCER_BYTE_RATE, "ANONYMOUS", "late", 1, 3_600_001)
    assert [group.key.client_id for group in manager.groups()] == ["late"]


def test_a_new_bound_applies_to_a_group_and_keeps_its_counts() -> None:
    manager = QuotaManager(QuotaWindow(samples=2, sample_ms=1000))
    entity = QuotaEntity.client("app")
    manager.set_entity(entity, {PRODUCER_BYTE_RATE: 1000.0})
    assert manager.record(PRODUCER_BYTE_RATE, "u", "app", 2000, 0) > 0
    manager.set_entity(entity, {PRODUCER_BYTE_RATE: 10_000.0})
    # The debt (1,000 bytes) is repaid at the new bound: in 100 ms.
    assert manager.record(PRODUCER_BYTE_RATE, "u", "app", 1, 0) == 101
    assert manager.record(PRODUCER_BYTE_RATE, "u", "app", 1, 200) == 0
    (group,) = manager.groups()
    assert group.total == 2002 and group.throttled_total == 2
    manager.set_entity(entity, {})
    assert not manager.any_enabled()
    assert manager.record(PRODUCER_BYTE_RATE, "u", "app", 10**9, 0) == 0


@given(
    quota=st.integers(min_value=10_000, max_value=1_000_000),
    factor=st.floats(min_value=1.5, max_value=5.0),
    request_share=st.floats(min_value=0.02, max_value=1.0),
)
@settings(max_examples=30, deadline=None)
def test_a_client_sending_faster_than_its_quota_is_held_to_it(
    quota: int, factor: float, request_share: float
) -> None:
    """A client that sends at ``factor`` times the quota but obeys each throttle achieves the quota ± 10 %
    once the first window's burst is over. Requests carry up to a second's worth of the quota (one
    larger than the window can hold is throttled at most ``throttle_ms_max``) and are at least 4 ms
    apart, so the fake clock's 1 ms steps do not slow the client."""
    manager = QuotaManager()
    manager.replace_all({QuotaEntity.client("fast"): {PRODUCER_BYTE_RATE: float(quota)}})
    clock = ManualClock()
    request_bytes = max(1, round(quota * request_share))
    gap_ms = max(1, round(request_bytes * 1000 / (quota * factor)))
    sent = 0
    steady_from: tuple[int, int] | None = None
    while clock.monotonic_ms() < 90_000:
        if steady_from is None and clock.monotonic_ms() >= 30_000:
            steady_from = (sent, clock.monotonic_ms())
        throttle_ms = manager.record(
            PRODUCER_BYTE_RATE, "ANONYMOUS", "fast", request_bytes, clock.monotonic_ms()
        )
        sent += request_bytes
        clock.advance(max(gap_ms, throttle_ms))
    assert steady_from is not None
    achieved = (sent - steady_from[0]) * 1000 / (clock.monotonic_ms() - steady_from[1])
    assert quota * 0.9 <= achieved <= quota * 1.1
    (group,) = manager.groups()
    assert group.throttled_total > 0 and group.total == sent


def test_values_are_checked() -> None:
    assert check_quota_value(PRODUCER_BYTE_RATE, 1024) == 1024
    assert check_quota_value(REQUEST_PERCENTAGE, 12.5) == 12.5
    for key, value, message in [
        ("bogus_rate", 1.0, "unknown quota key"),
        ("controller_mutation_rate", 1.0, "not supported"),
        (PRODUCER_BYTE_RATE, -1.0, "positive"),
        (CONSUMER_BYTE_RATE, 0.0, "positive"),
        (CONSUMER_BYTE_RATE, 1.5, "whole number"),
        (REQUEST_PERCENTAGE, float("nan"), "positive"),
    ]:
        with pytest.raises(QuotaError, match=message):
            check_quota_value(key, value)
    with pytest.raises(QuotaError, match="twice"):
        QuotaManager.altered({}, [(PRODUCER_BYTE_RATE, 1.0), (PRODUCER_BYTE_RATE, None)])
    assert QuotaManager.altered({PRODUCER_BYTE_RATE: 5.0}, [(PRODUCER_BYTE_RATE, None)]) == {}


def test_entities_are_checked() -> None:
    with pytest.raises(QuotaError, match="duplicate"):
        QuotaEntity.of([(ENTITY_USER, "a"), (ENTITY_USER, "b")])
    with pytest.raises(QuotaError, match="unknown entity type"):
        QuotaEntity.of([("group", "a")])
    with pytest.raises(QuotaError, match="not supported"):
        QuotaEntity.of([("ip", "127.0.0.1")])
    with pytest.raises(QuotaError, match="at least one"):
        QuotaEntity.of([])
    entity = QuotaEntity.of([(ENTITY_USER, None), (ENTITY_CLIENT_ID, "app")])
    assert entity == QuotaEntity.user_client(None, "app")
    assert entity.path() == "users/<default>/clients/app"


def test_describe_filters_match_exact_default_and_any() -> None:
    alice_app = QuotaEntity.user_client("alice", "app")
    default_user = QuotaEntity.user(None)
    alice = QuotaEntity.user("alice")
    app = QuotaEntity.client("app")
    everyone = [alice_app, default_user, alice, app]

    def found(components: list[FilterComponent], strict: bool = False) -> list[QuotaEntity]:
        return [entity for entity in everyone if matches(entity, check_filter(components), strict)]

    assert found([FilterComponent(ENTITY_USER, MATCH_EXACT, "alice")]) == [alice_app, alice]
    assert found([FilterComponent(ENTITY_USER, MATCH_EXACT, "alice")], strict=True) == [alice]
    assert found([FilterComponent(ENTITY_USER, MATCH_DEFAULT, None)]) == [default_user]
    assert found([FilterComponent(ENTITY_USER, MATCH_ANY, None)]) == [alice_app, alice]
    assert found([FilterComponent(ENTITY_CLIENT_ID, MATCH_ANY, None)], strict=True) == [app]
    assert found([]) == everyone
    assert found([], strict=True) == []
    for bad in (
        [FilterComponent(ENTITY_USER, MATCH_EXACT, None)],
        [FilterComponent(ENTITY_USER, MATCH_DEFAULT, "x")],
        [FilterComponent(ENTITY_USER, 7, None)],
        [FilterComponent(ENTITY_USER, MATCH_ANY, None), FilterComponent(ENTITY_USER, MATCH_ANY, None)],
    ):
        with pytest.raises(QuotaError):
            check_filter(bad)
