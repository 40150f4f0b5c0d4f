"""One exception hierarchy for everything the client raises.

``KafkaError`` carries the protocol ``ErrorCode`` (when the broker sent one) and the broker's
message. Errors of the environment (connection lost, timeout) and of the caller (bad config) are
subclasses too, so ``except KafkaError`` catches everything the client itself raises.
"""

from __future__ import annotations

from strom.protocol.errors import ErrorCode

__all__ = [
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
    "ProtocolError",
    "TopicAlreadyExistsError",
    "UnknownTopicOrPartitionError",
    "UnsupportedVersionError",
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


def error_for_code(code: int, message: str | None = None, context: str = "") -> BrokerResponseError:
    """The exception for a broker error code: a specific subclass where one exists."""
    try:
        error_code = ErrorCode(code)
    except ValueError:
        error_code = ErrorCode.UNKNOWN_SERVER_ERROR
    text = error_code.name
    if context:
        text = f"{context}: {text}"
    if message:
        text = f"{text}: {message}"
    return _BY_CODE.get(error_code, BrokerResponseError)(text, error_code)
