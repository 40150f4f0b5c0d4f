"""The client's one-pass Metadata decoding reads what the generated decoder reads, or leaves the
answer to it: it never accepts bytes the generated decoder refuses, nor reads them differently."""

from __future__ import annotations

import random
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.client.metadata_codec import decode_metadata_response
from strom.protocol.messages.metadata import MetadataRequest, MetadataResponse
from strom.protocol.primitives import DecodeError
from tests.unit.client.test_connection import answer, ready_connection

_Partition = MetadataResponse.MetadataResponsePartition
_Topic = MetadataResponse.MetadataResponseTopic
_Broker = MetadataResponse.MetadataResponseBroker
FAST_VERSIONS = range(9, MetadataResponse.MAX_VERSION + 1)

_node = st.integers(-(2**31), 2**31 - 1)
_partitions = st.builds(
    _Partition,
    error_code=st.integers(-(2**15), 2**15 - 1),
    partition_index=_node,
    leader_id=_node,
    leader_epoch=_node,
    replica_nodes=st.lists(_node, max_size=6),
    isr_nodes=st.lists(_node, max_size=6),
    offline_replicas=st.lists(_node, max_size=3),
)
_topics = st.builds(
    _Topic,
    error_code=st.integers(-(2**15), 2**15 - 1),
    name=st.text(max_size=150),
    topic_id=st.uuids(),
    is_internal=st.booleans(),
    partitions=st.lists(_partitions, max_size=5),
    topic_authorized_operations=_node,
)
_brokers = st.builds(
    _Broker, node_id=_node, host=st.text(max_size=20), port=_node, rack=st.none() | st.text(max_size=10)
)
_responses = st.builds(
    MetadataResponse,
    throttle_time_ms=_node,
    brokers=st.lists(_brokers, max_size=3),
    cluster_id=st.none() | st.text(max_size=30),
    controller_id=_node,
    topics=st.lists(_topics, max_size=4),
    cluster_authorized_operations=_node,
)


def _generated(body: bytes, version: int) -> MetadataResponse | None:
    try:
        return MetadataResponse.decode(body, version)
    except (DecodeError, ValueError):
        return None


def _large(topics: int, partitions: int) -> MetadataResponse:
    """A cluster's answer whose arrays need varints of more than one byte."""
    return MetadataResponse(
        brokers=[_Broker(node_id=node, host=f"broker-{node}", port=9092, rack=None) for node in (1, 2, 3)],
        cluster_id="cluster",
        controller_id=2,
        topics=[
            _Topic(
                name=f"topic-{index:04d}",
                topic_id=uuid.UUID(int=index + 1),
                partitions=[
                    _Partition(
                        partition_index=partition,
                        leader_id=partition % 3 + 1,
                        leader_epoch=4,
                        replica_nodes=[1, 2, 3],
                        isr_nodes=[1, 2],
                        offline_replicas=[3] if partition % 7 == 0 else [],
                    )
                    for partition in range(partitions)
                ],
            )
            for index in range(topics)
        ],
    )


@settings(max_examples=300)
@given(response=_responses, version=st.sampled_from(list(FAST_VERSIONS)))
def test_reads_what_the_generated_decoder_reads(response: MetadataResponse, version: int) -> None:
    if version < 10:
        for topic in response.topics:
            topic.topic_id = uuid.UUID(int=0)  # no field before v10: the decoders' default
    if version > 10:
        response.cluster_authorized_operations = -(2**31)
    body = response.encode(version)
    fast = decode_metadata_response(body, version)
    assert fast is not None
    assert fast == MetadataResponse.decode(body, version)


@pytest.mark.parametrize("version", FAST_VERSIONS)
def test_a_large_cluster(version: int) -> None:
    response = _large(300, 140)  # topic and partition counts past one varint byte
    body = response.encode(version)
    assert decode_metadata_response(body, version) == MetadataResponse.decode(body, version)


def test_null_names_of_topics_asked_for_by_id() -> None:
    response = MetadataResponse(
        topics=[_Topic(error_code=100, name=None, topic_id=uuid.uuid4(), partitions=[])]
    )
    body = response.encode(12)
    assert decode_metadata_response(body, 12) == response


@pytest.mark.parametrize("version", range(9))
def test_older_versions_go_to_the_generated_decoder(version: int) -> None:
    assert decode_metadata_response(_large(2, 2).encode(version), version) is None


def test_tagged_fields_go_to_the_generated_decoder() -> None:
    response = _large(2, 2)
    response.topics[1].partitions[0].unknown_tagged_fields = {7: b"\x01"}
    body = response.encode(12)
    assert decode_metadata_response(body, 12) is None
    assert MetadataResponse.decode(body, 12).topics[1].partitions[0].unknown_tagged_fields == {7: b"\x01"}


def test_a_partition_with_more_than_126_replicas_goes_to_the_generated_decoder() -> None:
    response = _large(1, 1)
    response.topics[0].partitions[0].replica_nodes = list(range(200))
    body = response.encode(12)
    assert decode_metadata_response(body, 12) is None
    assert MetadataResponse.decode(body, 12) == response


@pytest.mark.parametrize("version", FAST_VERSIONS)
def test_never_accepts_what_the_generated_decoder_refuses(version: int) -> None:
    """Every truncation, trailing bytes, and random byte flips: the fast decoder either reads what
    the generated decoder reads or declines."""
    body = _large(3, 4).encode(version)
    candidates = [body[:cut] for cut in range(len(body))] + [body + b"\x00", body + b"\x01\x02\x03"]
    rng = random.Random(version)
    for _ in range(2_000):
        mutated = bytearray(body)
        for _ in range(rng.randint(1, 3)):
            mutated[rng.randrange(len(mutated))] = rng.randrange(256)
        candidates.append(bytes(mutated))
    for candidate in candidates:
        fast = decode_metadata_response(candidate, version)
        if fast is not None:
            assert fast == _generated(candidate, version), candidate.hex()


def test_the_connection_reads_metadata_answers_in_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    def generated_decoder(body: bytes, version: int) -> MetadataResponse:
        raise AssertionError("the generated decoder read the answer")

    monkeypatch.setattr(MetadataResponse, "decode", generated_decoder)
    connection = ready_connection()
    frame = connection.send(MetadataRequest(topics=None), token="metadata")
    assert connection.version_for(MetadataRequest.API_KEY) in FAST_VERSIONS
    response = _large(2, 3)
    completions, _ = connection.receive_data(answer(frame, response))
    monkeypatch.undo()
    assert [completion.response for completion in completions] == [response]
