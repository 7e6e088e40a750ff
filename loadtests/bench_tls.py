"""TLS vs plaintext through the gateway's `Http1Transport`: µs per request and handshakes.

Why: a pool of ``https://`` replicas pays for encryption on every request and for a handshake
per new connection; this measures both against a local uvicorn echo server (the transport
tests' `echo_app`, certificates from trustme) in a closed loop of sequential requests on one
keep-alive connection, and counts the connections the loop opened (one: one handshake).

    .venv/bin/python loadtests/bench_tls.py [--requests 5000] [--body 700] [--loop uvloop|asyncio]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import ssl
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere in the repo

import uvloop

from gateway.config.endpoint import Endpoint
from gateway.config.tls import TlsConfig
from gateway.upstream.transport.http1 import Http1Transport
from tests.gateway.upstream.conftest import echo_server
from tests.support.tls import Certificates


async def _loop(endpoint: Endpoint, requests: int, body: bytes) -> dict[str, float]:
    transport = Http1Transport()
    try:
        await transport.request(endpoint, "POST", "/echo", body=body, timeout=5.0)  # connect
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(requests):
            await transport.request(endpoint, "POST", "/echo", body=body, timeout=5.0)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        peer = json.loads((await transport.request(endpoint, "GET", "/headers", timeout=5.0)).body)
        connections = len(transport._open)
        handshake = time.perf_counter()
        await Http1Transport().request(endpoint, "GET", "/headers", timeout=5.0)  # a fresh one
        handshake = time.perf_counter() - handshake
    finally:
        await transport.aclose()
    return {
        "wall_us": wall / requests * 1e6,
        "client_cpu_us": cpu / requests * 1e6,
        "connections": connections,
        "peer_port": peer["peer"],
        "first_request_ms": handshake * 1e3,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--body", type=int, default=700, help="request body bytes (echoed)")
    parser.add_argument("--loop", choices=["uvloop", "asyncio"], default="uvloop")
    args = parser.parse_args()
    run = uvloop.run if args.loop == "uvloop" else asyncio.run
    body = b"x" * args.body
    certs = Certificates.make(Path(tempfile.mkdtemp(prefix="bench-tls-")))
    trust = ssl.create_default_context(cafile=str(certs.ca))
    with echo_server() as port:
        plain = run(_loop(Endpoint("127.0.0.1", port), args.requests, body))
    with echo_server(str(certs.server_cert), str(certs.server_key), context=trust) as port:
        endpoint = Endpoint("127.0.0.1", port, scheme="https", tls=TlsConfig(ca_file=str(certs.ca)))
        secure = run(_loop(endpoint, args.requests, body))
    for name, result in (("http", plain), ("https", secure)):
        shown = ", ".join(f"{k} {v:.1f}" for k, v in result.items() if k != "peer_port")
        print(f"{name:5} {args.loop}: {shown}")
    print(
        f"TLS adds {secure['client_cpu_us'] - plain['client_cpu_us']:.1f} µs client CPU and "
        f"{secure['wall_us'] - plain['wall_us']:.1f} µs wall per request"
    )


if __name__ == "__main__":
    main()
