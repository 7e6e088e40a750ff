from __future__ import annotations

from replicas.metrics import ReplicaMetrics


def test_series_and_private_registry() -> None:
    a, b = ReplicaMetrics("digits"), ReplicaMetrics("digits")  # no duplicate-name clash
    a.observe(200, 0.002, rows=3)
    a.observe(200, 0.004, rows=2)
    a.observe(400, 0.001)
    a.set_ready(True)
    a.set_faults({"hang": True, "latency_ms": False})
    text = a.render().decode()
    model = 'model="digits",version="1"'
    assert f'replica_requests_total{{code="200",{model}}} 2.0' in text
    assert f'replica_requests_total{{code="400",{model}}} 1.0' in text
    assert f"replica_inference_rows_total{{{model}}} 5.0" in text
    assert f"replica_request_duration_seconds_count{{{model}}} 3.0" in text
    assert f"replica_ready{{{model}}} 1.0" in text
    assert f'replica_faults_active{{fault="hang",{model}}} 1.0' in text
    assert f'replica_faults_active{{fault="latency_ms",{model}}} 0.0' in text
    assert "replica_requests_total{" not in b.render().decode()
