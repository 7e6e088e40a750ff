"""Triton's model configuration derived from V2 metadata."""

from __future__ import annotations

from gateway.v2.triton import triton_config


def test_dims_follow_the_batch_dimension_and_types_are_tritons() -> None:
    metadata = {
        "name": "m",
        "inputs": [{"name": "text", "datatype": "BYTES", "shape": [-1, 1]}],
        "outputs": [{"name": "label", "datatype": "INT64", "shape": [-1]}, {"bad": 1}],
    }
    config = triton_config(metadata, max_rows=8)
    assert config["max_batch_size"] == 8 and config["name"] == "m"
    assert config["input"] == [{"name": "text", "data_type": "TYPE_STRING", "dims": [1]}]
    assert config["output"] == [{"name": "label", "data_type": "TYPE_INT64", "dims": []}]


def test_metadata_without_tensors_gives_an_empty_config() -> None:
    config = triton_config({"name": "m", "inputs": [], "outputs": []}, max_rows=1)
    assert config["input"] == [] and config["output"] == []
