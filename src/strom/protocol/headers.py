"""Request and response headers, and which header version goes with which API version.

A request sent with a flexible version of its API carries request header v2 (tagged fields) and
gets response header v1; otherwise v1 / v0. Two exceptions: ApiVersions responses always use
response header v0 (a client that does not know the broker's versions yet must still be able to
parse the answer), and ControlledShutdown v0 requests use request header v0 (no client id).
The header classes are generated from RequestHeader.json / ResponseHeader.json.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from strom.protocol import fast_paths
from strom.protocol.messages import REQUESTS
from strom.protocol.messages.request_header import RequestHeader
from strom.protocol.messages.response_header import ResponseHeader
from strom.protocol.primitives import Blob, DecodeError, Reader, Writer

__all__ = [
    "RequestHeader",
    "ResponseHeader",
    "decode_request_body",
    "decode_request_header",
    "decode_response_header",
    "encode_request",
    "encode_response",
    "encode_response_buffers",
    "read_request_header",
    "request_header_version",
    "response_header_version",
]

API_VERSIONS_KEY = 18
CONTROLLED_SHUTDOWN_KEY = 7
_SIZE_PREFIX = struct.Struct(">i")
_API_KEY_AND_VERSION = struct.Struct(">hh")


def _is_flexible(api_key: int, api_version: int) -> bool:
    request_class = REQUESTS.get(api_key)
    if request_class is None:
        return False
    flexible_min: int | None = request_class.FLEXIBLE_MIN_VERSION
    return flexible_min is not None and api_version >= flexible_min


def _header_versions() -> dict[tuple[int, int], tuple[int, int]]:
    """(request header version, response header version) of every API version of the specification."""
    table: dict[tuple[int, int], tuple[int, int]] = {}
    for api_key, request_class in REQUESTS.items():
        for api_version in range(request_class.MIN_VERSION, request_class.MAX_VERSION + 1):
            table[api_key, api_version] = (
                _request_header_version(api_key, api_version),
                _response_header_version(api_key, api_version),
            )
    return table


def _request_header_version(api_key: int, api_version: int) -> int:
    if api_key == CONTROLLED_SHUTDOWN_KEY and api_version == 0:
        return 0
    return 2 if _is_flexible(api_key, api_version) else 1


def _response_header_version(api_key: int, api_version: int) -> int:
    if api_key == API_VERSIONS_KEY:
        return 0
    return 1 if _is_flexible(api_key, api_version) else 0


def request_header_version(api_key: int, api_version: int) -> int:
    """The request header version a request of this API version carries (0, 1 or 2)."""
    known = _HEADER_VERSIONS.get((api_key, api_version))
    return known[0] if known is not None else _request_header_version(api_key, api_version)


def response_header_version(api_key: int, api_version: int) -> int:
    """The response header version the answer to such a request carries (0 or 1)."""
    known = _HEADER_VERSIONS.get((api_key, api_version))
    return known[1] if known is not None else _response_header_version(api_key, api_version)


# Looked up once per request: a table of every version the specification has (a fixed size, so a
# peer sending made-up keys and versions cannot grow it), the rule itself for anything else.
_HEADER_VERSIONS = _header_versions()
# The fixed start of request header v1 and v2: api key, api version, correlation id, client id length.
_REQUEST_HEADER_START = struct.Struct(">hhih")
_REQUEST_HEADER_START_BYTES = _REQUEST_HEADER_START.size
_NULL_CLIENT_ID = -1
# The start of an answer frame: its size (patched once known) and the correlation id.
_RESPONSE_START = struct.Struct(">ii")
_NO_TAGGED_FIELDS = b"\x00"
# The commonest small bodies (a one-partition Produce and its answer, Heartbeat) are read and
# written by ``fast_paths`` when they have its shape, by the generated codec otherwise.
_FAST_DECODERS = fast_paths.DECODERS
_FAST_ENCODERS = fast_paths.ENCODERS


def read_request_header(frame: bytes | bytearray | memoryview) -> tuple[int, int, int, str | None, int]:
    """What the broker needs of a request header: (api key, api version, correlation id, client id,
    where the body starts). The same answers and errors as ``decode_request_header``, without
    building a header object: the common headers (v1, and v2 without tagged fields) are read in
    one step, anything else by the generated codec."""
    if len(frame) >= _REQUEST_HEADER_START_BYTES:
        api_key, api_version, correlation_id, client_id_bytes = _REQUEST_HEADER_START.unpack_from(frame)
        versions = _HEADER_VERSIONS.get((api_key, api_version))
        header_version = versions[0] if versions is not None else 1 if api_key not in REQUESTS else -1
        if header_version >= 1:
            position = _REQUEST_HEADER_START_BYTES
            client_id: str | None = None
            if client_id_bytes >= 0:
                position += client_id_bytes
                if position <= len(frame):
                    try:
                        client_id = str(frame[_REQUEST_HEADER_START_BYTES:position], "utf-8")
                    except UnicodeDecodeError:
                        position = -1  # the codec says what is wrong
                else:
                    position = -1
            elif client_id_bytes != _NULL_CLIENT_ID:
                position = -1
            if position >= 0:
                if header_version == 1:
                    return api_key, api_version, correlation_id, client_id, position
                if position < len(frame) and frame[position] == 0:  # no tagged fields
                    return api_key, api_version, correlation_id, client_id, position + 1
    header, body_offset = decode_request_header(frame)
    return (
        header.request_api_key,
        header.request_api_version,
        header.correlation_id,
        header.client_id,
        body_offset,
    )


def decode_request_header(frame: bytes | bytearray | memoryview) -> tuple[RequestHeader, int]:
    """Parses the header at the start of a request frame body (no size prefix).

    Returns the header and the offset where the request body starts. The api key and version are
    read first to choose the header version; an api key we do not know is still parsed as header
    v1 so the broker can answer it with UNSUPPORTED_VERSION.
    """
    reader = Reader(frame)
    if reader.remaining < _API_KEY_AND_VERSION.size:
        raise DecodeError(f"request of {reader.remaining} bytes is too short for a header")
    api_key, api_version = _API_KEY_AND_VERSION.unpack_from(reader.raw(_API_KEY_AND_VERSION.size))
    reader.pos = 0
    header = RequestHeader.read(reader, request_header_version(api_key, api_version))
    return header, reader.pos


def decode_request_body(
    request_type: Any, frame: bytes | bytearray | memoryview, body_offset: int, api_version: int
) -> tuple[Any, int]:
    """Decodes the request body that starts at ``body_offset``; returns it and the count of bytes
    left after it.

    Kafka reads the fields a version has and ignores whatever follows them, and clients rely on it:
    librdkafka 2.15/2.16 sends an all-topics Metadata v12 request with three bytes after the body.
    So bytes after a complete body are not an error here (the caller may log them); a body that
    does not decode still raises ``DecodeError``.
    """
    fast = _FAST_DECODERS.get(request_type)
    if fast is not None:
        decoded = fast(frame, body_offset, api_version)
        if decoded is not None:
            return decoded
    reader = Reader(frame, body_offset)
    request = request_type.read(reader, api_version)
    return request, reader.remaining


def decode_response_header(
    frame: bytes | bytearray | memoryview, api_key: int, api_version: int
) -> tuple[ResponseHeader, int]:
    """Parses the header of a response frame body; returns it and where the body starts."""
    reader = Reader(frame)
    header = ResponseHeader.read(reader, response_header_version(api_key, api_version))
    return header, reader.pos


def _framed(writer: Writer) -> bytes:
    return _SIZE_PREFIX.pack(len(writer)) + writer.getvalue()


def encode_response(
    correlation_id: int, api_key: int, api_version: int, body_bytes: bytes | bytearray | memoryview
) -> bytes:
    """A whole response frame: 4-byte size, response header, body."""
    writer = Writer()
    ResponseHeader(correlation_id=correlation_id).write(writer, response_header_version(api_key, api_version))
    writer.raw(body_bytes)
    return _framed(writer)


def encode_response_buffers(correlation_id: int, api_key: int, api_version: int, response: Any) -> list[Blob]:
    """A whole response frame as buffers for ``writelines``: large records fields are passed by
    reference, not copied (the fetch path serves megabytes of batches this way)."""
    # The size is patched below once it is known; response header v1 is v0 and no tagged fields.
    start = _RESPONSE_START.pack(0, correlation_id)
    if response_header_version(api_key, api_version) >= 1:
        start += _NO_TAGGED_FIELDS
    fast = _FAST_ENCODERS.get(type(response))
    if fast is not None:
        body = fast(response, api_version)
        if body is not None:
            frame = bytearray(start)
            if isinstance(body, bytes):
                frame += body
                _SIZE_PREFIX.pack_into(frame, 0, len(frame) - _SIZE_PREFIX.size)
                return [frame]
            frame += body[0]
            framed: list[Blob] = [frame, *body[1:]]
            _SIZE_PREFIX.pack_into(frame, 0, sum(map(len, framed)) - _SIZE_PREFIX.size)
            return framed
    writer = Writer(start)
    response.write(writer, api_version)
    buffers = writer.getbuffers()
    first = buffers[0]
    assert isinstance(first, bytearray) and len(first) >= _SIZE_PREFIX.size
    _SIZE_PREFIX.pack_into(first, 0, len(writer) - _SIZE_PREFIX.size)
    return buffers


def encode_request(
    api_key: int,
    api_version: int,
    correlation_id: int,
    client_id: str | None,
    body: Blob | Sequence[Blob],
) -> bytes:
    """A whole request frame: 4-byte size, request header, body — its bytes, or its pieces in
    order (a Produce request's batches among them), joined once with the header into the frame."""
    writer = Writer()
    header = RequestHeader(
        request_api_key=api_key,
        request_api_version=api_version,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    version = request_header_version(api_key, api_version)
    if version == 0:
        header.client_id = ""
    header.write(writer, version)
    head = writer.getvalue()
    pieces = (body,) if isinstance(body, bytes | bytearray | memoryview) else body
    return b"".join((_SIZE_PREFIX.pack(len(head) + sum(map(len, pieces))), head, *pieces))
