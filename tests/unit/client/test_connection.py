"""The sans-I/O connection driven by bytes: handshake, pipelining, partial frames, errors."""

from __future__ import annotations

import pytest

from strom.client.connection import Completion, Connection
from strom.client.errors import ProtocolError, UnsupportedVersionError
from strom.protocol.errors import ErrorCode
from strom.protocol.headers import decode_request_header, encode_response
from strom.protocol.messages.api_versions import ApiVersionsResponse
from strom.protocol.messages.metadata import MetadataRequest, MetadataResponse

METADATA_KEY = MetadataRequest.API_KEY


def broker_versions(**overrides: tuple[int, int]) -> list[ApiVersionsResponse.ApiVersion]:
    ranges = {18: (0, 3), METADATA_KEY: (0, 12), 0: (3, 11), 1: (4, 17)}
    for name, value in overrides.items():
        ranges[int(name.removeprefix("key"))] = value
    return [
        ApiVersionsResponse.ApiVersion(api_key=key, min_version=low, max_version=high)
        for key, (low, high) in ranges.items()
    ]


def answer(frame: bytes, response: object) -> bytes:
    """What a broker would send back for the request ``frame`` (size prefix included)."""
    header, _ = decode_request_header(frame[4:])
    body = response.encode(header.request_api_version)
    return encode_response(header.correlation_id, header.request_api_key, header.request_api_version, body)


def ready_connection() -> Connection:
    connection = Connection("test", 1 << 20)
    handshake = connection.handshake()
    completions, outgoing = connection.receive_data(
        answer(handshake, ApiVersionsResponse(api_keys=broker_versions()))
    )
    assert completions == [] and outgoing == b""
    assert connection.ready
    return connection


def test_send_before_handshake_is_refused() -> None:
    connection = Connection("test", 1 << 20)
    connection.handshake()
    with pytest.raises(AssertionError):
        connection.send(MetadataRequest(topics=None))


def test_versions_are_the_highest_both_support() -> None:
    connection = ready_connection()
    assert connection.version_for(METADATA_KEY) == 12
    assert connection.version_for(0) == 11
    assert connection.version_for(1) == 12  # capped: the fetcher names topics, not topic ids


def test_no_common_version_is_a_clear_error() -> None:
    connection = Connection("test", 1 << 20)
    handshake = connection.handshake()
    connection.receive_data(answer(handshake, ApiVersionsResponse(api_keys=broker_versions(key0=(0, 2)))))
    with pytest.raises(UnsupportedVersionError, match="Produce"):
        connection.version_for(0)
    assert not connection.supports(0)


def test_api_versions_retried_at_the_version_the_broker_names() -> None:
    connection = Connection("test", 1 << 20)
    handshake = connection.handshake()
    refusal = ApiVersionsResponse(
        error_code=ErrorCode.UNSUPPORTED_VERSION,
        api_keys=[ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=1)],
    )
    header, _ = decode_request_header(handshake[4:])
    frame = encode_response(header.correlation_id, 18, 0, refusal.encode(0))
    completions, retry = connection.receive_data(frame)
    assert completions == [] and retry
    retry_header, _ = decode_request_header(retry[4:])
    assert retry_header.request_api_version == 1
    connection.receive_data(answer(retry, ApiVersionsResponse(api_keys=broker_versions())))
    assert connection.ready


def test_pipelined_responses_match_their_tokens_even_out_of_order_and_split() -> None:
    connection = ready_connection()
    first = connection.send(MetadataRequest(topics=None), token="first")
    second = connection.send(MetadataRequest(topics=None), token="second")
    assert connection.in_flight == 2
    reply_second = answer(second, MetadataResponse(controller_id=2))
    reply_first = answer(first, MetadataResponse(controller_id=1))
    data = reply_second + reply_first
    completions = []
    for index in range(0, len(data), 7):  # the socket delivers a few bytes at a time
        done, _ = connection.receive_data(data[index : index + 7])
        completions.extend(done)
    assert [(c.token, c.response.controller_id) for c in completions] == [("second", 2), ("first", 1)]
    assert connection.in_flight == 0


