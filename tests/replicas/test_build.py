"""The model build: one real build into temporary directories (a few seconds on 2 cores)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from replicas import build
from replicas.build import FALLBACK, GOLDEN_FILE, MAX_MODEL_BYTES, SIGNATURE, Built
from v2proto.manifest import GoldenSet, read_manifest, sha256_file


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, list[Built]]]:
    root = tmp_path_factory.mktemp("build")
    out, fallback = root / "models", root / "fallback"
    results = build.build_models(out, fallback, progress=False)
    yield out, fallback, results


def test_primaries(built: tuple[Path, Path, list[Built]]) -> None:
    out, _, results = built
    manifest = read_manifest(out)
    assert [m.name for m in manifest.models] == ["digits-mlp", "digits-svm", "digits-forest"]
    for entry in manifest.models:
        path = entry.verify_file(out)
        assert entry.version == "1" and entry.file == f"{entry.name}.onnx"
        assert entry.size < MAX_MODEL_BYTES and entry.accuracy >= 0.95 and entry.golden is None
        assert (entry.inputs, entry.outputs) == (SIGNATURE.inputs, SIGNATURE.outputs)
        graph = onnx.load(str(path)).graph
        assert [o.name for o in graph.output] == ["label", "probabilities"]
        assert [i.name for i in graph.input] == ["input"]
    assert all(r.agreement is not None and r.agreement >= 0.99 for r in results)


def test_fallback_is_built_when_missing(built: tuple[Path, Path, list[Built]]) -> None:
    _, fallback, results = built
    entry = read_manifest(fallback).get(FALLBACK.name)
    entry.verify_file(fallback)
    assert entry.size < 10_000 and entry.accuracy >= 0.95
    assert entry.golden is not None and entry.golden.file == GOLDEN_FILE
    golden = GoldenSet.read(fallback / GOLDEN_FILE)
    assert golden.inputs.shape == (100, 64) and golden.min_accuracy == entry.golden.min_accuracy
    assert results[-1].golden_accuracy is not None
    assert results[-1].golden_accuracy >= golden.min_accuracy + 0.03  # a margin, not a knife edge


def test_fallback_is_kept_unless_refreshed(
    built: tuple[Path, Path, list[Built]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _, fallback, _ = built
    monkeypatch.setattr(build, "PRIMARIES", ())
    model = fallback / f"{FALLBACK.name}.onnx"
    before = {p.name: sha256_file(p) for p in fallback.iterdir()}
    mtime = model.stat().st_mtime_ns
    results = build.build_models(tmp_path, fallback, progress=False)
    assert results[-1].sklearn_accuracy is None  # checked, not rebuilt
    assert model.stat().st_mtime_ns == mtime
    assert {p.name: sha256_file(p) for p in fallback.iterdir()} == before
    build.build_models(tmp_path, fallback, refresh_fallback=True, progress=False)
    assert read_manifest(fallback).get(FALLBACK.name).sha256 == sha256_file(model)


def test_tampered_fallback_is_refused(
    built: tuple[Path, Path, list[Built]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _, fallback, _ = built
    monkeypatch.setattr(build, "PRIMARIES", ())
    copy = tmp_path / "fallback"
    copy.mkdir()
    for p in fallback.iterdir():
        (copy / p.name).write_bytes(p.read_bytes())
    model = copy / f"{FALLBACK.name}.onnx"
    model.write_bytes(model.read_bytes() + b"\0")
    with pytest.raises(ValueError, match="manifest says"):
        build.build_models(tmp_path / "models", copy, progress=False)


def test_rename_outputs() -> None:
    node = helper.make_node("Identity", ["x"], ["output_label"])
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.INT64, [None])],
        [helper.make_tensor_value_info("output_label", TensorProto.INT64, [None])],
    )
    build._rename(graph, "output_label", "label")
    assert list(graph.node[0].output) == ["label"] and graph.output[0].name == "label"


def test_table_mentions_every_model(built: tuple[Path, Path, list[Built]]) -> None:
    table = build.format_table(built[2])
    for name in ("digits-mlp", "digits-svm", "digits-forest", "digits-logreg", "golden set"):
        assert name in table
