"""What crosses the edge, on one real gateway (REST and gRPC doors) with real and rogue replicas.

- What every V2 server refuses (a batch of no rows, an input named twice, an output asked for
  twice) is refused by the gateway, 400 over REST and INVALID_ARGUMENT over gRPC, naming the
  field; no replica sees it and the gateway logs no error for it.
- A replica's error text (markup, a line forging a log line, a terminal escape, an address:
  `tests.support.rogue_replica`'s ``hostile`` modes) reaches clients only as a fixed summary;
  the keyed ``/admin/state`` and the log keep it, escaped on one line.
- A pool's pause reason is shown to clients as "paused" only; the keyed state keeps who and why.
- ``POST /admin/reload`` is audited with the operator's name.

The gateway logs text lines here (``log.json_lines: false``): in JSON lines a line break is
escaped anyway, in text it is what would forge a line.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
import orjson
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from tests.support.gateway import GatewayProcess, start_gateway
from tests.support.processes import ReplicaProcess, free_port, start_replica, wait_until

pytestmark = pytest.mark.integration
ALICE = "alice-key-0123456789abcdef"
AS_ALICE = {"authorization": f"Bearer {ALICE}"}
HOSTILE_BITS = ("<script", "10.9.8.7", "FORGED", "\x1b", "\n")
ROW = [0.5] * 64


@dataclass
class Setup:
    gateway: GatewayProcess
    honest: ReplicaProcess


def _rogue(mode: str) -> ReplicaProcess:
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "tests.support.rogue_replica",
        "--port",
        str(port),
        "--mode",
        mode,
    ]
    proc = ReplicaProcess(argv, host="127.0.0.1", port=port, name="digits-mlp", version="1")
    wait_until(lambda: proc.ready() or not proc.alive(), 20, message=proc.log_text)
    assert proc.alive(), proc.log_text()
    return proc


@pytest.fixture(scope="module")
def setup(models_dir: Path) -> Iterator[Setup]:
    started: list[ReplicaProcess] = []
    try:
        honest = start_replica(models_dir / "digits-mlp.onnx", name="digits-mlp")
        started.append(honest)
        started += [_rogue("hostile"), _rogue("hostile-500")]

        def pool(rid: str, proc: ReplicaProcess) -> dict[str, Any]:
            return {
                "model": "digits-mlp",
                "version": "1",
                "replicas": [{"id": rid, "url": proc.url}],
            }

        config = {
            "pools": {
                "primary": pool("r0", honest),
                "hostile": pool("rogue", started[1]),
                "hostile5": pool("rogue5", started[2]),
            },
            "models": {
                "digits": {"pool": "primary"},
                "hostile": {"pool": "hostile", "required": False},
                "hostile5": {"pool": "hostile5", "required": False},
            },
            "server": {"admin": {"operators": {"alice": {"key_env": "ALICE_KEY"}}}},
            "log": {"json_lines": False},
        }
        gateway = start_gateway(config, env={"ALICE_KEY": ALICE}, grpc=True)
        try:
            yield Setup(gateway, honest)
        finally:
            gateway.cleanup()
    finally:
        for proc in started:
            proc.cleanup()


def admin_state(gateway: GatewayProcess) -> dict[str, Any]:
    answer = httpx.get(f"{gateway.url}/admin/state", headers=AS_ALICE, trust_env=False, timeout=5)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def replica_state(gateway: GatewayProcess, replica_id: str) -> dict[str, Any]:
    for pool in admin_state(gateway)["pools"]:
        for item in (*pool["replicas"], *pool["draining"]):
            if item["id"] == replica_id:
                return dict(item)
    raise KeyError(replica_id)


def rest(gateway: GatewayProcess, model: str, request: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        f"{gateway.url}/v2/models/{model}/infer",
        content=orjson.dumps(request),
        trust_env=False,
        timeout=10,
    )


def tensor(name: str = "input", rows: int = 1) -> dict[str, Any]:
    return {"name": name, "shape": [rows, 64], "datatype": "FP32", "data": ROW * rows}


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (
            {"inputs": [{**tensor(), "shape": [0, 64], "data": []}]},
            "input 'input': shape [0, 64] has no rows; send at least one",
        ),
        ({"inputs": [tensor(), tensor()]}, "inputs[1].name: input 'input' is named more than once"),
        (
            {"inputs": [tensor()], "outputs": [{"name": "label"}, {"name": "label"}]},
            "outputs[1].name: output 'label' is named more than once",
        ),
    ],
)
def test_rest_refuses_what_every_server_refuses_before_a_replica_sees_it(
    setup: Setup, request_: dict[str, Any], message: str
) -> None:
    before = replica_state(setup.gateway, "r0")["requests"]
    answer = rest(setup.gateway, "digits", request_)
    assert answer.status_code == 400, answer.text
    assert answer.json() == {"error": message}
    assert replica_state(setup.gateway, "r0")["requests"] == before
    assert rest(setup.gateway, "digits", {"inputs": [tensor()]}).status_code == 200


def _grpc_request(rows: int = 1, inputs: int = 1, outputs: tuple[str, ...] = ()) -> Any:
    request = service_pb2.ModelInferRequest(model_name="digits")
    for _ in range(inputs):
        item = request.inputs.add(name="input", datatype="FP32", shape=[rows, 64])
        item.contents.fp32_contents.extend(ROW * rows)
    for name in outputs:
        request.outputs.add(name=name)
    return request


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (_grpc_request(rows=0), "input 'input': shape [0, 64] has no rows"),
        (_grpc_request(inputs=2), "inputs[1].name: input 'input' is named more than once"),
        (
            _grpc_request(outputs=("label", "label")),
            "outputs[1].name: output 'label' is named more than once",
        ),
    ],
)
def test_the_grpc_door_refuses_them_with_invalid_argument_and_logs_no_error(
    setup: Setup, request_: Any, message: str
) -> None:
    gateway = setup.gateway
    assert gateway.grpc_url is not None
    before = replica_state(gateway, "r0")["requests"]
    logged = len(gateway.log_text())
    with grpc.insecure_channel(gateway.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        for _ in range(3):
            with pytest.raises(grpc.RpcError) as refused:
                stub.ModelInfer(request_, timeout=10)
            assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            assert message in (refused.value.details() or "")
        answered = stub.ModelInfer(_grpc_request(outputs=("label",)), timeout=10)
        assert [o.name for o in answered.outputs] == ["label"]
    assert replica_state(gateway, "r0")["requests"] == before + 1
    assert " ERROR " not in gateway.log_text()[logged:]


@pytest.mark.parametrize(
    ("model", "rogue", "status"), [("hostile", "rogue", 400), ("hostile5", "rogue5", 500)]
)
def test_a_replicas_error_text_reaches_clients_only_as_a_fixed_summary(
    setup: Setup, model: str, rogue: str, status: int
) -> None:
    gateway = setup.gateway
    errors = []
    for _ in range(8):
        answer = rest(gateway, model, {"inputs": [tensor()]})
        assert answer.status_code in (400, 503), answer.text
        errors.append(answer.json()["error"])
    for error in errors:
        assert not any(bit in error for bit in HOSTILE_BITS), error
    phrase = "bad request" if status == 400 else "internal error"
    assert any(f"replica {rogue} answered {status}: {phrase}" in e for e in errors), errors
    # the keyed view and the log keep what it said, escaped on one line
    log = gateway.log_text()
    kept = [line for line in log.splitlines() if "FORGED" in line]
    last_error = replica_state(gateway, rogue)["last_error"] or ""
    if "FORGED" in last_error:
        kept.append(last_error)
    assert kept and all("10.9.8.7" in k and "\\n2026-12-01" in k and "\\x1b" in k for k in kept)
    assert "\x1b" not in log
    assert not any(line.startswith("2026-12-01 00:00:00,000") for line in log.splitlines())


def test_a_pause_reason_is_shown_to_clients_as_paused_only(setup: Setup) -> None:
    gateway = setup.gateway
    reason = {"reason": "maintenance of node 10.9.8.7"}
    paused = httpx.post(
        f"{gateway.url}/admin/pools/hostile/pause",
        json=reason,
        headers=AS_ALICE,
        trust_env=False,
        timeout=5,
    )
    assert paused.status_code == 200, paused.text
    try:
        answer = rest(gateway, "hostile", {"inputs": [tensor()]})
        assert answer.status_code == 503
        assert answer.json() == {"error": "model 'hostile': pool 'hostile' is paused"}
        [pool] = [p for p in admin_state(gateway)["pools"] if p["name"] == "hostile"]
        assert pool["paused"] == "paused by alice: maintenance of node 10.9.8.7"
        assert httpx.get(f"{gateway.url}/admin/state", trust_env=False).status_code == 401
    finally:
        resumed = httpx.post(
            f"{gateway.url}/admin/pools/hostile/resume",
            json={},
            headers=AS_ALICE,
            trust_env=False,
            timeout=5,
        )
        assert resumed.status_code == 200


def test_a_reload_is_audited_with_the_operators_name(setup: Setup) -> None:
    gateway = setup.gateway
    answer = httpx.post(
        f"{gateway.url}/admin/reload",
        json={"reason": "rotate keys"},
        headers=AS_ALICE,
        trust_env=False,
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    wait_until(
        lambda: "audit: config reload by alice: rotate keys (applied)" in gateway.log_text(),
        10,
        message=gateway.log_text,
    )
    history = httpx.get(f"{gateway.url}/admin/history", headers=AS_ALICE, trust_env=False).json()
    audited = [e for e in history["events"] if e["kind"] == "manual" and e["subject"] == "config"]
    assert audited, history["events"]
    assert (audited[0]["by"], audited[0]["detail"]) == (
        "alice",
        "reload by alice: rotate keys (applied)",
    )
