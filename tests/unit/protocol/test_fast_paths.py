"""The fast paths give exactly what the generated codecs give, or hand the input back (None).

For every version the broker serves: bodies of the fast shape decode to equal objects (records a
view of the frame, as writable as the frame), with the same count of trailing bytes; bodies of any
other shape (several topics or partitions, tagged fields, long strings and varints), and bodies
cut short or with bytes overwritten, are either decoded equally or handed back, never decoded
differently and never raising. Answers encode to the same bytes, or are handed back.
"""

from __future__ import annotations

import random
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.protocol import fast_paths
from strom.protocol.headers import (
    decode_request_body,
    encode_request,
    encode_response,
    encode_response_buffers,
    read_request_header,
)
from strom.protocol.messages.fetch import FetchRequest, FetchResponse
from strom.protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from strom.protocol.messages.metadata import MetadataResponse
from strom.protocol.messages.produce import ProduceRequest, ProduceResponse
from strom.protocol.primitives import DecodeError, Reader

PRODUCE_VERSIONS = range(3, 12)
HEARTBEAT_VERSIONS = range(0, 5)

int16s = st.integers(min_value=-(2**15), max_value=2**15 - 1)
int32s = st.integers(min_value=-(2**31), max_value=2**31 - 1)
int64s = st.integers(min_value=-(2**63), max_value=2**63 - 1)
# Short and long (past a one-byte compact length), ASCII and not.
names = st.one_of(st.text(max_size=8), st.text(min_size=120, max_size=140), st.sampled_from(["", "ü" * 70]))
tagged = st.dictionaries(st.integers(min_value=0, max_value=300), st.binary(max_size=4), max_size=2)
records_values = st.one_of(
    st.none(),
    st.binary(max_size=200),
    st.integers(min_value=16_380, max_value=16_400).map(bytes),  # a varint of two and of three bytes
)


def _generic_decode(request_type: Any, body: bytes, version: int) -> tuple[Any, int]:
    reader = Reader(bytearray(body))
    return request_type.read(reader, version), reader.remaining


def _assert_same_decoding(fast: Any, request_type: Any, body: bytes, version: int) -> bool:
    """The fast decoder either hands ``body`` back or decodes it as the generated codec does;
    True when it decoded it."""
    frame = bytearray(body)
    decoded = fast(frame, 0, version)
    try:
        expected = _generic_decode(request_type, body, version)
    except DecodeError:
        assert decoded is None, f"the generated codec refuses this body, the fast path gave {decoded}"
        return False
    if decoded is None:
        return False
    assert decoded == expected
    if request_type is ProduceRequest:
        records = decoded[0].topic_data[0].partition_data[0].records
        if records is not None:
            assert isinstance(records, memoryview) and not records.readonly
            assert records.obj is frame  # a view of the frame, not a copy
    return True


@st.composite
def produce_requests(draw: st.DrawFn, one_partition: bool = True) -> ProduceRequest:
    topics = 1 if one_partition else draw(st.integers(min_value=0, max_value=2))
    return ProduceRequest(
        transactional_id=draw(st.one_of(st.none(), names)),
        acks=draw(int16s),
        timeout_ms=draw(int32s),
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=draw(names),
                partition_data=[
                    ProduceRequest.PartitionProduceData(
                        index=draw(int32s),
                        records=draw(records_values),
                        unknown_tagged_fields=draw(tagged) if not one_partition else {},
                    )
                    for _ in range(1 if one_partition else draw(st.integers(min_value=0, max_value=2)))
                ],
                unknown_tagged_fields=draw(tagged) if not one_partition else {},
            )
            for _ in range(topics)
        ],
        unknown_tagged_fields=draw(tagged) if not one_partition else {},
    )


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
@settings(max_examples=150, deadline=None, database=None)
@given(request=produce_requests(), trailing=st.binary(max_size=4))
def test_produce_of_the_fast_shape_decodes_as_the_generated_codec_does(
    version: int, request: ProduceRequest, trailing: bytes
) -> None:
    body = request.encode(version) + trailing
    decoded = _assert_same_decoding(fast_paths.decode_produce, ProduceRequest, body, version)
    name_bytes = len(request.topic_data[0].name.encode())
    transactional_bytes = len((request.transactional_id or "").encode())
    if version < 9 or (name_bytes < 126 and transactional_bytes < 126):
        assert decoded, "a body of the fast shape took the general path"


