"""Model manifests (``MANIFEST.json``) and golden sets: what a model file must be to be trusted.

A manifest pins each model file by SHA-256 and size and records its signature and test-split
accuracy; a golden set is known inputs with expected labels and a minimum accuracy. The model
build writes them, the gateway loads its fallback model only if both check out and probes
replicas with the golden set, so these formats are a contract:

    {"models": [{"name", "version", "file", "sha256", "size", "accuracy",
                 "inputs": [{"name", "datatype", "shape"}], "outputs": [...],
                 "golden": {"file", "min_accuracy"}   # fallback models only
                }]}
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from v2proto.errors import ManifestError
from v2proto.signature import TensorSpec

MANIFEST_NAME = "MANIFEST.json"


@dataclass(frozen=True, slots=True)
class GoldenRef:
    file: str
    min_accuracy: float


@dataclass(frozen=True, slots=True)
class ModelEntry:
    name: str
    version: str
    file: str
    sha256: str
    size: int
    accuracy: float
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    golden: GoldenRef | None = None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "name": self.name,
            "version": self.version,
            "file": self.file,
            "sha256": self.sha256,
            "size": self.size,
            "accuracy": self.accuracy,
            "inputs": [t.to_json() for t in self.inputs],
            "outputs": [t.to_json() for t in self.outputs],
        }
        if self.golden is not None:
            doc["golden"] = {"file": self.golden.file, "min_accuracy": self.golden.min_accuracy}
        return doc

    @classmethod
    def from_json(cls, doc: Any) -> ModelEntry:
        try:
            golden = doc.get("golden")
            return cls(
                name=_typed(doc["name"], str),
                version=_typed(doc["version"], str),
                file=_typed(doc["file"], str),
                sha256=_typed(doc["sha256"], str),
                size=_typed(doc["size"], int),
                accuracy=float(doc["accuracy"]),
                inputs=tuple(TensorSpec.from_json(t) for t in doc["inputs"]),
                outputs=tuple(TensorSpec.from_json(t) for t in doc["outputs"]),
                golden=None
                if golden is None
                else GoldenRef(_typed(golden["file"], str), float(golden["min_accuracy"])),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ManifestError(f"bad manifest entry {doc!r}: {exc}") from exc

    def verify_file(self, directory: Path) -> Path:
        """The entry's file in ``directory``, after checking its size and SHA-256."""
        path = directory / self.file
        if not path.is_file():
            raise ManifestError(f"{path} is missing")
        size = path.stat().st_size
        if size != self.size:
            raise ManifestError(f"{path} has {size} bytes, the manifest says {self.size}")
        digest = sha256_file(path)
        if digest != self.sha256:
            raise ManifestError(f"{path} has SHA-256 {digest}, the manifest says {self.sha256}")
        return path


def _typed(value: Any, kind: type) -> Any:
    if not isinstance(value, kind) or isinstance(value, bool):
        raise TypeError(f"expected {kind.__name__}, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class Manifest:
    models: tuple[ModelEntry, ...]

    def get(self, name: str) -> ModelEntry:
        for entry in self.models:
            if entry.name == name:
                return entry
        raise ManifestError(f"no model named {name!r} in the manifest")

    def to_json(self) -> dict[str, Any]:
        return {"models": [m.to_json() for m in self.models]}


def read_manifest(path: Path) -> Manifest:
    """Read ``path`` (a MANIFEST.json, or a directory holding one)."""
    if path.is_dir():
        path = path / MANIFEST_NAME
    try:
        doc = json.loads(path.read_text())
        models = doc["models"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ManifestError(f"cannot read manifest {path}: {exc}") from exc
    if not isinstance(models, list):
        raise ManifestError(f"{path}: 'models' must be a list")
    return Manifest(tuple(ModelEntry.from_json(m) for m in models))


def write_manifest(path: Path, manifest: Manifest) -> None:
    if path.is_dir():
        path = path / MANIFEST_NAME
    path.write_text(json.dumps(manifest.to_json(), indent=2) + "\n")


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class GoldenSet:
    """Known inputs with expected labels; a model passes with ``min_accuracy`` or better."""

    inputs: npt.NDArray[np.float32]
    labels: npt.NDArray[np.int64]
    min_accuracy: float

    def accuracy(self, predicted: npt.ArrayLike) -> float:
        return float(np.mean(np.asarray(predicted).reshape(-1) == self.labels))

    def passes(self, predicted: npt.ArrayLike) -> bool:
        return self.accuracy(predicted) >= self.min_accuracy

    @classmethod
    def read(cls, path: Path) -> GoldenSet:
        try:
            doc = json.loads(path.read_text())
            inputs = np.asarray(doc["inputs"], dtype=np.float32)
            labels = np.asarray(doc["labels"], dtype=np.int64)
            min_accuracy = float(doc["min_accuracy"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ManifestError(f"cannot read golden set {path}: {exc}") from exc
        if inputs.ndim != 2 or labels.shape != (inputs.shape[0],) or not 0 < min_accuracy <= 1:
            raise ManifestError(
                f"{path}: inputs must be rows matching labels, 0 < min_accuracy <= 1"
            )
        return cls(inputs, labels, min_accuracy)

    def write(self, path: Path) -> None:
        """One input row per line, so a diff of the golden set stays readable."""
        rows = ",\n    ".join(json.dumps(row) for row in self.inputs.tolist())
        labels = json.dumps(self.labels.tolist())
        path.write_text(
            f'{{"inputs": [\n    {rows}\n  ],\n  "labels": {labels},\n'
            f'  "min_accuracy": {json.dumps(self.min_accuracy)}}}\n'
        )
