"""The server's floor: uvicorn as the gateway runs it, with an ASGI app that proxies nothing.

The app reads the request body and answers a fixed small V2 reply: no upstream, no checks, no
telemetry. What a request costs here is what any gateway built on uvicorn pays before doing
anything of its own, to set beside the minimal proxy's whole request (`loadtests/minimal_proxy.py`,
which also makes an upstream exchange) in ``loadtests/bench_instructions.py``.
Run: ``.venv/bin/python loadtests/uvicorn_floor.py --port 8080``.
"""

from __future__ import annotations

import argparse
from typing import Any

import uvicorn

REPLY = (
    b'{"model_name":"digits","outputs":[{"name":"probabilities","datatype":"FP32",'
    b'"shape":[1,10],"data":[0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1]}]}'
)
HEADERS = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(REPLY))]


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": REPLY})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=args.port,
        loop="uvloop",
        http="httptools",
        lifespan="off",
        access_log=False,
        server_header=False,
        log_level="warning",
    )


if __name__ == "__main__":
    main()
