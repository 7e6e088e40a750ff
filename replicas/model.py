"""The served model: an onnxruntime session, its signature, warm-up and one synchronous run.

The wrapper is generic over any ONNX model (the signature comes from the session, dynamic dims
become -1) and reports the execution provider actually in use, because asking onnxruntime for
CUDA silently falls back to CPU when the GPU build or the driver is missing. `run` is blocking:
the server calls it in a thread pool, never on the event loop.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np
import onnxruntime as ort

from replicas.errors import InferenceFailed
from v2proto.signature import DATATYPES, Array, signature_of

log = logging.getLogger("replicas.model")

Device = Literal["cpu", "cuda"]
PROVIDERS: Mapping[str, list[str]] = {
    "cpu": ["CPUExecutionProvider"],
    "cuda": ["CUDAExecutionProvider", "CPUExecutionProvider"],
}
PLATFORM = "onnxruntime_onnx"


class OnnxModel:
    """One loaded ONNX model. ``intra_op_threads=1`` measured fastest for small models here."""

    def __init__(
        self, path: str | Path, *, device: Device = "cpu", intra_op_threads: int = 1
    ) -> None:
        options = ort.SessionOptions()
        options.intra_op_num_threads = intra_op_threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        self.path = Path(path)
        self.requested_device: Device = device
        available = ort.get_available_providers()
        providers = [p for p in PROVIDERS[device] if p in available] or ["CPUExecutionProvider"]
        self.session = ort.InferenceSession(str(path), options, providers=providers)
        self.provider: str = self.session.get_providers()[0]
        if device == "cuda" and self.provider != "CUDAExecutionProvider":
            log.warning(
                "CUDA was requested for %s but onnxruntime runs it on %s (available providers: "
                "%s); install onnxruntime-gpu and a matching CUDA runtime to use the GPU",
                self.path.name,
                self.provider,
                ", ".join(available),
            )
        self.signature = signature_of(self.session)
        self._output_names = list(self.signature.output_names)

    def run(self, inputs: Mapping[str, Array]) -> dict[str, Array]:
        """All outputs for ``inputs``; an onnxruntime failure becomes `InferenceFailed`."""
        try:
            results = self.session.run(self._output_names, dict(inputs))
        except Exception as exc:
            raise InferenceFailed(f"inference failed: {exc}") from exc
        return dict(zip(self._output_names, results, strict=True))

    def warm_up(self) -> dict[str, Array]:
        """Run once on zeros of each input's shape with batch (and every variable dim) 1."""
        zeros = {
            spec.name: np.zeros(
                [d if d >= 0 else 1 for d in spec.shape],
                dtype=_numpy_dtype(spec.datatype),
            )
            for spec in self.signature.inputs
        }
        return self.run(zeros)


def _numpy_dtype(datatype: str) -> np.dtype[Any]:
    dtype = DATATYPES[datatype]
    return np.dtype(str) if datatype == "BYTES" else dtype.newbyteorder("=")
