"""Byte-level mutations of whole request frames, and a prediction of how the broker takes them.

A frame is the 4-byte size prefix, the request header (api key, api version, correlation id,
client id, tagged fields) and the body. Every mutation keeps the size prefix true to the bytes
that follow, except ``bad_size``, which lies about it on purpose. ``classify`` predicts with
strom's own decoders whether the broker will answer the frame or close the connection, so the
campaign can put the one frame that closes a connection last in its batch.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable
from enum import Enum

from strom.broker import handlers
from strom.broker.registry import HANDLERS
from strom.protocol.headers import decode_request_body, decode_request_header
from strom.protocol.primitives import DecodeError

SIZE = struct.Struct(">i")
HEADER_KEY_VERSION = struct.Struct(">hh")
# api key (2) + api version (2) + correlation id (4): mutations leave these alone unless they mean to.
FIXED_HEADER_BYTES = 8
INTERESTING_BYTES = (0x00, 0xFF, 0x7F, 0x80, 0x01, 0xFE)

handlers.register_all()  # the version table classify() judges frames by


def _body(frame: bytes) -> bytearray:
    return bytearray(frame[SIZE.size :])


def _framed(body: bytes | bytearray) -> bytes:
    return SIZE.pack(len(body)) + bytes(body)


def flip_bytes(rng: random.Random, frame: bytes) -> bytes:
    body = _body(frame)
    if len(body) <= FIXED_HEADER_BYTES:
        return frame
    for _ in range(rng.randint(1, 3)):
        body[rng.randrange(FIXED_HEADER_BYTES, len(body))] ^= 1 << rng.randrange(8)
    return _framed(body)


def set_bytes(rng: random.Random, frame: bytes) -> bytes:
    body = _body(frame)
    if len(body) <= FIXED_HEADER_BYTES:
        return frame
    start = rng.randrange(FIXED_HEADER_BYTES, len(body))
    value = rng.choice(INTERESTING_BYTES)
    for position in range(start, min(len(body), start + rng.randint(1, 4))):
        body[position] = value
    return _framed(body)


def truncate(rng: random.Random, frame: bytes) -> bytes:
    body = _body(frame)
    return _framed(body[: rng.randrange(min(4, len(body)), len(body) + 1)])


def append_bytes(rng: random.Random, frame: bytes) -> bytes:
    return _framed(_body(frame) + rng.randbytes(rng.randint(1, 16)))


def insert_bytes(rng: random.Random, frame: bytes) -> bytes:
    body = _body(frame)
    position = rng.randrange(min(FIXED_HEADER_BYTES, len(body)), len(body) + 1)
    body[position:position] = rng.randbytes(rng.randint(1, 8))
    return _framed(body)


def other_version(rng: random.Random, frame: bytes) -> bytes:
    body = _body(frame)
    if len(body) < HEADER_KEY_VERSION.size:
        return frame
    api_key, version = HEADER_KEY_VERSION.unpack_from(body)
    new_version = rng.choice([version - 1, version + 1, rng.randint(-(2**15), 2**15 - 1)])
    HEADER_KEY_VERSION.pack_into(body, 0, api_key, max(-(2**15), min(2**15 - 1, new_version)))
    return _framed(body)


def other_api(rng: random.Random, frame: bytes) -> bytes:
    body = _body(frame)
    if len(body) < HEADER_KEY_VERSION.size:
        return frame
    _, version = HEADER_KEY_VERSION.unpack_from(body)
    api_key = rng.choice([*HANDLERS, rng.randint(-(2**15), 2**15 - 1)])
    HEADER_KEY_VERSION.pack_into(body, 0, api_key, version)
    return _framed(body)


def bad_size(rng: random.Random, frame: bytes) -> bytes:
    """A size prefix that is negative, below the smallest header, or larger than any frame allowed."""
    return SIZE.pack(rng.choice([-1, -(2**31), 0, 3, 2**31 - 1, 200 * 1024 * 1024])) + frame[SIZE.size :]


MUTATIONS: tuple[Callable[[random.Random, bytes], bytes], ...] = (
    flip_bytes,
    flip_bytes,
    flip_bytes,
    set_bytes,
    set_bytes,
    truncate,
    append_bytes,
    insert_bytes,
    other_version,
    other_api,
)


def mutate(rng: random.Random, frame: bytes) -> bytes:
    """One or two mutations of ``frame`` (and, rarely, a lying size prefix)."""
    if rng.random() < 0.005:
        return bad_size(rng, frame)
    for _ in range(1 if rng.random() < 0.8 else 2):
        frame = rng.choice(MUTATIONS)(rng, frame)
    return frame


class Fate(Enum):
    ANSWERED = "answered"  # decodes and is handled (Produce with acks=0 has no answer, still fine)
    CLOSES = "closes"  # the broker will close the connection (or may: unsupported version)


def classify(frame: bytes) -> tuple[Fate, object | None]:
    """Whether the broker will handle ``frame`` or close the connection, and the decoded request."""
    (size,) = SIZE.unpack_from(frame)
    if size != len(frame) - SIZE.size or size < FIXED_HEADER_BYTES:
        return Fate.CLOSES, None
    body = memoryview(frame)[SIZE.size :]
    try:
        header, offset = decode_request_header(body)
    except DecodeError:
        return Fate.CLOSES, None
    handler = HANDLERS.get(header.request_api_key)
    if handler is None or not handler.min_version <= header.request_api_version <= handler.max_version:
        return Fate.CLOSES, None
    try:
        request, _ = decode_request_body(handler.request_type, body, offset, header.request_api_version)
    except DecodeError:
        return Fate.CLOSES, None
    return Fate.ANSWERED, request
