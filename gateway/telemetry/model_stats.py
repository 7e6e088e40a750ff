"""Per-model inference statistics in Triton's shape (``GET /v2/models/[NAME/]stats``).

Triton clients (``get_inference_statistics``) read success and failure counts with their total
time in nanoseconds and the time of the last inference. The gateway counts what its clients
saw, once per answer at the edge: success is a 200 (degraded answers included: they answered),
anything else a failure. Queue and compute phases are the replicas' business and stay zero.
As Triton counts them: ``inference_count`` is the successful requests' rows (a batch of 4 is
four inferences), ``execution_count`` the successful requests (the gateway does not batch).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

NS = 1_000_000_000


@dataclass(slots=True)
class _Counts:
    success: int = 0
    success_ns: int = 0
    # of the successful requests
    rows: int = 0
    fail: int = 0
    fail_ns: int = 0
    last_ms: int = 0


class ModelStats:
    def __init__(self) -> None:
        self._models: dict[str, _Counts] = {}

    def record(self, model: str, ok: bool, latency_s: float, wall_s: float, rows: int = -1) -> None:
        """One answer; ``rows``: the request's batch size (-1: not known, counted as one)."""
        self.record_all(model, ok, (latency_s,), wall_s, (rows,))

    def record_all(
        self,
        model: str,
        ok: bool,
        latencies_s: Sequence[float],
        last_wall_s: float,
        rows: Sequence[int],
    ) -> None:
        """Answers alike in outcome (one `record` each); ``last_wall_s``: the latest's time."""
        counts = self._models.get(model)
        if counts is None:
            counts = self._models[model] = _Counts()
        ns = sum([max(0, round(latency_s * NS)) for latency_s in latencies_s])
        if ok:
            counts.success += len(latencies_s)
            counts.success_ns += ns
            counts.rows += sum([max(r, 1) for r in rows])
        else:
            counts.fail += len(latencies_s)
            counts.fail_ns += ns
        counts.last_ms = round(last_wall_s * 1000)

    def triton(self, models: dict[str, str]) -> dict[str, Any]:
        """``models``: name -> version, in the order to list them."""
        return {"model_stats": [self._entry(name, v) for name, v in models.items()]}

    def _entry(self, name: str, version: str) -> dict[str, Any]:
        c = self._models.get(name, _Counts())
        zero = {"count": 0, "ns": 0}
        return {
            "name": name,
            "version": version,
            "last_inference": c.last_ms,
            "inference_count": c.rows,
            "execution_count": c.success,
            "inference_stats": {
                "success": {"count": c.success, "ns": c.success_ns},
                "fail": {"count": c.fail, "ns": c.fail_ns},
                "queue": dict(zero),
                "compute_input": dict(zero),
                "compute_infer": dict(zero),
                "compute_output": dict(zero),
                "cache_hit": dict(zero),
                "cache_miss": dict(zero),
            },
            "batch_stats": [],
        }
