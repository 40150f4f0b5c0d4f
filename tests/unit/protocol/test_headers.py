"""Header versions per API version, and request/response header parsing and framing."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strom.protocol.headers import (
    decode_request_body,
    decode_request_header,
    decode_response_header,
    encode_request,
    encode_response,
    read_request_header,
    request_header_version,
    response_header_version,
)
from strom.protocol.messages.api_versions import ApiVersionsRequest
from strom.protocol.messages.metadata import MetadataRequest
from strom.protocol.primitives import DecodeError


@pytest.mark.parametrize(
    ("api_key", "api_version", "request_version", "response_version"),
    [
        (0, 8, 1, 0),  # Produce v8: not flexible
        (0, 9, 2, 1),  # Produce v9: first flexible
        (18, 2, 1, 0),
        (18, 3, 2, 0),  # ApiVersions responses always use header v0
        (7, 0, 0, 0),  # ControlledShutdown v0 has no client id
        (7, 1, 1, 0),
        (9999, 0, 1, 0),  # unknown API: parse what every client sends
    ],
)
def test_header_versions(api_key: int, api_version: int, request_version: int, response_version: int) -> None:
    assert request_header_version(api_key, api_version) == request_version
    assert response_header_version(api_key, api_version) == response_version


def test_api_versions_v3_request_round_trip() -> None:
    body = ApiVersionsRequest(client_software_name="kcat", client_software_version="1.7").encode(3)
    frame = encode_request(18, 3, 42, "client-1", body)
    (size,) = struct.unpack_from(">i", frame)
    assert size == len(frame) - 4
    header, offset = decode_request_header(frame[4:])
    assert (header.request_api_key, header.request_api_version, header.correlation_id) == (18, 3, 42)
    # The client id keeps its int16 length even in header v2, then come the tagged fields.
    assert frame[4 + 8 : 4 + 8 + 2] == b"\x00\x08"
    assert header.client_id == "client-1"
    assert ApiVersionsRequest.decode(frame[4 + offset :], 3).client_software_name == "kcat"


def test_unknown_api_key_still_parses_as_header_v1() -> None:
    frame = struct.pack(">hhih", 9999, 3, 7, -1) + b"body"
    header, offset = decode_request_header(frame)
    assert (header.request_api_key, header.correlation_id, header.client_id) == (9999, 7, None)
    assert frame[offset:] == b"body"


def test_controlled_shutdown_v0_header_has_no_client_id() -> None:
    frame = struct.pack(">hhi", 7, 0, 5) + b"\x00\x00\x00\x01"
    header, offset = decode_request_header(frame)
    assert offset == 8 and header.correlation_id == 5


def test_truncated_header_raises_decode_error() -> None:
    with pytest.raises(DecodeError):
        decode_request_header(b"\x00\x12")
    with pytest.raises(DecodeError):
        decode_request_header(struct.pack(">hhi", 18, 3, 1) + b"\x00\x05ab")


def test_encode_response_header_versions() -> None:
    assert encode_response(9, 18, 3, b"B") == b"\x00\x00\x00\x05" + b"\x00\x00\x00\x09" + b"B"
    assert encode_response(9, 0, 9, b"B") == b"\x00\x00\x00\x06" + b"\x00\x00\x00\x09" + b"\x00" + b"B"
    header, offset = decode_response_header(encode_response(9, 0, 9, b"B")[4:], 0, 9)
    assert header.correlation_id == 9 and offset == 5


def _metadata_frame(body: bytes) -> bytes:
    return encode_request(3, 12, 9, "rdkafka", body)[4:]


def test_request_body_with_bytes_after_it_decodes_and_counts_them() -> None:
    """Kafka ignores bytes after a complete request body; librdkafka 2.16 sends three."""
    body = MetadataRequest(topics=None, allow_auto_topic_creation=False).encode(12)
    frame = _metadata_frame(body + b"\x01\x00\x00")
    _, body_offset = decode_request_header(frame)
    request, trailing_bytes = decode_request_body(MetadataRequest, frame, body_offset, 12)
    assert request == MetadataRequest(topics=None, allow_auto_topic_creation=False)
    assert trailing_bytes == 3
    _, exact = decode_request_body(MetadataRequest, _metadata_frame(body), body_offset, 12)
    assert exact == 0


def test_request_body_cut_short_still_raises() -> None:
    body = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="abc")]).encode(12)
    frame = _metadata_frame(body[:-2])
    _, body_offset = decode_request_header(frame)
    with pytest.raises(DecodeError):
        decode_request_body(MetadataRequest, frame, body_offset, 12)


def _read_either(frame: bytes) -> object:
    """What decode_request_header makes of a frame, in read_request_header's terms (or the error)."""
    try:
        header, offset = decode_request_header(frame)
    except DecodeError as error:
        return ("error", str(error))
    return (
        header.request_api_key,
        header.request_api_version,
        header.correlation_id,
        header.client_id,
        offset,
    )


def _read_fast(frame: bytes) -> object:
    try:
        return read_request_header(frame)
    except DecodeError as error:
        return ("error", str(error))


_HEADER_STARTS = st.tuples(
    st.sampled_from([0, 1, 3, 7, 12, 18, 60, 999, -1]),
    st.integers(-2, 20),
    st.integers(-(2**31), 2**31 - 1),
)


@given(start=_HEADER_STARTS, client_id=st.one_of(st.none(), st.text(max_size=8)), tail=st.binary(max_size=6))
def test_read_request_header_answers_as_the_codec_does(
    start: tuple[int, int, int], client_id: str | None, tail: bytes
) -> None:
    api_key, api_version, correlation_id = start
    encoded = (
        b"\xff\xff" if client_id is None else struct.pack(">h", len(client_id.encode())) + client_id.encode()
    )
    frame = struct.pack(">hhi", api_key, api_version, correlation_id) + encoded + tail
    assert _read_fast(frame) == _read_either(frame)


@given(frame=st.binary(max_size=24))
def test_read_request_header_refuses_what_the_codec_refuses(frame: bytes) -> None:
    assert _read_fast(frame) == _read_either(frame)
