"""/metrics of a real gateway after real traffic, checked by Prometheus' own linter.

``promtool check metrics`` (Debian's ``prometheus`` package: ``WITH_PROMTOOL=1 make system``)
parses the exposition and lints names, units, help texts and types. The traffic touches
every kind of series: answers, a refused request, an unknown model, a vote, retries after a
replica's 503s, a breaker that opens, SLO gauges; the scrape must pass with no finding.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.faults import clear_faults, inject_faults
from tests.support.gateway import GatewayProcess, pool_config, start_gateway
from tests.support.processes import ReplicaProcess, start_replica
from v2proto.load import PENDING_METRIC

pytestmark = pytest.mark.integration

PROMTOOL = shutil.which("promtool")
ROW = {"name": "input", "shape": [1, 64], "datatype": "FP32", "data": [0.0] * 64}
BODY = orjson.dumps({"inputs": [ROW]})
BATCH = orjson.dumps({"inputs": [{**ROW, "shape": [4, 64], "data": [0.0] * 256}]})


@pytest.fixture
def replicas(models_dir: Path) -> Iterator[list[ReplicaProcess]]:
    started: list[ReplicaProcess] = []
    try:
        for _ in range(3):
            model = models_dir / "digits-mlp.onnx"
            started.append(start_replica(model, name="digits-mlp", enable_faults=True))
        yield started
    finally:
        for proc in started:
            proc.cleanup()


@pytest.fixture
def gateway(replicas: list[ReplicaProcess]) -> Iterator[GatewayProcess]:
    config = pool_config(
        replicas[:2],
        pool={"breaker": {"failure_threshold": 2}},
        slos=[{"name": "availability", "kind": "availability", "objective": 0.99}],
    )
    config["pools"]["second"] = {
        "model": "digits-mlp",
        "version": "1",
        "replicas": [{"id": "s0", "url": replicas[2].url}],
    }
    config["models"]["digits-vote"] = {"vote": {"pools": ["primary", "second"], "quorum": 2}}
    proc = start_gateway(config)
    try:
        yield proc
    finally:
        proc.cleanup()


def traffic(gateway: GatewayProcess, failing: ReplicaProcess) -> None:
    with httpx.Client(base_url=gateway.url, timeout=10, trust_env=False) as http:
        for body in (BODY, BATCH) * 5:
            assert http.post("/v2/models/digits/infer", content=body).status_code == 200
        assert http.post("/v2/models/digits-vote/infer", content=BODY).status_code == 200
        assert http.post("/v2/models/digits/infer", content=b'{"inputs": 1}').status_code == 400
        assert http.post("/v2/models/nope/infer", content=BODY).status_code == 404
        inject_faults(failing.url, error_rate=1.0)
        try:
            for _ in range(6):  # the other replica answers: retries, and r0's breaker opens
                http.post("/v2/models/digits/infer", content=BODY)
        finally:
            clear_faults(failing.url)


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed: WITH_PROMTOOL=1 make system")
def test_metrics_of_a_real_gateway_pass_promtool(
    gateway: GatewayProcess, replicas: list[ReplicaProcess]
) -> None:
    traffic(gateway, replicas[0])
    scrape = httpx.get(f"{gateway.url}/metrics", timeout=10, trust_env=False)
    assert scrape.status_code == 200
    assert PROMTOOL is not None
    check = subprocess.run(
        [PROMTOOL, "check", "metrics"], input=scrape.content, capture_output=True, timeout=30
    )
    findings = (check.stdout + check.stderr).decode()
    assert (check.returncode, findings) == (0, ""), findings
    # The traffic reached the series promtool was shown (a check of an empty page proves little).
    families = {f.name: f for f in text_string_to_metric_families(scrape.text)}
    for name in (
        "gateway_requests",
        "gateway_request_queue_duration_seconds",
        "gateway_request_size_bytes",
        "gateway_response_size_bytes",
        "gateway_request_batch_rows",
        "gateway_upstream_attempt_duration_seconds",
        "gateway_breaker_state",
        "gateway_outlier_ejections_active",
        "gateway_slo_burn_rate",
        "gateway_votes",
    ):
        assert families[name].samples, name
    rows = {
        s.labels["le"]: s.value
        for s in families["gateway_request_batch_rows"].samples
        if s.name.endswith("_bucket") and s.labels["model"] == "digits"
    }
    assert rows["1.0"] >= 5 and rows["4.0"] - rows["2.0"] == 5  # five 1-row, five 4-row
    states = [s for s in families["gateway_breaker_state"].samples if s.labels["replica"] == "r0"]
    assert sorted(s.labels["state"] for s in states) == ["closed", "half_open", "open"]
    assert sum(s.value for s in states) == 1
    assert {s.labels["pool"] for s in states} == {"primary"}


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed: WITH_PROMTOOL=1 make system")
def test_a_replica_s_metrics_pass_promtool(replicas: list[ReplicaProcess]) -> None:
    with httpx.Client(base_url=replicas[0].url, timeout=10, trust_env=False) as http:
        assert http.post("/v2/models/digits-mlp/infer", content=BATCH).status_code == 200
        assert http.post("/v2/models/digits-mlp/infer", content=b"{}").status_code == 400
        scrape = http.get("/metrics")
    assert PROMTOOL is not None
    check = subprocess.run(
        [PROMTOOL, "check", "metrics"], input=scrape.content, capture_output=True, timeout=30
    )
    findings = (check.stdout + check.stderr).decode().splitlines()
    # the replica's queue is under Triton's own name (a gauge ending in _count), so that a
    # gateway scrapes it as it would Triton: promtool's naming lint is the one finding allowed
    allowed = f"{PENDING_METRIC} non-histogram and non-summary metrics should not have"
    findings = [line for line in findings if not line.startswith(allowed)]
    assert findings == [], findings
    assert 'replica_ready{model="digits-mlp",version="1"} 1.0' in scrape.text
