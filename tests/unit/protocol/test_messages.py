"""Generated messages: hand-assembled known bytes, refusal of malformed input, and encode rules."""

from __future__ import annotations

import uuid

import pytest

from strom.protocol.api import api_name, request_class, response_class
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from strom.protocol.messages.fetch import FetchRequest
from strom.protocol.messages.metadata import MetadataRequest, MetadataResponse
from strom.protocol.messages.produce import ProduceRequest
from strom.protocol.primitives import DecodeError, UnsupportedVersionError


def test_api_versions_request_v3_known_bytes() -> None:
    body = b"\x06strom" + b"\x041.0" + b"\x00"
    request = ApiVersionsRequest.decode(body, 3)
    assert request.client_software_name == "strom"
    assert request.client_software_version == "1.0"
    assert request.encode(3) == body


def test_metadata_request_v1_null_topics_means_all() -> None:
    request = MetadataRequest.decode(b"\xff\xff\xff\xff", 1)
    assert request.topics is None
    assert MetadataRequest(topics=None).encode(1) == b"\xff\xff\xff\xff"


def test_produce_request_v3_known_bytes() -> None:
    records = b"BATCH"
    body = (
        b"\xff\xff"  # transactional id: null
        + b"\xff\xff"  # acks -1
        + b"\x00\x00\x75\x30"  # timeout 30000 ms
        + b"\x00\x00\x00\x01"  # one topic
        + b"\x00\x01t"
        + b"\x00\x00\x00\x01"  # one partition
        + b"\x00\x00\x00\x02"  # index 2
        + b"\x00\x00\x00\x05"
        + records
    )
    request = ProduceRequest.decode(body, 3)
    assert request.transactional_id is None
    assert (request.acks, request.timeout_ms) == (-1, 30000)
    topic = request.topic_data[0]
    assert topic.name == "t"
    partition = topic.partition_data[0]
    assert partition.index == 2
    assert isinstance(partition.records, memoryview)
    assert bytes(partition.records) == records
    assert request.encode(3) == body


def test_defaults_follow_the_spec() -> None:
    response = ApiVersionsResponse()
    assert response.finalized_features_epoch == -1
    assert response.api_keys == [] and response.api_keys is not ApiVersionsResponse().api_keys
    assert ProduceRequest().transactional_id is None
    assert FetchRequest().replica_id == -1
    assert FetchRequest().topics == []
    assert MetadataResponse.MetadataResponseTopic().topic_id == uuid.UUID(int=0)


def test_class_attributes() -> None:
    assert (ProduceRequest.API_KEY, ProduceRequest.NAME) == (0, "ProduceRequest")
    assert (ProduceRequest.MIN_VERSION, ProduceRequest.MAX_VERSION, ProduceRequest.FLEXIBLE_MIN_VERSION) == (
        0,
        11,
        9,
    )
    assert request_class(18) is ApiVersionsRequest
    assert response_class(18) is ApiVersionsResponse
    assert api_name(3) == "Metadata"
    assert api_name(9999) == "Unknown(9999)"


def test_known_tagged_fields_written_only_when_not_default() -> None:
    assert ApiVersionsResponse().encode(3) == b"\x00\x00" + b"\x01" + b"\x00\x00\x00\x00" + b"\x00"
    with_epoch = ApiVersionsResponse(finalized_features_epoch=5).encode(3)
    assert with_epoch.endswith(b"\x01\x01\x08" + (5).to_bytes(8, "big"))
    assert ApiVersionsResponse.decode(with_epoch, 3).finalized_features_epoch == 5


def test_unknown_tagged_fields_survive_a_round_trip() -> None:
    request = ApiVersionsRequest(
        client_software_name="a", client_software_version="b", unknown_tagged_fields={9: b"x"}
    )
    body = request.encode(3)
    assert body.endswith(b"\x01\x09\x01x")
    assert ApiVersionsRequest.decode(body, 3) == request


def test_fetch_request_tagged_cluster_id() -> None:
    request = FetchRequest(
        cluster_id="cluster", replica_state=FetchRequest.ReplicaState(replica_id=1, replica_epoch=4)
    )
    decoded = FetchRequest.decode(request.encode(15), 15)
    assert decoded.cluster_id == "cluster"
    assert decoded.replica_state.replica_epoch == 4


def test_encoding_a_field_the_version_lacks_raises() -> None:
    with pytest.raises(ValueError, match=r"transactional_id.*version 2"):
        ProduceRequest(transactional_id="tx").encode(2)
    # Ignorable fields are dropped silently, as Kafka does.
    assert ApiVersionsResponse(throttle_time_ms=5).encode(0) == ApiVersionsResponse().encode(0)


def test_non_nullable_none_raises_value_error() -> None:
    with pytest.raises(ValueError, match="not nullable"):
        ProduceRequest(topic_data=[ProduceRequest.TopicProduceData(name=None)]).encode(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not nullable"):
        MetadataRequest(topics=None).encode(0)


def test_integer_out_of_range_raises_value_error() -> None:
    with pytest.raises(ValueError):
        ProduceRequest(acks=70000).encode(3)


def test_unsupported_version_raises() -> None:
    with pytest.raises(UnsupportedVersionError):
        ProduceRequest().encode(12)
    with pytest.raises(UnsupportedVersionError):
        ProduceRequest.decode(b"", -1)
    assert issubclass(UnsupportedVersionError, ValueError)


def test_trailing_bytes_are_refused() -> None:
    body = MetadataRequest(topics=None).encode(1)
    with pytest.raises(DecodeError, match="left over"):
        MetadataRequest.decode(body + b"\x00", 1)


@pytest.mark.parametrize(
    "body",
    [
        b"",  # truncated before anything
        b"\xff\xff\xff\xff\x00\x00",  # truncated after acks
        b"\xff\xff\xff\xff\x00\x00\x75\x30\x7f\xff\xff\xff",  # huge topic count
        b"\xff\xff\xff\xff\x00\x00\x75\x30\xff\xff\xff\xfe",  # negative topic count
        b"\xff\xfe\xff\xff\x00\x00\x75\x30\x00\x00\x00\x00",  # negative transactional id length
        b"\xff\xff\xff\xff\x00\x00\x75\x30\x00\x00\x00\x01\x00\x01t\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x09ab",
    ],
)
def test_malformed_produce_requests_raise_decode_error(body: bytes) -> None:
    with pytest.raises(DecodeError):
        ProduceRequest.decode(body, 3)


def test_error_codes() -> None:
    assert ErrorCode.NONE.value == 0
    assert ErrorCode(3) is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert ErrorCode.UNKNOWN_TOPIC_OR_PARTITION.retriable
    assert ErrorCode.UNKNOWN_TOPIC_OR_PARTITION.invalid_metadata
    assert ErrorCode.NOT_COORDINATOR.retriable and not ErrorCode.NOT_COORDINATOR.invalid_metadata
    assert not ErrorCode.REBALANCE_IN_PROGRESS.retriable
    assert "leader" in ErrorCode.LEADER_NOT_AVAILABLE.describe
    assert [code.value for code in ErrorCode] == list(range(-1, 129))
