"""The scaling benchmark's upstream: a real gateway accepts its answers, and its table adds up."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import orjson
import pytest
import yaml

from loadtests.bench_overhead import body
from loadtests.echo_upstream import Answers, request_id
from loadtests.scaling_table import SINGLE, Row, medians, render
from loadtests.stack import ROOT
from loadtests.wrk_runner import WrkResult, parse
from tests.support.gateway import start_gateway
from tests.support.processes import ManagedProcess, free_port, http_status, start_bound

MODEL = "digits-mlp"


class EchoProcess(ManagedProcess):
    def __init__(self, port: int) -> None:
        argv = [sys.executable, str(ROOT / "loadtests" / "echo_upstream.py"), "--port", str(port)]
        super().__init__(argv, name="echo-upstream")
        self.url = f"http://127.0.0.1:{port}"

    def ready(self) -> bool:
        return http_status(f"{self.url}/v2/health/ready", timeout=0.5) == 200


@pytest.mark.integration
def test_a_gateway_takes_the_echo_upstreams_answers_to_every_request(tmp_path: Path) -> None:
    with start_bound(lambda: EchoProcess(free_port()), "echo upstream", 30.0) as echo:
        config = {
            "pools": {"pool": {"model": MODEL, "replicas": [{"id": "echo", "url": echo.url}]}},
            "models": {"digits": {"pool": "pool"}},
        }
        (tmp_path / "echo.yaml").write_text(yaml.safe_dump(config))
        argv = [sys.executable, "-m", "gateway.cli", "check-config", str(tmp_path / "echo.yaml")]
        probed = subprocess.run(
            [*argv, "--probe"], capture_output=True, text=True, timeout=60, check=False
        )
        with start_gateway(config) as gateway, httpx.Client(trust_env=False, timeout=10) as c:
            path = f"{gateway.url}/v2/models/digits/infer"
            plain = [c.post(path, content=body()) for _ in range(5)]
            doc = orjson.loads(body())
            named = c.post(path, content=orjson.dumps({**doc, "id": "mine"}))
            last = c.post(path, content=orjson.dumps({"inputs": doc["inputs"], "id": 'a"b'}))
            metadata = c.get(f"{gateway.url}/v2/models/digits")
    assert probed.returncode == 0, probed.stdout + probed.stderr
    assert "echoes request ids" in probed.stdout and "0 warning(s)" in probed.stdout
    assert [r.status_code for r in plain] == [200] * 5, plain[-1].text
    assert all(r.json()["outputs"][0]["name"] == "label" for r in plain)
    assert (named.status_code, named.json()["id"]) == (200, "mine")
    assert (last.status_code, last.json()["id"]) == (200, 'a"b')
    assert metadata.json()["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [1, 64]}]


def test_the_echo_finds_the_top_level_id_wherever_it_is() -> None:
    assert request_id(b'{"id":"g-1","inputs":[]}') == b'"g-1"'
    assert request_id(b'{"inputs":[{"name":"id"}],"id":"x\\"y"}') == b'"x\\"y"'
    assert request_id(b'{"inputs":[{"name":"id"}]}') is None
    assert request_id(b'{"\\u0069d":"e"}') == b'"e"'
    with pytest.raises(ValueError):
        request_id(b'["id"]')


def test_the_echo_answers_its_model_and_refuses_the_rest() -> None:
    answers = Answers(MODEL, "1")
    status, reply = answers.answer(
        b"POST", b"/v2/models/digits-mlp/versions/1/infer", b'{"id":"7","inputs":[]}', None
    )
    assert status == 200 and orjson.loads(reply)["id"] == "7"
    header = b'{"id":"8","inputs":[]}'
    status, reply = answers.answer(
        b"POST", b"/v2/models/digits-mlp/infer", header + b"\0" * 8, len(header)
    )
    assert status == 200 and orjson.loads(reply)["id"] == "8"
    assert answers.answer(b"POST", b"/v2/models/other/infer", b"{}", None)[0] == 404
    assert answers.answer(b"GET", b"/v2/models/digits-mlp/infer", b"", None)[0] == 405
    assert answers.answer(b"POST", b"/v2/models/digits-mlp/infer", b"{}", 99)[0] == 400
    assert orjson.loads(answers.answer(b"GET", b"/v2/health/ready", b"", None)[1]) == {
        "ready": True
    }


def test_wrks_summary_line_is_read_with_its_failures() -> None:
    output = (
        "Running 1s test\n"
        'wrk-summary {"requests":100,"duration_us":2000000,"connect":0,"read":1,"write":0,'
        '"status":2,"timeout":0,"p50_us":250,"p99_us":1500,"mean_us":300.0,"max_us":9000}\n'
    )
    result = parse(output)
    assert (result.rate, result.p50_ms, result.p99_ms, result.failures) == (50.0, 0.25, 1.5, 3)


def test_the_table_gives_issue_39s_ratios_from_one_run() -> None:
    def row(target: str, connections: int, rate: float, p50_ms: float) -> Row:
        return Row(target, connections, WrkResult(int(rate * 10), 10.0, p50_ms, 1.0), None)

    rows = [
        row("direct", 16, 50_000, 0.3),
        row("direct", 1, 8_000, 0.1),
        row(SINGLE, 16, 3_000, 5.0),
        row(SINGLE, 1, 1_500, 0.5),
        row("gateway 1 worker", 16, 4_500, 3.0),
        row("gateway 1 worker", 1, 2_000, 0.3),
        row("gateway 2 workers", 16, 8_100, 2.0),
    ]
    table = render(rows, ["single: this tree"])
    assert "| 2 workers ÷ 1 worker, req/s | 1.80 | ≥ 1.5 |" in table
    assert "| 1 worker ÷ single process, req/s | 1.50 | ≥ 1.25 |" in table
    assert "| 8 workers ÷ 1 worker, req/s (16 CPUs) | - | ≥ 6 |" in table
    assert "| c1 p50 over direct, 1 worker, ms | +0.200 | ≤ 0.25 ms |" in table
    assert table.endswith("- single: this tree")


def test_rounds_keep_each_rows_median_run_in_run_order() -> None:
    def row(target: str, rate: float) -> Row:
        return Row(target, 16, WrkResult(int(rate * 10), 10.0, 1.0, 2.0), None)

    rounds = [
        [row("direct", 30), row("floor", 9)],
        [row("direct", 10), row("floor", 7)],
        [row("direct", 20), row("floor", 8)],
    ]
    assert [(r.target, r.result.rate) for r in medians(rounds)] == [("direct", 20), ("floor", 8)]
