"""The payload benchmarks' image-sized model: built the same every time, and it runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort

from replicas.image_model import NAME, write_image_model


def test_the_image_model_is_deterministic_and_takes_224_by_224_images(tmp_path: Path) -> None:
    path = write_image_model(tmp_path)
    first = path.read_bytes()
    assert path.name == f"{NAME}.onnx" and write_image_model(tmp_path).read_bytes() == first
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    images = np.random.default_rng(0).uniform(0, 1, (2, 3, 224, 224)).astype(np.float32)
    label, logits = session.run(["label", "logits"], {"image": images})
    assert logits.shape == (2, 10) and label.shape == (2,)
    assert (label == logits.argmax(axis=1)).all()
