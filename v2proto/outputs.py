"""Which outputs a V2 infer request asks back, and in which form (binary or JSON).

Whoever answers a request, a replica running its model or the gateway replying from a vote or
its fallback, must honour the same choices: the outputs the client named, each in the form it
named, or every output in the request's default form (``parameters.binary_data_output``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from v2proto.errors import ProtocolError
from v2proto.fields import flag, name_of, parameters
from v2proto.signature import Signature


@dataclass(frozen=True, slots=True)
class RequestedOutput:
    name: str
    binary: bool


def binary_by_default(doc: Mapping[str, Any]) -> bool:
    """The request's ``parameters.binary_data_output``: the form of outputs it does not name."""
    params = parameters(doc.get("parameters"), "parameters")
    return flag(params, "binary_data_output", "parameters", default=False)


def requested_outputs(
    doc: Mapping[str, Any], signature: Signature | None = None
) -> tuple[RequestedOutput, ...] | None:
    """The outputs the request (its JSON header) names, or None: it asks for all of them.

    With a ``signature``, every named output must be one of the model's.
    """
    raw = doc.get("outputs")
    if raw is None or raw == []:
        return None
    if not isinstance(raw, list):
        raise ProtocolError("'outputs' must be a list")
    default = binary_by_default(doc)
    result = []
    for i, obj in enumerate(raw):
        output = name_of(obj, f"outputs[{i}]")
        if signature is not None and signature.output(output) is None:
            known = ", ".join(signature.output_names)
            raise ProtocolError(f"unknown output '{output}'; the model's outputs are: {known}")
        where = f"output '{output}' parameters"
        params = parameters(obj.get("parameters"), where)
        result.append(RequestedOutput(output, flag(params, "binary_data", where, default=default)))
    return tuple(result)


def outputs_to_send(
    requested: tuple[RequestedOutput, ...] | None, default_binary: bool, available: Iterable[str]
) -> tuple[RequestedOutput, ...]:
    """The outputs to return: the ``requested`` ones, or all ``available`` in the default form."""
    if requested is not None:
        return requested
    return tuple(RequestedOutput(output, default_binary) for output in available)
