"""`v2proto.grpc.wire.read_infer_request`: a large message's raw contents as views of the
received bytes, the rest parsed as protobuf parses the whole; malformed bytes named."""

from __future__ import annotations

import pytest

from v2proto.errors import ProtocolError
from v2proto.grpc import grpc_service_pb2 as pb
from v2proto.grpc.wire import SPLIT_MIN_BYTES, read_infer_request


def message(raws: list[bytes]) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="digits", model_version="1", id="r-7")
    request.parameters["priority"].int64_param = 3
    request.parameters["tag"].string_param = "x"
    for i, raw in enumerate(raws):
        tensor = request.inputs.add(name=f"in{i}", datatype="UINT8", shape=[len(raw)])
        tensor.parameters["note"].bool_param = True
    request.outputs.add(name="label").parameters["binary_data"].bool_param = True
    request.raw_input_contents.extend(raws)
    return request


def test_a_large_messages_raw_contents_are_views_of_its_bytes() -> None:
    raws = [bytes(range(256)) * 300, b"\x01" * 70_000]
    data = message(raws).SerializeToString()
    assert len(data) >= SPLIT_MIN_BYTES
    parsed, views = read_infer_request(data)
    assert [bytes(v) for v in views] == raws
    assert all(v.obj is data for v in views)  # no copy
    whole = pb.ModelInferRequest.FromString(data)
    del whole.raw_input_contents[:]
    assert parsed == whole and not parsed.raw_input_contents


def test_a_small_message_is_parsed_whole() -> None:
    data = message([b"\x02" * 64]).SerializeToString()
    parsed, views = read_infer_request(data)
    assert views == [] and parsed == pb.ModelInferRequest.FromString(data)


@pytest.mark.parametrize(
    "tail",
    [
        b"\x3a\xff\xff\xff\xff\x0f",  # raw content longer than the message
        b"\x3a",  # a tag and no length
        b"\x08" + b"\xff" * 11,  # an overlong varint
        b"\x0b",  # wire type 3 (a group)
    ],
)
def test_malformed_bytes_are_a_protocol_error(tail: bytes) -> None:
    data = message([b"\x00" * SPLIT_MIN_BYTES]).SerializeToString() + tail
    with pytest.raises(ProtocolError, match="malformed message"):
        read_infer_request(data)
