"""CUDA provider check for the replicas: the same models on CUDA and on CPU give the same answers.

Run where there is a GPU and onnxruntime-gpu: ``python loadtests/gpu_check.py [--models DIR]``.
Prints onnxruntime's providers; per model, the provider actually in use, label agreement and
the largest probability difference between CUDA and CPU over the digits test split, and the
time per batch on each; then one V2 infer through the replica server (`ReplicaApp` with
``device="cuda"``) over an in-process ASGI client. Exits non-zero if CUDA was not used or the
answers differ, so the check cannot pass by falling back to CPU. Then the accelerator check
(`loadtests.gpu_accelerator_check`): a replica's real NVML readings on its ``/metrics`` and in
a sampling gateway's ``/admin/state``, or "no device" where there is none.
``--accelerator-only`` runs that part alone (no onnxruntime-gpu needed).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import onnxruntime as ort
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtests import gpu_accelerator_check
from replicas.dataset import load_split
from replicas.model import OnnxModel
from replicas.server import ReplicaApp

PROBABILITY_ATOL = 1e-3  # the vote's default numeric_atol: a CUDA leg must agree with a CPU one


def timed(model: OnnxModel, x: np.ndarray, batch: int, repeats: int = 50) -> float:
    """Median milliseconds per run of ``batch`` rows."""
    rows = {model.signature.inputs[0].name: x[:batch]}
    model.run(rows)
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        model.run(rows)
        samples.append(time.perf_counter() - started)
    return float(np.median(samples) * 1000)


def compare(path: Path, x: np.ndarray) -> bool:
    cpu, cuda = OnnxModel(path, device="cpu"), OnnxModel(path, device="cuda")
    name = cpu.signature.inputs[0].name
    a, b = cpu.run({name: x}), cuda.run({name: x})
    labels = "label" in a and bool(np.array_equal(a["label"], b["label"]))
    diff = max(
        float(np.max(np.abs(a[k].astype(np.float64) - b[k].astype(np.float64))))
        for k in a
        if a[k].dtype.kind == "f"
    )
    times = {n: (timed(cpu, x, n), timed(cuda, x, n)) for n in (1, 64, len(x))}
    print(
        f"{path.stem}: provider {cuda.provider}; labels equal {labels}; "
        f"max probability diff {diff:.2e}; ms per batch (cpu / cuda): "
        + ", ".join(f"{n} rows {c:.3f} / {g:.3f}" for n, (c, g) in times.items())
    )
    return cuda.provider == "CUDAExecutionProvider" and labels and diff <= PROBABILITY_ATOL


async def serve_once(path: Path, x: np.ndarray) -> bool:
    app = ReplicaApp(path, name=path.stem, device="cuda")
    await app.startup()
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://replica") as client:
        body = {
            "id": "gpu-1",
            "inputs": [
                {
                    "name": "input",
                    "shape": [4, 64],
                    "datatype": "FP32",
                    "data": x[:4].ravel().tolist(),
                }
            ],
        }
        response = await client.post(f"/v2/models/{path.stem}/infer", content=orjson.dumps(body))
    print(f"replica server on cuda: {response.status_code} {response.text[:160]}")
    return response.status_code == 200 and response.json()["id"] == "gpu-1"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", default="models")
    parser.add_argument(
        "--accelerator-only", action="store_true", help="only the NVML readings check"
    )
    args = parser.parse_args()
    if args.accelerator_only:
        return 0 if gpu_accelerator_check.check() in (True, None) else 1
    if "CUDAExecutionProvider" in ort.get_available_providers() and hasattr(ort, "preload_dlls"):
        ort.preload_dlls()  # CUDA and cuDNN from the nvidia-* wheels, where they come that way
    print(f"onnxruntime {ort.__version__}, providers {ort.get_available_providers()}")
    _, x_test, _, _ = load_split()
    x = x_test.astype(np.float32)
    paths = sorted(Path(args.models).glob("digits-*.onnx"))
    ok = all([compare(p, x) for p in paths]) and bool(paths)
    ok = asyncio.run(serve_once(paths[0], x)) and ok
    print("CUDA check", "passed" if ok else "FAILED")
    ok = gpu_accelerator_check.check() is not False and ok
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
