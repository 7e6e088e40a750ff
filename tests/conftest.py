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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files with integration tests first, each file's tests in their own order.

    `make test` gives each worker a whole file at a time (``--dist loadfile``), in this order.
    The integration files are the long ones (a minute or two each, starting processes); started
    last, one of them holds a worker long after the others ran out of work. First, the short
    unit files fill the end of the run instead, and the workers finish together.
    """
    first_seen: dict[str, int] = {}
    starts_processes: set[str] = set()
    for index, item in enumerate(items):
        first_seen.setdefault(item.path.as_posix(), index)
        if item.get_closest_marker("integration") is not None:
            starts_processes.add(item.path.as_posix())

    def order(item: pytest.Item) -> tuple[bool, int]:
        path = item.path.as_posix()
        return path not in starts_processes, first_seen[path]

    items.sort(key=order)
