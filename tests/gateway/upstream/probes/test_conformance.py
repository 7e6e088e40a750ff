"""The probe behind ``check-config --probe``, against scripted servers (the real peers are in
tests/peers): each mismatch named with what to change; a fitting config finds nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from gateway.config import parse_config
from gateway.config.models import GatewayConfig
from gateway.control.preflight import fallback_signatures
from gateway.errors import UpstreamConnectError
from gateway.upstream.probes.conformance import probe_config
from gateway.upstream.transport.base import Reply
from tests.gateway.fakes import Behaviour, FakeTransport, fail

GOLDEN = str(Path(__file__).resolve().parents[4] / "fallback_models" / "digits-golden.json")
AUTHORITY = "127.0.0.1:9000"
METADATA = {
    "name": "digits",
    "versions": ["1"],
    "inputs": [{"name": "input-0", "datatype": "FP32", "shape": [-1, 64]}],
    "outputs": [{"name": "predict", "datatype": "INT64", "shape": [-1]}],
}


def _server(*, versioned: bool, extensions: list[str], ids: str = "echo") -> Behaviour:
    """A V2 server of ``digits``; with ``versioned=False`` it answers 501 to versioned paths;
    its answers carry the request's id (``ids="echo"``), none (``"none"``) or another one."""

    async def behave(method: str, path: str, payload: bytes) -> Reply:
        if "/versions/" in path and not versioned:
            return _json(501, {"error": "Model versioning not supported yet."})
        if path == "/v2/health/ready":
            return _json(200, {})
        if path == "/v2":
            return _json(200, {"name": "peer", "extensions": extensions})
        if path.endswith("/infer"):
            request = orjson.loads(payload)
            if request["inputs"][0]["name"] != "input-0":
                return _json(400, {"error": f"unknown input {request['inputs'][0]['name']}"})
            rows = request["inputs"][0]["shape"][0]
            out = {"name": "predict", "datatype": "INT64", "shape": [rows], "data": [0] * rows}
            answer = {"model_name": "digits", "id": request.get("id"), "outputs": [out]}
            if ids != "echo":
                answer["id"] = "other-request" if ids == "other" else None
            return _json(200, {k: v for k, v in answer.items() if v is not None})
        if path.startswith("/v2/models/digits"):
            return _json(200, METADATA)
        return _json(404, {"error": "not found"})

    return behave


def _json(status: int, doc: dict[str, Any]) -> Reply:
    return Reply(status, {"content-type": "application/json"}, orjson.dumps(doc))


def _config(**pool: Any) -> GatewayConfig:
    return parse_config(
        {
            "pools": {
                "p": {
                    "model": "digits",
                    "replicas": [{"id": "r0", "url": f"http://{AUTHORITY}"}],
                    "golden": {"file": GOLDEN, "scores_output": None},
                    **pool,
                }
            },
            "models": {"digits": {"pool": "p"}},
        }
    )


async def _probe(config: GatewayConfig, server: Behaviour, *, info: bool = False) -> list[str]:
    """The findings as printed; the ``info`` ones (what the server does, as configured) only
    when asked for."""
    findings = await probe_config(config, FakeTransport({AUTHORITY: server}))
    return [str(f) for f in findings if info or f.level != "info"]


async def test_a_version_the_server_cannot_serve_is_named() -> None:
    found = await _probe(_config(version="1"), _server(versioned=False, extensions=[]))
    assert any("answered 501" in f and "remove version '1' from the pool" in f for f in found)


async def test_tensor_names_the_server_lacks_are_named_with_the_fix() -> None:
    found = await _probe(_config(), _server(versioned=True, extensions=["binary_tensor_data"]))
    errors = [f for f in found if f.startswith("error")]
    assert any("no input 'input' on the server; its inputs: input-0" in f for f in errors)
    assert any("no output 'label' on the server; its outputs: predict" in f for f in errors)


async def test_binary_tensors_without_the_extension_is_a_warning() -> None:
    tensors = {"inputs": {"input": "input-0"}, "outputs": {"label": "predict"}}
    forced = _config(tensors=tensors, binary_tensors=True)
    found = await _probe(forced, _server(versioned=True, extensions=[]))
    assert len(found) == 1 and found[0].startswith("warning") and "binary_tensors: true" in found[0]
    fits = _config(tensors=tensors, binary_tensors=False)
    assert await _probe(fits, _server(versioned=True, extensions=[])) == []


