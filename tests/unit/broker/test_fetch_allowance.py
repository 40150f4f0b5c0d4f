"""A Fetch answer carries at most what its connection may still buffer (``response_bytes_max``),
whatever the request asks, in whole batches and never less than one (KIP-74)."""

from __future__ import annotations

import pytest

from strom.protocol.headers import decode_response_header, encode_request
from strom.protocol.messages.fetch import FetchRequest, FetchResponse
from tests.unit.broker.conftest import InProcessBroker
from tests.unit.broker.test_dispatch import batch, create_topic, produce

FETCH_VERSION = 12
BATCHES = 4


def fetch_records(broker: InProcessBroker, topic: str, response_bytes_max: int | None) -> bytes:
    request = FetchRequest(
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=64 * 1024 * 1024,
        topics=[
            FetchRequest.FetchTopic(
                topic=topic,
                partitions=[
                    FetchRequest.FetchPartition(
                        partition=0, fetch_offset=0, partition_max_bytes=64 * 1024 * 1024
                    )
                ],
            )
        ],
    )
    frame = encode_request(1, FETCH_VERSION, 7, "tests", request.encode(FETCH_VERSION))
    if response_bytes_max is None:
        answer = broker.loop.run_until_complete(broker.server._dispatch(frame[4:], "test", 1))
    else:
        answer = broker.loop.run_until_complete(
            broker.server._dispatch(frame[4:], "test", 1, response_bytes_max)
        )
    assert answer is not None
    body = b"".join(answer)[4:]
    _, offset = decode_response_header(body, 1, FETCH_VERSION)
    response = FetchResponse.decode(memoryview(body)[offset:], FETCH_VERSION)
    partition = response.responses[0].partitions[0]
    assert partition.error_code == 0
    return bytes(partition.records)


@pytest.mark.parametrize(
    ("allowance_in_batches", "batches_expected"), [(None, BATCHES), (2.5, 2), (1, 1), (0.5, 1), (0, 1)]
)
def test_a_fetch_is_cut_to_the_connection_allowance(
    broker: InProcessBroker, allowance_in_batches: float | None, batches_expected: int
) -> None:
    create_topic(broker, "allowance")
    one_batch = batch([b"x" * 10_000 for _ in range(10)])
    for _ in range(BATCHES):
        assert produce(broker, "allowance", one_batch).error_code == 0
    allowance = None if allowance_in_batches is None else int(allowance_in_batches * len(one_batch))
    records = fetch_records(broker, "allowance", allowance)
    assert len(records) == batches_expected * len(one_batch)
