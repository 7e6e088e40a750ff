"""V2 REST bodies to and from the gRPC messages ``ModelInferRequest`` / ``ModelInferResponse``.

The gateway's pipeline carries REST bodies (JSON, or JSON plus the binary tensor extension); a
gRPC replica takes and gives messages, and a gRPC client of the gateway sends and expects them.
Both directions are exact, tensor for tensor:

- a tensor's form follows across: JSON ``data`` <-> typed ``contents``, binary data
  (``parameters.binary_data_size``) <-> ``raw_*_contents``. gRPC allows raw contents only for
  every tensor of a message or none, and has no typed field for FP16: a message with any binary
  tensor, any FP16 tensor, or a BYTES element that is not UTF-8 (JSON cannot carry it) is raw
  for all its tensors (values unchanged, only their form);
- raw bytes move as they are (binary extension and raw contents share the layout: little-endian
  elements, BYTES as 4-byte length + bytes); raw to JSON goes through ``numpy.frombuffer``;
- the ``id``, model version, and every ``parameters`` entry (request, tensors, requested outputs:
  the gateway's own ``degraded``/``vote`` among them) are kept; the REST-only form flags
  (``binary_data_output``, ``binary_data``, ``binary_data_size``) do not go to gRPC; the REST
  client's choice of forms is kept in `OutputForms` to answer it in the form it asked;
- an empty ``id`` or ``model_version`` in gRPC is an absent one in REST.

A malformed body or message raises `ProtocolError` naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from v2proto.codec import EncodedBody, _load
from v2proto.errors import ProtocolError
from v2proto.fields import flag, name_of, parameters
from v2proto.grpc import grpc_service_pb2 as pb
from v2proto.grpc.contents import (
    TYPED_FIELD,
    Raw,
    array_bytes,
    check_raw,
    from_raw,
    from_typed,
)
from v2proto.grpc.parameters import FORM_FLAGS, put_parameters, rest_parameters
from v2proto.signature import DATATYPES, Array, datatype_of
from v2proto.tensors import BinaryReader, decode_tensor, encode_tensor


@dataclass(frozen=True, slots=True)
class OutputForms:
    """Which outputs a REST client wants as binary data: the named ones as named, the rest as
    the request-level ``binary_data_output`` says."""

    default: bool = False
    named: Mapping[str, bool] = field(default_factory=dict)

    def binary(self, output: str) -> bool:
        return self.named.get(output, self.default)


@dataclass(frozen=True, slots=True)
class _Tensor:
    """One tensor on its way across: metadata, and either its array or its raw bytes."""

    name: str
    datatype: str
    shape: list[int]
    params: dict[str, Any]
    array: Array | None = None  # from JSON data or typed contents
    raw: Raw | None = None  # from binary data or raw contents

    def raw_bytes(self) -> Raw:
        if self.raw is not None:
            return self.raw
        assert self.array is not None
        return array_bytes(self.array, self.datatype)

    def as_array(self, where: str) -> Array:
        if self.array is not None:
            return self.array
        assert self.raw is not None
        return from_raw(self.raw, self.datatype, self.shape, where)


# ------------------------------------------------------------------------------- REST -> gRPC


def rest_to_grpc_request(
    body: bytes,
    header_length: str | int | None,
    *,
    model_name: str,
    model_version: str = "",
    raw: bool = False,
) -> tuple[pb.ModelInferRequest, OutputForms]:
    """A REST infer request as a ``ModelInferRequest``, and the output forms its client wants;
    ``raw``: every tensor as raw contents (for a server that takes them: typed contents of a
    large tensor cost milliseconds to build and to read in Python, raw ones a copy)."""
    doc, binary = _load(body, header_length)
    request_id = doc.get("id")
    if request_id is not None and not isinstance(request_id, str):
        raise ProtocolError(f"'id' must be a string, got {request_id!r}")
    params = parameters(doc.get("parameters"), "parameters")
    default = flag(params, "binary_data_output", "parameters", default=False)
    raw_inputs = doc.get("inputs")
    if not isinstance(raw_inputs, list) or not raw_inputs:
        raise ProtocolError("'inputs' must be a non-empty list")
    tensors = _rest_tensors(raw_inputs, "inputs", binary, "input", allow_empty=True)
    message = pb.ModelInferRequest(
        model_name=model_name, model_version=model_version, id=request_id or ""
    )
    put_parameters(message.parameters, params, "parameters")
    _put_tensors(tensors, message.inputs, message.raw_input_contents, raw=raw)
    named: dict[str, bool] = {}
    raw_outputs = doc.get("outputs") or []
    if not isinstance(raw_outputs, list):
        raise ProtocolError("'outputs' must be a list")
    for i, obj in enumerate(raw_outputs):
        output = name_of(obj, f"outputs[{i}]")
        where = f"output '{output}' parameters"
        out_params = parameters(obj.get("parameters"), where)
        named[output] = flag(out_params, "binary_data", where, default=default)
        requested = message.outputs.add(name=output)
        put_parameters(requested.parameters, out_params, where)
    return message, OutputForms(default, named)


def rest_to_grpc_response(body: bytes, header_length: str | int | None) -> pb.ModelInferResponse:
    """A REST infer response as a ``ModelInferResponse``."""
    doc, binary = _load(body, header_length)
    model_name = doc.get("model_name")
    if not isinstance(model_name, str):
        raise ProtocolError("response has no string 'model_name'")
    raw_outputs = doc.get("outputs")
    if not isinstance(raw_outputs, list):
        raise ProtocolError("response has no 'outputs' list")
    tensors = _rest_tensors(raw_outputs, "outputs", binary, "output", allow_empty=True)
    version, response_id = doc.get("model_version"), doc.get("id")
    message = pb.ModelInferResponse(
        model_name=model_name,
        model_version="" if version is None else str(version),
        id="" if response_id is None else str(response_id),
    )
    put_parameters(message.parameters, parameters(doc.get("parameters"), "parameters"), "")
    _put_tensors(tensors, message.outputs, message.raw_output_contents)
    return message


def grpc_response(
    model_name: str,
    model_version: str | None,
    request_id: str | None,
    outputs: Sequence[tuple[str, Array]],
    *,
    raw: bool,
    parameters: Mapping[str, Any] | None = None,
) -> pb.ModelInferResponse:
    """A ``ModelInferResponse`` from output arrays: raw contents when ``raw`` (what a client
    that sent raw contents reads back, as Triton answers), else typed where the datatypes allow
    (FP16 or non-UTF-8 BYTES: raw for all, as in every other conversion here)."""
    message = pb.ModelInferResponse(
        model_name=model_name, model_version=model_version or "", id=request_id or ""
    )
    put_parameters(message.parameters, parameters or {}, "parameters")
    tensors = [
        _Tensor(name, datatype_of(arr.dtype), list(arr.shape), {}, array=arr)
        for name, arr in outputs
    ]
    _put_tensors(tensors, message.outputs, message.raw_output_contents, raw=raw)
    return message


def _rest_tensors(
    objs: list[Any], key: str, binary: BinaryReader, kind: str, *, allow_empty: bool
) -> list[_Tensor]:
    recorder = _Recorder(binary)
    tensors: list[_Tensor] = []
    seen: set[str] = set()
    for i, obj in enumerate(objs):
        name = name_of(obj, f"{key}[{i}]")
        where = f"{kind} '{name}'"
        if name in seen:
            raise ProtocolError(f"{where} appears twice")
        seen.add(name)
        recorder.last = None
        array = decode_tensor(obj, where, recorder, None, allow_empty=allow_empty)
        params = {
            k: v
            for k, v in parameters(obj.get("parameters"), f"{where} parameters").items()
            if k not in FORM_FLAGS
        }
        shape = list(obj["shape"])
        if recorder.last is not None:
            tensors.append(_Tensor(name, obj["datatype"], shape, params, raw=recorder.last))
        else:
            tensors.append(_Tensor(name, obj["datatype"], shape, params, array=array))
    recorder.finish()
    return tensors


class _Recorder(BinaryReader):
    """A `BinaryReader` that keeps the bytes of the last tensor it handed out."""

    def __init__(self, inner: BinaryReader) -> None:
        self._inner = inner
        self.last: bytes | None = None

    def take(self, size: int, where: str) -> memoryview:
        chunk = self._inner.take(size, where)
        self.last = bytes(chunk)
        return chunk

    def finish(self) -> None:
        self._inner.finish()


def _put_tensors(
    tensors: Sequence[_Tensor], into: Any, raw_into: Any, *, raw: bool = False
) -> None:
    raw = (
        raw
        or any(t.raw is not None or t.datatype not in TYPED_FIELD for t in tensors)
        or any(t.datatype == "BYTES" and not _utf8(t.array) for t in tensors)
    )
    for t in tensors:
        entry = into.add(name=t.name, datatype=t.datatype, shape=t.shape)
        put_parameters(entry.parameters, t.params, f"'{t.name}' parameters")
        if raw:
            raw_into.append(t.raw_bytes())
        else:
            assert t.array is not None
            getattr(entry.contents, TYPED_FIELD[t.datatype]).extend(t.array.ravel().tolist())


def _utf8(array: Array | None) -> bool:
    """Whether every BYTES element can be JSON text (None: raw bytes, never converted)."""
    if array is None:
        return True
    try:
        for item in array.ravel().tolist():
            if isinstance(item, bytes):
                item.decode()
    except UnicodeDecodeError:
        return False
    return True


# ------------------------------------------------------------------------------- gRPC -> REST


def grpc_to_rest_request(
    message: pb.ModelInferRequest, *, binary_outputs: bool = False
) -> EncodedBody:
    """A ``ModelInferRequest`` as a REST body; outputs come back as binary data when
    ``binary_outputs`` (a raw-contents client's choice), else as JSON."""
    head, chunks = grpc_to_rest_parts(message, binary_outputs=binary_outputs)
    if not chunks:
        return EncodedBody(head)
    return EncodedBody(b"".join([head, *chunks]), len(head))


def grpc_to_rest_parts(
    message: pb.ModelInferRequest,
    *,
    binary_outputs: bool = False,
    raw_contents: Sequence[Raw] | None = None,
) -> tuple[bytes, list[Raw]]:
    """`grpc_to_rest_request`'s body unjoined: its JSON header, then the binary tensors that
    follow it (none for a JSON body), each the raw content's own buffer, for a caller that
    carries a body as pieces (the gateway's gRPC door). ``raw_contents``: the message's raw
    contents when read apart from it (`v2proto.grpc.wire`: views of the received bytes)."""
    doc: dict[str, Any] = {}
    if message.id:
        doc["id"] = message.id
    params = rest_parameters(message.parameters)
    if binary_outputs and not message.outputs:
        params["binary_data_output"] = True  # named outputs say it each
    if params:
        doc["parameters"] = params
    raws = message.raw_input_contents if raw_contents is None else raw_contents
    tensors = _grpc_tensors(message.inputs, raws, "input")
    chunks: list[Raw] = []
    doc["inputs"] = [_rest_tensor(t, t.raw is not None, chunks) for t in tensors]
    if message.outputs:
        outputs = []
        for requested in message.outputs:
            out_params = rest_parameters(requested.parameters)
            if binary_outputs:
                out_params["binary_data"] = True
            entry: dict[str, Any] = {"name": requested.name}
            if out_params:
                entry["parameters"] = out_params
            outputs.append(entry)
        doc["outputs"] = outputs
    return orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY), chunks


