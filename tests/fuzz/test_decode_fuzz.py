"""Fuzz the request decoders with arbitrary bytes.

INVARIANT: any input either decodes or raises `strom.protocol.primitives.DecodeError` — never any
other exception (no IndexError, struct.error, UnicodeDecodeError, MemoryError, ...). This is what
lets the broker turn every malformed request into one clean "close the connection" decision.
Bytes after a complete request body are accepted (as Kafka does) and counted, never an error.
"""

from __future__ import annotations

import contextlib
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.broker import handlers
from strom.broker.registry import HANDLERS
from strom.protocol.api import request_class
from strom.protocol.headers import decode_request_body, decode_request_header
from strom.protocol.primitives import DecodeError
from tests.fuzz.mutations import mutate
from tests.fuzz.request_factory import RequestFactory

handlers.register_all()
# Every API the broker serves, and a few it does not (varied layouts the codec must survive too).
FUZZED_API_KEYS = tuple(sorted({*HANDLERS, 68}))


def _decode_or_decode_error(cls: type[Any], data: bytes, version: int) -> None:
    with contextlib.suppress(DecodeError):
        cls.decode(data, version)


@pytest.mark.parametrize("api_key", FUZZED_API_KEYS)
@settings(max_examples=150, deadline=None, database=None)
@given(data=st.binary(max_size=64), version_choice=st.integers(min_value=0, max_value=1000))
def test_request_decoders_raise_only_decode_error(api_key: int, data: bytes, version_choice: int) -> None:
    cls = request_class(api_key)
    version = cls.MIN_VERSION + version_choice % (cls.MAX_VERSION - cls.MIN_VERSION + 1)
    _decode_or_decode_error(cls, data, version)


@pytest.mark.parametrize("api_key", FUZZED_API_KEYS)
@settings(max_examples=100, deadline=None, database=None)
@given(prefix_length=st.integers(min_value=0, max_value=200), noise=st.binary(max_size=8), seed=st.data())
def test_mutated_valid_requests_raise_only_decode_error(
    api_key: int, prefix_length: int, noise: bytes, seed: st.DataObject
) -> None:
    """Valid encodings cut short or with bytes overwritten reach deeper into the decoders."""
    cls = request_class(api_key)
    version = seed.draw(st.integers(min_value=cls.MIN_VERSION, max_value=cls.MAX_VERSION))
    valid = cls().encode(version)
    position = min(prefix_length, len(valid))
    mutated = valid[:position] + noise + valid[position + len(noise) :]
    _decode_or_decode_error(cls, mutated, version)
    _decode_or_decode_error(cls, valid[:position], version)


@settings(max_examples=300, deadline=None, database=None)
@given(data=st.binary(max_size=40))
def test_request_header_decoder_raises_only_decode_error(data: bytes) -> None:
    with contextlib.suppress(DecodeError):
        decode_request_header(data)


@settings(max_examples=400, deadline=None, database=None)
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_mutated_request_frames_decode_or_raise_only_decode_error(seed: int) -> None:
    """Whole frames as the broker cuts them: header, then body (trailing bytes allowed)."""
    rng = random.Random(seed)
    api_key = rng.choice(sorted(HANDLERS))
    handler = HANDLERS[api_key]
    version = rng.randint(handler.min_version, handler.max_version)
    frame = mutate(rng, RequestFactory(rng).frame(handler.request_type, version, 1))
    body = frame[4:]
    with contextlib.suppress(DecodeError):
        header, offset = decode_request_header(body)
        target = HANDLERS.get(header.request_api_key)
        if target is not None and target.min_version <= header.request_api_version <= target.max_version:
            _, trailing_bytes = decode_request_body(
                target.request_type, body, offset, header.request_api_version
            )
            assert 0 <= trailing_bytes <= len(body) - offset
