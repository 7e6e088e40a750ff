"""Does a V2 server return each request's ``id``? One inference with a known id, and a look.

The gateway refuses a reply without the request's id (it could be any request's answer, read
off an out-of-step keep-alive connection), so a server that never echoes ids must be declared
in its pool (``echoes_id: false``), which then gets a connection per exchange. ``check-config
--probe`` asks each replica: the request is the smallest the model's metadata allows (one row
of zeros: the answer's values do not matter, only its id), or the pool's golden rows when the
metadata lists no inputs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.config.endpoint import Endpoint
from gateway.errors import UpstreamError
from gateway.upstream.transport.base import Transport
from gateway.v2.reply import check_reply, error_text
from gateway.v2.request import HEADER_LENGTH

PROBE_ID = "check-config-echo"
_ZERO: Mapping[str, Any] = {"BOOL": False, "BYTES": ""}


@dataclass(frozen=True, slots=True)
class IdEcho:
    """What the probe saw: ``echoes`` True/False, or None when it could not tell (``why``);
    ``refused``: the gateway would refuse every answer whatever the pool says (another id)."""

    echoes: bool | None
    why: str = ""
    refused: bool = False


def zeros_request(metadata: Mapping[str, Any], request_id: str = PROBE_ID) -> bytes | None:
    """A JSON infer body of one row of zeros for every input the metadata lists (None: it lists
    none, or a shape or datatype that cannot be filled)."""
    specs = metadata.get("inputs")
    if not isinstance(specs, list) or not specs:
        return None
    inputs = []
    for spec in specs:
        if not isinstance(spec, dict):
            return None
        name, datatype, shape = spec.get("name"), spec.get("datatype"), spec.get("shape")
        if not isinstance(name, str) or not isinstance(datatype, str):
            return None
        if not isinstance(shape, list) or not all(isinstance(d, int) for d in shape):
            return None
        dims = [1 if d < 0 else d for d in shape]
        inputs.append(
            {
                "name": name,
                "datatype": datatype,
                "shape": dims,
                "data": [_ZERO.get(datatype, 0)] * math.prod(dims),
            }
        )
    return orjson.dumps({"id": request_id, "inputs": inputs})


async def probe_id_echo(
    transport: Transport, endpoint: Endpoint, path: str, body: bytes, timeout: float
) -> IdEcho:
    """Sends ``body`` (an infer request whose id is `PROBE_ID`) and says whether the reply
    carries that id."""
    try:
        response = await transport.request(
            endpoint,
            "POST",
            path,
            body=body,
            headers={"content-type": "application/json"},
            timeout=timeout,
        )
    except UpstreamError as exc:
        return IdEcho(None, f"the probe inference failed: {exc.message}")
    if response.status != 200:
        text = error_text(response.body)
        return IdEcho(None, f"the probe inference answered {response.status}: {text}")
    length = response.headers.get(HEADER_LENGTH)
    problem = check_reply(response.body, length, PROBE_ID, echoes_id=False)
    if problem is not None:
        # not V2, or under another id: refused whatever the pool says
        response.discard()
        return IdEcho(None, f"the probe inference's answer is refused: {problem}", refused=True)
    echoed = check_reply(response.body, length, PROBE_ID) is None
    return IdEcho(echoed)
