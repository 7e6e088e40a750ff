"""``gateway check-config --probe`` against the real peers: every mismatch named, then none."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.cli import main
from tests.support.peers import PeerProcess

pytestmark = [pytest.mark.integration, pytest.mark.peers]

GOLDEN = str(Path(__file__).resolve().parents[2] / "fallback_models" / "digits-golden.json")
PEER_TENSORS = {"outputs": {"label": {"name": "predict", "shape": [-1]}}}


def _run(
    tmp_path: Path, config: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> tuple[int, str]:
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    code = main(["check-config", str(path), "--probe"])
    return code, capsys.readouterr().out


def _config(
    mlserver: PeerProcess, kserve: PeerProcess, pools: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    golden = {"file": GOLDEN, "scores_output": None}
    return {
        "pools": {
            "mlserver": {
                "model": "digits",
                "version": "1",
                "replicas": [{"id": "mlserver-a", "url": mlserver.url}],
                "golden": golden,
                **pools.get("mlserver", {}),
            },
            "kserve": {
                "model": "digits",
                "replicas": [{"id": "kserve-a", "url": kserve.url}],
                "golden": golden,
                **pools.get("kserve", {}),
            },
        },
        "models": {
            "a": {"pool": "mlserver"},
            "b": {"pool": "kserve"},
            "v": {"vote": {"pools": ["mlserver", "kserve"], "quorum": 2}},
        },
    }


def test_the_probe_names_every_mismatch(
    mlserver: PeerProcess,
    kserve: PeerProcess,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = _config(mlserver, kserve, {"kserve": {"version": "1"}})
    code, out = _run(tmp_path, config, capsys)
    assert code == 1, out
    # KServe answers 501 on versioned paths; the unversioned one works
    assert "remove version '1' from the pool" in out
    # MLServer: no 'label' output (it answers 'predict'), and no binary extension listed: the
    # gateway learns that and sends it JSON (KServe too: it lists only its repository's)
    assert "pool 'mlserver'" in out and "no output 'label' after the pool's mapping" in out
    assert "info: pool 'mlserver', replica 'mlserver-a': the gateway will send it JSON" in out
    assert "info: pool 'kserve', replica 'kserve-a': the gateway will send it JSON" in out
    # unversioned, KServe's metadata lists its tensors: the names are checked against them
    code, out = _run(tmp_path, _config(mlserver, kserve, {}), capsys)
    assert code == 1, out
    assert "pool 'kserve', replica 'kserve-a': no input 'input' on the server" in out
    assert "model 'v' votes on output 'label': no output 'label' on the server" in out


def test_a_config_that_fits_the_peers_passes(
    mlserver: PeerProcess,
    kserve: PeerProcess,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    pools: dict[str, dict[str, Any]] = {
        "mlserver": {"tensors": PEER_TENSORS},
        "kserve": {"tensors": {"inputs": {"input": "input-0"}, **PEER_TENSORS}},
    }
    config = _config(mlserver, kserve, pools)
    code, out = _run(tmp_path, config, capsys)
    assert code == 0, out
    assert "error" not in out
    # both return the request's id: nothing to declare (echoes_id stays true)
    assert "info: pool 'mlserver', replica 'mlserver-a': echoes request ids" in out
    assert "info: pool 'kserve', replica 'kserve-a': echoes request ids" in out
