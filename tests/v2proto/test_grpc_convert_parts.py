"""`grpc_to_rest_parts`: the REST body of a ModelInferRequest unjoined, the same bytes as
`grpc_to_rest_request`'s once joined, with each raw content a piece of its own."""

from __future__ import annotations

import numpy as np

from v2proto.grpc import grpc_service_pb2 as pb
from v2proto.grpc.convert import grpc_to_rest_parts, grpc_to_rest_request


def test_raw_contents_are_pieces_after_the_header() -> None:
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([7, 8], dtype=np.int64)
    request = pb.ModelInferRequest(model_name="m", id="r1")
    request.inputs.add(name="a", datatype="FP32", shape=[2, 3])
    request.inputs.add(name="b", datatype="INT64", shape=[2])
    request.raw_input_contents.extend([a.tobytes(), b.tobytes()])
    head, pieces = grpc_to_rest_parts(request, binary_outputs=True)
    assert pieces == [a.tobytes(), b.tobytes()]
    joined = grpc_to_rest_request(request, binary_outputs=True)
    assert joined.body == head + b"".join(pieces) and joined.json_length == len(head)


def test_a_typed_request_is_all_header() -> None:
    request = pb.ModelInferRequest(model_name="m")
    request.inputs.add(name="a", datatype="FP32", shape=[2]).contents.fp32_contents.extend([1, 2])
    head, pieces = grpc_to_rest_parts(request)
    assert pieces == [] and head == grpc_to_rest_request(request).body
