"""The producer's one-pass Produce encoding gives the generated encoder's bytes, frame and all."""

from __future__ import annotations

import pytest

from strom.client.connection import Connection
from strom.client.producer.produce_request import FastProduceRequest
from strom.protocol.headers import encode_request
from strom.protocol.messages.produce import ProduceRequest


def _request(cls: type[ProduceRequest], transactional_id: str | None) -> ProduceRequest:
    return cls(
        transactional_id=transactional_id,
        acks=-1,
        timeout_ms=30_000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="orders",
                partition_data=[
                    ProduceRequest.PartitionProduceData(index=0, records=b"\x01" * 200),
                    ProduceRequest.PartitionProduceData(index=7, records=None),
                ],
            ),
            ProduceRequest.TopicProduceData(
                name="t" * 130,  # a name whose compact length takes two varint bytes
                partition_data=[ProduceRequest.PartitionProduceData(index=2, records=b"x" * 300)],
            ),
        ],
    )


@pytest.mark.parametrize(
    ("version", "transactional_id"),
    [(version, None) for version in range(ProduceRequest.MAX_VERSION + 1)]
    + [(version, "tx-é") for version in range(3, ProduceRequest.MAX_VERSION + 1)],  # a field from v3
)
def test_body_is_the_generated_encoders(version: int, transactional_id: str | None) -> None:
    fast = _request(FastProduceRequest, transactional_id)
    assert b"".join(fast.encode_parts(version)) == _request(ProduceRequest, transactional_id).encode(version)


def test_unknown_tagged_fields_go_through_the_generated_encoder() -> None:
    fast = _request(FastProduceRequest, None)
    fast.topic_data[0].partition_data[0].unknown_tagged_fields = {5: b"\x01\x02"}
    generic = _request(ProduceRequest, None)
    generic.topic_data[0].partition_data[0].unknown_tagged_fields = {5: b"\x01\x02"}
    assert b"".join(fast.encode_parts(9)) == generic.encode(9)


@pytest.mark.parametrize("client_id", [None, "", "producer-1"])
@pytest.mark.parametrize("version", [3, 8, 9, 11])
def test_frame_is_encode_requests(client_id: str | None, version: int) -> None:
    connection = Connection(client_id, 1 << 20)
    connection._next_correlation_id = 41
    frame = connection._frame(_request(FastProduceRequest, None), version, token=None, expect_response=False)
    expected = encode_request(0, version, 41, client_id, _request(ProduceRequest, None).encode(version))
    assert frame == expected
