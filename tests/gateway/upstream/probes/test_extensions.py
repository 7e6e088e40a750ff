"""Whether a pool takes binary tensors is learned from its servers' metadata: JSON until they
have said, binary only when every one lists the extension; the config's value overrides."""

from __future__ import annotations

import random
from typing import Any

import httpx
import numpy as np
import orjson

from gateway.api.app import GatewayApp
from gateway.config import parse_config
from gateway.config.models import GatewayConfig
from gateway.control.runtime import Gateway
from gateway.errors import UpstreamConnectError
from gateway.upstream.probes.extensions import BinaryLearner, lists_binary
from gateway.upstream.registry import Registry
from gateway.upstream.transport.base import Reply
from gateway.v2.dialect import Dialect
from tests.gateway.fakes import Behaviour, FakeTransport, fail, with_echoed_id
from tests.support.clock import FakeClock

A, B = "127.0.0.1:9000", "127.0.0.1:9001"
LABEL = {"name": "label", "datatype": "INT64", "shape": [1], "data": [3]}


def _config(binary_tensors: bool | None = None, replicas: int = 2) -> GatewayConfig:
    pool: dict[str, Any] = {
        "model": "digits",
        "replicas": [
            {"id": f"r{i}", "url": f"http://127.0.0.1:{9000 + i}"} for i in range(replicas)
        ],
    }
    if binary_tensors is not None:
        pool["binary_tensors"] = binary_tensors
    return parse_config({"pools": {"p": pool}, "models": {"digits": {"pool": "p"}}})


def _server(extensions: list[str] | None, payloads: list[bytes] | None = None) -> Behaviour:
    """``GET /v2`` lists ``extensions`` (None: answers no server metadata); infer answers a
    label and keeps the payload."""

    async def behave(method: str, path: str, payload: bytes) -> Reply:
        if path == "/v2":
            doc = {"name": "s", "version": "1", "extensions": extensions}
            body = orjson.dumps(doc if extensions is not None else {"error": "not found"})
            return Reply(200 if extensions is not None else 404, {}, body)
        if method == "POST" and payloads is not None:
            payloads.append(payload)
        answer = orjson.dumps({"model_name": "digits", "outputs": [LABEL]})
        return Reply(200, {"content-type": "application/json"}, with_echoed_id(payload, answer))

    return behave


def _learner(config: GatewayConfig, transport: FakeTransport) -> tuple[Registry, BinaryLearner]:
    clock = FakeClock()
    registry = Registry(config, clock)
    return registry, BinaryLearner(registry, transport, clock)


def test_server_metadata_lists_the_extension_or_not() -> None:
    assert lists_binary(b'{"name": "t", "extensions": ["binary_tensor_data"]}') is True
    assert lists_binary(b'{"name": "m", "extensions": []}') is False
    assert lists_binary(b'{"name": "m"}') is None and lists_binary(b"nope") is None


def test_a_dialect_learns_only_what_the_config_leaves_open() -> None:
    learning = Dialect(None, None)
    assert not learning.native and not learning.binary_tensors  # JSON until it is said
    assert learning.learn_binary(True) and learning.native
    assert learning.learn_binary(False) and not learning.native
    assert not learning.learn_binary(False)  # nothing changed
    for configured in (True, False):
        fixed = Dialect(None, configured)
        assert not fixed.learn_binary(not configured) and fixed.native is configured


async def test_a_pool_is_sent_binary_only_when_every_server_lists_the_extension() -> None:
    both = FakeTransport({A: _server(["binary_tensor_data"]), B: _server(["binary_tensor_data"])})
    registry, learner = _learner(_config(), both)
    pool = registry.pools["p"]
    assert not pool.dialect.native  # not yet said: JSON
    assert not await learner.learn()
    assert pool.dialect.native and pool.snapshot(0.0)["binary_tensors"] is True
    one_lacks = FakeTransport({A: _server(["binary_tensor_data"]), B: _server([])})  # MLServer
    registry, learner = _learner(_config(), one_lacks)
    assert not await learner.learn() and not registry.pools["p"].dialect.native
    silent = FakeTransport({A: _server(None), B: _server(None)})  # no server metadata: none listed
    registry, learner = _learner(_config(), silent)
    assert not await learner.learn() and not registry.pools["p"].dialect.native


async def test_a_server_not_reachable_yet_is_asked_again_and_then_decides() -> None:
    transport = FakeTransport(
        {A: _server(["binary_tensor_data"]), B: fail(UpstreamConnectError("refused"))}
    )
    registry, learner = _learner(_config(), transport)
    pool = registry.pools["p"]
    assert await learner.learn()  # B is still to be heard
    assert pool.dialect.native  # every server that answered lists it
    transport.behaviours[B] = _server([])
    assert not await learner.learn()
    assert not pool.dialect.native
    assert transport.calls[A] == ["GET /v2"]  # a server that said is not asked again
    assert transport.calls[B] == ["GET /v2", "GET /v2"]


async def test_the_config_overrides_what_the_servers_say() -> None:
    for configured in (True, False):
        transport = FakeTransport({A: _server([]), B: _server(["binary_tensor_data"])})
        registry, learner = _learner(_config(configured), transport)
        assert not await learner.learn()
        assert registry.pools["p"].dialect.native is configured
        assert transport.calls == {}  # not even asked


async def test_binary_from_a_client_reaches_a_server_without_the_extension_as_json() -> None:
    """tritonclient's binary input to MLServer was forwarded as is (a 500 charged to it)."""
    payloads: list[bytes] = []
    transport = FakeTransport({A: _server([], payloads)})
    gateway = Gateway(_config(replicas=1), transport=transport, rng=random.Random(0))
    await gateway.start()
    app = GatewayApp(gateway)
    try:
        raw = np.arange(64, dtype=np.float32).tobytes()
        tensor = {
            "name": "input",
            "shape": [1, 64],
            "datatype": "FP32",
            "parameters": {"binary_data_size": len(raw)},
        }
        head = orjson.dumps({"inputs": [tensor], "parameters": {"binary_data_output": True}})
        headers = {"inference-header-content-length": str(len(head))}
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://gw"
        ) as client:
            reply = await client.post(
                "/v2/models/digits/infer", content=head + raw, headers=headers
            )
        assert reply.status_code == 200, reply.text
        [sent] = payloads
        doc = orjson.loads(sent)  # plain JSON, the data inline
        assert doc["inputs"][0]["data"] == list(range(64))
        assert "parameters" not in doc["inputs"][0] and "binary_data_output" not in doc.get(
            "parameters", {}
        )
    finally:
        await gateway.stop()
        await app.parser.close()