@pytest.mark.parametrize("version", range(9, 12))
@settings(max_examples=60, deadline=None, database=None)
@given(
    request=produce_requests(),
    level=st.sampled_from(["partition", "topic", "request"]),
    fields=st.dictionaries(
        st.integers(min_value=0, max_value=300), st.binary(max_size=4), min_size=1, max_size=2
    ),
)
def test_produce_with_tagged_fields_is_handed_back(
    version: int, request: ProduceRequest, level: str, fields: dict[int, bytes]
) -> None:
    topic = request.topic_data[0]
    holder: Any = {"partition": topic.partition_data[0], "topic": topic, "request": request}[level]
    holder.unknown_tagged_fields = fields
    body = request.encode(version)
    assert fast_paths.decode_produce(bytearray(body), 0, version) is None
    _assert_same_decoding(fast_paths.decode_produce, ProduceRequest, body, version)


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
@settings(max_examples=100, deadline=None, database=None)
@given(request=produce_requests(one_partition=False))
def test_produce_of_other_shapes_decodes_as_the_generated_codec_does_or_is_handed_back(
    version: int, request: ProduceRequest
) -> None:
    if version < 9:  # tagged fields exist only in flexible versions
        request.unknown_tagged_fields = {}
        for topic in request.topic_data:
            topic.unknown_tagged_fields = {}
            for partition in topic.partition_data:
                partition.unknown_tagged_fields = {}
    _assert_same_decoding(fast_paths.decode_produce, ProduceRequest, request.encode(version), version)


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
@settings(max_examples=150, deadline=None, database=None)
@given(request=produce_requests(), cut=st.integers(min_value=0, max_value=400), noise=st.binary(max_size=6))
def test_produce_cut_short_or_overwritten_is_decoded_equally_or_handed_back(
    version: int, request: ProduceRequest, cut: int, noise: bytes
) -> None:
    valid = request.encode(version)
    position = min(cut, len(valid))
    _assert_same_decoding(fast_paths.decode_produce, ProduceRequest, valid[:position], version)
    overwritten = valid[:position] + noise + valid[position + len(noise) :]
    _assert_same_decoding(fast_paths.decode_produce, ProduceRequest, overwritten, version)


def test_produce_of_a_version_outside_the_fast_paths_is_handed_back() -> None:
    request = ProduceRequest(
        acks=1,
        topic_data=[ProduceRequest.TopicProduceData("t", [ProduceRequest.PartitionProduceData(0, b"")])],
    )
    assert fast_paths.decode_produce(request.encode(2), 0, 2) is None
    assert fast_paths.encode_produce_response(ProduceResponse(), 2) is None


@st.composite
def produce_responses(draw: st.DrawFn) -> ProduceResponse:
    partition = ProduceResponse.PartitionProduceResponse(
        index=draw(int32s),
        error_code=draw(int16s),
        base_offset=draw(int64s),
        log_append_time_ms=draw(int64s),
        log_start_offset=draw(int64s),
    )
    shape = draw(
        st.sampled_from(["fast", "record errors", "message", "leader", "endpoints", "tagged", "two"])
    )
    if shape == "record errors":
        partition.record_errors = [ProduceResponse.BatchIndexAndErrorMessage(1, "bad")]
    elif shape == "message":
        partition.error_message = draw(names)
    elif shape == "leader":
        partition.current_leader = ProduceResponse.LeaderIdAndEpoch(3, 4)
    elif shape == "tagged":
        partition.unknown_tagged_fields = {7: b"x"}
    topic = ProduceResponse.TopicProduceResponse(name=draw(names), partition_responses=[partition])
    response = ProduceResponse(responses=[topic], throttle_time_ms=draw(int32s))
    if shape == "endpoints":
        response.node_endpoints = [ProduceResponse.NodeEndpoint(1, "h", 9092)]
    elif shape == "two":
        response.responses.append(topic)
    return response


