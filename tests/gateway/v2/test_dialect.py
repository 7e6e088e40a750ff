"""A pool's dialect: the client's request in the pool's tensor names (plain JSON), the pool's
outputs back in the client's names and shapes, its metadata in the client's vocabulary."""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
import pytest

from gateway.config.tensors import TensorMapping
from gateway.errors import BadRequest
from gateway.v2.dialect import Dialect
from gateway.v2.request import parse_infer_request
from v2proto.codec import encode_infer_request
from v2proto.codec import parse_infer_request as decode_request

MLSERVER = TensorMapping.model_validate(
    {"inputs": {"input": "input-0"}, "outputs": {"label": {"name": "predict", "shape": [-1]}}}
)
X = np.arange(2 * 64, dtype=np.float32).reshape(2, 64)


def test_a_native_pool_takes_every_request_as_is() -> None:
    encoded = encode_infer_request({"input": X}, binary_inputs=True, binary_outputs=True)
    info = parse_infer_request(encoded.body, str(encoded.json_length))
    assert Dialect().speaks_as_is(info)
    json_only = Dialect(binary_tensors=False)
    assert not json_only.speaks_as_is(info)  # binary in, binary asked
    plain = encode_infer_request({"input": X})
    assert json_only.speaks_as_is(parse_infer_request(plain.body, None))
    assert not Dialect(MLSERVER).speaks_as_is(parse_infer_request(plain.body, None))


@pytest.mark.parametrize("binary", [False, True])
def test_the_request_in_the_pools_names_as_plain_json(binary: bool) -> None:
    encoded = encode_infer_request(
        {"input": X}, ["label"], binary_inputs=binary, binary_outputs=binary, request_id="r-1"
    )
    length = None if encoded.json_length is None else str(encoded.json_length)
    info = parse_infer_request(encoded.body, length)
    sent = Dialect(MLSERVER, binary_tensors=False).request(encoded.body, length, info)
    assert sent.json_length is None and sent.content_type == "application/json"
    doc = orjson.loads(sent.body)
    assert doc["id"] == "r-1"
    assert doc["outputs"] == [{"name": "predict"}]  # JSON outputs, the pool's name
    request = decode_request(sent.body)
    assert list(request.inputs) == ["input-0"]
    np.testing.assert_array_equal(request.inputs["input-0"], X)


def test_request_parameters_pass_but_not_the_binary_output_flag() -> None:
    body = orjson.dumps(
        {
            "parameters": {"binary_data_output": True, "priority": 2},
            "inputs": [{"name": "input", "shape": [1, 2], "datatype": "FP32", "data": [1, 2]}],
        }
    )
    sent = Dialect(MLSERVER).request(body, None, parse_infer_request(body, None))
    assert orjson.loads(sent.body)["parameters"] == {"priority": 2}


def test_outputs_back_in_the_clients_names_and_shapes() -> None:
    dialect = Dialect(MLSERVER)
    outputs = dialect.client_outputs(
        {"predict": np.array([[3], [7]]), "predict_proba": np.zeros((2, 10))}
    )
    assert set(outputs) == {"label", "predict_proba"}  # unnamed ones pass unchanged
    assert outputs["label"].shape == (2,) and outputs["label"].tolist() == [3, 7]
    with pytest.raises(BadRequest, match="does not fit the shape"):
        Dialect(
            TensorMapping.model_validate({"outputs": {"label": {"name": "p", "shape": [3]}}})
        ).client_outputs({"p": np.zeros(2)})


def test_metadata_in_the_clients_vocabulary() -> None:
    metadata: dict[str, Any] = {
        "name": "digits",
        "inputs": [{"name": "input-0", "datatype": "FP32", "shape": [-1, 64]}],
        "outputs": [
            {"name": "predict", "datatype": "INT64", "shape": [-1, 1]},
            {"name": "predict_proba", "datatype": "FP32", "shape": [-1, 10]},
        ],
    }
    doc = Dialect(MLSERVER).client_metadata(metadata)
    assert [t["name"] for t in doc["inputs"]] == ["input"]
    assert doc["outputs"][0] == {"name": "label", "datatype": "INT64", "shape": [-1]}
    assert doc["outputs"][1]["name"] == "predict_proba"
    assert metadata["inputs"][0]["name"] == "input-0"  # the pool's own document is untouched


def test_a_mapping_is_one_to_one_and_shapes_have_one_free_dimension() -> None:
    with pytest.raises(ValueError, match="two client names map to one pool name"):
        TensorMapping.model_validate({"outputs": {"a": "p", "b": "p"}})
    with pytest.raises(ValueError, match="at most one -1"):
        TensorMapping.model_validate({"outputs": {"a": {"name": "p", "shape": [-1, -1]}}})
    short = TensorMapping.model_validate({"outputs": {"label": "predict"}})
    assert short.pool_output("label") == "predict" and short.client_output("predict")[0] == "label"
