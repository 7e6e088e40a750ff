"""Shared fixtures: the committed fallback model (a real, small ONNX model) and the data split."""

from __future__ import annotations

from pathlib import Path

import pytest

from replicas.dataset import Split, load_split
from replicas.model import OnnxModel

REPO_ROOT = Path(__file__).resolve().parents[2]
FALLBACK_DIR = REPO_ROOT / "fallback_models"
MODEL_PATH = FALLBACK_DIR / "digits-logreg.onnx"


@pytest.fixture(scope="session")
def model_path() -> Path:
    assert MODEL_PATH.is_file(), f"{MODEL_PATH} is committed; run `replica build-models`"
    return MODEL_PATH


@pytest.fixture(scope="session")
def split() -> Split:
    return load_split()


@pytest.fixture(scope="session")
def onnx_model(model_path: Path) -> OnnxModel:
    return OnnxModel(model_path)
