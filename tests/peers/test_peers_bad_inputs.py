"""Bad inputs to a model served by MLServer: each a clean 4xx from the gateway, none charged.

MLServer answers many misfits between ``data`` and its declared datatype with a 500 (a string
in an FP32 tensor, a value out of an INT8's range...), which a gateway forwarding them counted
as the replica's failure: five opened its breaker and ejected it, and the next good request
got a 503. The gateway now checks every element against the declared datatype and shape
(`gateway.v2.elements`) before any replica sees it. No signature is declared: MLServer's
metadata lists no tensors, so these are the checks every request gets.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.gateway import GatewayProcess, start_gateway
from tests.support.peers import PeerProcess

pytestmark = [pytest.mark.integration, pytest.mark.peers]

ROW = [0.0, 1.0, 5.0, 16.0] * 16


def _tensor(data: Any, datatype: str = "FP32", shape: list[int] | None = None) -> dict[str, Any]:
    return {
        "inputs": [
            {
                "name": "input",
                "datatype": datatype,
                "shape": [1, 64] if shape is None else shape,
                "data": data,
            }
        ]
    }


BAD = {  # kind -> (body, what the 400 names)
    "string in FP32": (_tensor([*ROW[:63], "5.0"]), "element 63 is a string"),
    "boolean in FP32": (_tensor([True, *ROW[1:]]), "element 0 is a boolean"),
    "null in FP32": (_tensor([*ROW[:10], None, *ROW[11:]]), "element 10 is null"),
    "object in FP32": (_tensor([{"v": 1.0}, *ROW[1:]]), "element 0 is an object"),
    "FP32 overflow": (_tensor([*ROW[:63], 1e39]), "outside the FP32 range"),
    "non-integer in INT64": (_tensor([*[0] * 63, 2.5], "INT64"), "element 63 is a decimal"),
    "INT8 out of range": (_tensor([*[0] * 63, 300], "INT8"), "300 is outside the INT8 range"),
    "negative UINT8": (_tensor([-1, *[0] * 63], "UINT8"), "-1 is outside the UINT8 range"),
    "INT64 out of range": (_tensor([2**63, *[0] * 63], "INT64"), "outside the INT64 range"),
    "number in BOOL": (_tensor([1, *[True] * 63], "BOOL"), "BOOL takes true or false"),
    "number in BYTES": (_tensor([5, *["a"] * 63], "BYTES"), "BYTES takes strings"),
    "ragged rows": (_tensor([ROW[:32], ROW], "FP32", [2, 32]), "'data' is ragged"),
    "nested as another shape": (_tensor([ROW[:32], ROW[32:]]), "does not follow shape [1, 64]"),
    "too few elements": (_tensor(ROW[:60]), "'data' has 60 elements, shape [1, 64] needs 64"),
    "unknown datatype": (_tensor(ROW, "FLOAT32"), "unknown datatype 'FLOAT32'"),
}


@pytest.fixture(scope="module")
def gateway(mlserver: PeerProcess) -> Iterator[GatewayProcess]:
    replicas = [{"id": "mlserver-0", "url": mlserver.url}]
    pool: dict[str, Any] = {"model": "digits", "version": "1", "replicas": replicas}
    # the defaults eject after 5 failures in a row: here one would show
    pool.update(outlier={"consecutive_failures": 1}, breaker={"failure_threshold": 1})
    proc = start_gateway({"pools": {"mlserver": pool}, "models": {"digits": {"pool": "mlserver"}}})
    yield proc
    proc.cleanup()


def _post(gateway: GatewayProcess, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{gateway.url}/v2/models/digits/infer", json=body, timeout=10)


def test_bad_inputs_are_clean_4xx_and_charge_mlserver_nothing(gateway: GatewayProcess) -> None:
    assert len(BAD) >= 12
    assert _post(gateway, _tensor(ROW)).status_code == 200  # it serves good input
    wrong: dict[str, str] = {}
    for kind, (body, named) in BAD.items():
        reply = _post(gateway, body)
        error = (
            reply.json().get("error", "")
            if reply.headers["content-type"].startswith("application/json")
            else reply.text
        )
        if not (reply.status_code == 400 and error.startswith("input 'input'") and named in error):
            wrong[kind] = f"{reply.status_code} {error}"
        assert "x-served-by" not in reply.headers, kind  # no replica saw it
    assert wrong == {}
    state = httpx.get(f"{gateway.url}/admin/state", timeout=5).json()
    [replica] = state["pools"][0]["replicas"]
    assert replica["failures"] == 0 and replica["requests"] == 1, replica
    assert not replica["ejected"] and replica["breaker"]["state"] == "closed", replica
    good = _post(gateway, _tensor(ROW))
    assert good.status_code == 200 and good.headers["x-served-by"] == "mlserver-0"
