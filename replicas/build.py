"""Train, export to ONNX and verify the digits models; write their manifests and the golden set.

The gateway votes across three *diverse* primaries (a neural net, a kernel machine, a tree
ensemble fail differently) and falls back to one small verified model, so every file is built
reproducibly (fixed split, fixed seeds), checked with onnxruntime against scikit-learn before it
is recorded, and pinned by SHA-256. The fallback and its golden set are committed to git: they
are rebuilt only when missing or on ``--refresh-fallback``, so their hashes stay stable.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from skl2onnx import to_onnx
from skl2onnx.common.data_types import FloatTensorType
from sklearn.calibration import CalibratedClassifierCV
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler, StandardScaler
from sklearn.svm import SVC
from tqdm import tqdm

from replicas.dataset import N_CLASSES, N_FEATURES, Split, load_split
from replicas.image_model import write_image_model
from v2proto.manifest import (
    MANIFEST_NAME,
    GoldenRef,
    GoldenSet,
    Manifest,
    ModelEntry,
    read_manifest,
    sha256_file,
    write_manifest,
)
from v2proto.signature import Signature, TensorSpec, signature_of

VERSION = "1"
MIN_AGREEMENT = 0.99  # onnxruntime vs scikit-learn labels on the test split
MAX_MODEL_BYTES = 5 * 1024 * 1024
FALLBACK_MIN_ACCURACY = 0.95
GOLDEN_FILE = "digits-golden.json"
GOLDEN_PER_CLASS = 10  # 100 rows: the first 10 test rows of each class
GOLDEN_MIN_ACCURACY = 0.90  # the fallback scores 0.94 on them: a margin of 4 rows

SIGNATURE = Signature(
    inputs=(TensorSpec("input", "FP32", (-1, N_FEATURES)),),
    outputs=(
        TensorSpec("label", "INT64", (-1,)),
        TensorSpec("probabilities", "FP32", (-1, N_CLASSES)),
    ),
)
_OUTPUT_NAMES = {"output_label": "label", "output_probability": "probabilities"}


class BuildError(RuntimeError):
    """A model failed verification, or the committed fallback does not match its manifest."""


@dataclass(frozen=True)
class Recipe:
    name: str
    description: str
    make: Callable[[], Any]


PRIMARIES = (
    # The three were chosen so that their 2-of-3 majority is at least as accurate as the
    # best of them alone (the SVM, on the test split), which a vote must not lose.
    Recipe(
        "digits-mlp",
        "MLP, 256 hidden units, min-max scaled input",
        lambda: make_pipeline(
            MinMaxScaler(),
            MLPClassifier(hidden_layer_sizes=(256,), alpha=1e-4, max_iter=2000, random_state=0),
        ),
    ),
    Recipe(
        # SVC(probability=True) is deprecated since scikit-learn 1.9; this is its replacement.
        "digits-svm",
        "RBF SVM, sigmoid-calibrated probabilities",
        lambda: CalibratedClassifierCV(SVC(kernel="rbf", gamma=0.001), ensemble=False),
    ),
    Recipe(
        "digits-forest",
        "random forest, 120 trees of depth <= 14",
        lambda: RandomForestClassifier(n_estimators=120, max_depth=14, random_state=0, n_jobs=1),
    ),
)
FALLBACK = Recipe(
    "digits-logreg",
    "logistic regression, standardized input",
    lambda: make_pipeline(StandardScaler(), LogisticRegression(C=0.1, max_iter=2000)),
)


@dataclass(frozen=True)
class Built:
    entry: ModelEntry
    sklearn_accuracy: float | None  # None: an existing file was checked, not rebuilt
    agreement: float | None
    seconds: float
    golden_accuracy: float | None = None


def export_onnx(estimator: Any) -> bytes:
    """ONNX bytes with input ``input`` FP32 [N, 64], outputs ``label`` and ``probabilities``."""
    model = to_onnx(
        estimator,
        initial_types=[("input", FloatTensorType([None, N_FEATURES]))],
        options={"zipmap": False},
    )
    for old, new in _OUTPUT_NAMES.items():
        _rename(model.graph, old, new)
    onnx.checker.check_model(model)
    return bytes(model.SerializeToString())


def _rename(graph: onnx.GraphProto, old: str, new: str) -> None:
    for node in graph.node:
        node.output[:] = [new if n == old else n for n in node.output]
        node.input[:] = [new if n == old else n for n in node.input]
    for value in graph.output:
        if value.name == old:
            value.name = new


def check_onnx(model: bytes | Path, split: Split) -> tuple[float, np.ndarray[Any, Any]]:
    """Test-split accuracy and labels of an ONNX model, after checking its signature."""
    source = str(model) if isinstance(model, Path) else model
    session = ort.InferenceSession(source, providers=["CPUExecutionProvider"])
    signature = signature_of(session)
    if signature != SIGNATURE:
        raise BuildError(f"exported signature {signature} is not {SIGNATURE}")
    labels, probabilities = session.run(None, {"input": split.X_test})
    if not np.array_equal(np.argmax(probabilities, axis=1), labels):
        raise BuildError("exported probabilities disagree with exported labels")
    return float(np.mean(labels == split.y_test)), labels


def _build_one(recipe: Recipe, split: Split, directory: Path) -> Built:
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # skl2onnx on newer scikit-learn
        estimator = recipe.make().fit(split.X_train, split.y_train)
        expected = estimator.predict(split.X_test)
        data = export_onnx(estimator)
    if len(data) > MAX_MODEL_BYTES:
        raise BuildError(f"{recipe.name}: {len(data)} bytes exceeds {MAX_MODEL_BYTES}")
    accuracy, labels = check_onnx(data, split)
    agreement = float(np.mean(labels == expected))
    if agreement < MIN_AGREEMENT:
        raise BuildError(f"{recipe.name}: onnxruntime agrees with scikit-learn on {agreement:.2%}")
    path = directory / f"{recipe.name}.onnx"
    _atomic_write(path, data)
    return Built(
        _entry(recipe.name, path, accuracy),
        float(np.mean(expected == split.y_test)),
        agreement,
        time.perf_counter() - started,
    )


def _entry(name: str, path: Path, accuracy: float, golden: GoldenRef | None = None) -> ModelEntry:
    return ModelEntry(
        name=name,
        version=VERSION,
        file=path.name,
        sha256=sha256_file(path),
        size=path.stat().st_size,
        accuracy=round(accuracy, 4),
        inputs=SIGNATURE.inputs,
        outputs=SIGNATURE.outputs,
        golden=golden,
    )


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def golden_set(split: Split) -> GoldenSet:
    rows = np.concatenate(
        [np.flatnonzero(split.y_test == k)[:GOLDEN_PER_CLASS] for k in range(N_CLASSES)]
    )
    return GoldenSet(split.X_test[rows], split.y_test[rows], GOLDEN_MIN_ACCURACY)


def _fallback(directory: Path, split: Split, refresh: bool) -> Built:
    """Build the fallback if missing or asked to; in every case check what is on disk."""
    model_path = directory / f"{FALLBACK.name}.onnx"
    golden_path, manifest_path = directory / GOLDEN_FILE, directory / MANIFEST_NAME
    built = _build_one(FALLBACK, split, directory) if refresh or not model_path.exists() else None
    if built is not None or not golden_path.exists():
        golden_set(split).write(golden_path)
    golden = GoldenSet.read(golden_path)
    started = time.perf_counter()
    if built is not None or not manifest_path.exists():
        ref = GoldenRef(GOLDEN_FILE, golden.min_accuracy)
        accuracy, _ = check_onnx(model_path, split)
        write_manifest(manifest_path, Manifest((_entry(FALLBACK.name, model_path, accuracy, ref),)))
    entry = read_manifest(manifest_path).get(FALLBACK.name)
    entry.verify_file(directory)  # before running it: a tampered file is refused unread
    accuracy, _ = check_onnx(model_path, split)
    session = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    golden_labels = session.run(["label"], {"input": golden.inputs})[0]
    if accuracy < FALLBACK_MIN_ACCURACY or not golden.passes(golden_labels):
        raise BuildError(
            f"fallback {FALLBACK.name}: test accuracy {accuracy:.4f} (needs "
            f"{FALLBACK_MIN_ACCURACY}), golden accuracy {golden.accuracy(golden_labels):.2f} "
            f"(needs {golden.min_accuracy})"
        )
    golden_accuracy = golden.accuracy(golden_labels)
    if built is not None:
        return Built(entry, built.sklearn_accuracy, built.agreement, built.seconds, golden_accuracy)
    return Built(entry, None, None, time.perf_counter() - started, golden_accuracy)


def build_models(
    out_dir: Path, fallback_dir: Path, *, refresh_fallback: bool = False, progress: bool = True
) -> list[Built]:
    """Build the primaries into ``out_dir`` and check (or build) the fallback; print a table."""
    split = load_split()
    out_dir.mkdir(parents=True, exist_ok=True)
    fallback_dir.mkdir(parents=True, exist_ok=True)
    results: list[Built] = []
    with tqdm(total=len(PRIMARIES) + 1, unit="model", disable=not progress) as bar:
        for recipe in PRIMARIES:
            bar.set_description(recipe.name)
            results.append(_build_one(recipe, split, out_dir))
            bar.update()
        bar.set_description(FALLBACK.name)
        primaries = Manifest(tuple(r.entry for r in results))
        write_manifest(out_dir / MANIFEST_NAME, primaries)
        # the payload benchmarks' image-sized model (untrained: not a primary, no manifest entry)
        write_image_model(out_dir)
        results.append(_fallback(fallback_dir, split, refresh_fallback))
        bar.update()
    if progress:
        print(format_table(results))
    return results


def format_table(results: list[Built]) -> str:
    def pct(value: float | None) -> str:
        return "(kept)" if value is None else f"{value:.2%}"

    lines = [f"{'model':<15} {'sklearn':>8} {'onnx':>8} {'agree':>8} {'bytes':>10} {'time':>7}"]
    for r in results:
        lines.append(
            f"{r.entry.name:<15} {pct(r.sklearn_accuracy):>8} {r.entry.accuracy:>8.2%} "
            f"{pct(r.agreement):>8} {r.entry.size:>10,} {r.seconds:>6.2f}s"
        )
        if r.golden_accuracy is not None and r.entry.golden is not None:
            lines.append(
                f"  golden set {r.entry.golden.file}: {r.golden_accuracy:.2%} "
                f"(needs {r.entry.golden.min_accuracy:.0%})"
            )
    return "\n".join(lines)
