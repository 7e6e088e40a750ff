"""``check-config --probe`` checks every output a vote asks its legs for on each of its pools:
an unmapped one would make that pool's legs missing answers on every request."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.config import parse_config
from gateway.upstream.probes.conformance import probe_config
from gateway.upstream.transport.base import Reply
from tests.gateway.fakes import FakeTransport

AUTHORITIES = {"ours": "127.0.0.1:9000", "sklearn": "127.0.0.1:9001"}
OUTPUTS = {"ours": ["label", "probabilities"], "sklearn": ["predict", "predict_proba"]}


def _server(outputs: list[str]) -> Any:
    """A V2 server of ``digits`` whose metadata lists ``outputs``."""
    metadata = {
        "name": "digits",
        "versions": ["1"],
        "inputs": [{"name": "input", "datatype": "FP32", "shape": [-1, 64]}],
        "outputs": [{"name": name, "datatype": "FP32", "shape": [-1]} for name in outputs],
    }

    async def behave(method: str, path: str, payload: bytes) -> Reply:
        doc: dict[str, Any] = {"name": "peer", "extensions": ["binary_tensor_data"]}
        if path.startswith("/v2/models/digits"):
            doc = metadata
        elif path != "/v2" and path != "/v2/health/ready":
            return Reply(404, {}, b'{"error": "not found"}')
        return Reply(200, {"content-type": "application/json"}, orjson.dumps(doc))

    return behave


async def test_every_output_a_vote_asks_for_is_checked_on_its_pools() -> None:
    label_only = {"outputs": {"label": "predict"}}  # probabilities: not mapped
    pools = {
        name: {
            "model": "digits",
            "replicas": [{"id": name, "url": f"http://{AUTHORITIES[name]}"}],
            **({"tensors": label_only} if name == "sklearn" else {}),
        }
        for name in AUTHORITIES
    }
    vote = {"pools": list(pools), "outputs": ["label", "probabilities"]}
    config = parse_config({"pools": pools, "models": {"v": {"vote": vote}}})
    servers = {AUTHORITIES[name]: _server(OUTPUTS[name]) for name in AUTHORITIES}
    findings = [str(f) for f in await probe_config(config, FakeTransport(servers))]
    votes = [f for f in findings if "votes on output" in f]
    assert len(votes) == 1, findings
    assert votes[0].startswith("error: pool 'sklearn'")
    assert "model 'v' votes on output 'probabilities': no output 'probabilities'" in votes[0]
