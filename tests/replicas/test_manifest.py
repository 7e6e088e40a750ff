from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from replicas.build import FALLBACK_MIN_ACCURACY, SIGNATURE
from replicas.dataset import Split
from v2proto.errors import ManifestError
from v2proto.manifest import (
    GoldenRef,
    GoldenSet,
    Manifest,
    ModelEntry,
    read_manifest,
    sha256_file,
    write_manifest,
)

from .conftest import FALLBACK_DIR


def entry_for(path: Path, golden: GoldenRef | None = None) -> ModelEntry:
    return ModelEntry(
        name="m",
        version="1",
        file=path.name,
        sha256=sha256_file(path),
        size=path.stat().st_size,
        accuracy=0.5,
        inputs=SIGNATURE.inputs,
        outputs=SIGNATURE.outputs,
        golden=golden,
    )


def test_round_trip_and_exact_format(tmp_path: Path) -> None:
    model = tmp_path / "m.onnx"
    model.write_bytes(b"model bytes")
    manifest = Manifest((entry_for(model, GoldenRef("g.json", 0.9)),))
    write_manifest(tmp_path, manifest)
    assert read_manifest(tmp_path) == manifest
    doc = json.loads((tmp_path / "MANIFEST.json").read_text())
    assert list(doc) == ["models"]
    assert list(doc["models"][0]) == [
        "name",
        "version",
        "file",
        "sha256",
        "size",
        "accuracy",
        "inputs",
        "outputs",
        "golden",
    ]
    assert doc["models"][0]["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [-1, 64]}]
    assert doc["models"][0]["outputs"] == [
        {"name": "label", "datatype": "INT64", "shape": [-1]},
        {"name": "probabilities", "datatype": "FP32", "shape": [-1, 10]},
    ]
    assert doc["models"][0]["golden"] == {"file": "g.json", "min_accuracy": 0.9}


def test_entries_without_golden_omit_the_key(tmp_path: Path) -> None:
    model = tmp_path / "m.onnx"
    model.write_bytes(b"x")
    assert "golden" not in entry_for(model).to_json()


def test_verify_file_detects_changes(tmp_path: Path) -> None:
    model = tmp_path / "m.onnx"
    model.write_bytes(b"original")
    entry = entry_for(model)
    assert entry.verify_file(tmp_path) == model
    model.write_bytes(b"tampered")  # same size, other bytes
    with pytest.raises(ManifestError, match="SHA-256"):
        entry.verify_file(tmp_path)
    model.write_bytes(b"longer than before")
    with pytest.raises(ManifestError, match="bytes, the manifest says 8"):
        entry.verify_file(tmp_path)
    model.unlink()
    with pytest.raises(ManifestError, match="missing"):
        entry.verify_file(tmp_path)


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        '{"nomodels": []}',
        '{"models": {}}',
        '{"models": [{"name": "m"}]}',
        '{"models": [{"name": "m", "version": 1, "file": "f", "sha256": "x", "size": 1,'
        ' "accuracy": 1, "inputs": [], "outputs": []}]}',
    ],
)
def test_malformed_manifests(tmp_path: Path, text: str) -> None:
    (tmp_path / "MANIFEST.json").write_text(text)
    with pytest.raises(ManifestError):
        read_manifest(tmp_path)


def test_unknown_model_name(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="no model named 'x'"):
        Manifest(()).get("x")


def test_golden_set_round_trip(tmp_path: Path) -> None:
    golden = GoldenSet(np.ones((3, 64), np.float32), np.array([1, 2, 3]), 0.6)
    golden.write(tmp_path / "g.json")
    again = GoldenSet.read(tmp_path / "g.json")
    np.testing.assert_array_equal(again.inputs, golden.inputs)
    np.testing.assert_array_equal(again.labels, golden.labels)
    assert again.min_accuracy == 0.6
    assert again.accuracy([1, 2, 0]) == pytest.approx(2 / 3)
    assert again.passes([1, 2, 0]) and not again.passes([0, 0, 3])


def test_golden_set_rejects_mismatched_rows(tmp_path: Path) -> None:
    path = tmp_path / "g.json"
    path.write_text(json.dumps({"inputs": [[1.0]], "labels": [1, 2], "min_accuracy": 0.5}))
    with pytest.raises(ManifestError):
        GoldenSet.read(path)


def test_committed_fallback_verifies_and_passes_its_golden_set(split: Split) -> None:
    entry = read_manifest(FALLBACK_DIR).get("digits-logreg")
    path = entry.verify_file(FALLBACK_DIR)
    assert entry.golden is not None and entry.size < 20_000
    assert entry.accuracy >= FALLBACK_MIN_ACCURACY
    golden = GoldenSet.read(FALLBACK_DIR / entry.golden.file)
    assert golden.min_accuracy == entry.golden.min_accuracy
    assert len(golden.labels) == 100
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert golden.passes(session.run(["label"], {"input": golden.inputs})[0])
    # every golden row comes from the test split
    test_rows = {row.tobytes() for row in split.X_test}
    assert all(row.tobytes() in test_rows for row in golden.inputs)
