"""Session-wide setup: the primary models that integration tests serve are built once, and
the variables the example configs read are set, as their deployment sets them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

MODELS = Path(__file__).resolve().parents[1] / "models"
# config/production.yaml reads Redis's password from the environment (state.redis_url), and
# a config that names an unset variable is refused at load: every command that reads it
# (check-config, slo-rules) needs it set. A stand-in, for this process and what it starts.
os.environ.setdefault("REDIS_PASSWORD", "example-redis-password-stand-in")


@pytest.fixture(scope="session")
def models_dir() -> Path:
    if not (MODELS / "MANIFEST.json").is_file():
        from replicas.build import build_models

        build_models(MODELS, MODELS.parent / "fallback_models", progress=False)
    return MODELS
