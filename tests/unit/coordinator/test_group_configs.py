"""Group configs (KIP-848) in the coordinator: a group's own session timeout and heartbeat
interval, the broker's where it has none, held to the broker's bounds; and their checks."""

from __future__ import annotations

import pytest

from strom.coordinator.config import CoordinatorConfig
from strom.coordinator.group_configs import (
    HEARTBEAT_INTERVAL,
    SESSION_TIMEOUT,
    GroupConfigError,
    check_group_configs,
)
from strom.coordinator.timers import consumer_session_key
from strom.protocol.errors import ErrorCode
from tests.unit.coordinator.consumer_harness import ConsumerHarness, SimulatedMember

BOUNDS = dict(
    consumer_group_min_session_timeout_ms=5_000,
    consumer_group_max_session_timeout_ms=60_000,
    consumer_group_min_heartbeat_interval_ms=500,
    consumer_group_max_heartbeat_interval_ms=15_000,
)


def test_a_group_gets_its_own_heartbeat_interval_and_session_timeout() -> None:
    harness = ConsumerHarness(**BOUNDS)
    harness.topics.create("t", 1)
    harness.coordinator.set_group_configs("g", {HEARTBEAT_INTERVAL: 2_500, SESSION_TIMEOUT: 30_000})
    answer = harness.heartbeat("g", "m", 0, names=["t"])
    assert (answer.error_code, answer.heartbeat_interval_ms) == (ErrorCode.NONE, 2_500)
    assert harness.timer.due_in_ms(consumer_session_key("g", "m")) == 30_000
    # Another group keeps the broker's (the harness: 1 s and 10 s).
    other = harness.heartbeat("h", "m", 0, names=["t"])
    assert other.heartbeat_interval_ms == 1_000
    assert harness.timer.due_in_ms(consumer_session_key("h", "m")) == 10_000
    # Removed: the broker's again, from the next heartbeat.
    harness.coordinator.set_group_configs("g", {})
    again = harness.heartbeat("g", "m", answer.member_epoch, owned={})
    assert again.heartbeat_interval_ms == 1_000
    assert harness.timer.due_in_ms(consumer_session_key("g", "m")) == 10_000


def test_the_group_session_timeout_is_what_removes_a_silent_member() -> None:
    harness = ConsumerHarness(**BOUNDS)
    topic = harness.topics.create("t", 2)
    harness.coordinator.set_group_configs("g", {SESSION_TIMEOUT: 20_000})
    first, second = SimulatedMember(harness, ["t"]), SimulatedMember(harness, ["t"])
    for _ in range(6):
        first.beat()
        second.beat()
    for _ in range(15):  # 15 s: past the broker's 10 s, within the group's 20 s
        harness.advance(1000)
        second.beat()
    assert harness.heartbeat("g", first.member_id, first.epoch).error_code == ErrorCode.NONE
    for _ in range(21):
        harness.advance(1000)
        second.beat()
    assert second.partitions() == {(topic, 0), (topic, 1)}
    assert (
        harness.heartbeat("g", first.member_id, first.epoch, owned={}).error_code
        == ErrorCode.UNKNOWN_MEMBER_ID
    )


def test_a_kept_value_outside_bounds_that_moved_is_held_to_them() -> None:
    harness = ConsumerHarness(**BOUNDS)
    harness.topics.create("t", 1)
    harness.coordinator.set_group_configs("g", {HEARTBEAT_INTERVAL: 100, SESSION_TIMEOUT: 900_000})
    answer = harness.heartbeat("g", "m", 0, names=["t"])
    assert answer.heartbeat_interval_ms == 500
    assert harness.timer.due_in_ms(consumer_session_key("g", "m")) == 60_000


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({SESSION_TIMEOUT: "4999"}, "at least group.consumer.min.session.timeout.ms (5000)"),
        ({SESSION_TIMEOUT: "60001"}, "at most group.consumer.max.session.timeout.ms (60000)"),
        ({HEARTBEAT_INTERVAL: "499"}, "at least group.consumer.min.heartbeat.interval.ms (500)"),
        ({HEARTBEAT_INTERVAL: "soon"}, "expected int"),
        ({"consumer.session.timeout": "50000"}, "unknown group config"),
        ({"share.record.lock.duration.ms": "30000"}, "no share or streams groups"),
    ],
)
def test_bad_group_configs_are_refused_naming_the_key(values: dict[str, str], message: str) -> None:
    with pytest.raises(
        GroupConfigError, match=message.replace(".", r"\.").replace("(", r"\(").replace(")", r"\)")
    ):
        check_group_configs(values, CoordinatorConfig(**BOUNDS))  # type: ignore[arg-type]


def test_good_group_configs_and_kept_ones_beyond_the_bounds() -> None:
    config = CoordinatorConfig(**BOUNDS)  # type: ignore[arg-type]
    assert check_group_configs({SESSION_TIMEOUT: " 50000 ", HEARTBEAT_INTERVAL: "500"}, config) == {
        SESSION_TIMEOUT: 50_000,
        HEARTBEAT_INTERVAL: 500,
    }
    assert check_group_configs({SESSION_TIMEOUT: "1"}, config, within_bounds=False) == {SESSION_TIMEOUT: 1}
