"""Every example config in config/ stays valid as the schema evolves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gateway.cli import main
from gateway.config.models import DEFAULT_MAX_ROWS
from gateway.config.server import DEFAULT_MAX_BODY_BYTES

CONFIG = Path(__file__).parents[3] / "config"
EXAMPLES = sorted(CONFIG.glob("*.yaml"))


def test_there_are_examples() -> None:
    assert {p.name for p in EXAMPLES} >= {"local.yaml", "production.yaml", "sidecar.yaml"}


# Files that exist only where the config is deployed (secrets mounted in /run/secrets).
DEPLOYED_FILES = {"production.yaml"}
# Variables the deployed configs read (set by the deployment: a Secret, the environment).
DEPLOYED_VARIABLES = {"REDIS_PASSWORD": "r" * 32}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_passes_check_config_strictly(
    path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every example is valid and safe as written: no warning, even with ``--strict``."""
    for name, value in DEPLOYED_VARIABLES.items():
        monkeypatch.setenv(name, value)
    flags = ["--no-files"] if path.name in DEPLOYED_FILES else []
    assert main(["check-config", str(path), "--strict", *flags]) == 0, capsys.readouterr().err
    captured = capsys.readouterr()
    assert ": ok (" in captured.out and "warning" not in captured.out + captured.err


def test_the_production_example_sizes_its_body_limit_to_its_models() -> None:
    """Its models take 64 numbers a row (the digits models): the largest request they take
    (``max_rows`` rows, every number as long as JSON writes one) fits, with less than a
    quarter of the default limit to spare."""
    config = yaml.safe_load((CONFIG / "production.yaml").read_text(encoding="utf-8"))
    limit = config["server"]["max_body_bytes"]
    widest = -1.2345678901234567e-05  # the longest a float64 is written
    rows = [[widest] * 64] * DEFAULT_MAX_ROWS
    tensor = {"name": "x", "shape": [DEFAULT_MAX_ROWS, 64], "datatype": "FP64", "data": rows}
    largest = json.dumps({"inputs": [tensor]})
    assert len(largest) < limit < DEFAULT_MAX_BODY_BYTES // 4


def test_check_config_names_every_missing_file_and_unknown_fallback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "pools: {p: {model: m, replicas: [{id: a, url: 'http://127.0.0.1:1'}],\n"
        "            local: {model_path: models/m.onnx}, golden: {file: golden.json}}}\n"
        "models: {d: {pool: p, fallback: {model: nope}}}\n"
    )
    assert main(["check-config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"pools.p.local.model_path: no such file: {tmp_path / 'models' / 'm.onnx'}" in err
    assert f"pools.p.golden.file: no such file: {tmp_path / 'golden.json'}" in err
    assert "models.d.fallback.model: 'nope': no model named 'nope' in the manifest" in err
    assert "invalid (3 problem(s))" in err
    assert main(["check-config", str(bad), "--no-files"]) == 0


def test_a_bad_config_names_the_key_and_exits_non_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "pools: {p: {model: m, replicas: [{id: a, url: 'http://x:1'}]}}\n"
        "models: {d: {pool: p, timeout_ms: -5}}\n"
    )
    assert main(["check-config", str(bad)]) == 2
    assert "models.d.timeout_ms" in capsys.readouterr().err


def test_a_deployed_config_checked_elsewhere_points_to_no_files(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in DEPLOYED_VARIABLES.items():
        monkeypatch.setenv(name, value)
    production = next(p for p in EXAMPLES if p.name == "production.yaml")
    if Path("/run/secrets/gateway-metrics-key").exists():
        pytest.skip("this machine holds the deployed secrets")
    assert main(["check-config", str(production)]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"`gateway check-config --no-files {production}`" in last
