"""The blocking verification of a fallback model: checksum, load, signature, golden set.

Kept apart from the async wrapper so each step can be read (and tested) in order. Every step
that fails says why in one line, because that line is what readiness and ``/admin/state``
show to the operator: a refused fallback must be explainable without reading logs.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from gateway.fallback.manifest import find_model, read_hashed
from v2proto.errors import ManifestError
from v2proto.manifest import GoldenSet
from v2proto.signature import Array, Signature, signature_of

if TYPE_CHECKING:
    import onnxruntime as ort

LABEL_OUTPUT = "label"
# onnxruntime is imported only where a fallback loads: a gateway without one runs on the base
# install. Which extra brings it, for the refusal that says it is missing:
RUNTIME_EXTRA = (
    "install the gateway's 'cpu' extra: pip install 'v2-gateway[cpu]' ('gpu' on a GPU host)"
)


def runtime_missing() -> str | None:
    """Why no fallback can load in this environment (onnxruntime is not installed, and which
    extra brings it); None when it can. Looks for the package without importing it."""
    try:
        found = importlib.util.find_spec("onnxruntime") is not None
    except ImportError:
        # a finder that refuses the package outright
        found = False
    if found:
        return None
    return f"a fallback needs onnxruntime, which is not installed: {RUNTIME_EXTRA}"


@dataclass(frozen=True, slots=True)
class VerifiedModel:
    """A verified onnxruntime session and what it was verified as."""

    session: ort.InferenceSession
    signature: Signature
    sha256: str
    version: str

    def run(self, feed: Mapping[str, Array]) -> dict[str, Array]:
        """All outputs, in the model's order; blocking (call it from a worker thread)."""
        names = list(self.signature.output_names)
        results = self.session.run(names, dict(feed))
        return dict(zip(names, results, strict=True))


@dataclass(frozen=True, slots=True)
class FallbackCheck:
    ok: bool
    reason: str
    sha256: str | None = None
    accuracy: float | None = None
    version: str | None = None


def open_session(data: bytes) -> ort.InferenceSession:
    """A CPU session on one thread (measured fastest for small models on this machine)."""
    # here, not at the top: see RUNTIME_EXTRA
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    # errors only: a refused file is reported by us, once
    options.log_severity_level = 3
    return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])


def check_model(
    manifest: Path, name: str, current: VerifiedModel | None = None
) -> tuple[FallbackCheck, VerifiedModel | None]:
    """Verifies ``name`` from ``manifest``; the session is reused if the bytes are unchanged."""
    try:
        files = find_model(manifest, name)
    except ManifestError as exc:
        return FallbackCheck(False, f"manifest: {exc}"), None
    entry = files.entry
    try:
        data, digest = read_hashed(files.model_path)
    except OSError as exc:
        return FallbackCheck(False, f"cannot read {files.model_path}: {exc}"), None
    if digest != entry.sha256:
        reason = f"sha256 mismatch: manifest {entry.sha256[:12]}…, file {digest[:12]}…"
        return FallbackCheck(False, reason, digest), None
    if current is not None and current.sha256 == digest and current.version == entry.version:
        loaded = current
    else:
        try:
            session = open_session(data)
        except ImportError as exc:
            return FallbackCheck(False, f"cannot load it: {exc}: {RUNTIME_EXTRA}", digest), None
        except Exception as exc:
            # onnxruntime raises its own untyped errors
            return FallbackCheck(False, f"onnxruntime cannot load it: {exc}", digest), None
        loaded = VerifiedModel(session, signature_of(session), digest, entry.version)
    expected = Signature(entry.inputs, entry.outputs)
    if loaded.signature != expected:
        reason = f"signature {loaded.signature} differs from the manifest's {expected}"
        return FallbackCheck(False, reason, digest), None
    verdict = _golden(files.golden_path, entry.golden.min_accuracy if entry.golden else 1.0, loaded)
    return verdict, loaded if verdict.ok else None


def _golden(path: Path, pinned_min: float, loaded: VerifiedModel) -> FallbackCheck:
    """Accuracy of the label output on the golden set against the stricter minimum of the two.

    The golden file is not hashed in the manifest, so its own ``min_accuracy`` may only raise
    the bar the manifest sets, never lower it.
    """
    try:
        golden = GoldenSet.read(path)
    except ManifestError as exc:
        return FallbackCheck(False, f"golden set: {exc}", loaded.sha256)
    inputs = loaded.signature.inputs
    if len(inputs) != 1 or loaded.signature.output(LABEL_OUTPUT) is None:
        reason = f"golden set needs one input and a {LABEL_OUTPUT!r} output"
        return FallbackCheck(False, reason, loaded.sha256)
    try:
        outputs = loaded.run({inputs[0].name: golden.inputs})
    except Exception as exc:
        # onnxruntime's own errors
        return FallbackCheck(False, f"golden set: inference failed: {exc}", loaded.sha256)
    accuracy = golden.accuracy(np.asarray(outputs[LABEL_OUTPUT]))
    minimum = max(pinned_min, golden.min_accuracy)
    if accuracy < minimum:
        reason = f"golden accuracy {accuracy:.3f} is below the minimum {minimum:.3f}"
        return FallbackCheck(False, reason, loaded.sha256, accuracy, loaded.version)
    reason = f"verified: sha256 matches, golden accuracy {accuracy:.3f} >= {minimum:.3f}"
    return FallbackCheck(True, reason, loaded.sha256, accuracy, loaded.version)
