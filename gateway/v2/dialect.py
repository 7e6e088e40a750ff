"""How one pool speaks V2: its tensor names and shapes, and whether it takes binary tensors.

Any V2 server may sit behind the gateway, but they differ in what the protocol leaves open:
MLServer's scikit-learn runtime calls its output ``predict`` with shape [n, 1] and answers a
body with binary tensors with 422; a KServe model answers ``predict`` of shape [n]. A pool's
`Dialect` turns the client's request into one the pool understands and the pool's outputs back
into the client's names and shapes (`gateway.config.tensors.TensorMapping`), so clients, the
vote, golden probes and the fallback all speak the model's one vocabulary.

Whether a pool takes binary tensors is learned from its servers' metadata (the
``binary_tensor_data`` extension, `gateway.upstream.probes.extensions`) unless its config says
(``binary_tensors``); until it is learned the pool is sent JSON, which every V2 server takes.

A pool that speaks the client's dialect (no mapping, binary accepted) costs nothing: its
requests go unchanged. Otherwise the request is re-encoded as plain JSON in the pool's names
(what every V2 server speaks), asking for JSON outputs, and the reply decoded, renamed and
reshaped; the attempt layer then answers the client in the form it asked for.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import orjson

from gateway.config.tensors import TensorMapping
from gateway.errors import BadRequest
from gateway.v2.codec import decode_inputs
from gateway.v2.request import InferRequestInfo
from v2proto.codec import EncodedBody
from v2proto.outputs import requested_outputs
from v2proto.signature import Array
from v2proto.tensors import encode_tensor


class Dialect:
    def __init__(
        self, mapping: TensorMapping | None = None, binary_tensors: bool | None = True
    ) -> None:
        """``binary_tensors``: None to learn it (`learn_binary`); until then, JSON is sent."""
        self.mapping = mapping or TensorMapping()
        # True/False: the config decides, never learned
        self.configured = binary_tensors
        self._take_binary(bool(binary_tensors))

    def _take_binary(self, binary: bool) -> None:
        self.binary_tensors = binary
        # speaks the client's dialect
        self.native = self.mapping.empty and binary

    def learn_binary(self, takes: bool) -> bool:
        """What the pool's servers say of the binary extension (their server metadata's
        ``extensions``), unless the config decides; True if that changed how it is spoken."""
        if self.configured is not None or takes == self.binary_tensors:
            return False
        self._take_binary(takes)
        return True

    def speaks_as_is(self, info: InferRequestInfo | None) -> bool:
        """Whether this request can go to the pool unchanged."""
        if self.native:
            return True
        if not self.mapping.empty or info is None:
            return False
        return info.binary_length == 0 and not _asks_binary(info.header)

    def request(
        self, body: bytes, header_length: str | None, info: InferRequestInfo
    ) -> EncodedBody:
        """The client's request in the pool's names, as plain JSON asking for JSON outputs."""
        inputs = decode_inputs(body, header_length)
        doc: dict[str, Any] = {}
        if info.id is not None:
            doc["id"] = info.id
        parameters = info.header.get("parameters")
        if isinstance(parameters, dict):
            kept = {k: v for k, v in parameters.items() if k != "binary_data_output"}
            if kept:
                doc["parameters"] = kept
        chunks: list[bytes] = []
        doc["inputs"] = [
            encode_tensor(self.mapping.pool_input(name), array, False, chunks)
            for name, array in inputs.items()
        ]
        asked = requested_outputs(info.header)
        if asked is not None:
            doc["outputs"] = [{"name": self.mapping.pool_output(o.name)} for o in asked]
        return EncodedBody(orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY))

    def client_outputs(self, outputs: Mapping[str, Array]) -> dict[str, Array]:
        """The pool's outputs in the client's names and shapes; a shape that does not fit is
        the pool's error (`BadRequest` here, a protocol error for the attempt)."""
        result: dict[str, Array] = {}
        for pool_name, array in outputs.items():
            name, shape = self.mapping.client_output(pool_name)
            if shape is not None:
                try:
                    array = np.reshape(array, shape)
                except ValueError as exc:
                    raise BadRequest(
                        f"output {pool_name!r} of shape {list(np.shape(array))} does not fit "
                        f"the shape {list(shape)} of {name!r}"
                    ) from exc
            result[name] = array
        return result

    def client_metadata(self, metadata: Mapping[str, Any]) -> dict[str, Any]:
        """A pool's model metadata in the client's tensor names and output shapes."""
        doc = dict(metadata)
        if self.mapping.empty:
            return doc
        inputs, outputs = doc.get("inputs"), doc.get("outputs")
        if isinstance(inputs, list):
            doc["inputs"] = [
                {**t, "name": self.mapping.client_input(t["name"])} if _named(t) else t
                for t in inputs
            ]
        if isinstance(outputs, list):
            doc["outputs"] = [self._client_output_spec(t) if _named(t) else t for t in outputs]
        return doc

    def _client_output_spec(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        name, shape = self.mapping.client_output(spec["name"])
        result = {**spec, "name": name}
        if shape is not None:
            result["shape"] = list(shape)
        return result

    def pool_inputs(self, inputs: Mapping[str, Array]) -> dict[str, Array]:
        """Client-named input arrays in the pool's names (for golden probes and fallbacks)."""
        return {self.mapping.pool_input(name): array for name, array in inputs.items()}


def _named(spec: Any) -> bool:
    return isinstance(spec, dict) and isinstance(spec.get("name"), str)


def _asks_binary(header: Mapping[str, Any]) -> bool:
    parameters = header.get("parameters")
    if isinstance(parameters, dict) and parameters.get("binary_data_output"):
        return True
    for output in header.get("outputs") or ():
        params = output.get("parameters") if isinstance(output, dict) else None
        if isinstance(params, dict) and params.get("binary_data"):
            return True
    return False
