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

    @property
    def offsets_retention_ms(self) -> int:
        return self.offsets_retention_minutes * 60_000
