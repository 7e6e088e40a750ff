"""The lean server's protocol fed requests in memory: its own cost per request, no sockets.

Sixteen connections' protocols (`gateway.worker.http.protocol.HttpProtocol`, routed as
`loadtests/lean_floor.py` routes) each get ``N`` copies of one small infer request through
``data_received``, with a transport that only counts writes. Under callgrind, the difference
between a run of ``2N`` and one of ``N`` over ``16 N`` is the instructions per request of the
protocol, request, answer, router and task, without the loop's socket work:

    valgrind --tool=callgrind --toggle-collect=uv_run python loadtests/lean_in_memory.py 400

(and again with 800). Used to weigh changes to the server's hot path between runs of
``loadtests/bench_instructions.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.worker.http.router import Router
from gateway.worker.http.server import HttpServer
from loadtests.bench_overhead import body
from loadtests.lean_floor import not_found, reply

CONNECTIONS = 16


class CountingTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, data: Any) -> None:
        self.writes += 1

    def writelines(self, data: Any) -> None:
        self.writes += 1

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def run(requests: int) -> None:
    payload = body()
    wire = (
        b"POST /v2/models/digits/infer HTTP/1.1\r\nhost: 127.0.0.1:8000\r\n"
        b"content-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(payload), payload)
    )
    router = Router(not_found)
    router.add("POST", "/v2/models/{model}/infer", reply)
    server = HttpServer(router)
    connections = []
    for _ in range(CONNECTIONS):
        protocol, transport = server._protocol(), CountingTransport()
        protocol.connection_made(transport)
        connections.append((protocol, transport))
    for _ in range(requests):
        for protocol, _ in connections:
            protocol.data_received(wire)
        for _ in range(3):  # the handlers' tasks run and answer
            await asyncio.sleep(0)
    answered = [transport.writes for _, transport in connections]
    if answered != [requests] * CONNECTIONS:
        raise SystemExit(f"answers per connection: {answered}, expected {requests}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("requests", type=int, help="per connection")
    args = parser.parse_args()
    uvloop.run(run(args.requests))


if __name__ == "__main__":
    main()
