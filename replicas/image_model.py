"""A tiny image-shaped ONNX model: 1×3×224×224 FP32 in, ten logits and a label out.

Why: the digits models take 64 numbers a row (a ~300-byte request); real image traffic sends an
image's FP32 tensor (the shape above) a request, ten of them in a batch of 10. This model gives the
payload benchmarks (``loadtests/bench_payloads.py``) a replica that takes such inputs while costing
the replica little CPU: a global average pool, a 3×10 linear layer with fixed weights, an argmax.
Built from onnx helper ops in milliseconds; nothing is trained.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

NAME = "image-gap"
INPUT = "image"
CHANNELS, HEIGHT, WIDTH = 3, 224, 224
CLASSES = 10
OPSET = 13


def image_model() -> onnx.ModelProto:
    """The model: logits = mean over H×W of each channel @ W + b; label = argmax(logits)."""
    rng = np.random.default_rng(224)  # fixed: the file, and so its hash, never changes
    weights = rng.standard_normal((CHANNELS, CLASSES)).astype(np.float32)
    bias = np.linspace(-0.5, 0.5, CLASSES, dtype=np.float32)
    nodes = [
        helper.make_node("GlobalAveragePool", [INPUT], ["pooled"]),
        helper.make_node("Flatten", ["pooled"], ["features"], axis=1),
        helper.make_node("Gemm", ["features", "W", "b"], ["logits"]),
        helper.make_node("ArgMax", ["logits"], ["label"], axis=1, keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        NAME,
        [helper.make_tensor_value_info(INPUT, TensorProto.FLOAT, ["N", CHANNELS, HEIGHT, WIDTH])],
        [
            helper.make_tensor_value_info("label", TensorProto.INT64, ["N"]),
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", CLASSES]),
        ],
        initializer=[numpy_helper.from_array(weights, "W"), numpy_helper.from_array(bias, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8  # readable by every onnxruntime the replicas pin
    onnx.checker.check_model(model)
    return model


def write_image_model(directory: Path) -> Path:
    """Writes ``image-gap.onnx`` into ``directory`` (same bytes every time); returns its path."""
    path = directory / f"{NAME}.onnx"
    data = image_model().SerializeToString()
    if not path.exists() or path.read_bytes() != data:
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    return path
