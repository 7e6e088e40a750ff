"""``check-config`` refuses a fallback that cannot answer the model's tensors, against KServe.

A pool over KServe speaks its names (``input-0``, ``predict``); digits-logreg speaks ``input``
and ``label``. Without ``fallback.tensors`` every degraded answer was a 400 while readiness
and ``check-config`` (with or without ``--probe``) said all was well.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.cli import main
from tests.support.peers import PeerProcess

pytestmark = [pytest.mark.integration, pytest.mark.peers]

KSERVE_NAMES = {
    "inputs": {"input-0": "input"},
    "outputs": {"predict": "label", "predict_proba": "probabilities"},
}
MISFIT = "cannot answer the model's tensors: no input 'input-0'; its inputs: input"


def _run(tmp_path: Path, config: dict[str, Any], *flags: str) -> int:
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    return main(["check-config", str(path), *flags])


def _config(kserve: PeerProcess, fallback: dict[str, Any]) -> dict[str, Any]:
    return {
        "pools": {
            "kserve": {"model": "digits", "replicas": [{"id": "kserve-a", "url": kserve.url}]}
        },
        "models": {"digits": {"pool": "kserve", "fallback": fallback}},
    }


def test_the_probe_refuses_a_fallback_without_the_servers_names(
    kserve: PeerProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _run(tmp_path, _config(kserve, {"model": "digits-logreg"}), "--probe")
    out = capsys.readouterr().out
    assert code == 1, out
    assert f"model 'digits': fallback 'digits-logreg' {MISFIT}" in out
    mapped = {"model": "digits-logreg", "tensors": KSERVE_NAMES}
    code = _run(tmp_path, _config(kserve, mapped), "--probe")
    out = capsys.readouterr().out
    assert code == 0 and "error" not in out, out


def test_check_config_refuses_it_against_a_declared_signature(
    kserve: PeerProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The signature as KServe lists it, declared: no server needs to be asked."""
    config = _config(kserve, {"model": "digits-logreg"})
    config["models"]["digits"]["signature"] = {
        "inputs": [{"name": "input-0", "datatype": "FP32", "shape": [-1, 64]}],
        "outputs": [{"name": "predict", "datatype": "INT64", "shape": [-1]}],
    }
    code = _run(tmp_path, config)
    err = capsys.readouterr().err
    assert code == 2 and "models.digits.fallback: 'digits-logreg' cannot answer" in err, err
