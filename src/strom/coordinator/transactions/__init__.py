"""The transaction coordinator: transactional ids, their producer ids and epochs, and the
two-phase commit of their transactions through ``__transaction_state`` and markers, pure Python."""

from strom.coordinator.transactions.admin import ListedTransaction, TransactionDescription, TransactionListing
from strom.coordinator.transactions.config import TransactionCoordinatorConfig
from strom.coordinator.transactions.coordinator import (
    AddPartitionsCallback,
    InitProducerIdCallback,
    InitProducerIdResult,
    TransactionCoordinator,
)
from strom.coordinator.transactions.markers import MarkerWriter, PartitionWritten, TransactionMarkers
from strom.coordinator.transactions.metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TopicPartition,
    TransactionMetadata,
    TransactionSnapshot,
)
from strom.coordinator.transactions.producer_ids import ProducerIdAllocator
from strom.coordinator.transactions.records import (
    TRANSACTION_STATE_TOPIC,
    CorruptTransactionRecord,
    TransactionLogWriter,
    transaction_write_error,
)
from strom.coordinator.transactions.state import (
    ALLOWED_PREVIOUS,
    IllegalTransactionTransition,
    TransactionState,
)

__all__ = [
    "ALLOWED_PREVIOUS",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "TRANSACTION_STATE_TOPIC",
    "AddPartitionsCallback",
    "CorruptTransactionRecord",
    "IllegalTransactionTransition",
    "InitProducerIdCallback",
    "InitProducerIdResult",
    "ListedTransaction",
    "MarkerWriter",
    "PartitionWritten",
    "ProducerIdAllocator",
    "TopicPartition",
    "TransactionCoordinator",
    "TransactionCoordinatorConfig",
    "TransactionDescription",
    "TransactionListing",
    "TransactionLogWriter",
    "TransactionMarkers",
    "TransactionMetadata",
    "TransactionSnapshot",
    "TransactionState",
    "transaction_write_error",
]
