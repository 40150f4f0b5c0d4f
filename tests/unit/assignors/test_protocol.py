"""Known bytes for the consumer embedded protocol, assembled by hand from the JSON specs."""

from __future__ import annotations

import struct

import pytest

from strom.assignors.protocol import (
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from strom.protocol.primitives import DecodeError
from tests.unit.assignors import kafka_python as kafka_metadata


def int16(value: int) -> bytes:
    return struct.pack(">h", value)


def int32(value: int) -> bytes:
    return struct.pack(">i", value)


def string(value: str) -> bytes:
    return int16(len(value)) + value.encode()


# Topics ["orders", "pay"], user data 01 02, owned orders-0, orders-2, pay-1, generation 7, rack "r1".
SUBSCRIPTION = Subscription(
    topics=["orders", "pay"],
    user_data=b"\x01\x02",
    owned_partitions=[("orders", 0), ("orders", 2), ("pay", 1)],
    generation_id=7,
    rack_id="r1",
)
TOPICS_AND_USER_DATA = int32(2) + string("orders") + string("pay") + int32(2) + b"\x01\x02"
OWNED = int32(2) + string("orders") + int32(2) + int32(0) + int32(2) + string("pay") + int32(1) + int32(1)
SUBSCRIPTION_BODIES = {
    0: TOPICS_AND_USER_DATA,
    1: TOPICS_AND_USER_DATA + OWNED,
    2: TOPICS_AND_USER_DATA + OWNED + int32(7),
    3: TOPICS_AND_USER_DATA + OWNED + int32(7) + string("r1"),
}


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_subscription_known_bytes_every_version(version: int) -> None:
    expected = int16(version) + SUBSCRIPTION_BODIES[version]
    assert encode_subscription(SUBSCRIPTION, version) == expected
    decoded = decode_subscription(expected)
    assert decoded.topics == ["orders", "pay"]
    assert decoded.user_data == b"\x01\x02"
    assert decoded.owned_partitions == (SUBSCRIPTION.owned_partitions if version >= 1 else [])
    assert decoded.generation_id == (7 if version >= 2 else -1)
    assert decoded.rack_id == ("r1" if version >= 3 else None)


def test_subscription_default_version_is_3() -> None:
    assert encode_subscription(SUBSCRIPTION) == int16(3) + SUBSCRIPTION_BODIES[3]
    assert decode_subscription(encode_subscription(SUBSCRIPTION)) == SUBSCRIPTION


def test_subscription_null_user_data_and_rack() -> None:
    subscription = Subscription(topics=["t"], user_data=None, owned_partitions=[], generation_id=-1)
    expected = int16(3) + int32(1) + string("t") + int32(-1) + int32(0) + int32(-1) + int16(-1)
    assert encode_subscription(subscription) == expected
    assert decode_subscription(expected) == subscription


def test_subscription_higher_version_reads_known_fields_and_ignores_the_rest() -> None:
    future = int16(9) + SUBSCRIPTION_BODIES[3] + int32(12345) + string("a field from the future")
    assert decode_subscription(future) == SUBSCRIPTION


def test_subscription_owned_partitions_grouped_by_topic_in_first_appearance_order() -> None:
    subscription = Subscription(topics=["b", "a"], owned_partitions=[("b", 3), ("a", 1), ("b", 0)])
    body = encode_subscription(subscription, 1)[2:]
    assert body == (
        int32(2)
        + string("b")
        + string("a")
        + int32(-1)
        + int32(2)
        + string("b")
        + int32(2)
        + int32(3)
        + int32(0)
        + string("a")
        + int32(1)
        + int32(1)
    )


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00",
        int16(-1) + SUBSCRIPTION_BODIES[0],
        int16(0) + SUBSCRIPTION_BODIES[0][:-1],
        int16(0) + SUBSCRIPTION_BODIES[0] + b"\x00",
        int16(1) + SUBSCRIPTION_BODIES[0],
    ],
    ids=["empty", "half-prefix", "negative-version", "truncated", "trailing-bytes", "missing-v1-field"],
)
def test_subscription_malformed_raises_decode_error(data: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_subscription(data)


def test_subscription_unknown_version_refused_on_encode() -> None:
    with pytest.raises(ValueError, match="version 4"):
        encode_subscription(SUBSCRIPTION, 4)


ASSIGNMENT = Assignment(partitions=[("orders", 1), ("orders", 0), ("pay", 2)], user_data=b"\xff")
ASSIGNMENT_BODY = (
    int32(2)
    + string("orders")
    + int32(2)
    + int32(1)
    + int32(0)
    + string("pay")
    + int32(1)
    + int32(2)
    + int32(1)
    + b"\xff"
)


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_assignment_known_bytes_every_version(version: int) -> None:
    expected = int16(version) + ASSIGNMENT_BODY
    assert encode_assignment(ASSIGNMENT, version) == expected
    assert decode_assignment(expected) == ASSIGNMENT


def test_assignment_default_version_and_null_user_data() -> None:
    assignment = Assignment(partitions=[("t", 0)], user_data=None)
    expected = int16(3) + int32(1) + string("t") + int32(1) + int32(0) + int32(-1)
    assert encode_assignment(assignment) == expected
    assert decode_assignment(expected) == assignment


def test_assignment_empty_bytes_is_empty_assignment() -> None:
    assert decode_assignment(b"") == Assignment(partitions=[], user_data=None)


def test_assignment_higher_version_ignores_trailing_fields() -> None:
    assert decode_assignment(int16(5) + ASSIGNMENT_BODY + b"\x00\x01\x02") == ASSIGNMENT


@pytest.mark.parametrize(
    "data",
    [
        b"\x00",
        int16(-3) + ASSIGNMENT_BODY,
        int16(0) + ASSIGNMENT_BODY[:-2],
        int16(3) + ASSIGNMENT_BODY + b"\x00",
    ],
    ids=["half-prefix", "negative-version", "truncated", "trailing-bytes"],
)
def test_assignment_malformed_raises_decode_error(data: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_assignment(data)


@pytest.mark.filterwarnings(kafka_metadata.IGNORE_KAFKA_PYTHON_WARNING)
@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_kafka_python_codec_agrees_both_ways(version: int) -> None:
    """kafka-python's independent codec of the same specs reads ours and writes what we read."""
    theirs_subscription = kafka_metadata.ConsumerProtocolSubscription
    ours = encode_subscription(SUBSCRIPTION, version)
    read_by_them = theirs_subscription.decode(ours)
    assert read_by_them.topics == SUBSCRIPTION.topics
    assert read_by_them.user_data == SUBSCRIPTION.user_data
    written_by_them = theirs_subscription(
        topics=SUBSCRIPTION.topics,
        user_data=SUBSCRIPTION.user_data,
        owned_partitions=[
            theirs_subscription.TopicPartition(topic="orders", partitions=[0, 2]),
            theirs_subscription.TopicPartition(topic="pay", partitions=[1]),
        ],
        generation_id=7,
        rack_id="r1",
        version=version,
    ).encode()
    assert written_by_them == ours

    theirs_assignment = kafka_metadata.ConsumerProtocolAssignment
    assert [
        tuple(each) for each in theirs_assignment.decode(encode_assignment(ASSIGNMENT, version)).partitions()
    ] == (ASSIGNMENT.partitions)
    written_assignment = theirs_assignment(
        assigned_partitions=[
            theirs_assignment.TopicPartition(topic="orders", partitions=[1, 0]),
            theirs_assignment.TopicPartition(topic="pay", partitions=[2]),
        ],
        user_data=b"\xff",
        version=version,
    ).encode()
    assert decode_assignment(written_assignment) == ASSIGNMENT
