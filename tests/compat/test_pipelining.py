"""Requests pipelined on one connection: answered in order, none held back by a later long poll,
and the answers made before a malformed request still delivered before the connection closes."""

from __future__ import annotations

import time

import pytest

from strom.protocol.headers import encode_request
from strom.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from strom.protocol.messages.fetch import FetchRequest, FetchResponse
from strom.protocol.messages.metadata import MetadataRequest, MetadataResponse
from tests.compat.conftest import BrokerProcess
from tests.compat.wire import WireClient

pytestmark = pytest.mark.compat

LONG_POLL_MS = 3000


def _fetch_request(topic: str) -> FetchRequest:
    return FetchRequest(
        max_wait_ms=LONG_POLL_MS,
        min_bytes=1,
        topics=[
            FetchRequest.FetchTopic(
                topic=topic,
                partitions=[
                    FetchRequest.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
                ],
            )
        ],
    )


def _frame(client: WireClient, request: object, version: int) -> tuple[int, bytes]:
    client.correlation_id += 1
    body = request.encode(version)  # type: ignore[attr-defined]
    api_key = request.API_KEY  # type: ignore[attr-defined]
    return client.correlation_id, encode_request(api_key, version, client.correlation_id, "pipelining", body)


def test_an_answer_is_not_held_back_by_a_later_long_poll(shared_broker: BrokerProcess) -> None:
    topic = f"pipelined-{time.monotonic_ns()}"
    with WireClient(shared_broker.port) as client:
        client.round_trip(
            MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]), MetadataResponse, 9
        )
        metadata_id, metadata = _frame(client, MetadataRequest(topics=None), 9)
        fetch_id, fetch = _frame(client, _fetch_request(topic), 12)
        started = time.monotonic()
        client.send_raw(metadata + fetch)  # one write: both requests arrive in one read
        answered = client.read_response(MetadataResponse, 3, 9, metadata_id)
        metadata_seconds = time.monotonic() - started
        assert topic in [t.name for t in answered.topics]
        # The metadata answer came before the long poll ended; the fetch came after, in order.
        assert metadata_seconds < LONG_POLL_MS / 1000 / 2
        fetched = client.read_response(FetchResponse, 1, 12, fetch_id)
        assert fetched.responses[0].partitions[0].error_code == 0
        assert time.monotonic() - started >= LONG_POLL_MS / 1000 * 0.9


def test_answers_before_a_malformed_request_are_delivered_then_the_connection_closes(
    shared_broker: BrokerProcess,
) -> None:
    with WireClient(shared_broker.port) as client:
        first_id, first = _frame(client, ApiVersionsRequest(), 0)
        second_id, second = _frame(client, MetadataRequest(topics=[]), 9)
        malformed = encode_request(3, 9, 99, "pipelining", b"\xff\xff\xff")  # Metadata v9, garbage body
        client.send_raw(first + second + malformed)
        assert client.read_response(ApiVersionsResponse, 18, 0, first_id).error_code == 0
        assert client.read_response(MetadataResponse, 3, 9, second_id).brokers
        assert client.closed_by_peer()