def _assert_same_encoding(fast: Any, response: Any, version: int) -> bool:
    encoded = fast(response, version)
    try:
        expected = response.encode(version)
    except ValueError:
        assert encoded is None
        return False
    assert encoded is None or encoded == expected
    return encoded is not None


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
@settings(max_examples=150, deadline=None, database=None)
@given(response=produce_responses())
def test_produce_answers_encode_as_the_generated_codec_does_or_are_handed_back(
    version: int, response: ProduceResponse
) -> None:
    encoded = _assert_same_encoding(fast_paths.encode_produce_response, response, version)
    partition = response.responses[0].partition_responses[0]
    fast_shape = (
        len(response.responses) == 1
        and not response.node_endpoints
        and not partition.record_errors
        and partition.error_message is None
        and partition.current_leader == ProduceResponse.LeaderIdAndEpoch()
        and not partition.unknown_tagged_fields
        and (version < 9 or len(response.responses[0].name.encode()) < 126)
    )
    assert encoded == fast_shape


@st.composite
def heartbeat_requests(draw: st.DrawFn) -> HeartbeatRequest:
    return HeartbeatRequest(
        group_id=draw(names),
        generation_id=draw(int32s),
        member_id=draw(names),
        group_instance_id=draw(st.one_of(st.none(), names)),
        unknown_tagged_fields=draw(st.one_of(st.just({}), tagged)),
    )


@pytest.mark.parametrize("version", HEARTBEAT_VERSIONS)
@settings(max_examples=150, deadline=None, database=None)
@given(
    request=heartbeat_requests(),
    trailing=st.binary(max_size=3),
    cut=st.integers(min_value=0, max_value=300),
    noise=st.binary(max_size=4),
)
def test_heartbeat_decodes_as_the_generated_codec_does_or_is_handed_back(
    version: int, request: HeartbeatRequest, trailing: bytes, cut: int, noise: bytes
) -> None:
    if version < 3:
        request.group_instance_id = None
    if version < 4:
        request.unknown_tagged_fields = {}
    valid = request.encode(version)
    decoded = _assert_same_decoding(fast_paths.decode_heartbeat, HeartbeatRequest, valid + trailing, version)
    strings = [request.group_id, request.member_id, request.group_instance_id or ""]
    if version < 4 or (not request.unknown_tagged_fields and all(len(s.encode()) < 126 for s in strings)):
        assert decoded, "a body of the fast shape took the general path"
    position = min(cut, len(valid))
    _assert_same_decoding(fast_paths.decode_heartbeat, HeartbeatRequest, valid[:position], version)
    overwritten = valid[:position] + noise + valid[position + len(noise) :]
    _assert_same_decoding(fast_paths.decode_heartbeat, HeartbeatRequest, overwritten, version)


@pytest.mark.parametrize("version", HEARTBEAT_VERSIONS)
@settings(max_examples=100, deadline=None, database=None)
@given(
    throttle_time_ms=st.one_of(int32s, st.just(2**31)),
    error_code=int16s,
    unknown=st.one_of(st.just({}), tagged),
)
def test_heartbeat_answers_encode_as_the_generated_codec_does_or_are_handed_back(
    version: int, throttle_time_ms: int, error_code: int, unknown: dict[int, bytes]
) -> None:
    response = HeartbeatResponse(throttle_time_ms=throttle_time_ms, error_code=error_code)
    if version >= 4:
        response.unknown_tagged_fields = unknown
    encoded = _assert_same_encoding(fast_paths.encode_heartbeat_response, response, version)
    assert encoded == (version >= 1 and not response.unknown_tagged_fields and throttle_time_ms < 2**31)


