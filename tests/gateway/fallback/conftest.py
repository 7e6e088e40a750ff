from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gateway.fallback.model import FallbackModel
from tests.gateway.fallback.support import COMMITTED, FILES, NAME, InlineExecutor
from tests.support.clock import FakeClock


@pytest.fixture
def fallback_dir(tmp_path: Path) -> Path:
    """A private copy of the committed fallback files, to tamper with."""
    for name in FILES:
        shutil.copy2(COMMITTED / name, tmp_path / name)
    return tmp_path


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def model(fallback_dir: Path, clock: FakeClock) -> FallbackModel:
    return FallbackModel(fallback_dir, NAME, clock, executor=InlineExecutor())
