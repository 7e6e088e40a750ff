"""Triton's per-model statistics as the gateway keeps them: what a Triton client reads."""

from __future__ import annotations

from gateway.config.loader import parse_config
from gateway.control.runtime import Gateway
from gateway.telemetry.model_stats import ModelStats


def test_inferences_are_rows_and_executions_are_requests_as_triton_counts_them() -> None:
    stats = ModelStats()
    for _ in range(2):
        stats.record("digits", True, 0.002, 1000.0, rows=4)
    stats.record("digits", False, 0.001, 1001.0, rows=4)  # a failure counts no inference
    stats.record("digits", True, 0.001, 1002.0)  # rows not known: one
    [entry] = stats.triton({"digits": "1"})["model_stats"]
    assert (entry["inference_count"], entry["execution_count"]) == (9, 3)
    assert entry["inference_stats"]["success"] == {"count": 3, "ns": 5_000_000}
    assert entry["inference_stats"]["fail"] == {"count": 1, "ns": 1_000_000}
    assert entry["last_inference"] == 1_002_000


def test_the_gateway_counts_each_answers_rows() -> None:
    config = parse_config(
        {
            "pools": {
                "p": {
                    "model": "digits-mlp",
                    "replicas": [{"id": "r0", "url": "http://127.0.0.1:9"}],
                }
            },
            "models": {"digits": {"pool": "p"}},
        }
    )
    gateway = Gateway(config)
    for _ in range(2):
        gateway.observe("digits", 200, "r0", 0.01, None, rows=4)
    [entry] = gateway.statistics("digits")["model_stats"]  # folds the recorded answers in
    assert (entry["inference_count"], entry["execution_count"]) == (8, 2)  # Triton: 8 and 2
