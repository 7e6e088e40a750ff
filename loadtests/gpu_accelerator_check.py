"""The accelerator part of the GPU check: a replica reads its real GPU through NVML, and a
gateway sampling it shows the readings.

Run by ``loadtests/gpu_check.py`` (or alone: ``python loadtests/gpu_accelerator_check.py``).
Without a GPU (no nvidia-ml-py, no driver, no device) it prints "no device" and why, and
passes nothing off as a reading. With one it starts ``replica serve`` (NVML sampling on by
default) and checks its ``/metrics`` carries the DCGM series with the device's real UUID
(temperature, power, ECC counters where the device has ECC), then starts a gateway whose pool
samples it (``accelerator:``) and checks ``/admin/state`` shows the same device's reading.
Prints the readings.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtests.stack import Stack
from replicas.accelerator_nvml import open_device

REQUIRED = ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE")
ECC = ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")
WAIT_S = 30.0


def device() -> tuple[str, str] | str:
    """(gpu index, UUID) of GPU 0, or why there is none."""
    found = open_device(0)
    if isinstance(found, str):
        return found
    try:
        return found.gpu, found.uuid
    finally:
        found.close()


def replica_readings(url: str) -> dict[str, tuple[dict[str, str], float]]:
    text = httpx.get(f"{url}/metrics", timeout=5.0, trust_env=False).text
    return {
        s.name: (s.labels, s.value)
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name.startswith("DCGM_FI_DEV_")
    }


def gateway_reading(url: str) -> dict[str, Any] | None:
    doc = httpx.get(f"{url}/admin/state", timeout=5.0, trust_env=False).json()
    replica = doc.get("accelerators", {}).get("gpu", {}).get("replicas", {}).get("gpu-0", {})
    reading: dict[str, Any] | None = replica.get("reading")
    return reading


def check(model: str = "digits-mlp") -> bool | None:
    """True: real readings seen on the replica and in the gateway; None: no device here."""
    found = device()
    if isinstance(found, str):
        print(f"accelerator check: no device ({found})")
        return None
    gpu, uuid = found
    print(f"accelerator check: gpu {gpu} {uuid}")
    with Stack() as stack:
        replica = stack.replica("gpu-0", model, faults=False)
        readings = replica_readings(replica.url)
        for name, (labels, value) in sorted(readings.items()):
            print(f"  replica /metrics {name}{labels} = {value:g}")
        ok = all(readings.get(n, ({}, 0))[0].get("UUID") == uuid for n in REQUIRED)
        has_ecc = all(n in readings for n in ECC)
        print(f"  temperature and power with the device's UUID: {ok}; ECC counters: {has_ecc}")
        gateway = stack.gateway(
            {
                "pools": {
                    "gpu": {
                        "model": model,
                        "accelerator": {"interval_s": 0.2},
                        "replicas": [{"id": "gpu-0", "url": replica.url}],
                    }
                },
                "models": {"digits": {"pool": "gpu"}},
            }
        )
        deadline = time.monotonic() + WAIT_S
        seen = None
        while seen is None and time.monotonic() < deadline:
            seen = gateway_reading(gateway.url)
            time.sleep(0.2)
        print(f"  gateway /admin/state reading: {seen}")
        ok = ok and seen is not None and seen.get("uuid") == uuid
    print("accelerator check", "passed" if ok else "FAILED")
    return ok


if __name__ == "__main__":
    result = check()
    raise SystemExit(0 if result in (True, None) else 1)
