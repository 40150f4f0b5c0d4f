"""Transaction coordinator configuration: the transaction.* broker settings, with Kafka's defaults."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TransactionCoordinatorConfig:
    # Partitions of __transaction_state; a transactional id belongs to
    # abs(hashCode(id)) % this (fixed once the topic exists, as offsets.topic.num.partitions).
    transaction_state_log_num_partitions: int = 50
    # The largest transaction.timeout.ms a producer may ask for (INVALID_TRANSACTION_TIMEOUT above).
    transaction_max_timeout_ms: int = 900_000
    # A transactional id with no transaction open and no update for this long is forgotten.
    transactional_id_expiration_ms: int = 604_800_000
    # How often transactions past their timeout are looked for (and aborted).
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    # How often idle transactional ids are looked for (and expired).
    transaction_remove_expired_transaction_cleanup_interval_ms: int = 3_600_000
    # strom's: how long a transaction waits before writing again a marker that failed with a
    # retriable error, or its Complete record (Kafka's marker sender retries after its
    # retry.backoff.ms, 100 ms by default).
    transaction_marker_retry_backoff_ms: int = 100

    def __post_init__(self) -> None:
        # Settings come from the operator: a bad one is refused with a clear message, not asserted.
        positive = {
            "transaction.state.log.num.partitions": self.transaction_state_log_num_partitions,
            "transaction.max.timeout.ms": self.transaction_max_timeout_ms,
            "transactional.id.expiration.ms": self.transactional_id_expiration_ms,
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": (
                self.transaction_abort_timed_out_transaction_cleanup_interval_ms
            ),
            "transaction.remove.expired.transaction.cleanup.interval.ms": (
                self.transaction_remove_expired_transaction_cleanup_interval_ms
            ),
        }
        for name, value in positive.items():
            if value <= 0:
                raise ValueError(f"{name} must be positive, got {value}")
        if self.transaction_marker_retry_backoff_ms < 0:
            raise ValueError(
                f"the marker retry backoff must not be negative: {self.transaction_marker_retry_backoff_ms}"
            )
