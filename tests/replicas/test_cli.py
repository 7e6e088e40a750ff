from __future__ import annotations

from pathlib import Path

import pytest

from replicas import build, cli


def test_serve_requires_an_existing_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(["serve", "--model", str(tmp_path / "x.onnx"), "--name", "m", "--port", "0"])
    assert code == 2 and "model file not found" in capsys.readouterr().err


def test_serve_rejects_zero_threads(model_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["serve", "--model", str(model_path), "--name", "m", "--port", "0", "--threads", "0"]
    assert cli.main(argv) == 2 and "--threads" in capsys.readouterr().err


def test_unknown_device_is_a_usage_error(model_path: Path) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(
            ["serve", "--model", str(model_path), "--name", "m", "--port", "1", "--device", "tpu"]
        )
    assert info.value.code == 2


def test_build_models_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(build, "PRIMARIES", ())  # the full build is tested in test_build
    argv = ["build-models", "--out", str(tmp_path / "m"), "--fallback-dir", str(tmp_path / "f")]
    assert cli.main(argv) == 0
    assert "digits-logreg" in capsys.readouterr().out
    (tmp_path / "f" / "digits-logreg.onnx").write_bytes(b"tampered")
    assert cli.main(argv) == 1
    assert "manifest says" in capsys.readouterr().err
