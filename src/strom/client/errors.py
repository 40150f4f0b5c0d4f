"""One exception hierarchy for everything the client raises.

``KafkaError`` carries the protocol ``ErrorCode`` (when the broker sent one) and the broker's
message. Errors of the environment (connection lost, timeout) and of the caller (bad config) are
subclasses too, so ``except KafkaError`` catches everything the client itself raises.
"""

from __future__ import annotations

from strom.protocol.errors import ErrorCode

__all__ = [
    "AuthenticationError",
    "BrokerResponseError",
    "ClientClosedError",
    "CommitFailedError",
    "ConfigError",
    "FencedInstanceIdError",
    "GroupError",
    "KafkaConnectionError",
    "KafkaError",
    "KafkaTimeoutError",
    "MaxPollIntervalExceededError",
    "NoOffsetForPartitionError",
    "ProducerFencedError",
    "ProtocolError",
    "TopicAlreadyExistsError",
    "TransactionAbortableError",
    "TransactionAbortedError",
    "TransactionFatalError",
    "TransactionStateError",
    "UnknownTopicOrPartitionError",
    "UnsupportedVersionError",
    "describe_error_code",
    "error_for_code",
]


class KafkaError(Exception):
    """Base of every client error. ``code`` is the broker's error code, or None for local errors."""

    def __init__(self, message: str, code: ErrorCode | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code

    @property
    def retriable(self) -> bool:
        """Sending the same request again may succeed."""
        return self.code is not None and self.code.retriable


class ConfigError(KafkaError, ValueError):
    """An unknown configuration key or a value of the wrong type or range."""


class KafkaTimeoutError(KafkaError, TimeoutError):
    """An operation did not complete within its timeout."""

    @property
    def retriable(self) -> bool:
        return True


class KafkaConnectionError(KafkaError, ConnectionError):
    """A broker could not be reached, or the connection broke with requests in flight."""

    @property
    def retriable(self) -> bool:
        return True


class AuthenticationError(KafkaError):
    """The broker refused this client's credentials (SASL), or the TLS handshake failed (an
    untrusted or mismatched certificate, a TLS client on a plaintext port). Not retriable: the
    same credentials fail again, so the caller hears it at once instead of after a timeout.
    The message is the broker's own where it sent one."""

    @property
    def retriable(self) -> bool:
        return False


class ProtocolError(KafkaError):
    """The broker sent bytes that do not parse as the response we expected."""


class ClientClosedError(KafkaError):
    """The client was closed; no more work is accepted."""


class UnsupportedVersionError(KafkaError):
    """The broker supports no version of an API this client needs."""


class NoOffsetForPartitionError(KafkaError):
    """A partition has no position and ``auto.offset.reset`` is ``none``."""


class GroupError(KafkaError):
    """Consumer-group membership failed (see the subclasses and ``code``)."""


class CommitFailedError(GroupError):
    """An offset commit was refused because this member is no longer part of the generation it
    committed for (the group rebalanced); its partitions may belong to another member now."""


class MaxPollIntervalExceededError(GroupError):
    """``poll()`` was not called within ``max.poll.interval.ms``: the member left the group and its
    partitions went to others. The next ``poll()`` rejoins."""


class FencedInstanceIdError(GroupError):
    """Another consumer with the same ``group.instance.id`` joined the group; this one is fenced."""


class TransactionStateError(KafkaError):
    """A transactional call made in a state that does not allow it (``send()`` outside a
    transaction, ``commit_transaction()`` before ``begin_transaction()``, ...). Nothing changed."""


class TransactionAbortableError(KafkaError):
    """The current transaction cannot commit (a record failed, the group refused its offsets):
    call ``abort_transaction()``, then the producer can begin the next one. ``code`` is the cause's."""


class TransactionAbortedError(KafkaError):
    """A record failed because its transaction was aborted before it was sent."""


class TransactionFatalError(KafkaError):
    """The transactional producer cannot go on (fenced, not authorized, a broker too old, an
    answer the protocol does not allow): close it; a new one may ``init_transactions()``."""


class ProducerFencedError(TransactionFatalError):
    """Another producer with the same ``transactional.id`` has started (or the coordinator aborted
    this one's transaction after its timeout and bumped the epoch): this instance is a zombie."""


class BrokerResponseError(KafkaError):
    """The broker answered with an error code."""


class TopicAlreadyExistsError(BrokerResponseError):
    pass


class UnknownTopicOrPartitionError(BrokerResponseError):
    pass


class OffsetOutOfRangeError(BrokerResponseError):
    pass


class InvalidPartitionsError(BrokerResponseError):
    pass


class InvalidConfigError(BrokerResponseError):
    pass


class PolicyViolationError(BrokerResponseError):
    pass


_BY_CODE: dict[ErrorCode, type[BrokerResponseError]] = {
    ErrorCode.TOPIC_ALREADY_EXISTS: TopicAlreadyExistsError,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: UnknownTopicOrPartitionError,
    ErrorCode.OFFSET_OUT_OF_RANGE: OffsetOutOfRangeError,
    ErrorCode.INVALID_PARTITIONS: InvalidPartitionsError,
    ErrorCode.INVALID_CONFIG: InvalidConfigError,
    ErrorCode.POLICY_VIOLATION: PolicyViolationError,
}


# What an error code means, in words, where its name alone says too little. Every other code is
# described by its name in lower case ("LEADER_NOT_AVAILABLE" -> "leader not available").
_WORDS: dict[ErrorCode, str] = {
    ErrorCode.UNKNOWN_SERVER_ERROR: "the broker failed unexpectedly (its log says why)",
    ErrorCode.OFFSET_OUT_OF_RANGE: "the offset is outside the partition's log",
    ErrorCode.CORRUPT_MESSAGE: "a record batch failed its checks (CRC, size or format)",
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "no such topic or partition",
    ErrorCode.NOT_LEADER_OR_FOLLOWER: "this broker does not lead the partition",
    ErrorCode.REQUEST_TIMED_OUT: "the broker timed out on the request",
    ErrorCode.MESSAGE_TOO_LARGE: "a record batch is larger than the broker or topic accepts",
    ErrorCode.NETWORK_EXCEPTION: "the connection closed before the answer came",
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: "the coordinator is still loading",
    ErrorCode.COORDINATOR_NOT_AVAILABLE: "no coordinator is available yet",
    ErrorCode.NOT_COORDINATOR: "this broker is not the coordinator",
    ErrorCode.INVALID_TOPIC_EXCEPTION: "not a valid topic name, or a topic that cannot be used so",
    ErrorCode.RECORD_LIST_TOO_LARGE: "the request's records are larger than the broker accepts",
    ErrorCode.NOT_ENOUGH_REPLICAS: "fewer in-sync replicas than min.insync.replicas",
    ErrorCode.ILLEGAL_GENERATION: "the group has moved on to a newer generation",
    ErrorCode.INCONSISTENT_GROUP_PROTOCOL: "the member's protocols do not match the group's",
    ErrorCode.UNKNOWN_MEMBER_ID: "the group does not know this member",
    ErrorCode.INVALID_SESSION_TIMEOUT: "the session timeout is outside the broker's allowed range",
    ErrorCode.REBALANCE_IN_PROGRESS: "the group is rebalancing",
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: "not authorized for the topic",
    ErrorCode.GROUP_AUTHORIZATION_FAILED: "not authorized for the group",
    ErrorCode.UNSUPPORTED_VERSION: "the broker does not support this request's version",
    ErrorCode.TOPIC_ALREADY_EXISTS: "the topic already exists",
    ErrorCode.INVALID_PARTITIONS: "not a valid number of partitions",
    ErrorCode.INVALID_REPLICATION_FACTOR: "not a valid replication factor",
    ErrorCode.INVALID_CONFIG: "not a valid configuration",
    ErrorCode.INVALID_REQUEST: "the broker refused the request as invalid",
    ErrorCode.POLICY_VIOLATION: "refused by the broker's policy",
    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER: "the producer's sequence numbers are out of order",
    ErrorCode.NON_EMPTY_GROUP: "the group still has members",
    ErrorCode.GROUP_ID_NOT_FOUND: "no such group",
    ErrorCode.FENCED_INSTANCE_ID: "another consumer with the same group.instance.id took over",
    ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC: "the group's members are subscribed to the topic",
    ErrorCode.OFFSET_NOT_AVAILABLE: "the offset is not available yet",
    ErrorCode.INVALID_PRODUCER_EPOCH: "the producer's epoch is not the current one (fenced)",
    ErrorCode.PRODUCER_FENCED: "another producer with the same transactional.id has started",
    ErrorCode.INVALID_TXN_STATE: "the transaction is not in a state that allows this",
    ErrorCode.INVALID_PRODUCER_ID_MAPPING: "the coordinator does not know this producer for the transactional id",
    ErrorCode.INVALID_TRANSACTION_TIMEOUT: "the transaction timeout is above transaction.max.timeout.ms",
    ErrorCode.CONCURRENT_TRANSACTIONS: "the previous transaction of this transactional id is still completing",
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "not authorized for the transactional id",
    ErrorCode.TRANSACTIONAL_ID_NOT_FOUND: "no such transactional id",
    ErrorCode.OPERATION_NOT_ATTEMPTED: "not attempted because another part of the request failed",
}


def describe_error_code(code: ErrorCode) -> str:
    """What ``code`` means, in words."""
    return _WORDS.get(code) or code.name.lower().replace("_", " ")


def error_for_code(code: int, message: str | None = None, context: str = "") -> BrokerResponseError:
    """The exception for a broker error code: a specific subclass where one exists. Its text says
    what failed (``context``), why in words (the broker's message, or what the code means) and the
    code's name: ``delete topic 'x': no such topic or partition (UNKNOWN_TOPIC_OR_PARTITION)``."""
    try:
        error_code = ErrorCode(code)
    except ValueError:
        error_code = ErrorCode.UNKNOWN_SERVER_ERROR
    text = f"{message or describe_error_code(error_code)} ({error_code.name})"
    if context:
        text = f"{context}: {text}"
    return _BY_CODE.get(error_code, BrokerResponseError)(text, error_code)
