"""A binary tensor request is checked in the gateway's own process, whatever its size: only
its JSON header is parsed (a few hundred bytes), so its tensor bytes never go to the parse
worker; its NaN is still found, the replica gets its tensor with a unique id, and the client
its own id back."""

from __future__ import annotations

import httpx
import numpy as np
import orjson

from tests.gateway.api.test_client_limits import config, started


def binary_request(rows: int, nan: bool = False) -> tuple[bytes, dict[str, str]]:
    values = np.full((rows, 64), 0.25, dtype=np.float32)
    if nan:
        values[rows - 1, 63] = np.nan
    raw = values.tobytes()
    tensor = {
        "name": "input",
        "shape": [rows, 64],
        "datatype": "FP32",
        "parameters": {"binary_data_size": len(raw)},
    }
    head = orjson.dumps({"id": "b-1", "inputs": [tensor]})
    return head + raw, {"inference-header-content-length": str(len(head))}


async def test_a_large_binary_request_never_goes_to_the_worker() -> None:
    gateway_app, upstream = await started(config(parse_inline_max_bytes=1024))
    transport = httpx.ASGITransport(app=gateway_app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            body, headers = binary_request(16)  # 4 KiB of tensor bytes, over the inline limit
            ok = await client.post("/v2/models/digits/infer", content=body, headers=headers)
            assert ok.status_code == 200, ok.text
            assert ok.json()["id"] == "b-1"  # its own id back
            (sent,) = upstream.payloads  # in JSON: this fake pool's metadata names no binary
            sent_doc = orjson.loads(sent)
            assert sent_doc["id"].startswith("b-1~")  # unique upstream
            assert sent_doc["inputs"][0]["data"] == [0.25] * (16 * 64)
            body, headers = binary_request(16, nan=True)
            refused = await client.post("/v2/models/digits/infer", content=body, headers=headers)
            assert refused.status_code == 400
            assert "binary FP32 data holds NaN or infinity (1 values)" in refused.text
            assert gateway_app.parser.process_pids() == []  # no parse process was needed
    finally:
        await gateway_app.gateway.stop()
        await gateway_app.parser.close()
