"""checkov's Kubernetes and Dockerfile policies over deploy/: no failed check, and every
skipped one carries its reason inline (a `checkov.io/skipN` annotation or a `checkov:skip=`
comment). checkov pins many packages, so it lives in its own venv, not the project's:
`make deploy-check` builds it (under ~/.cache/v2-gateway/deploy-tools) and runs this test
with CHECKOV pointing at it; without it, the test is skipped and says how to get it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.manifests import DEPLOY, ROOT

TOOLS_VENV = Path.home() / ".cache" / "v2-gateway" / "deploy-tools"
FRAMEWORKS = ("kubernetes", "dockerfile")


def _checkov() -> str | None:
    for candidate in (os.environ.get("CHECKOV"), str(TOOLS_VENV / "bin" / "checkov")):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("checkov")


@pytest.fixture(scope="module")
def reports() -> dict[str, dict[str, Any]]:
    checkov = _checkov()
    if checkov is None:
        pytest.skip(
            "checkov not found: run `make deploy-check` (installs it into "
            f"{TOOLS_VENV}) or set CHECKOV=/path/to/checkov"
        )
    out = subprocess.run(
        [
            checkov,
            "-d",
            str(DEPLOY.relative_to(ROOT)),
            "--framework",
            *FRAMEWORKS,
            "--compact",
            "--skip-download",
            "--output",
            "json",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode in (0, 1), out.stderr[-2000:]  # 1: failed checks, reported below
    parsed = json.loads(out.stdout)
    runs = parsed if isinstance(parsed, list) else [parsed]
    return {run["check_type"]: run for run in runs}


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_no_check_fails(reports: dict[str, dict[str, Any]], framework: str) -> None:
    run = reports[framework]
    failed = [
        f"{c['check_id']} {c['resource']} ({c['file_path']})"
        for c in run["results"]["failed_checks"]
    ]
    assert not failed, "\n".join(failed)
    assert run["summary"]["passed"] > 100, run["summary"]  # it did look at the files


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_every_skip_says_why(reports: dict[str, dict[str, Any]], framework: str) -> None:
    for check in reports[framework]["results"]["skipped_checks"]:
        reason = (check.get("check_result") or {}).get("suppress_comment", "")
        assert len(reason.strip()) > 20, f"{check['check_id']} {check['resource']}: {reason!r}"
