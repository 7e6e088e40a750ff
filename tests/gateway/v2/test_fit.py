"""A fallback's signature against a model's: each way it cannot answer the model's requests."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.config.tensors import TensorMapping
from gateway.v2.fit import fallback_misfit
from gateway.v2.schema import ModelSchema
from v2proto.signature import Signature, TensorSpec

LOGREG = Signature(  # digits-logreg, as its manifest lists it
    (TensorSpec("input", "FP32", (-1, 64)),),
    (TensorSpec("label", "INT64", (-1,)), TensorSpec("probabilities", "FP32", (-1, 10))),
)
KSERVE = {  # KServe's metadata of the digits model
    "inputs": [{"name": "input-0", "datatype": "FP32", "shape": [-1, 64]}],
    "outputs": [{"name": "predict", "datatype": "INT64", "shape": [-1]}],
}
KSERVE_NAMES = {"inputs": {"input-0": "input"}, "outputs": {"predict": "label"}}


def _misfit(metadata: dict[str, Any], mapping: dict[str, Any] | None = None) -> str | None:
    schema = ModelSchema.from_metadata(metadata)
    assert schema is not None
    return fallback_misfit(schema, LOGREG, TensorMapping.model_validate(mapping or {}))


def test_a_fallback_without_the_models_names_does_not_fit() -> None:
    assert _misfit(KSERVE) == (
        "no input 'input-0'; its inputs: input (map the model's under fallback.tensors.inputs)"
    )
    assert _misfit(KSERVE, {"inputs": {"input-0": "input"}}) == (
        "no output 'predict'; its outputs: label, probabilities (map the model's under "
        "fallback.tensors.outputs)"
    )
    assert _misfit(KSERVE, KSERVE_NAMES) is None


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        (
            [{"name": "input", "datatype": "FP64", "shape": [-1, 64]}],
            "input 'input' is FP64, its 'input' takes FP32",
        ),
        (
            [{"name": "input", "datatype": "FP32", "shape": [-1, 63]}],
            "input 'input' has shape [-1, 63], its 'input' takes [-1, 64]",
        ),
        (
            [{"name": "input", "datatype": "FP32", "shape": [-1, 8, 8]}],
            "input 'input' has shape [-1, 8, 8]",
        ),
        ([{"name": "x", "datatype": "FP32", "shape": [-1, 64]}], "no input 'x'"),
        (
            [
                {"name": "input", "datatype": "FP32", "shape": [-1, 64]},
                {"name": "mask", "datatype": "BOOL", "shape": [-1]},
            ],
            "no input 'mask'",
        ),
    ],
)
def test_datatype_shape_and_names_must_agree(inputs: list[Any], message: str) -> None:
    why = _misfit({"inputs": inputs})
    assert why is not None and why.startswith(message)


def test_what_fits() -> None:
    ours = {
        "inputs": [{"name": "input", "datatype": "FP32", "shape": [-1, 64]}],
        "outputs": [{"name": "label", "datatype": "INT64", "shape": [-1]}],
    }
    assert _misfit(ours) is None
    # a fixed batch in one signature and a free one in the other do not contradict
    assert _misfit({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 64]}]}) is None
    # no declared outputs: nothing to compare; undeclared datatype and shape: names only
    assert _misfit({"inputs": [{"name": "input"}]}) is None
    renamed = {
        "inputs": [{"name": "pixels", "datatype": "FP32", "shape": [-1, 64]}],
        "outputs": [{"name": "digit", "datatype": "INT64", "shape": [-1]}],
    }
    mapping = {"inputs": {"pixels": "input"}, "outputs": {"digit": "label"}}
    assert _misfit(renamed, mapping) is None


def test_a_fallback_input_nobody_feeds_does_not_fit() -> None:
    two = Signature(
        (TensorSpec("input", "FP32", (-1, 64)), TensorSpec("scale", "FP32", (1,))), LOGREG.outputs
    )
    schema = ModelSchema.from_metadata({"inputs": [{"name": "input"}]})
    assert schema is not None
    why = fallback_misfit(schema, two, TensorMapping())
    assert why == "its input 'scale' is fed by none of the model's inputs"
