"""The consumer's one-pass Fetch encoding gives the generated encoder's bytes, and its one-pass
decoding reads what the generated decoder reads (or leaves the answer to it)."""

from __future__ import annotations

from typing import Any, TypeVar

import pytest

from strom.client.connection import Connection
from strom.client.fetch_codec import FastFetchRequest, decode_fetch_response
from strom.protocol.headers import encode_request
from strom.protocol.messages.fetch import FetchRequest, FetchResponse
from tests.unit.client.test_connection import answer, ready_connection

FAST_VERSIONS = range(7, 13)

RequestT = TypeVar("RequestT", bound=FetchRequest)


def _request(cls: type[RequestT], version: int, **fields: Any) -> RequestT:
    def partition(index: int, offset: int) -> FetchRequest.FetchPartition:
        return FetchRequest.FetchPartition(
            partition=index,
            current_leader_epoch=5 if version >= 9 else -1,
            fetch_offset=offset,
            last_fetched_epoch=4 if version >= 12 else -1,
            log_start_offset=-1,
            partition_max_bytes=1 << 20,
        )

    return cls(
        replica_id=-1,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=50 << 20,
        isolation_level=1,
        session_id=0,
        session_epoch=-1,
        topics=[
            FetchRequest.FetchTopic(topic="orders", partitions=[partition(0, 0), partition(7, 1 << 40)]),
            # A name whose compact length takes two varint bytes, and one partition.
            FetchRequest.FetchTopic(topic="t" * 130, partitions=[partition(2, 99)]),
            FetchRequest.FetchTopic(topic="é", partitions=[]),
        ],
        rack_id="rack-b" if version >= 11 else "",
        **fields,
    )


@pytest.mark.parametrize("version", range(4, FetchRequest.MAX_VERSION + 1))
def test_body_is_the_generated_encoders(version: int) -> None:
    fast = _request(FastFetchRequest, version)
    assert b"".join(fast.encode_parts(version)) == _request(FetchRequest, version).encode(version)


@pytest.mark.parametrize(
    "fields",
    [
        {"unknown_tagged_fields": {5: b"\x01\x02"}},
        {"cluster_id": "cluster-1"},
        {"forgotten_topics_data": [FetchRequest.ForgottenTopic(topic="old", partitions=[1, 2])]},
    ],
)
def test_other_shapes_go_through_the_generated_encoder(fields: dict[str, Any]) -> None:
    fast = _request(FastFetchRequest, 12, **fields)
    assert b"".join(fast.encode_parts(12)) == _request(FetchRequest, 12, **fields).encode(12)


def test_tagged_fields_of_a_topic_or_partition_go_through_the_generated_encoder() -> None:
    fast, generic = _request(FastFetchRequest, 12), _request(FetchRequest, 12)
    for request in (fast, generic):
        request.topics[0].partitions[1].unknown_tagged_fields = {9: b"\x07"}
    assert b"".join(fast.encode_parts(12)) == generic.encode(12)
    for request in (fast, generic):
        request.topics[0].partitions[1].unknown_tagged_fields = {}
        request.topics[1].unknown_tagged_fields = {3: b""}
    assert b"".join(fast.encode_parts(12)) == generic.encode(12)


def test_a_field_the_version_lacks_is_refused_as_the_generated_encoder_refuses_it() -> None:
    fast = _request(FastFetchRequest, 12)
    fast.topics[0].partitions[0].last_fetched_epoch = 3  # a v12 field, asked of v11
    with pytest.raises(ValueError, match="last_fetched_epoch"):
        fast.encode_parts(11)


@pytest.mark.parametrize("version", [7, 11, 12])
def test_frame_is_encode_requests(version: int) -> None:
    connection = Connection("consumer-1", 1 << 20)
    connection._next_correlation_id = 41
    frame = connection._frame(_request(FastFetchRequest, version), version, token=None, expect_response=False)
    assert frame == encode_request(
        1, version, 41, "consumer-1", _request(FetchRequest, version).encode(version)
    )


