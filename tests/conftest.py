"""Session-wide setup: the primary models that integration tests serve are built once."""

from __future__ import annotations

from pathlib import Path

import pytest

MODELS = Path(__file__).resolve().parents[1] / "models"


@pytest.fixture(scope="session")
def models_dir() -> Path:
    if not (MODELS / "MANIFEST.json").is_file():
        from replicas.build import build_models

        build_models(MODELS, MODELS.parent / "fallback_models", progress=False)
    return MODELS
