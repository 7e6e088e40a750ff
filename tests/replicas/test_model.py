from __future__ import annotations

import logging

import numpy as np
import pytest

from replicas.dataset import Split
from replicas.errors import InferenceFailed
from replicas.model import PROVIDERS, OnnxModel

from .conftest import MODEL_PATH


def test_signature_comes_from_the_session(onnx_model: OnnxModel) -> None:
    sig = onnx_model.signature
    assert [t.to_json() for t in sig.inputs] == [
        {"name": "input", "datatype": "FP32", "shape": [-1, 64]}
    ]
    assert sig.output_names == ("label", "probabilities")
    assert sig.output("probabilities") is not None and sig.output("nope") is None
    assert onnx_model.provider == "CPUExecutionProvider"
    assert onnx_model.requested_device == "cpu"


def test_warm_up_runs_batch_one(onnx_model: OnnxModel) -> None:
    out = onnx_model.warm_up()
    assert out["label"].shape == (1,) and out["probabilities"].shape == (1, 10)


def test_run_matches_test_split_accuracy(onnx_model: OnnxModel, split: Split) -> None:
    out = onnx_model.run({"input": split.X_test})
    assert out["label"].dtype == np.int64
    assert np.mean(out["label"] == split.y_test) > 0.95


def test_runtime_errors_become_inference_failed(onnx_model: OnnxModel) -> None:
    with pytest.raises(InferenceFailed, match="inference failed"):
        onnx_model.run({"input": np.zeros((1, 64), np.float64)})


def test_cuda_request_reports_the_provider_in_use(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="replicas.model"):
        model = OnnxModel(MODEL_PATH, device="cuda")
    assert model.requested_device == "cuda"
    assert model.provider in PROVIDERS["cuda"]
    if model.provider != "CUDAExecutionProvider":  # no GPU build or no GPU here
        assert "CUDA was requested" in caplog.text