def test_the_broker_codec_takes_the_fast_paths_and_frames_their_answers() -> None:
    """``decode_request_body`` and ``encode_response_buffers`` go through the fast paths and
    frame what they give exactly as the generated codec's bodies are framed."""
    rng = random.Random(17)
    records = bytes(rng.randrange(256) for _ in range(300))
    request = ProduceRequest(
        acks=1,
        timeout_ms=1000,
        topic_data=[ProduceRequest.TopicProduceData("t", [ProduceRequest.PartitionProduceData(2, records)])],
    )
    for version in PRODUCE_VERSIONS:
        frame = bytearray(encode_request(0, version, 5, "client", request.encode(version) + b"\x00\x01")[4:])
        _, _, _, _, body_offset = read_request_header(frame)
        decoded, trailing = decode_request_body(ProduceRequest, frame, body_offset, version)
        assert (decoded, trailing) == (request, 2)
        records_view = decoded.topic_data[0].partition_data[0].records
        assert records_view.obj is frame and not records_view.readonly
        response = ProduceResponse(
            [ProduceResponse.TopicProduceResponse("t", [ProduceResponse.PartitionProduceResponse(2, 0, 7)])]
        )
        assert fast_paths.encode_produce_response(response, version) is not None
        answer = b"".join(encode_response_buffers(5, 0, version, response))
        assert answer == encode_response(5, 0, version, response.encode(version))
    fetch = FetchResponse(
        responses=[
            FetchResponse.FetchableTopicResponse(
                "t", partitions=[FetchResponse.PartitionData(2, records=records * 60)]
            )
        ]
    )
    for version in FETCH_VERSIONS:
        assert fast_paths.encode_fetch_response(fetch, version) is not None
        answer = b"".join(encode_response_buffers(5, 1, version, fetch))
        assert answer == encode_response(5, 1, version, fetch.encode(version))
    heartbeat = HeartbeatResponse(error_code=27)
    for version in HEARTBEAT_VERSIONS:
        answer = b"".join(encode_response_buffers(9, 12, version, heartbeat))
        assert answer == encode_response(9, 12, version, heartbeat.encode(version))


FETCH_VERSIONS = range(12, 18)
uuids = st.uuids()


@st.composite
def fetch_requests(draw: st.DrawFn, one_partition: bool = True) -> FetchRequest:
    def partition() -> FetchRequest.FetchPartition:
        return FetchRequest.FetchPartition(
            partition=draw(int32s),
            current_leader_epoch=draw(int32s),
            fetch_offset=draw(int64s),
            last_fetched_epoch=draw(int32s),
            log_start_offset=draw(int64s),
            partition_max_bytes=draw(int32s),
            unknown_tagged_fields=draw(tagged) if not one_partition else {},
        )

    def topic() -> FetchRequest.FetchTopic:
        count = 1 if one_partition else draw(st.integers(min_value=0, max_value=2))
        return FetchRequest.FetchTopic(
            topic=draw(names),
            topic_id=draw(uuids),
            partitions=[partition() for _ in range(count)],
            unknown_tagged_fields=draw(tagged) if not one_partition else {},
        )

    topics = 1 if one_partition else draw(st.integers(min_value=0, max_value=2))
    forgotten = (
        []
        if one_partition
        else [FetchRequest.ForgottenTopic("f", draw(uuids), [1]) for _ in range(draw(st.integers(0, 1)))]
    )
    return FetchRequest(
        cluster_id=None if one_partition else draw(st.one_of(st.none(), names)),
        replica_id=draw(int32s),
        max_wait_ms=draw(int32s),
        min_bytes=draw(int32s),
        max_bytes=draw(int32s),
        isolation_level=draw(st.integers(min_value=-128, max_value=127)),
        session_id=draw(int32s),
        session_epoch=draw(int32s),
        topics=[topic() for _ in range(topics)],
        forgotten_topics_data=forgotten,
        rack_id=draw(names),
        unknown_tagged_fields=draw(tagged) if not one_partition else {},
    )


def _for_version(request: FetchRequest, version: int) -> FetchRequest:
    """What ``version`` carries of ``request`` (the fields it has; the others at their defaults)."""
    if version > 14:
        request.replica_id = -1
    for topic in request.topics:
        if version <= 12:
            topic.topic_id = FetchRequest.FetchTopic().topic_id
        else:
            topic.topic = ""
    for forgotten in request.forgotten_topics_data:
        if version <= 12:
            forgotten.topic_id = FetchRequest.ForgottenTopic().topic_id
        else:
            forgotten.topic = ""
    return request


@pytest.mark.parametrize("version", FETCH_VERSIONS)
@settings(max_examples=150, deadline=None, database=None)
@given(
    request=fetch_requests(),
    trailing=st.binary(max_size=3),
    cut=st.integers(min_value=0, max_value=200),
    noise=st.binary(max_size=6),
)
def test_fetch_decodes_as_the_generated_codec_does_or_is_handed_back(
    version: int, request: FetchRequest, trailing: bytes, cut: int, noise: bytes
) -> None:
    request = _for_version(request, version)
    valid = request.encode(version)
    decoded = _assert_same_decoding(fast_paths.decode_fetch, FetchRequest, valid + trailing, version)
    short_strings = len(request.rack_id.encode()) < 126 and len(request.topics[0].topic.encode()) < 126
    if short_strings:
        assert decoded, "a body of the fast shape took the general path"
    position = min(cut, len(valid))
    _assert_same_decoding(fast_paths.decode_fetch, FetchRequest, valid[:position], version)
    overwritten = valid[:position] + noise + valid[position + len(noise) :]
    _assert_same_decoding(fast_paths.decode_fetch, FetchRequest, overwritten, version)


