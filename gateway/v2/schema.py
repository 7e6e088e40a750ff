"""A request checked against the model's signature before any replica sees it.

The signature is the model's metadata in the client's names (`Dialect.client_metadata`), or
the one its config declares (``models.X.signature``) for servers whose metadata lists no
tensors (MLServer). A request that cannot fit it gets a precise 400 from the gateway instead
of an attempt: a replica answering a bad input with a 500 (MLServer does, for a wrong feature
count) would otherwise be charged, and ejected, for the client's mistake.

Checked on the JSON header alone (no tensor is decoded): every input the model takes and no
other, each one's datatype, rank and fixed dimensions (``-1`` is free), its element count
against its shape (JSON ``data``, or ``binary_data_size`` for fixed-size types), and the
outputs asked for.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.errors import BadRequest
from v2proto.signature import DATATYPES


@dataclass(frozen=True, slots=True)
class InputSpec:
    name: str
    # None: not declared
    datatype: str | None
    # -1: any size; None: not declared
    shape: tuple[int, ...] | None


@dataclass(frozen=True, slots=True)
class ModelSchema:
    inputs: Mapping[str, InputSpec]
    # None: not declared, any name passes to the replica
    outputs: frozenset[str] | None

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any]) -> ModelSchema | None:
        """The schema the metadata declares; None when it lists no inputs (nothing to check)."""
        inputs: dict[str, InputSpec] = {}
        for spec in _specs(metadata.get("inputs")):
            shape = spec.get("shape")
            dims = (
                tuple(int(d) for d in shape) if isinstance(shape, list) and _ints(shape) else None
            )
            datatype = spec.get("datatype")
            known = datatype if isinstance(datatype, str) and datatype in DATATYPES else None
            inputs[spec["name"]] = InputSpec(spec["name"], known, dims)
        if not inputs:
            return None
        outputs = [s["name"] for s in _specs(metadata.get("outputs"))]
        return cls(inputs, frozenset(outputs) if outputs else None)

    def check(self, header: Mapping[str, Any]) -> None:
        """`BadRequest` naming the first way the request does not fit (``header`` is a
        structurally valid V2 request: `gateway.v2.request.parse_infer_request`)."""
        given = header["inputs"]
        for tensor in given:
            spec = self.inputs.get(tensor["name"])
            if spec is None:
                raise BadRequest(
                    f"unknown input {tensor['name']!r}; the model's inputs: {_list(self.inputs)}"
                )
            _check_tensor(tensor, spec)
        # every given input is the model's and named once (structurally valid), so one is
        # missing exactly when fewer are given
        missing = [] if len(given) >= len(self.inputs) else _missing(self.inputs, given)
        if missing:
            raise BadRequest(
                f"missing input {missing[0]!r}; the model's inputs: {_list(self.inputs)}"
            )
        if self.outputs is not None:
            for output in header.get("outputs") or ():
                if output["name"] not in self.outputs:
                    raise BadRequest(
                        f"unknown output {output['name']!r}; the model's outputs: "
                        f"{_list(sorted(self.outputs))}"
                    )


def _check_tensor(tensor: Mapping[str, Any], spec: InputSpec) -> None:
    where = f"input {spec.name!r}"
    datatype, shape = tensor["datatype"], tensor["shape"]
    if spec.datatype is not None and datatype != spec.datatype:
        raise BadRequest(f"{where}: datatype {datatype}, the model takes {spec.datatype}")
    wanted = spec.shape
    if wanted is not None:
        fits = len(shape) == len(wanted)
        if fits:
            for got, want in zip(shape, wanted, strict=True):
                # a loop: no generator per request
                if want != -1 and want != got:
                    fits = False
                    break
        if not fits:
            raise BadRequest(f"{where}: shape {shape}, the model takes {list(wanted)}")
    count = math.prod(shape)
    parameters = tensor.get("parameters") or {}
    size = parameters.get("binary_data_size")
    if size is not None:
        dtype = DATATYPES.get(datatype)
        if datatype != "BYTES" and dtype is not None and size != count * dtype.itemsize:
            raise BadRequest(
                f"{where}: {size} bytes of binary data, shape {shape} of {datatype} needs "
                f"{count * dtype.itemsize}"
            )
        return
    # absent from a header parsed in the worker process: counted there
    data = tensor.get("data")
    elements = None if data is None else _count(data)
    if elements is not None and elements != count:
        raise BadRequest(f"{where}: 'data' has {elements} elements, shape {shape} needs {count}")


def _missing(inputs: Mapping[str, InputSpec], given: list[dict[str, Any]]) -> list[str]:
    names = {t["name"] for t in given}
    return [name for name in inputs if name not in names]


def _count(data: list[Any]) -> int | None:
    """Elements of flat or nested ``data``, judged by its first element (a flat list costs
    nothing to count); None where rows are not all lists (the replica names that)."""
    if not data or not isinstance(data[0], list):
        return len(data)
    total = 0
    for row in data:
        if not isinstance(row, list):
            return None
        inner = _count(row)
        if inner is None:
            return None
        total += inner
    return total


def _specs(raw: Any) -> list[Mapping[str, Any]]:
    if not isinstance(raw, list):
        return []
    return [t for t in raw if isinstance(t, Mapping) and isinstance(t.get("name"), str)]


def _ints(values: list[Any]) -> bool:
    return all(isinstance(d, int) and not isinstance(d, bool) for d in values)


def _list(names: Sequence[str] | Mapping[str, Any]) -> str:
    return ", ".join(names)
