"""Relative paths in a config mean files beside it, whatever the working directory."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml

from gateway.config import load_config
from gateway.config.paths import resolve_paths
from gateway.control.preflight import config_problems
from gateway.fallback.manifest import BUNDLED_MANIFEST, configured_manifest

REPO = Path(__file__).resolve().parents[3]


def test_each_kind_of_path_is_resolved_and_absolute_ones_kept(tmp_path: Path) -> None:
    data = {
        "fallback_manifest": "fb/MANIFEST.json",
        "server": {"admin": {"key_file": "keys/admin", "metrics_key_file": "/abs/metrics"}},
        "pools": {
            "p": {
                "local": {"model_path": "m.onnx"},
                "golden": {"file": "../golden.json"},
                "tls": {"ca_file": "ca.pem", "cert_file": "/etc/c.pem"},
            }
        },
        "tenants": {"t": {"keys_file": "t.keys"}},
    }
    resolve_paths(data, tmp_path)
    assert data["fallback_manifest"] == str(tmp_path / "fb" / "MANIFEST.json")
    assert data["server"]["admin"] == {  # type: ignore[index]
        "key_file": str(tmp_path / "keys" / "admin"),
        "metrics_key_file": "/abs/metrics",
    }
    pool = data["pools"]["p"]  # type: ignore[index]
    assert pool["local"]["model_path"] == str(tmp_path / "m.onnx")
    assert pool["golden"]["file"] == str(tmp_path.parent / "golden.json")
    assert pool["tls"] == {"ca_file": str(tmp_path / "ca.pem"), "cert_file": "/etc/c.pem"}
    assert data["tenants"]["t"]["keys_file"] == str(tmp_path / "t.keys")  # type: ignore[index]


def test_a_config_elsewhere_finds_its_files_from_any_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    shutil.copy(REPO / "fallback_models" / "digits-golden.json", site / "golden.json")
    (site / "model.onnx").write_bytes(b"not really a model")
    config = {
        "pools": {
            "p": {
                "model": "m",
                "local": {"model_path": "model.onnx"},
                "golden": {"file": "golden.json"},
                "replicas": [{"id": "a", "url": "http://127.0.0.1:1"}],
            }
        },
        "models": {"d": {"pool": "p", "fallback": {"model": "digits-logreg"}}},
    }
    (site / "gateway.yaml").write_text(yaml.safe_dump(config))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    loaded = load_config(Path("..") / "site" / "gateway.yaml")
    pool = loaded.pools["p"]
    assert pool.golden is not None and pool.golden.file == str(site / "golden.json")
    assert config_problems(loaded) == []  # the bundled fallback manifest needs no cwd either


def test_the_default_config_is_whole_from_another_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = load_config(REPO / "config" / "local.yaml")
    assert config_problems(config) == []


def test_the_bundled_manifest_is_the_repositorys() -> None:
    assert configured_manifest(None) == BUNDLED_MANIFEST
    assert BUNDLED_MANIFEST.is_file()
    assert os.path.samefile(BUNDLED_MANIFEST, REPO / "fallback_models" / "MANIFEST.json")
