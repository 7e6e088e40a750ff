"""A large ``ModelInferRequest`` read with its raw contents as views of the received bytes.

Parsing the message copies every ``raw_input_contents`` entry into the message, and reading one
copies it again into a new ``bytes``; a large content's copy is a fresh allocation that faults its
pages in (docs/measured.md). Here the message's top-level fields are walked on the wire: each raw
content (field 7) becomes a `memoryview` of the received buffer, and only the other fields (names,
shapes, parameters: a few hundred bytes) are parsed as a message. Protobuf allows fields in any
order and repeated fields split anywhere, so the message parsed from the other fields is the one
the whole would give, less its raw contents.
"""

from __future__ import annotations

from google.protobuf.message import DecodeError

from v2proto.errors import ProtocolError
from v2proto.grpc import grpc_service_pb2 as pb

RAW_INPUT_CONTENTS = 7  # ModelInferRequest.raw_input_contents's field number
SPLIT_MIN_BYTES = 64 * 1024  # smaller messages: parsed whole (a copy costs less than the walk)
_LENGTH_DELIMITED, _VARINT, _FIXED64, _FIXED32 = 2, 0, 1, 5


def read_infer_request(data: bytes) -> tuple[pb.ModelInferRequest, list[memoryview]]:
    """The message, and its raw contents as views when it is large (else they stay in it)."""
    if len(data) < SPLIT_MIN_BYTES:
        return _parse(data), []
    view = memoryview(data)
    rest: list[memoryview] = []
    raws: list[memoryview] = []
    pos, end = 0, len(data)
    while pos < end:
        start = pos
        key, pos = _varint(data, pos)
        wire = key & 7
        if wire == _LENGTH_DELIMITED:
            size, pos = _varint(data, pos)
            if pos + size > end:
                raise ProtocolError("malformed message: a field runs past its end")
            if key >> 3 == RAW_INPUT_CONTENTS:
                raws.append(view[pos : pos + size])
                pos += size
                continue
            pos += size
        elif wire == _VARINT:
            _, pos = _varint(data, pos)
        elif wire == _FIXED64:
            pos += 8
        elif wire == _FIXED32:
            pos += 4
        else:
            raise ProtocolError(f"malformed message: wire type {wire}")
        if pos > end:
            raise ProtocolError("malformed message: a field runs past its end")
        rest.append(view[start:pos])
    return _parse(b"".join(rest)), raws


def _parse(data: bytes) -> pb.ModelInferRequest:
    try:
        return pb.ModelInferRequest.FromString(data)
    except DecodeError as exc:
        raise ProtocolError(f"malformed message: {exc}") from exc


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    end = len(data)
    while pos < end and shift < 64:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
    raise ProtocolError("malformed message: a truncated or overlong varint")
