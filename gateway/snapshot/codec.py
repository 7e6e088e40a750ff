"""Frames on the link: a ``uint32`` big-endian length, then one msgpack-encoded message.

`encode_frame` writes a message into one fresh buffer behind its length (no second copy).
`FrameDecoder` is fed bytes as they arrive and yields each whole message, decoded by msgspec
into the types of its direction: it holds at most one unfinished frame, refuses a length over
``max_frame_bytes`` before reading the frame, and turns a frame msgspec cannot decode into the
types expected (garbage, a message of the other direction, a wrongly typed field) into a
`FrameError`; the end that reads it counts it and closes the link.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any, Final, Generic, TypeVar

import msgspec

from gateway.snapshot.messages import ControlMessage, WorkerMessage

HEADER: Final = struct.Struct(">I")
# a config text, or a batch of its shipper's most items
MAX_FRAME_BYTES: Final = 8 * 1024 * 1024

T = TypeVar("T")

_encoder = msgspec.msgpack.Encoder()


class FrameError(Exception):
    """A frame refused: over the size limit, or not a message of the expected types."""


def encode_frame(message: Any, max_frame_bytes: int = MAX_FRAME_BYTES) -> bytearray:
    """``message`` as one frame; `FrameError` when the peer would refuse its size.

    A fresh buffer every time: a transport may keep it, uncopied, until the peer reads it.
    """
    frame = bytearray(HEADER.size)
    _encoder.encode_into(message, frame, HEADER.size)
    size = len(frame) - HEADER.size
    if size > max_frame_bytes:
        raise FrameError(f"a {type(message).__name__} of {size} bytes is over {max_frame_bytes}")
    HEADER.pack_into(frame, 0, size)
    return frame


class FrameDecoder(Generic[T]):
    """Whole messages out of bytes fed in any pieces; after a `FrameError` it takes nothing."""

    __slots__ = ("_buffer", "_decoder", "_failed", "_max")

    def __init__(
        self, decoder: msgspec.msgpack.Decoder[T], max_frame_bytes: int = MAX_FRAME_BYTES
    ) -> None:
        self._decoder = decoder
        self._max = max_frame_bytes
        self._buffer = bytearray()
        self._failed = False

    @property
    def buffered(self) -> int:
        """Bytes held of a frame not whole yet."""
        return len(self._buffer)

    def feed(self, data: bytes) -> Iterator[T]:
        """Yields each message that ``data`` completes, in order; raises `FrameError` at the
        first frame refused (the messages before it are yielded first)."""
        if self._failed:
            raise FrameError("the link already refused a frame")
        buffer = self._buffer
        buffer += data
        start = 0
        try:
            while len(buffer) - start >= HEADER.size:
                (size,) = HEADER.unpack_from(buffer, start)
                if size > self._max:
                    raise FrameError(f"a frame of {size} bytes is over {self._max}")
                end = start + HEADER.size + size
                if end > len(buffer):
                    break
                message = self._decode(buffer, start + HEADER.size, end)
                start = end
                yield message
        except FrameError:
            self._failed = True
            buffer.clear()
            start = 0
            raise
        finally:
            del buffer[:start]

    def _decode(self, buffer: bytearray, start: int, end: int) -> T:
        # The views are released before the buffer is resized (a bytearray with a view on it
        # cannot be); the decoded message holds no reference to them.
        with memoryview(buffer) as whole, whole[start:end] as payload:
            try:
                return self._decoder.decode(payload)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                raise FrameError(f"a frame refused: {exc}") from exc


def control_decoder(max_frame_bytes: int = MAX_FRAME_BYTES) -> FrameDecoder[ControlMessage]:
    """What a worker reads: control's messages."""
    return FrameDecoder(msgspec.msgpack.Decoder(ControlMessage), max_frame_bytes)


def worker_decoder(max_frame_bytes: int = MAX_FRAME_BYTES) -> FrameDecoder[WorkerMessage]:
    """What control reads: a worker's messages."""
    return FrameDecoder(msgspec.msgpack.Decoder(WorkerMessage), max_frame_bytes)
