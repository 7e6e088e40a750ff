"""The lean server's floor: `gateway.worker.http` answering a fixed reply, with no upstream.

The handler reads the request body and answers the same small V2 reply as
`loadtests/uvicorn_floor.py`: no upstream, no checks, no telemetry. Set beside uvicorn's floor
in ``loadtests/bench_instructions.py``, it is what the data plane's own server pays per request
before the gateway does anything of its own. ``GET /ready`` answers for the stack's readiness
wait. Run: ``.venv/bin/python loadtests/lean_floor.py --port 8080``.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.worker.http.answer import Answer
from gateway.worker.http.request import Request
from gateway.worker.http.router import Router
from gateway.worker.http.server import HttpServer

REPLY = (
    b'{"model_name":"digits","outputs":[{"name":"probabilities","datatype":"FP32",'
    b'"shape":[1,10],"data":[0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1]}]}'
)
LINES = b"content-type: application/json\r\n"


async def reply(request: Request, answer: Answer) -> None:
    more = True
    while more:
        _, more = await request.read()
    answer.send(200, LINES, REPLY)


async def not_found(request: Request, answer: Answer) -> None:
    answer.send_error(404, "not found")


async def serve(port: int) -> None:
    router = Router(not_found)
    router.add("POST", "/v2/models/{model}/infer", reply)
    router.add("GET", "/ready", reply)
    server = HttpServer(router)
    await server.start(host="127.0.0.1", port=port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.drain(1.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvloop.run(serve(args.port))


if __name__ == "__main__":
    main()
