from __future__ import annotations

from pathlib import Path

import pytest

from replicas import build, cli
from tests.support.blocked_imports import MODEL_BUILD, run_without


def test_serve_requires_an_existing_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(["serve", "--model", str(tmp_path / "x.onnx"), "--name", "m", "--port", "0"])
    assert code == 2 and "model file not found" in capsys.readouterr().err


def test_serve_rejects_zero_threads(model_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["serve", "--model", str(model_path), "--name", "m", "--port", "0", "--threads", "0"]
    assert cli.main(argv) == 2 and "--threads" in capsys.readouterr().err


def test_faults_without_a_key_refuse_to_start(
    model_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("REPLICA_FAULT_KEY", raising=False)
    argv = ["serve", "--model", str(model_path), "--name", "m", "--port", "0", "--enable-faults"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "--enable-faults needs a key: set REPLICA_FAULT_KEY or pass --fault-key-file" in err


def test_faults_with_a_short_key_refuse_to_start(
    model_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("REPLICA_FAULT_KEY", "letmein")
    argv = ["serve", "--model", str(model_path), "--name", "m", "--port", "0", "--enable-faults"]
    assert cli.main(argv) == 2
    assert "the fault key has 7 characters; it needs at least 16" in capsys.readouterr().err


def test_a_key_file_needs_the_faults_flag(
    model_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "key").write_text("k")
    argv = [
        "serve",
        "--model",
        str(model_path),
        "--name",
        "m",
        "--port",
        "0",
        "--fault-key-file",
        str(tmp_path / "key"),
    ]
    assert cli.main(argv) == 2
    assert "--fault-key-file needs --enable-faults" in capsys.readouterr().err


def test_help_says_which_key_source_wins(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "wins over the REPLICA_FAULT_KEY environment variable" in text


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


def test_build_models_without_the_build_extra_names_it(tmp_path: Path) -> None:
    code = f"""
from replicas.cli import main
print("RC", main(["build-models", "--out", {str(tmp_path / "m")!r}]))
"""
    result = run_without(MODEL_BUILD, code)
    assert "RC 2" in result.stdout, result.stderr[-2000:]
    assert "the model build needs the 'build' extra" in result.stderr
    assert "pip install 'v2-gateway[build]'" in result.stderr
    assert not (tmp_path / "m").exists()


def test_serve_without_the_replica_extra_names_it(model_path: Path) -> None:
    code = f"""
from replicas.cli import main
print("RC", main(["serve", "--model", {str(model_path)!r}, "--name", "m", "--port", "0"]))
"""
    result = run_without(("onnxruntime",), code)
    assert "RC 2" in result.stdout, result.stderr[-2000:]
    assert "the replica server needs the 'replica' extra" in result.stderr
    assert "pip install 'v2-gateway[replica]'" in result.stderr