@pytest.mark.parametrize("version", FETCH_VERSIONS)
@settings(max_examples=100, deadline=None, database=None)
@given(request=fetch_requests(one_partition=False))
def test_fetch_of_other_shapes_decodes_as_the_generated_codec_does_or_is_handed_back(
    version: int, request: FetchRequest
) -> None:
    request = _for_version(request, version)
    body = request.encode(version)
    decoded = _assert_same_decoding(fast_paths.decode_fetch, FetchRequest, body, version)
    if decoded:
        assert request.cluster_id is None and not request.forgotten_topics_data
        assert len(request.topics) == 1 and len(request.topics[0].partitions) == 1


def test_fetch_of_a_version_outside_the_fast_paths_is_handed_back() -> None:
    request = FetchRequest(topics=[FetchRequest.FetchTopic("t", partitions=[FetchRequest.FetchPartition()])])
    assert fast_paths.decode_fetch(request.encode(11), 0, 11) is None
    assert fast_paths.encode_fetch_response(FetchResponse(), 11) is None


@st.composite
def fetch_responses(draw: st.DrawFn) -> FetchResponse:
    records = draw(
        st.one_of(
            st.none(),
            st.binary(max_size=200),
            st.binary(max_size=200).map(lambda data: memoryview(bytearray(data))),
            st.integers(min_value=16_380, max_value=16_400).map(bytes),
        )
    )
    partition = FetchResponse.PartitionData(
        partition_index=draw(int32s),
        error_code=draw(int16s),
        high_watermark=draw(int64s),
        last_stable_offset=draw(int64s),
        log_start_offset=draw(int64s),
        aborted_transactions=draw(st.sampled_from([None, []])),
        preferred_read_replica=draw(int32s),
        records=records,
    )
    shape = draw(
        st.sampled_from(["fast", "aborted", "diverging", "leader", "snapshot", "endpoints", "tagged", "two"])
    )
    if shape == "aborted":
        partition.aborted_transactions = [FetchResponse.AbortedTransaction(1, 2)]
    elif shape == "diverging":
        partition.diverging_epoch = FetchResponse.EpochEndOffset(1, 2)
    elif shape == "leader":
        partition.current_leader = FetchResponse.LeaderIdAndEpoch(1, 2)
    elif shape == "snapshot":
        partition.snapshot_id = FetchResponse.SnapshotId(1, 2)
    elif shape == "tagged":
        partition.unknown_tagged_fields = {9: b"x"}
    topic = FetchResponse.FetchableTopicResponse(
        topic=draw(names), topic_id=draw(uuids), partitions=[partition]
    )
    response = FetchResponse(
        throttle_time_ms=draw(int32s), error_code=draw(int16s), session_id=draw(int32s), responses=[topic]
    )
    if shape == "endpoints":
        response.node_endpoints = [FetchResponse.NodeEndpoint(1, "h", 9092)]
    elif shape == "two":
        response.responses.append(topic)
    return response


@pytest.mark.parametrize("version", FETCH_VERSIONS)
@settings(max_examples=150, deadline=None, database=None)
@given(response=fetch_responses())
def test_fetch_answers_encode_as_the_generated_codec_does_or_are_handed_back(
    version: int, response: FetchResponse
) -> None:
    buffers = fast_paths.encode_fetch_response(response, version)
    try:
        expected = response.encode(version)
    except ValueError:
        assert buffers is None
        return
    if buffers is not None:
        assert b"".join(buffers) == expected
    partition = response.responses[0].partitions[0]
    fast_shape = (
        len(response.responses) == 1
        and not response.node_endpoints
        and not partition.aborted_transactions
        and partition.diverging_epoch == FetchResponse.EpochEndOffset()
        and partition.current_leader == FetchResponse.LeaderIdAndEpoch()
        and partition.snapshot_id == FetchResponse.SnapshotId()
        and not partition.unknown_tagged_fields
        and (version > 12 or len(response.responses[0].topic.encode()) < 126)
    )
    assert (buffers is not None) == fast_shape
    if buffers is not None and partition.records is not None:
        assert any(buffer is partition.records for buffer in buffers), "records are sent by reference"


