"""The partition log: segments, indexes, recovery, retention, compaction, flushing, idempotent
producer state, and the log manager holding every topic under one data directory.

Pure Python with no asyncio and no sockets: the broker calls it from its event loop and runs
``PartitionLog.flush()`` in a worker thread. See ``log_manager`` for the on-disk layout.
"""

from strom.storage.config import TOPIC_CONFIG_KEYS, ConfigKeyInfo, LogConfig
from strom.storage.errors import (
    ConfigError,
    DuplicateSequenceError,
    InvalidPartitionsError,
    InvalidProducerEpochError,
    InvalidTopicError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
    StorageError,
    TopicExistsError,
    UnknownProducerIdError,
    UnknownTopicError,
)
from strom.storage.log_manager import LogManager, TopicMetadata, validate_topic_name
from strom.storage.partition_log import AppendResult, PartitionLog, ReadResult

__all__ = [
    "TOPIC_CONFIG_KEYS",
    "AppendResult",
    "ConfigError",
    "ConfigKeyInfo",
    "DuplicateSequenceError",
    "InvalidPartitionsError",
    "InvalidProducerEpochError",
    "InvalidTopicError",
    "LogConfig",
    "LogManager",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "PartitionLog",
    "ReadResult",
    "RecordTooLargeError",
    "StorageError",
    "TopicExistsError",
    "TopicMetadata",
    "UnknownProducerIdError",
    "UnknownTopicError",
    "validate_topic_name",
]
