"""The consumer group protocol's broker keys (group.consumer.*, group.coordinator.rebalance.protocols):
Kafka's names and defaults reach the coordinator's config, and settings that contradict each other
stop the broker with a message naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.broker.config import BrokerConfig, BrokerConfigError


def test_kafka_defaults(tmp_path: Path) -> None:
    config = BrokerConfig(data_dir=tmp_path).coordinator_config()
    assert config.consumer_group_session_timeout_ms == 45_000
    assert (config.consumer_group_min_session_timeout_ms, config.consumer_group_max_session_timeout_ms) == (
        45_000,
        60_000,
    )
    assert config.consumer_group_heartbeat_interval_ms == 5000
    assert (
        config.consumer_group_min_heartbeat_interval_ms,
        config.consumer_group_max_heartbeat_interval_ms,
    ) == (5000, 15_000)
    assert config.consumer_group_max_size == 2**31 - 1
    assert config.consumer_group_assignors == ("uniform", "range")
    assert config.rebalance_protocols == frozenset({"classic", "consumer"})
    assert config.consumer_group_migration_policy == "bidirectional"


def test_settings_reach_the_coordinator(tmp_path: Path) -> None:
    config = BrokerConfig(
        data_dir=tmp_path,
        values={
            "group.consumer.session.timeout.ms": "6000",
            "group.consumer.min.session.timeout.ms": "1000",
            "group.consumer.heartbeat.interval.ms": "300",
            "group.consumer.min.heartbeat.interval.ms": "100",
            "group.consumer.max.size": "8",
            # Kafka's class names are understood; the order says which is the default.
            "group.consumer.assignors": "range, org.apache.kafka.coordinator.group.assignor.UniformAssignor",
            "group.coordinator.rebalance.protocols": "CLASSIC",
            "group.consumer.migration.policy": "Upgrade",
        },
    ).coordinator_config()
    assert config.consumer_group_session_timeout_ms == 6000
    assert config.consumer_group_heartbeat_interval_ms == 300
    assert config.consumer_group_max_size == 8
    assert config.consumer_group_assignors == ("range", "uniform")
    assert config.rebalance_protocols == frozenset({"classic"})
    assert config.consumer_group_migration_policy == "upgrade"


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"group.consumer.session.timeout.ms": "1000"}, "group.consumer.session.timeout.ms"),
        ({"group.consumer.heartbeat.interval.ms": "20000"}, "group.consumer.heartbeat.interval.ms"),
        (
            {
                "group.consumer.session.timeout.ms": "5000",
                "group.consumer.min.session.timeout.ms": "1000",
                "group.consumer.heartbeat.interval.ms": "5000",
            },
            "must be below group.consumer.session.timeout.ms",
        ),
        ({"group.consumer.max.size": "0"}, "group.consumer.max.size"),
        ({"group.consumer.assignors": "uniform,sticky"}, "no server-side assignor named sticky"),
        ({"group.consumer.assignors": " , "}, "names no assignor"),
        ({"group.coordinator.rebalance.protocols": "consumer"}, "classic must be enabled"),
        ({"group.coordinator.rebalance.protocols": "classic,share"}, "unknown share"),
        ({"group.consumer.migration.policy": "sometimes"}, "group.consumer.migration.policy"),
    ],
)
def test_contradictions_are_refused_naming_the_key(
    tmp_path: Path, values: dict[str, str], named: str
) -> None:
    with pytest.raises(BrokerConfigError, match=named):
        BrokerConfig(data_dir=tmp_path, values=values).coordinator_config()
