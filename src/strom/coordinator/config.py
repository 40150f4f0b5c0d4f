"""Coordinator configuration: the group.* and offsets.* broker settings, with Kafka's defaults."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CoordinatorConfig:
    group_initial_rebalance_delay_ms: int = 3000
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    group_max_size: int = 2**31 - 1
    offsets_retention_minutes: int = 10080
    offsets_retention_check_interval_ms: int = 600_000
    offset_metadata_max_bytes: int = 4096
    offsets_topic_num_partitions: int = 50
    # How long a write to a replicated __consumer_offsets partition may wait for its in-sync
    # replicas before the client is told to retry (Kafka's offsets.commit.timeout.ms).
    offsets_commit_timeout_ms: int = 5000
    # The consumer group protocol (KIP-848), with Kafka's names (group.consumer.*) and defaults.
    consumer_group_session_timeout_ms: int = 45_000
    consumer_group_min_session_timeout_ms: int = 45_000
    consumer_group_max_session_timeout_ms: int = 60_000
    consumer_group_heartbeat_interval_ms: int = 5000
    consumer_group_min_heartbeat_interval_ms: int = 5000
    consumer_group_max_heartbeat_interval_ms: int = 15_000
    consumer_group_max_size: int = 2**31 - 1
    # The server assignors members may ask for (group.remote.assignor); the first is the default.
    consumer_group_assignors: tuple[str, ...] = ("uniform", "range")
    # group.coordinator.rebalance.protocols: "classic" and/or "consumer".
    rebalance_protocols: frozenset[str] = frozenset({"classic", "consumer"})
    # group.consumer.migration.policy: disabled | upgrade | downgrade | bidirectional.
    consumer_group_migration_policy: str = "bidirectional"

    @property
    def offsets_retention_ms(self) -> int:
        return self.offsets_retention_minutes * 60_000
