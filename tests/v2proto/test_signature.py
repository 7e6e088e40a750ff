from __future__ import annotations

import numpy as np
import pytest

from v2proto.signature import DATATYPES, TensorSpec, datatype_of


@pytest.mark.parametrize("name", [n for n in DATATYPES if n != "BYTES"])
def test_datatype_names_round_trip(name: str) -> None:
    assert datatype_of(DATATYPES[name]) == name
    assert datatype_of(DATATYPES[name].newbyteorder("=")) == name


def test_bytes_and_unknown_dtypes() -> None:
    assert datatype_of(np.dtype(object)) == "BYTES"
    assert datatype_of(np.dtype("U3")) == "BYTES"
    with pytest.raises(ValueError, match="no V2 datatype"):
        datatype_of(np.dtype("complex64"))


def test_tensor_spec_json_and_matching() -> None:
    spec = TensorSpec.from_json({"name": "input", "datatype": "FP32", "shape": [-1, 64]})
    assert spec == TensorSpec("input", "FP32", (-1, 64))
    assert spec.to_json() == {"name": "input", "datatype": "FP32", "shape": [-1, 64]}
    assert spec.matches([5, 64]) and not spec.matches([5, 63]) and not spec.matches([64])


@pytest.mark.parametrize(
    "doc",
    [
        [],
        {"name": "", "datatype": "FP32", "shape": []},
        {"name": "x", "datatype": "FLOAT", "shape": []},
        {"name": "x", "datatype": "FP32", "shape": [-2]},
        {"name": "x", "datatype": "FP32", "shape": "1"},
    ],
)
def test_tensor_spec_rejects_bad_json(doc: object) -> None:
    with pytest.raises(ValueError):
        TensorSpec.from_json(doc)
