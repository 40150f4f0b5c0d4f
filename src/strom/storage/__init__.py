"""The partition log: segments, indexes, recovery, retention, compaction, flushing, idempotent
producer state, the partition side of transactions (docs/transactions.md), and the log manager
holding every topic under one data directory.

Pure Python with no asyncio and no sockets: the broker calls it from its event loop, runs
``PartitionLog.flush()`` in its fsync thread and the file work of admin operations and compaction in
its admin thread. See ``log_manager`` for the on-disk layout and the phases of admin operations,
``open_files`` and ``budget`` for file descriptors, ``lock`` for the data directory's lock.
"""

from strom.storage.config import TOPIC_CONFIG_KEYS, ConfigKeyInfo, LogConfig
from strom.storage.errors import (
    ConfigError,
    DuplicateSequenceError,
    InvalidPartitionsError,
    InvalidProducerEpochError,
    InvalidTopicError,
    InvalidTxnStateError,
    LogFileError,
    OffsetOutOfOrderError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    PartitionBudgetError,
    RecordTooLargeError,
    StorageError,
    TopicExistsError,
    TransactionCoordinatorFencedError,
    UnknownProducerIdError,
    UnknownTopicError,
)
from strom.storage.log_manager import LogManager, TopicMetadata, validate_topic_name
from strom.storage.partition_log import AppendResult, PartitionLog, ProducerView, ReadResult
from strom.storage.segment import AbortedTxn

__all__ = [
    "TOPIC_CONFIG_KEYS",
    "AbortedTxn",
    "AppendResult",
    "ConfigError",
    "ConfigKeyInfo",
    "DuplicateSequenceError",
    "InvalidPartitionsError",
    "InvalidProducerEpochError",
    "InvalidTopicError",
    "InvalidTxnStateError",
    "LogConfig",
    "LogFileError",
    "LogManager",
    "OffsetOutOfOrderError",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "PartitionBudgetError",
    "PartitionLog",
    "ProducerView",
    "ReadResult",
    "RecordTooLargeError",
    "StorageError",
    "TopicExistsError",
    "TopicMetadata",
    "TransactionCoordinatorFencedError",
    "UnknownProducerIdError",
    "UnknownTopicError",
    "validate_topic_name",
]