def grpc_to_rest_response(
    message: pb.ModelInferResponse, forms: OutputForms | None = None
) -> EncodedBody:
    """A ``ModelInferResponse`` as a REST body, each output in the form ``forms`` asks (None:
    the form it came in: raw contents as binary data, typed contents as JSON)."""
    doc: dict[str, Any] = {"model_name": message.model_name}
    if message.model_version:
        doc["model_version"] = message.model_version
    if message.id:
        doc["id"] = message.id
    params = rest_parameters(message.parameters)
    if params:
        doc["parameters"] = params
    tensors = _grpc_tensors(message.outputs, message.raw_output_contents, "output")
    chunks: list[Raw] = []
    doc["outputs"] = [
        _rest_tensor(t, t.raw is not None if forms is None else forms.binary(t.name), chunks)
        for t in tensors
    ]
    return _finish(doc, chunks)


def _grpc_tensors(entries: Sequence[Any], raws: Sequence[Raw], kind: str) -> list[_Tensor]:
    if raws and len(raws) != len(entries):
        raise ProtocolError(
            f"{len(raws)} raw contents for {len(entries)} {kind}s: raw contents are for every "
            f"{kind} or none"
        )
    tensors = []
    for i, entry in enumerate(entries):
        where = f"{kind} '{entry.name}'"
        if not entry.name:
            raise ProtocolError(f"{kind}s[{i}]: 'name' must be a non-empty string")
        if entry.datatype not in DATATYPES:
            raise ProtocolError(f"{where}: unknown datatype {entry.datatype!r}")
        shape = list(entry.shape)
        if any(d < 0 for d in shape):
            raise ProtocolError(f"{where}: shape {shape} has a negative dimension")
        # a server's REST form flags (KServe sends binary_data_size) say nothing in gRPC
        params = {k: v for k, v in rest_parameters(entry.parameters).items()
                  if k not in FORM_FLAGS}  # fmt: skip
        if raws:
            raw = raws[i]
            check_raw(raw, entry.datatype, shape, where)
            tensors.append(_Tensor(entry.name, entry.datatype, shape, params, raw=raw))
        else:
            array = from_typed(entry.contents, entry.datatype, shape, where)
            tensors.append(_Tensor(entry.name, entry.datatype, shape, params, array=array))
    return tensors


def _rest_tensor(t: _Tensor, binary: bool, chunks: list[Raw]) -> dict[str, Any]:
    where = f"'{t.name}'"
    if binary:
        raw = t.raw_bytes()
        if t.raw is not None and t.datatype == "BYTES":
            t.as_array(where)  # the element count must match the shape
        chunks.append(raw)
        params = {**t.params, "binary_data_size": len(raw)}
        return {"name": t.name, "datatype": t.datatype, "shape": t.shape, "parameters": params}
    array = t.as_array(where)
    if t.datatype == "BYTES" and not _utf8(array):
        return _rest_tensor(t, True, chunks)
    entry = encode_tensor(t.name, array, False, [])
    entry["datatype"] = t.datatype  # an empty BYTES or typed array keeps its declared type
    if t.params:
        entry["parameters"] = dict(t.params)
    return entry


def _finish(doc: dict[str, Any], chunks: list[Raw]) -> EncodedBody:
    head = orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY)
    if not chunks:
        return EncodedBody(head)
    return EncodedBody(b"".join([head, *chunks]), len(head))
