"""Tensor signatures and the V2 datatype vocabulary (V2 name <-> numpy dtype <-> ONNX type).

A model's signature (input and output names, datatypes, shapes with -1 for variable dims) is what
requests are validated against, what model metadata shows and what manifests record; keeping it
in one small module lets the codec, the model wrapper, the build and the gateway's fallback
share one definition. `signature_of` reads it from an onnxruntime session without importing
onnxruntime (the session is duck-typed), so this package stays free of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[Any]

# Little-endian, as the binary tensor data extension puts tensors on the wire.
DATATYPES: Mapping[str, np.dtype[Any]] = {
    "BOOL": np.dtype("?"),
    "UINT8": np.dtype("u1"),
    "UINT16": np.dtype("<u2"),
    "UINT32": np.dtype("<u4"),
    "UINT64": np.dtype("<u8"),
    "INT8": np.dtype("i1"),
    "INT16": np.dtype("<i2"),
    "INT32": np.dtype("<i4"),
    "INT64": np.dtype("<i8"),
    "FP16": np.dtype("<f2"),
    "FP32": np.dtype("<f4"),
    "FP64": np.dtype("<f8"),
    "BYTES": np.dtype("O"),
}

_BY_NUMPY: Mapping[np.dtype[Any], str] = {
    dt.newbyteorder("="): name for name, dt in DATATYPES.items() if name != "BYTES"
}

ONNX_TYPES: Mapping[str, str] = {
    "tensor(bool)": "BOOL",
    "tensor(uint8)": "UINT8",
    "tensor(uint16)": "UINT16",
    "tensor(uint32)": "UINT32",
    "tensor(uint64)": "UINT64",
    "tensor(int8)": "INT8",
    "tensor(int16)": "INT16",
    "tensor(int32)": "INT32",
    "tensor(int64)": "INT64",
    "tensor(float16)": "FP16",
    "tensor(float)": "FP32",
    "tensor(double)": "FP64",
    "tensor(string)": "BYTES",
}


def datatype_of(dtype: np.dtype[Any]) -> str:
    """The V2 datatype name of a numpy dtype; object and bytes/str arrays are BYTES."""
    if dtype.kind in "OSU":
        return "BYTES"
    try:
        return _BY_NUMPY[dtype.newbyteorder("=")]
    except KeyError:
        raise ValueError(f"numpy dtype {dtype} has no V2 datatype") from None


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """One named tensor of a signature; ``-1`` in ``shape`` means any size."""

    name: str
    datatype: str
    shape: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape)}

    @classmethod
    def from_json(cls, obj: object) -> TensorSpec:
        if not isinstance(obj, Mapping):
            raise ValueError(f"tensor spec must be an object, got {obj!r}")
        name, datatype, shape = obj.get("name"), obj.get("datatype"), obj.get("shape")
        if not isinstance(name, str) or not name:
            raise ValueError(f"tensor spec needs a non-empty string 'name', got {name!r}")
        if datatype not in DATATYPES:
            raise ValueError(f"tensor {name!r}: unknown datatype {datatype!r}")
        if not isinstance(shape, list) or not all(type(d) is int and d >= -1 for d in shape):
            raise ValueError(f"tensor {name!r}: shape must be a list of integers >= -1")
        return cls(name, str(datatype), tuple(shape))

    def matches(self, shape: Sequence[int]) -> bool:
        """True if a concrete ``shape`` fits this spec (same rank, fixed dims equal)."""
        return len(shape) == len(self.shape) and all(
            want in (-1, got) for want, got in zip(self.shape, shape, strict=True)
        )


@dataclass(frozen=True, slots=True)
class Signature:
    """A model's inputs and outputs, in the model's order."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    def input(self, name: str) -> TensorSpec | None:
        return next((t for t in self.inputs if t.name == name), None)

    def output(self, name: str) -> TensorSpec | None:
        return next((t for t in self.outputs if t.name == name), None)

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.inputs)

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.outputs)


class OnnxArg(Protocol):
    """One input or output of an onnxruntime session (``onnxruntime.NodeArg``)."""

    @property
    def name(self) -> str: ...
    @property
    def type(self) -> str: ...
    @property
    def shape(self) -> Sequence[Any]: ...


class OnnxSession(Protocol):
    """What `signature_of` reads from an ``onnxruntime.InferenceSession``."""

    def get_inputs(self) -> Sequence[OnnxArg]: ...
    def get_outputs(self) -> Sequence[OnnxArg]: ...


def signature_of(session: OnnxSession) -> Signature:
    """The V2 signature of a loaded session; dynamic dims become -1."""
    return Signature(
        tuple(_spec(a) for a in session.get_inputs()),
        tuple(_spec(a) for a in session.get_outputs()),
    )


def _spec(arg: OnnxArg) -> TensorSpec:
    try:
        datatype = ONNX_TYPES[arg.type]
    except KeyError:
        raise ValueError(f"tensor {arg.name!r} has unsupported ONNX type {arg.type}") from None
    shape = tuple(d if isinstance(d, int) and d >= 0 else -1 for d in arg.shape)
    return TensorSpec(arg.name, datatype, shape)
