"""FrameDecoder and FrameReceiver: splitting a byte stream into frames, and refusing bad sizes early."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.protocol.framing import FrameDecoder, FrameReceiver, FrameTooLargeError, encode_frame
from strom.protocol.primitives import DecodeError


def test_frames_split_across_feeds() -> None:
    decoder = FrameDecoder(frame_bytes_max=1000)
    stream = encode_frame(b"first-body") + encode_frame(b"second-body")
    frames: list[bytes] = []
    for index in range(len(stream)):
        frames += decoder.feed(stream[index : index + 1])
    assert frames == [b"first-body", b"second-body"]
    assert decoder.buffered_bytes == 0


def test_several_frames_in_one_feed_and_a_partial_tail() -> None:
    decoder = FrameDecoder(frame_bytes_max=1000)
    stream = encode_frame(b"a" * 8) + encode_frame(b"b" * 9) + encode_frame(b"c" * 10)[:6]
    assert decoder.feed(stream) == [b"a" * 8, b"b" * 9]
    assert decoder.buffered_bytes == 6


def test_too_large_frame_refused_before_its_body_arrives() -> None:
    decoder = FrameDecoder(frame_bytes_max=100)
    with pytest.raises(FrameTooLargeError) as raised:
        decoder.feed(b"\x7f\xff\xff\xff")
    assert raised.value.size_bytes == 2**31 - 1
    assert isinstance(raised.value, DecodeError)


@pytest.mark.parametrize("size_bytes", [b"\xff\xff\xff\xff", b"\x00\x00\x00\x00", b"\x00\x00\x00\x07"])
def test_negative_or_too_small_size_raises_decode_error(size_bytes: bytes) -> None:
    with pytest.raises(DecodeError):
        FrameDecoder(frame_bytes_max=100).feed(size_bytes)


def test_many_small_frames_do_not_grow_the_buffer() -> None:
    decoder = FrameDecoder(frame_bytes_max=1000)
    frame = encode_frame(b"x" * 20)
    chunk = frame * 5000 + frame[:3]
    assert len(decoder.feed(chunk)) == 5000
    assert decoder.buffered_bytes == 3
    assert decoder.feed(frame[3:]) == [b"x" * 20]
    assert decoder.buffered_bytes == 0


def test_encode_frame_prefixes_size() -> None:
    assert encode_frame(b"abcdefgh") == b"\x00\x00\x00\x08abcdefgh"


def test_a_large_frame_filling_the_buffer_is_handed_over_writable_and_the_decoder_goes_on() -> None:
    decoder = FrameDecoder(10 * 1024 * 1024)
    body = bytes(range(256)) * 1024  # 256 KiB
    stream = encode_frame(body) + encode_frame(b"small frame")
    frames = []
    for index in range(0, len(stream) - 15, 4096):
        frames += decoder.feed(stream[index : min(index + 4096, len(stream) - 15)])
    assert len(frames) == 1 and bytes(frames[0]) == body
    frame = frames[0]
    frame[0:4] = b"\x00\x00\x00\x00"  # writable: the broker rewrites base offsets in place
    assert decoder.feed(stream[len(stream) - 15 :]) == [b"small frame"]


def test_a_large_frame_with_the_next_ones_behind_it_is_handed_over_without_a_copy() -> None:
    """A read that ends past a large frame (the next request already arriving): the frame is a
    view of the buffer it arrived in, the frames behind it are cut as before, whatever the reads."""
    large = bytes(range(256)) * 512  # 128 KiB
    stream = (
        encode_frame(b"before it") + encode_frame(large) + encode_frame(b"after it") + encode_frame(large)
    )
    for read_bytes in (1000, 65536, len(stream) - 3, len(stream)):
        decoder = FrameDecoder(10 * 1024 * 1024)
        frames = []
        for index in range(0, len(stream), read_bytes):
            frames += decoder.feed(stream[index : index + read_bytes])
        assert [bytes(frame) for frame in frames] == [b"before it", large, b"after it", large]
        assert all(isinstance(frame, memoryview) for frame in (frames[1], frames[3]))
        for frame in frames:
            frame[0:1] = b"\xff"  # each writable, and none shares bytes with another
        assert [bytes(frame[1:]) for frame in frames] == [b"efore it", large[1:], b"fter it", large[1:]]
        assert decoder.buffered_bytes == 0
    # One frame a call: the frames left behind a handed-over one wait in the new buffer.
    decoder = FrameDecoder(10 * 1024 * 1024)
    frames = decoder.feed(stream, 1) + decoder.feed(b"", 1) + decoder.feed(b"", 1) + decoder.feed(b"", 1)
    assert [bytes(frame) for frame in frames] == [b"before it", large, b"after it", large]
    assert decoder.feed(b"", 1) == [] and decoder.buffered_bytes == 0


def test_at_most_frames_max_frames_are_cut_and_the_rest_wait_in_the_buffer() -> None:
    decoder = FrameDecoder(frame_bytes_max=1000)
    bodies = [b"%08d" % index for index in range(7)]
    stream = b"".join(encode_frame(body) for body in bodies)
    assert decoder.feed(stream + encode_frame(b"tail-body")[:5], frames_max=3) == bodies[:3]
    assert decoder.buffered_bytes == 4 * 12 + 5
    assert decoder.feed(b"", frames_max=3) == bodies[3:6]
    assert decoder.feed(b"", frames_max=3) == bodies[6:]
    assert decoder.feed(b"", frames_max=3) == []
    assert decoder.feed(encode_frame(b"tail-body")[5:], frames_max=3) == [b"tail-body"]
    assert decoder.buffered_bytes == 0


def test_a_zero_frames_max_is_a_programming_error() -> None:
    with pytest.raises(AssertionError):
        FrameDecoder().feed(b"", frames_max=0)


def test_running_totals_of_bytes_fed_and_frames_cut() -> None:
    decoder = FrameDecoder(frame_bytes_max=1000)
    stream = encode_frame(b"x" * 10) * 3
    decoder.feed(stream[:20])
    assert (decoder.bytes_total, decoder.frames_total) == (20, 1)
    decoder.feed(stream[20:], frames_max=1)
    decoder.feed(b"")
    assert (decoder.bytes_total, decoder.frames_total) == (len(stream), 3)


def receive(receiver: FrameReceiver, stream: bytes, reads: list[int]) -> list[bytes]:
    """Feed ``stream`` through ``receiver`` as a socket would, in reads of at most the given sizes
    (cycled), each into the buffer the receiver offers."""
    frames: list[bytes] = []
    position = 0
    index = 0
    while position < len(stream):
        target = receiver.buffer()
        assert len(target) > 0
        count = min(len(target), reads[index % len(reads)], len(stream) - position)
        index += 1
        target[:count] = stream[position : position + count]
        position += count
        frames.extend(bytes(frame) for frame in receiver.received(count))
    return frames


@settings(max_examples=200, deadline=None)
@given(
    bodies=st.lists(
        st.one_of(st.binary(min_size=8, max_size=300), st.integers(8, 3000).map(lambda n: b"x" * n)),
        max_size=30,
    ),
    reads=st.lists(st.integers(1, 700), min_size=1, max_size=5),
    scratch=st.integers(16, 1024),
)
def test_the_receiver_cuts_the_frames_the_decoder_cuts_whatever_the_reads(
    bodies: list[bytes], reads: list[int], scratch: int
) -> None:
    stream = b"".join(encode_frame(body) for body in bodies)
    assert receive(FrameReceiver(scratch_bytes=scratch), stream, reads) == bodies


def test_the_receiver_reads_a_large_frame_into_a_buffer_of_its_own() -> None:
    receiver = FrameReceiver(scratch_bytes=64)
    big = bytes(range(256)) * 40
    stream = encode_frame(b"small-frame") + encode_frame(big)
    first = receiver.buffer()
    first[:40] = stream[:40]
    assert [bytes(frame) for frame in receiver.received(40)] == [b"small-frame"]
    rest = receiver.buffer()
    assert len(rest) == len(big) - (40 - 15 - 4), "the rest of the large frame goes straight into it"
    rest[:] = stream[40:]
    [frame] = receiver.received(len(rest))
    assert isinstance(frame, bytearray) and frame == big


def test_the_receiver_refuses_a_frame_over_the_limit_from_its_prefix() -> None:
    receiver = FrameReceiver(frame_bytes_max=100, scratch_bytes=64)
    receiver.buffer()[:4] = (101).to_bytes(4, "big")
    with pytest.raises(FrameTooLargeError):
        receiver.received(4)
