"""Run Python code in a fresh interpreter where some packages cannot be imported.

A test that the gateway runs without scikit-learn (say) must not depend on whether this venv
happens to have it: a meta path finder refuses the named top-level packages as if they were
not installed, and records every attempt, so a dependency that catches the `ImportError` and
carries on is still seen.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterable
from typing import Any

from tests.support.processes import REPO_ROOT

MODEL_BUILD = ("sklearn", "skl2onnx", "onnx", "tqdm")  # the `build` extra's packages
LOAD = ("aiohttp", "locust", "matplotlib")  # the `load` extra's packages

_PRELUDE = """
import importlib.abc, sys
BLOCKED = set({blocked!r})
ATTEMPTS = []

class _Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            ATTEMPTS.append(name)
            raise ModuleNotFoundError(f"No module named {{name!r}} (blocked)", name=name)
        return None

sys.meta_path.insert(0, _Refuse())
"""

_REPORT = """
import json as _json
_loaded = sorted(m for m in sys.modules if m.partition(".")[0] in BLOCKED)
print("BLOCKED-IMPORTS " + _json.dumps({"attempts": ATTEMPTS, "loaded": _loaded}))
"""


def run_without(
    blocked: Iterable[str], code: str, timeout_s: float = 120.0
) -> subprocess.CompletedProcess[str]:
    """Runs ``code`` (then a report line) in a new interpreter at the repository root."""
    script = _PRELUDE.format(blocked=sorted(blocked)) + code + _REPORT
    return subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def report(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The blocked imports the code attempted and the blocked modules that got loaded."""
    for line in result.stdout.splitlines():
        if line.startswith("BLOCKED-IMPORTS "):
            parsed: dict[str, Any] = json.loads(line.removeprefix("BLOCKED-IMPORTS "))
            return parsed
    raise AssertionError(f"no report; rc={result.returncode}\n{result.stdout}\n{result.stderr}")