# -- Metadata answers ----------------------------------------------------------------------------

METADATA_VERSIONS = range(0, 13)
_MetadataPartition = MetadataResponse.MetadataResponsePartition
_MetadataTopic = MetadataResponse.MetadataResponseTopic
# Any int32 (an out-of-range one included: both encoders refuse it), in lists short and past the
# one-byte compact length.
node_lists = st.one_of(
    st.lists(int32s, max_size=5),
    st.lists(st.integers(min_value=0, max_value=9), min_size=126, max_size=130),
)


@st.composite
def metadata_responses(draw: st.DrawFn) -> MetadataResponse:
    def partition() -> Any:
        return _MetadataPartition(
            error_code=draw(int16s),
            partition_index=draw(int32s),
            leader_id=draw(int32s),
            leader_epoch=draw(st.one_of(int32s, st.just(2**31))),
            replica_nodes=draw(node_lists),
            isr_nodes=draw(st.lists(int32s, max_size=3)),
            offline_replicas=draw(st.lists(int32s, max_size=2)),
            unknown_tagged_fields=draw(st.one_of(st.just({}), tagged)),
        )

    def topic() -> Any:
        return _MetadataTopic(
            error_code=draw(int16s),
            name=draw(st.one_of(names, st.none())),
            topic_id=draw(uuids),
            is_internal=draw(st.booleans()),
            partitions=[partition() for _ in range(draw(st.integers(0, 3)))],
            topic_authorized_operations=draw(int32s),
            unknown_tagged_fields=draw(st.one_of(st.just({}), tagged)),
        )

    return MetadataResponse(
        throttle_time_ms=draw(int32s),
        brokers=[
            MetadataResponse.MetadataResponseBroker(
                node_id=draw(int32s),
                host=draw(names),
                port=draw(int32s),
                rack=draw(st.one_of(names, st.none())),
            )
            for _ in range(draw(st.integers(0, 3)))
        ],
        cluster_id=draw(st.one_of(names, st.none())),
        controller_id=draw(int32s),
        topics=[topic() for _ in range(draw(st.integers(0, 4)))],
        cluster_authorized_operations=draw(int32s),
        unknown_tagged_fields=draw(st.one_of(st.just({}), st.just({}), tagged)),
    )


@pytest.mark.parametrize("version", METADATA_VERSIONS)
@settings(max_examples=150, deadline=None, database=None)
@given(response=metadata_responses())
def test_metadata_answers_encode_as_the_generated_codec_does_or_are_handed_back(
    version: int, response: MetadataResponse
) -> None:
    encoded = _assert_same_encoding(fast_paths.encode_metadata_response, response, version)
    partitions = [partition for topic in response.topics for partition in topic.partitions]
    fast_shape = (
        9 <= version <= 12
        and not response.unknown_tagged_fields
        and not any(topic.unknown_tagged_fields for topic in response.topics)
        and not any(partition.unknown_tagged_fields for partition in partitions)
        and all(len(partition.replica_nodes) < 127 for partition in partitions)
    )
    try:
        response.encode(version)
    except ValueError:
        return  # refused by both (an int out of range, a null name before v12, a field too new)
    assert encoded == fast_shape


def test_a_large_metadata_answer_takes_the_fast_path() -> None:
    response = MetadataResponse(
        brokers=[MetadataResponse.MetadataResponseBroker(node_id=1, host="127.0.0.1", port=9092)],
        cluster_id="cluster",
        controller_id=1,
        topics=[
            _MetadataTopic(
                name=f"topic-{index:04d}",
                topic_id=uuid.UUID(int=index),
                partitions=[
                    _MetadataPartition(
                        partition_index=partition,
                        leader_id=1,
                        leader_epoch=0,
                        replica_nodes=[1],
                        isr_nodes=[1],
                    )
                    for partition in range(20)
                ],
            )
            for index in range(200)  # past one byte of compact length, topics and partitions alike
        ],
    )
    for version in range(9, 13):
        assert fast_paths.encode_metadata_response(response, version) is not None
        answer = b"".join(encode_response_buffers(5, 3, version, response))
        assert answer == encode_response(5, 3, version, response.encode(version))
