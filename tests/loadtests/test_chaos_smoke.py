"""The chaos runner end to end: real replicas, a real gateway, Locust, a SIGKILL, a report.

``python -m loadtests.chaos --smoke`` runs the crash scenario for about 8 s of load. The
assertions are on counts and on the objective (with the smoke margin: ≤ 1 % failed or late),
never on timing. If the run overstays, it gets SIGTERM, which it turns into stopping every
process it started, and SIGKILL only after that.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from loadtests.chaos import plots
from loadtests.chaos.scenarios import SMOKE_SCENARIO
from tests.support.processes import REPO_ROOT

pytestmark = pytest.mark.integration

TIMEOUT_S = 240.0


def run_smoke(out: Path) -> tuple[int, str]:
    argv = [sys.executable, "-m", "loadtests.chaos", "--smoke", "--out", str(out)]
    process = subprocess.Popen(
        argv, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        output, _ = process.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGTERM)  # the runner stops its processes by PID
        try:
            output, _ = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            output, _ = process.communicate()
        pytest.fail(f"smoke run overstayed {TIMEOUT_S} s:\n{output[-3000:]}")
    return process.returncode, output


def test_crash_smoke_scenario_passes_and_writes_its_report(
    models_dir: Path, tmp_path: Path
) -> None:
    code, output = run_smoke(tmp_path)
    folder = tmp_path / SMOKE_SCENARIO
    assert code == 0, output[-3000:] + (folder / "README.md").read_text()[-3000:]

    result = json.loads((folder / "result.json").read_text())
    assert result["status"] == "pass", result
    assert result["smoke"] is True
    assert result["sent"] >= 200  # ≈ 8 users × 20/s × 8 s = 1300; the run really happened
    assert result["failed"] <= 0.01 * result["sent"]
    assert result["wrong"] == 0

    locust_log = (folder / "logs" / "locust.log").read_text()  # Locust's summary, always kept
    assert "Answers (successes) by how they were made:" in locust_log, locust_log[-3000:]
    assert "plain" in locust_log.split("Answers (successes)")[1]
    seconds = (folder / "seconds.csv").read_text().splitlines()
    assert len(seconds) >= 6  # header + one row per second of load
    assert "SIGKILL" in (folder / "README.md").read_text()
    assert (folder / "timeline.png").is_file() == plots.available()
    assert f"[{SMOKE_SCENARIO}/]" in (tmp_path / "README.md").read_text()