def _answer(version: int, **partition: Any) -> FetchResponse:
    return FetchResponse(
        throttle_time_ms=3,
        error_code=0,
        session_id=0,
        responses=[
            FetchResponse.FetchableTopicResponse(
                topic="orders",
                partitions=[
                    FetchResponse.PartitionData(
                        partition_index=0,
                        high_watermark=1 << 40,
                        last_stable_offset=(1 << 40) - 2,
                        log_start_offset=5,
                        aborted_transactions=[
                            FetchResponse.AbortedTransaction(producer_id=7, first_offset=100),
                            FetchResponse.AbortedTransaction(producer_id=8, first_offset=120),
                        ],
                        preferred_read_replica=-1,
                        records=b"\x01" * 300,  # a compact length of two varint bytes
                    ),
                    FetchResponse.PartitionData(
                        partition_index=9,
                        error_code=1,
                        high_watermark=-1,
                        aborted_transactions=None,
                        preferred_read_replica=2 if version >= 11 else -1,
                        records=None,
                        **partition,
                    ),
                    FetchResponse.PartitionData(partition_index=3, aborted_transactions=[], records=b""),
                ],
            ),
            FetchResponse.FetchableTopicResponse(topic="é", partitions=[]),
        ],
    )


@pytest.mark.parametrize("version", FAST_VERSIONS)
def test_answer_reads_as_the_generated_decoder_reads_it(version: int) -> None:
    body = _answer(version).encode(version)
    fast = decode_fetch_response(memoryview(body), version)
    assert fast is not None
    assert fast == FetchResponse.decode(body, version)
    assert fast.responses[0].partitions[1].aborted_transactions is None
    records = fast.responses[0].partitions[0].records
    assert isinstance(records, memoryview) and records == b"\x01" * 300


@pytest.mark.parametrize("version", [4, 6, 13, 16])
def test_versions_outside_the_fast_ones_are_left_to_the_generated_decoder(version: int) -> None:
    assert decode_fetch_response(b"\x00" * 64, version) is None


@pytest.mark.parametrize(
    "partition",
    [
        {"diverging_epoch": FetchResponse.EpochEndOffset(epoch=3, end_offset=40)},
        {"current_leader": FetchResponse.LeaderIdAndEpoch(leader_id=2, leader_epoch=4)},
        {"snapshot_id": FetchResponse.SnapshotId(end_offset=10, epoch=1)},
        {"unknown_tagged_fields": {7: b"\x01"}},
    ],
)
def test_an_answer_with_tagged_fields_is_left_to_the_generated_decoder(partition: dict[str, Any]) -> None:
    assert decode_fetch_response(_answer(12, **partition).encode(12), 12) is None


@pytest.mark.parametrize("version", FAST_VERSIONS)
def test_a_cut_or_padded_answer_is_left_to_the_generated_decoder(version: int) -> None:
    body = _answer(version).encode(version)
    for cut in (1, 5, 40, len(body) - 1):
        assert decode_fetch_response(body[:cut], version) is None
    assert decode_fetch_response(body + b"\x00", version) is None


def test_a_records_size_beyond_the_body_is_left_to_the_generated_decoder() -> None:
    body = bytearray(_answer(11).encode(11))
    at = bytes(body).index(b"\x00\x00\x01\x2c" + b"\x01" * 4)  # the first partition's records size (300)
    body[at : at + 4] = (10_000).to_bytes(4, "big")
    assert decode_fetch_response(bytes(body), 11) is None


def test_the_connection_reads_fetch_answers_in_one_pass_or_the_general_way() -> None:
    connection = ready_connection()
    version = connection.version_for(1)
    for answer_sent in (
        _answer(version),
        _answer(version, current_leader=FetchResponse.LeaderIdAndEpoch(leader_id=1, leader_epoch=2)),
    ):
        frame = connection.send(_request(FastFetchRequest, version), token="t")
        (completion,), _ = connection.receive_data(answer(frame, answer_sent))
        assert completion.response == answer_sent
