"""The floor `make bench` prints: the minimal proxy forwards a real replica's answers unchanged."""

from __future__ import annotations

import httpx
import pytest

from loadtests.bench_overhead import Row, body, floor, render
from loadtests.loadgen import LoadResult
from loadtests.stack import Stack


@pytest.mark.integration
def test_the_floor_forwards_infer_and_health_to_its_replica_on_kept_connections() -> None:
    with Stack() as stack:
        replica = stack.replica("replica-0", "digits-mlp", faults=False)
        proxy = floor(stack, replica)
        path = "/v2/models/digits-mlp/infer"
        with httpx.Client(trust_env=False, timeout=10.0) as client:
            direct = client.post(replica.url + path, content=body())
            answers = [client.post(proxy.url + path, content=body()) for _ in range(3)]
            missing = client.post(proxy.url + "/v2/models/nope/infer", content=body())
        assert direct.status_code == 200
        assert [a.status_code for a in answers] == [200, 200, 200]
        assert all(a.json()["outputs"] == direct.json()["outputs"] for a in answers)
        assert missing.status_code == 404


def test_the_table_puts_each_target_beside_nginx_and_the_floor() -> None:
    def row(target: str, cpu: float | None) -> Row:
        return Row(target, 16, LoadResult(1.0, [0.001], [0.0], [200]), cpu)

    table = render(
        [row("direct", None), row("gateway", 300.0), row("nginx", 100.0), row("floor", 150.0)]
    )
    gateway = next(line for line in table.splitlines() if line.startswith("| gateway"))
    assert gateway.endswith("| 3.0× | 2.0× |")
