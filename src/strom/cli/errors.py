"""Client errors turned into one clear line for the person at the terminal: what failed, why in
words, and what to do about it."""

from __future__ import annotations

import argparse

from strom.client.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError
from strom.protocol.errors import ErrorCode

__all__ = ["ADVICE", "describe_kafka_error"]

# What to do next, for the codes a person at the terminal meets.
ADVICE: dict[ErrorCode, str] = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "`strom topics list` shows the topics there are",
    ErrorCode.TOPIC_ALREADY_EXISTS: "choose another name, or `strom topics delete` the old topic first",
    ErrorCode.INVALID_CONFIG: "`strom configs describe ... --all` lists every key and its value",
    ErrorCode.INVALID_PARTITIONS: "a topic's partitions can grow but never shrink",
    ErrorCode.INVALID_REPLICATION_FACTOR: "a replication factor cannot exceed the number of brokers",
    ErrorCode.INVALID_TOPIC_EXCEPTION: "topic names use letters, digits, '.', '_' and '-' (at most 249)",
    ErrorCode.NON_EMPTY_GROUP: "stop the group's consumers first",
    ErrorCode.UNKNOWN_MEMBER_ID: "the group has active members: stop its consumers first",
    ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC: "the group's members still read the topic: stop them first",
    ErrorCode.GROUP_ID_NOT_FOUND: "`strom groups list` shows the groups there are",
    ErrorCode.TRANSACTIONAL_ID_NOT_FOUND: "`strom transactions list` shows the transactional ids there are",
    ErrorCode.OFFSET_OUT_OF_RANGE: "`strom topics describe` shows where each partition's log starts and ends",
    ErrorCode.MESSAGE_TOO_LARGE: "send smaller records, or raise the topic's max.message.bytes "
    "(`strom configs alter --topic T --add-config max.message.bytes=N`)",
    ErrorCode.RECORD_LIST_TOO_LARGE: "send smaller records, or raise the topic's max.message.bytes",
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: "the broker is still starting: try again in a moment",
    ErrorCode.COORDINATOR_NOT_AVAILABLE: "the broker is still starting: try again in a moment",
    ErrorCode.UNSUPPORTED_VERSION: "the broker is too old for this command",
    ErrorCode.POLICY_VIOLATION: "the broker's policy forbids this change",
    ErrorCode.NOT_ENOUGH_REPLICAS: "wait for the replicas to catch up, or lower min.insync.replicas",
    ErrorCode.UNKNOWN_SERVER_ERROR: "the broker's log says what went wrong",
    ErrorCode.SASL_AUTHENTICATION_FAILED: "check sasl.username and sasl.password "
    "(--command-config FILE or -X; docs/security.md)",
}


def describe_kafka_error(error: KafkaError, arguments: argparse.Namespace, elapsed_s: float) -> str:
    """The line after ``strom: error: ``. ``elapsed_s``: how long the command ran before it gave up."""
    bootstrap = getattr(arguments, "bootstrap_server", None)
    timeout_ms = getattr(arguments, "request_timeout_ms", None)
    if isinstance(error, KafkaTimeoutError) and bootstrap:
        knob = f" (--request-timeout-ms {timeout_ms})" if timeout_ms else ""
        return f"no answer from {bootstrap} after {elapsed_s:.1f} s{knob}: {error}"
    if isinstance(error, KafkaConnectionError) and bootstrap:
        return f"cannot reach the cluster at {bootstrap} (after {elapsed_s:.1f} s): {error}"
    text = str(error) or type(error).__name__
    advice = ADVICE.get(error.code) if error.code is not None else None
    return f"{text}; {advice}" if advice else text
