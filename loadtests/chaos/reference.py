"""Request bodies from the digits test split, and the labels each model should answer.

A wrong answer is one whose labels differ from what the same model answers with no fault
injected, so the reference is computed once, locally, by running the same ONNX files with
onnxruntime: `digits-mlp` for ``digits``, the majority of the three diverse versions for
``digits-vote``, the fallback model for answers served by ``fallback/<name>``. Where a model
file is missing the true labels of the split stand in (and the wrong rate then includes the
model's own test error).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import orjson

from replicas.dataset import load_split

ROOT = Path(__file__).resolve().parents[2]
MODELS_DIR = ROOT / "models"
FALLBACK_DIR = ROOT / "fallback_models"
VOTERS = ("digits-mlp", "digits-svm", "digits-forest")
FALLBACK_PREFIX = "fallback/"
UNKNOWN = -1  # no strict majority among the voters: the row is not checked

# The model names clients use -> the model files whose answers define "right".
SOURCES: dict[str, tuple[str, ...]] = {
    "digits": ("digits-mlp",),
    "digits-mlp": ("digits-mlp",),
    "digits-svm": ("digits-svm",),
    "digits-forest": ("digits-forest",),
    "digits-vote": VOTERS,
}

Labels = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class Sample:
    """One request body and the test-split rows it carries, in order."""

    rows: tuple[int, ...]
    body: bytes


def encode(x: npt.NDArray[np.float32], rows: Sequence[int]) -> bytes:
    data = x[list(rows)].reshape(-1).tolist()
    tensor = {"name": "input", "shape": [len(rows), x.shape[1]], "datatype": "FP32", "data": data}
    return orjson.dumps({"inputs": [tensor]})


def make_samples(
    x: npt.NDArray[np.float32], batch_sizes: Sequence[int], count: int, seed: int = 0
) -> list[Sample]:
    """``count`` bodies with rows drawn at random (fixed seed); batch size 1 walks every row."""
    rng = random.Random(seed)
    out: list[Sample] = []
    for i in range(count):
        size = rng.choice(list(batch_sizes))
        rows = (i % len(x),) if size == 1 else tuple(rng.sample(range(len(x)), size))
        out.append(Sample(rows, encode(x, rows)))
    return out


def onnx_labels(path: Path, x: npt.NDArray[np.float32]) -> Labels | None:
    """The labels an ONNX model gives ``x``, or None if the file is missing or will not run."""
    if not path.is_file():
        return None
    try:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name
        label = next(o.name for o in session.get_outputs() if o.name == "label")
        result = session.run([label], {name: x})[0]
    except Exception:  # any onnxruntime failure: use the true labels instead
        return None
    return np.asarray(result, dtype=np.int64).reshape(-1)


def majority(votes: Sequence[Labels]) -> Labels:
    """Per row, the label more than half of ``votes`` agree on, else `UNKNOWN`."""
    stacked = np.stack(votes)
    out = np.full(stacked.shape[1], UNKNOWN, dtype=np.int64)
    for row in range(stacked.shape[1]):
        values, counts = np.unique(stacked[:, row], return_counts=True)
        best = int(counts.argmax())
        if counts[best] * 2 > len(votes):
            out[row] = values[best]
    return out


class Reference:
    """Expected labels per test row for each model name and each fallback, computed once."""

    def __init__(self, models_dir: Path = MODELS_DIR, fallback_dir: Path = FALLBACK_DIR) -> None:
        _, self.x, _, self.y_true = load_split()
        self._models_dir, self._fallback_dir = models_dir, fallback_dir
        self._cache: dict[str, Labels] = {}
        self.sources: dict[str, str] = {}  # name -> "onnx" or "true labels"

    def _file_labels(self, name: str) -> Labels | None:
        for folder in (self._models_dir, self._fallback_dir):
            labels = onnx_labels(folder / f"{name}.onnx", self.x)
            if labels is not None:
                return labels
        return None

    def labels(self, name: str) -> Labels:
        """Labels for a client-facing model name, or ``fallback/<model>``, for every row."""
        if name not in self._cache:
            files = SOURCES.get(name, (name.removeprefix(FALLBACK_PREFIX),))
            found = [self._file_labels(f) for f in files]
            present = [f for f in found if f is not None]
            if len(present) == len(found):
                self._cache[name] = present[0] if len(present) == 1 else majority(present)
                self.sources[name] = "onnx"
            else:
                self._cache[name] = self.y_true
                self.sources[name] = "true labels"
        return self._cache[name]

    def expected(self, model: str, served_by: str | None, rows: Sequence[int]) -> list[int]:
        """What the answer should say: the fallback's labels if a fallback served it."""
        name = served_by if served_by and served_by.startswith(FALLBACK_PREFIX) else model
        labels = self.labels(name)
        return [int(labels[r]) for r in rows]