def test_requests_without_response_are_not_remembered() -> None:
    connection = ready_connection()
    from strom.protocol.messages.produce import ProduceRequest

    connection.send(ProduceRequest(acks=0), token="x", expect_response=False)
    assert connection.in_flight == 0


def test_unknown_correlation_id_breaks_the_connection_and_fails_pending() -> None:
    connection = ready_connection()
    connection.send(MetadataRequest(topics=None), token="pending")
    bogus = encode_response(999, METADATA_KEY, 12, MetadataResponse().encode(12))
    completions, _ = connection.receive_data(bogus)
    assert [c.token for c in completions] == ["pending"]
    assert isinstance(completions[0].error, ProtocolError)
    assert not connection.ready


def test_oversized_frame_is_refused_before_buffering() -> None:
    connection = Connection("test", 1024)
    connection.handshake()
    completions, _ = connection.receive_data((10_000).to_bytes(4, "big"))
    assert completions == []  # the handshake has no token to complete
    assert isinstance(connection.closed_error, ProtocolError)


def test_connection_lost_fails_everything_in_flight() -> None:
    connection = ready_connection()
    connection.send(MetadataRequest(topics=None), token=1)
    connection.send(MetadataRequest(topics=None), token=2)
    error = ProtocolError("gone")
    completions = connection.connection_lost(error)
    assert sorted(c.token for c in completions) == [1, 2]
    assert all(c.error is error for c in completions)
    with pytest.raises(ProtocolError):
        connection.send(MetadataRequest(topics=None))


def read_into(
    connection: Connection, data: bytes, read_max: int, offered: list[int] | None = None
) -> list[Completion]:
    """What the event loop does: each read writes at most ``read_max`` bytes into the connection's
    ``read_buffer()`` and reports them with ``bytes_read``. ``offered`` gets each buffer's size."""
    completions: list[Completion] = []
    while data:
        buffer = connection.read_buffer()
        assert len(buffer) > 0
        if offered is not None:
            offered.append(len(buffer))
        size = min(len(buffer), read_max, len(data))
        buffer[:size] = data[:size]
        data = data[size:]
        done, _ = connection.bytes_read(size)
        completions.extend(done)
    return completions


def test_an_answer_larger_than_the_read_buffer_is_read_straight_into_a_buffer_of_its_own() -> None:
    connection = ready_connection()
    topics = [MetadataResponse.MetadataResponseTopic(name=f"topic-{index:06d}") for index in range(20_000)]
    large = connection.send(MetadataRequest(topics=None), token="large")
    small = connection.send(MetadataRequest(topics=None), token="small")
    reply = answer(large, MetadataResponse(controller_id=1, topics=topics))
    assert len(reply) > 2 * len(connection.read_buffer())  # more than one read buffer's worth
    offered: list[int] = []
    completions = read_into(
        connection, reply + answer(small, MetadataResponse(controller_id=2)), 100_000, offered
    )
    # Once its size prefix is in, the rest of the large answer goes where the reads are asked to
    # write: a buffer as large as what is left of it, not the connection's scratch buffer.
    assert any(length > 256 * 1024 for length in offered)
    assert [(c.token, c.response.controller_id) for c in completions] == [("large", 1), ("small", 2)]
    assert len(completions[0].response.topics) == 20_000
    assert connection.in_flight == 0


def test_answers_read_a_few_bytes_at_a_time_complete_in_order() -> None:
    connection = ready_connection()
    first = connection.send(MetadataRequest(topics=None), token="first")
    second = connection.send(MetadataRequest(topics=None), token="second")
    data = answer(first, MetadataResponse(controller_id=1)) + answer(
        second, MetadataResponse(controller_id=2)
    )
    completions = read_into(connection, data, 5)
    assert [c.token for c in completions] == ["first", "second"]


def test_a_frame_size_below_the_minimum_read_into_the_buffer_breaks_the_connection() -> None:
    connection = ready_connection()
    connection.send(MetadataRequest(topics=None), token="pending")
    completions = read_into(connection, (1).to_bytes(4, "big") + b"\0", 64)
    assert [c.token for c in completions] == ["pending"]
    assert isinstance(connection.closed_error, ProtocolError)
    assert connection.bytes_read(0) == ([], b"")  # a broken connection takes nothing more
