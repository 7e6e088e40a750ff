"""A real replica behind TLS (certificates made here) and a real gateway: infer, probes and
metadata over https with the pool's CA; mutual TLS; a CA that does not sign the replica."""

from __future__ import annotations

import ssl
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.gateway import GatewayProcess, start_gateway
from tests.support.processes import ManagedProcess, free_port, wait_until
from tests.support.tls import Certificates

pytestmark = pytest.mark.integration
ROW = {"name": "input", "datatype": "FP32", "shape": [1, 64], "data": [0.0] * 64}
SECRET = "s3cret-token-value"
StartGateway = Callable[..., GatewayProcess]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return Certificates.make(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def start_gw() -> Iterator[StartGateway]:
    """``start_gw(config, env)``: a gateway with extra environment variables; stopped after."""
    started: list[GatewayProcess] = []

    def start(config: dict[str, Any], env: dict[str, str] | None = None) -> GatewayProcess:
        started.append(start_gateway(config, env=env))
        return started[-1]

    yield start
    for proc in started:
        proc.cleanup()


def _start_tls_replica(
    models_dir: Path, certs: Certificates, *, mtls: bool
) -> tuple[ManagedProcess, int]:
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "replicas.cli",
        "serve",
        "--model",
        str(models_dir / "digits-mlp.onnx"),
        "--name",
        "digits-mlp",
        "--port",
        str(port),
        "--ssl-certfile",
        str(certs.server_cert),
        "--ssl-keyfile",
        str(certs.server_key),
        *(["--ssl-ca-certs", str(certs.ca)] if mtls else []),
    ]
    proc = ManagedProcess(argv, name="replica-tls")
    context = ssl.create_default_context(cafile=str(certs.ca))
    if mtls:
        context.load_cert_chain(str(certs.client_cert), str(certs.client_key))

    def ready() -> bool:
        try:
            url = f"https://127.0.0.1:{port}/v2/health/ready"
            return httpx.get(url, verify=context, timeout=0.5).status_code == 200
        except httpx.HTTPError:
            return not proc.alive()

    try:
        wait_until(ready, 30.0, message=lambda: f"TLS replica to start; log:\n{proc.log_text()}")
    except BaseException:
        proc.cleanup()
        raise
    return proc, port


@pytest.fixture(scope="module")
def replica(models_dir: Path, certs: Certificates) -> Iterator[int]:
    proc, port = _start_tls_replica(models_dir, certs, mtls=False)
    yield port
    proc.cleanup()


@pytest.fixture(scope="module")
def mtls_replica(models_dir: Path, certs: Certificates) -> Iterator[int]:
    proc, port = _start_tls_replica(models_dir, certs, mtls=True)
    yield port
    proc.cleanup()


def _config(port: int, tls: dict[str, Any], **pool: Any) -> dict[str, Any]:
    replicas = [{"id": "tls0", "url": f"https://127.0.0.1:{port}"}]
    return {
        "pools": {"p": {"model": "digits-mlp", "replicas": replicas, "tls": tls, **pool}},
        "models": {"digits": {"pool": "p"}},
    }


def _infer(gateway: GatewayProcess) -> httpx.Response:
    body = {"inputs": [ROW]}
    return httpx.post(f"{gateway.url}/v2/models/digits/infer", json=body, timeout=10)


def test_infer_probes_and_metadata_over_tls(
    replica: int, certs: Certificates, start_gw: StartGateway
) -> None:
    headers = {"Authorization": "Bearer ${POOL_TOKEN}", "Host": "digits.models.example"}
    config = _config(replica, {"ca_file": str(certs.ca)}, headers=headers)
    gateway = start_gw(config, {"POOL_TOKEN": SECRET})  # ready: the probes passed over TLS
    reply = _infer(gateway)
    assert reply.status_code == 200, reply.text
    assert reply.headers["x-served-by"] == "tls0"
    metadata = httpx.get(f"{gateway.url}/v2/models/digits", timeout=5).json()
    assert metadata["inputs"][0]["name"] == "input"
    state = httpx.get(f"{gateway.url}/admin/state", timeout=5).text
    assert '"authorization":"***"' in state.replace(" ", "") and SECRET not in state
    assert "https://127.0.0.1" in state
    assert SECRET not in gateway.log_text()


def test_mutual_tls(mtls_replica: int, certs: Certificates, start_gw: StartGateway) -> None:
    tls = {"ca_file": str(certs.ca), "cert_file": str(certs.client_cert)}
    gateway = start_gw(_config(mtls_replica, {**tls, "key_file": str(certs.client_key)}))
    assert _infer(gateway).status_code == 200


def test_an_untrusted_replica_is_never_used(
    replica: int, certs: Certificates, start_gw: StartGateway
) -> None:
    config = _config(replica, {"ca_file": str(certs.other_ca)})
    config["models"]["digits"]["required"] = False  # so the gateway starts ready without it
    gateway = start_gw(config)
    reply = _infer(gateway)
    assert reply.status_code == 503
    assert "replica tls0: could not connect" in reply.json()["error"], reply.text  # no more said
    state = httpx.get(f"{gateway.url}/admin/state", timeout=5).json()
    (pool,) = state["pools"]
    assert "certificate verify failed" in (pool["replicas"][0]["last_error"] or "")


def test_verify_false_is_warned_at_start(
    replica: int, certs: Certificates, start_gw: StartGateway
) -> None:
    gateway = start_gw(_config(replica, {"ca_file": str(certs.other_ca), "verify": False}))
    assert _infer(gateway).status_code == 200
    assert "NOT verified" in gateway.log_text()
