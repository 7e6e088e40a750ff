"""A ``ModelInferRequest`` read straight into a validated `InferRequest`, for a gRPC server.

A server could turn the message into a REST body and parse that (`convert.grpc_to_rest_request`
then `codec.parse_infer_request`), but typed contents would go through JSON text and back:
milliseconds for an image's tensor (docs/measured.md). Here raw contents are read in place
(``numpy.frombuffer``) and typed ones straight from the repeated field, and every tensor passes the
same checks as a REST body's (`v2proto.tensors.decode_tensor` against the model's signature), so
both doors of a server refuse the same bad input with the same message.
"""

from __future__ import annotations

from typing import Any

from v2proto.codec import InferRequest
from v2proto.errors import ProtocolError
from v2proto.fields import flag
from v2proto.grpc import grpc_service_pb2 as pb
from v2proto.grpc.contents import array_bytes, from_typed
from v2proto.grpc.parameters import rest_parameters
from v2proto.outputs import requested_outputs
from v2proto.signature import DATATYPES, Array, Signature
from v2proto.tensors import BinaryReader, decode_tensor


def grpc_infer_request(message: pb.ModelInferRequest, signature: Signature) -> InferRequest:
    """The request's inputs as arrays, checked against ``signature``; `ProtocolError` naming
    the field otherwise."""
    raws = message.raw_input_contents
    if not message.inputs:
        raise ProtocolError("'inputs' must be a non-empty list")
    if raws and len(raws) != len(message.inputs):
        raise ProtocolError(
            f"{len(raws)} raw contents for {len(message.inputs)} inputs: raw contents are for "
            "every input or none"
        )
    inputs: dict[str, Array] = {}
    for i, entry in enumerate(message.inputs):
        if not entry.name:
            raise ProtocolError(f"inputs[{i}]: 'name' must be a non-empty string")
        spec = signature.input(entry.name)
        if spec is None:
            known = ", ".join(signature.input_names)
            raise ProtocolError(f"unknown input '{entry.name}'; the model's inputs are: {known}")
        if entry.name in inputs:
            raise ProtocolError(f"input '{entry.name}' appears twice")
        where = f"input '{entry.name}'"
        raw = raws[i] if raws else _typed_bytes(entry, spec.datatype, where)
        obj = {"datatype": entry.datatype, "shape": list(entry.shape),
               "parameters": {"binary_data_size": len(raw)}}  # fmt: skip
        reader = BinaryReader(memoryview(raw), True)
        inputs[entry.name] = decode_tensor(obj, where, reader, spec, allow_empty=False)
        reader.finish()
    for name in signature.input_names:
        if name not in inputs:
            raise ProtocolError(f"missing input '{name}'")
    params = rest_parameters(message.parameters)
    doc: dict[str, Any] = {"outputs": [{"name": o.name} for o in message.outputs]}
    outputs = requested_outputs(doc, signature)
    binary = flag(params, "binary_data_output", "parameters", default=False)
    return InferRequest(message.id or None, inputs, outputs, binary, params)


def _typed_bytes(
    entry: pb.ModelInferRequest.InferInputTensor, spec_datatype: str, where: str
) -> bytes:
    """Typed contents as the raw bytes they stand for (the checks read raw bytes). A datatype
    or shape the checks refuse anyway is left to them (nothing read), so they name it."""
    if entry.datatype not in DATATYPES or any(d < 0 for d in entry.shape):
        return b""
    if entry.datatype != spec_datatype:
        raise ProtocolError(
            f"{where}: datatype {entry.datatype} does not match the model's {spec_datatype}"
        )
    shape = list(entry.shape)
    return array_bytes(from_typed(entry.contents, entry.datatype, shape, where), entry.datatype)