async def test_unset_binary_tensors_is_learned_and_the_probe_says_how() -> None:
    tensors = {"inputs": {"input": "input-0"}, "outputs": {"label": "predict"}}
    for extensions, how in (([], "JSON (extensions: [])"), (["binary_tensor_data"], "binary")):
        server = _server(versioned=True, extensions=extensions)
        assert await _probe(_config(tensors=tensors), server) == []
        found = await _probe(_config(tensors=tensors), server, info=True)
        said = f"info: pool 'p', replica 'r0': the gateway will send it {how}"
        assert any(f.startswith(said) for f in found), found
    listed = _config(tensors=tensors, binary_tensors=False)
    found = await _probe(listed, _server(versioned=True, extensions=["binary_tensor_data"]))
    assert found == [
        "warning: pool 'p', replica 'r0': the server lists 'binary_tensor_data' but the pool "
        "says binary_tensors: false, which costs a conversion to JSON: remove the key"
    ]


async def test_an_unreachable_replica_is_an_error_and_nothing_more() -> None:
    refused = fail(UpstreamConnectError("connection refused"))
    found = await probe_config(_config(), FakeTransport({AUTHORITY: refused}))
    assert len(found) == 1 and found[0].level == "error"


# --- does the server echo request ids? ----------------------------------------------------------

TENSORS = {"inputs": {"input": "input-0"}, "outputs": {"label": "predict"}}


async def test_a_server_that_echoes_ids_is_said_to() -> None:
    server = _server(versioned=True, extensions=["binary_tensor_data"])
    found = await _probe(_config(tensors=TENSORS), server, info=True)
    assert "info: pool 'p', replica 'r0': echoes request ids" in found
    # declared as not echoing: it works, at the price of a connection per request
    found = await _probe(_config(tensors=TENSORS, echoes_id=False), server)
    assert any(f.startswith("warning") and "echoes_id: false" in f for f in found), found


async def test_a_server_that_does_not_echo_ids_must_be_declared() -> None:
    server = _server(versioned=True, extensions=["binary_tensor_data"], ids="none")
    found = await _probe(_config(tensors=TENSORS), server)
    assert any(
        f.startswith("error") and "does not echo request ids" in f and "echoes_id: false" in f
        for f in found
    ), found
    declared = await _probe(_config(tensors=TENSORS, echoes_id=False), server, info=True)
    assert not [f for f in declared if f.startswith("error")], declared
    assert any(f.startswith("info") and "does not echo request ids" in f for f in declared)


async def test_a_server_answering_under_another_id_is_an_error_whatever_the_pool_says() -> None:
    server = _server(versioned=True, extensions=["binary_tensor_data"], ids="other")
    for echoes_id in (True, False):
        found = await _probe(_config(tensors=TENSORS, echoes_id=echoes_id), server)
        assert any(f.startswith("error") and "'other-request'" in f for f in found), found


async def test_without_listed_inputs_the_golden_rows_ask() -> None:
    """Metadata without tensors: the pool's golden rows carry the probe's id instead."""

    async def bare(method: str, path: str, payload: bytes) -> Reply:
        if path.endswith("/infer") or not path.startswith("/v2/models/"):
            return await _server(versioned=True, extensions=[], ids="none")(method, path, payload)
        return _json(200, {"name": "digits", "versions": ["1"]})

    found = await _probe(_config(tensors=TENSORS), bare)
    assert any(f.startswith("error") and "does not echo request ids" in f for f in found), found
    config = _config(tensors=TENSORS).model_copy(deep=True)
    pools = {n: p.model_copy(update={"golden": None}) for n, p in config.pools.items()}
    found = await _probe(config.model_copy(update={"pools": pools}), bare)
    assert any(f.startswith("warning") and "cannot tell" in f for f in found), found


# --- can the model's fallback answer the tensors the server lists? ---------------------------


async def test_a_fallback_that_cannot_answer_the_servers_tensors_is_an_error() -> None:
    """A pool with KServe's names (input-0, predict: clients use them too) and digits-logreg's
    (input, label) for its fallback, unmapped."""
    data: dict[str, Any] = {
        "pools": {
            "p": {"model": "digits", "replicas": [{"id": "r0", "url": f"http://{AUTHORITY}"}]}
        },
        "models": {"digits": {"pool": "p", "fallback": {"model": "digits-logreg"}}},
    }
    server = FakeTransport({AUTHORITY: _server(versioned=True, extensions=[])})
    config = parse_config(data)
    found = await probe_config(config, server, fallback_signatures(config))
    assert [str(f) for f in found if f.level == "error"] == [
        "error: pool 'p', replica 'r0': model 'digits': fallback 'digits-logreg' cannot answer "
        "the model's tensors: no input 'input-0'; its inputs: input (map the model's under "
        "fallback.tensors.inputs)"
    ]
    data["models"]["digits"]["fallback"]["tensors"] = {
        "inputs": {"input-0": "input"},
        "outputs": {"predict": "label"},
    }
    config = parse_config(data)
    found = await probe_config(config, server, fallback_signatures(config))
    assert [f for f in found if f.level == "error"] == []
