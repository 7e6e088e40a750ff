"""Can a fallback model answer a model's requests? Its signature against the model's.

A model's fallback receives the requests its clients send, in the model's tensor names, renamed
by ``fallback.tensors``, and answers outputs renamed back. A fallback that lacks an input the
model takes (KServe's ``input-0`` against the fallback's ``input``, with no mapping) refuses
every request, so a pool over KServe with such a fallback looked ready while every degraded
answer was a 400. The same comparison serves ``check-config`` (a declared signature against
the fallback's manifest entry), ``check-config --probe`` (the servers' metadata) and readiness
(the metadata the gateway fetched against the loaded fallback).

Fits when: every input the model takes reaches a fallback input of the same datatype and a
shape that does not contradict it (same rank; fixed dimensions equal where both are fixed),
every fallback input is fed, and every output the model declares is answered.
"""

from __future__ import annotations

from collections.abc import Iterable

from gateway.config.tensors import TensorMapping
from gateway.errors import BadRequest
from gateway.v2.schema import ModelSchema
from v2proto.signature import Signature


class FallbackMisfit(BadRequest):
    """The fallback's signature refuses a request's tensors (names, datatype, shape): the
    fallback cannot stand in for the model, which is not the client's fault where the request
    passed the model's checks; the fallback layer lets the primary's error stand."""


def fallback_misfit(model: ModelSchema, fallback: Signature, mapping: TensorMapping) -> str | None:
    """Why ``fallback`` (renamed by ``mapping``, the model's ``fallback.tensors``) cannot answer
    requests that fit ``model``; None when it can."""
    fed: set[str] = set()
    for name, spec in model.inputs.items():
        theirs = mapping.pool_input(name)
        tensor = fallback.input(theirs)
        if tensor is None:
            return (
                f"no input {theirs!r}{_from(name, theirs)}; its inputs: "
                f"{_names(fallback.input_names)} (map the model's under fallback.tensors.inputs)"
            )
        fed.add(theirs)
        if spec.datatype is not None and spec.datatype != tensor.datatype:
            return f"input {name!r} is {spec.datatype}, its {theirs!r} takes {tensor.datatype}"
        if spec.shape is not None and not _compatible(spec.shape, tensor.shape):
            return (
                f"input {name!r} has shape {list(spec.shape)}, its {theirs!r} takes "
                f"{list(tensor.shape)}"
            )
    unfed = [n for n in fallback.input_names if n not in fed]
    if unfed:
        return f"its input {unfed[0]!r} is fed by none of the model's inputs"
    if model.outputs is not None:
        answered = {mapping.client_output(n)[0] for n in fallback.output_names}
        missing = sorted(model.outputs - answered)
        if missing:
            theirs = mapping.pool_output(missing[0])
            return (
                f"no output {theirs!r}{_from(missing[0], theirs)}; its outputs: "
                f"{_names(fallback.output_names)} (map the model's under fallback.tensors.outputs)"
            )
    return None


def _compatible(model: tuple[int, ...], fallback: tuple[int, ...]) -> bool:
    return len(model) == len(fallback) and all(
        -1 in (a, b) or a == b for a, b in zip(model, fallback, strict=True)
    )


def _from(client: str, theirs: str) -> str:
    return f" for the model's {client!r}" if client != theirs else ""


def _names(names: Iterable[str]) -> str:
    return ", ".join(names)
