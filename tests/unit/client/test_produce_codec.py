"""The producer's one-pass Produce encoding gives the generated encoder's bytes, frame and all, and
its one-pass decoding reads what the generated decoder reads (or leaves the answer to it)."""

from __future__ import annotations

import pytest

from strom.client.connection import Connection
from strom.client.produce_codec import FastProduceRequest, decode_produce_response
from strom.protocol.headers import encode_request
from strom.protocol.messages.produce import ProduceRequest, ProduceResponse
from tests.unit.client.test_connection import answer, ready_connection


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


def _answer(**partition: object) -> ProduceResponse:
    return ProduceResponse(
        throttle_time_ms=3,
        responses=[
            ProduceResponse.TopicProduceResponse(
                name="orders",
                partition_responses=[
                    ProduceResponse.PartitionProduceResponse(
                        index=0, base_offset=1 << 40, log_append_time_ms=1_700_000_000_000, log_start_offset=5
                    ),
                    ProduceResponse.PartitionProduceResponse(
                        index=9, error_code=6, base_offset=-1, **partition
                    ),
                ],
            ),
            ProduceResponse.TopicProduceResponse(name="é", partition_responses=[]),
        ],
    )


@pytest.mark.parametrize("version", range(3, ProduceResponse.MAX_VERSION + 1))
def test_answer_reads_as_the_generated_decoder_reads_it(version: int) -> None:
    body = _answer().encode(version)
    fast = decode_produce_response(memoryview(body), version)
    assert fast is not None
    assert fast == ProduceResponse.decode(body, version)


@pytest.mark.parametrize(
    ("version", "partition"),
    [
        (8, {"error_message": "not leader"}),
        (9, {"error_message": "not leader"}),
        (8, {"record_errors": [ProduceResponse.BatchIndexAndErrorMessage(batch_index=2)]}),
        (11, {"record_errors": [ProduceResponse.BatchIndexAndErrorMessage(batch_index=2)]}),
        (10, {"current_leader": ProduceResponse.LeaderIdAndEpoch(leader_id=2, leader_epoch=4)}),
        (9, {"unknown_tagged_fields": {7: b"\x01"}}),
    ],
)
def test_an_unusual_answer_is_left_to_the_generated_decoder(
    version: int, partition: dict[str, object]
) -> None:
    assert decode_produce_response(_answer(**partition).encode(version), version) is None


@pytest.mark.parametrize("version", [2, 3, 8, 9, 11])
def test_a_cut_or_padded_answer_is_left_to_the_generated_decoder(version: int) -> None:
    body = _answer().encode(version)
    assert decode_produce_response(body[:-1], version) is None
    assert decode_produce_response(body + b"\x00", version) is None


def test_the_connection_reads_produce_answers_in_one_pass_or_the_general_way() -> None:
    connection = ready_connection()
    for answer_sent in (_answer(), _answer(error_message="not leader")):
        frame = connection.send(_request(FastProduceRequest, None), token="t")
        (completion,), _ = connection.receive_data(answer(frame, answer_sent))
        assert completion.response == answer_sent
