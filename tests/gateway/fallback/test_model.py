from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest

from gateway.errors import BadRequest, FallbackUnavailable
from gateway.fallback.manifest import read_hashed
from gateway.fallback.model import FallbackModel
from replicas.dataset import load_split
from tests.gateway.fallback.support import COMMITTED, NAME, bump_mtime, tamper
from tests.support.clock import FakeClock

PINNED = json.loads((COMMITTED / "MANIFEST.json").read_text())["models"][0]["sha256"]


async def test_the_committed_model_verifies(clock: FakeClock) -> None:
    model = FallbackModel(COMMITTED, NAME, clock)  # the real thread pool, the real files
    status = await model.verify()
    assert status.ok and model.ok, status.reason
    assert status.sha256 == PINNED and status.version == "1"
    assert status.accuracy is not None and status.accuracy >= 0.9
    assert status.checked_at == clock.wall()
    assert "verified" in status.reason
    assert status.to_json()["model"] == NAME


async def test_test_split_accuracy(clock: FakeClock) -> None:
    model = FallbackModel(COMMITTED, NAME, clock)
    await model.verify()
    split = load_split()
    outputs = await model.infer({"input": split.X_test})
    assert float(np.mean(outputs["label"] == split.y_test)) >= 0.95
    assert outputs["label"].dtype == np.int64 and outputs["label"].shape == (450,)
    assert outputs["probabilities"].dtype == np.float32
    assert outputs["probabilities"].shape == (450, 10)


async def test_a_tampered_copy_is_refused(model: FallbackModel, fallback_dir: Path) -> None:
    tamper(fallback_dir / f"{NAME}.onnx")
    status = await model.verify()
    assert not status.ok and not model.ok
    assert status.reason.startswith(f"sha256 mismatch: manifest {PINNED[:12]}")
    _, digest = read_hashed(fallback_dir / f"{NAME}.onnx")
    assert status.sha256 == digest and digest[:12] in status.reason
    with pytest.raises(FallbackUnavailable, match="sha256 mismatch"):
        await model.infer({"input": np.zeros((1, 64), dtype=np.float32)})


async def test_tampering_after_verification_stops_serving(
    model: FallbackModel, fallback_dir: Path
) -> None:
    path = fallback_dir / f"{NAME}.onnx"
    original = path.read_bytes()
    assert (await model.verify()).ok
    tamper(path)
    assert not (await model.verify()).ok and not model.ok
    path.write_bytes(original)
    bump_mtime(path)
    assert (await model.verify()).ok and model.ok


async def test_unverified_model_does_not_answer(model: FallbackModel) -> None:
    assert not model.ok and model.status.reason == "not verified yet"
    with pytest.raises(FallbackUnavailable, match="not verified yet"):
        await model.infer({"input": np.zeros((1, 64), dtype=np.float32)})


async def test_golden_minimum_can_only_be_raised(model: FallbackModel, fallback_dir: Path) -> None:
    golden = fallback_dir / "digits-golden.json"
    doc = json.loads(golden.read_text())
    doc["min_accuracy"] = 0.99
    golden.write_text(json.dumps(doc))
    status = await model.verify()
    assert not status.ok
    assert status.reason == "golden accuracy 0.940 is below the minimum 0.990"
    doc["min_accuracy"] = 0.1  # lower than the manifest's 0.9: the manifest's bar stands
    golden.write_text(json.dumps(doc))
    assert (await model.verify()).reason.endswith(">= 0.900")


async def test_wrong_golden_labels_are_refused(model: FallbackModel, fallback_dir: Path) -> None:
    golden = fallback_dir / "digits-golden.json"
    doc = json.loads(golden.read_text())
    doc["labels"] = [(label + 1) % 10 for label in doc["labels"]]
    golden.write_text(json.dumps(doc))
    status = await model.verify()
    assert not status.ok and "golden accuracy 0.0" in status.reason


async def test_manifest_problems_are_reasons(model: FallbackModel, fallback_dir: Path) -> None:
    manifest = fallback_dir / "MANIFEST.json"
    doc = json.loads(manifest.read_text())
    del doc["models"][0]["golden"]
    manifest.write_text(json.dumps(doc))
    assert "has no golden set" in (await model.verify()).reason
    (fallback_dir / f"{NAME}.onnx").unlink()
    other = FallbackModel(fallback_dir, "nope", FakeClock())
    assert "no model named 'nope'" in (await other.verify()).reason


async def test_missing_file_is_a_reason(model: FallbackModel, fallback_dir: Path) -> None:
    (fallback_dir / f"{NAME}.onnx").unlink()
    status = await model.verify()
    assert not status.ok and status.reason.startswith("cannot read")


async def test_inputs_are_checked_against_the_signature(model: FallbackModel) -> None:
    await model.verify()
    good = np.zeros((2, 64), dtype=np.float32)
    with pytest.raises(BadRequest, match="unknown input 'x'"):
        await model.infer({"input": good, "x": good})
    with pytest.raises(BadRequest, match="missing input 'input'"):
        await model.infer({})
    with pytest.raises(BadRequest, match="datatype FP64, the model expects FP32"):
        await model.infer({"input": good.astype(np.float64)})
    with pytest.raises(BadRequest, match=r"shape \[2, 63\]"):
        await model.infer({"input": good[:, :63]})
    overflowing = np.full((1, 64), 3.4e38, dtype=np.float32)
    overflowing[0, ::2] *= -1  # finite, but its softmax is NaN
    with pytest.raises(BadRequest, match="'probabilities' is not finite"):
        await model.infer({"input": overflowing})


async def test_status_changes_are_logged_once(
    model: FallbackModel, fallback_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.fallback.model")
    for _ in range(3):
        await model.verify()
    tamper(fallback_dir / f"{NAME}.onnx")
    for _ in range(3):
        await model.verify()
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2 and model.verifications == 6
    assert "is available" in messages[0] and "is refused: sha256 mismatch" in messages[1]
