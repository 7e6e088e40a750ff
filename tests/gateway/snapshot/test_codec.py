"""Frames: what goes in comes out, however the stream is cut; what is refused never escapes as
anything but a `FrameError`."""

from __future__ import annotations

import itertools
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.snapshot.codec import (
    HEADER,
    FrameDecoder,
    FrameError,
    control_decoder,
    encode_frame,
    worker_decoder,
)
from gateway.snapshot.messages import Batch, Drain, Hello, Stop
from tests.gateway.snapshot.strategies import control_messages, worker_messages


def cut(stream: bytes, points: list[int]) -> list[bytes]:
    """``stream`` in pieces at ``points`` (any order, repeats allowed: empty pieces too)."""
    bounds = [0, *sorted(p % (len(stream) + 1) for p in points), len(stream)]
    return [stream[a:b] for a, b in itertools.pairwise(bounds)]


def decode_all(decoder: FrameDecoder[Any], pieces: list[bytes]) -> list[object]:
    return [message for piece in pieces for message in decoder.feed(piece)]


@settings(max_examples=80, deadline=None)
@given(st.lists(worker_messages, max_size=6), st.lists(st.integers(0, 10**6), max_size=12))
def test_a_stream_of_worker_messages_decodes_the_same_however_it_is_cut(
    messages: list[object], points: list[int]
) -> None:
    stream = b"".join(encode_frame(m) for m in messages)
    decoder = worker_decoder()
    assert decode_all(decoder, cut(stream, points)) == messages
    assert decoder.buffered == 0


@settings(max_examples=80, deadline=None)
@given(st.lists(control_messages, max_size=6), st.lists(st.integers(0, 10**6), max_size=12))
def test_a_stream_of_control_messages_decodes_the_same_however_it_is_cut(
    messages: list[object], points: list[int]
) -> None:
    stream = b"".join(encode_frame(m) for m in messages)
    assert decode_all(control_decoder(), cut(stream, points)) == messages


def test_a_frame_is_its_length_then_its_payload() -> None:
    frame = bytes(encode_frame(Drain("operator")))
    (size,) = HEADER.unpack_from(frame)
    assert size == len(frame) - HEADER.size
    assert msgspec.msgpack.decode(frame[HEADER.size :]) == {"type": "Drain", "reason": "operator"}


def test_a_frame_over_the_limit_is_refused_from_its_length_alone() -> None:
    decoder = control_decoder(max_frame_bytes=100)
    with pytest.raises(FrameError, match="over 100"):
        list(decoder.feed(HEADER.pack(101)))  # nothing of the frame itself is waited for
    assert decoder.buffered == 0
    with pytest.raises(FrameError, match="already refused"):
        list(decoder.feed(bytes(encode_frame(Stop(1.0)))))


def test_an_unfinished_frame_is_held_and_no_more() -> None:
    frame = bytes(encode_frame(Drain("x" * 50)))
    decoder = control_decoder(max_frame_bytes=len(frame))
    assert list(decoder.feed(frame[:-1])) == []
    assert decoder.buffered == len(frame) - 1
    assert list(decoder.feed(frame[-1:])) == [Drain("x" * 50)]
    assert decoder.buffered == 0


def test_a_message_over_the_limit_is_not_even_sent() -> None:
    with pytest.raises(FrameError, match="Drain of"):
        encode_frame(Drain("x" * 200), max_frame_bytes=100)


def test_the_messages_before_a_refused_frame_are_delivered_first() -> None:
    stream = bytes(encode_frame(Stop(1.0))) + HEADER.pack(3) + b"\xc1\xc1\xc1"
    got = []
    with pytest.raises(FrameError):
        for message in control_decoder().feed(stream):
            got.append(message)
    assert got == [Stop(1.0)]


@pytest.mark.parametrize(
    "payload",
    [
        b"",  # an empty frame
        b"\xc1",  # never valid msgpack
        msgspec.msgpack.encode({"type": "Drain"}),  # a field missing
        msgspec.msgpack.encode({"type": "Drain", "reason": 7}),  # a field of the wrong type
        msgspec.msgpack.encode({"type": "Nope", "reason": "x"}),  # an unknown message
        msgspec.msgpack.encode([1, 2, 3]),  # not a message at all
        bytes(encode_frame(Hello(1, 0, 1, 0)))[HEADER.size :],  # the other direction's message
    ],
)
def test_a_malformed_or_mistyped_frame_is_refused(payload: bytes) -> None:
    with pytest.raises(FrameError):
        list(control_decoder().feed(HEADER.pack(len(payload)) + payload))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_garbage_raises_nothing_but_frame_error(garbage: bytes) -> None:
    decoder = worker_decoder(max_frame_bytes=1000)
    try:
        list(decoder.feed(garbage))
    except FrameError:
        return
    assert decoder.buffered <= HEADER.size + 1000


def test_fields_a_newer_peer_added_are_ignored() -> None:
    payload = msgspec.msgpack.encode(
        {"type": "Hello", "protocol": 1, "worker": 2, "pid": 3, "config_version": 4, "new": [1]}
    )
    assert list(worker_decoder().feed(HEADER.pack(len(payload)) + payload)) == [Hello(1, 2, 3, 4)]


def test_a_batch_without_the_newer_optional_fields_decodes() -> None:
    payload = msgspec.msgpack.encode(
        {"type": "Batch", "worker": 1, "seq": 1, "answers": [], "calls": [], "gauges": None}
    )
    (batch,) = worker_decoder().feed(HEADER.pack(len(payload)) + payload)
    assert batch == Batch(1, 1, [], [], None, stale=False)
