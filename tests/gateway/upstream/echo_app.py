"""A real uvicorn upstream for the transport tests: echoes request bodies; run as a script.

Why: the scripted server covers edge cases, but the happy path must also hold against the server
that replicas really run (uvicorn with httptools and uvloop). Usage: ``echo_app.py FD [CERT KEY
[CA]]`` where FD is an inherited listening socket, so the parent knows the port before the
child starts; with CERT and KEY it serves TLS, and with CA it requires a client certificate.
"""

from __future__ import annotations

import json
import socket
import ssl
import sys
from typing import Any

import uvicorn


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Echo the body; ``/status/N`` replies with status N; ``x-echo`` comes back as ``X-Echo``;
    ``/headers`` replies with JSON: the request's header fields as ``headers`` (a list of
    [name, value]) and the client's port as ``peer`` (one port: one connection)."""
    if scope["type"] != "http":
        return
    body = bytearray()
    more = True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    path: str = scope["path"]
    status = int(path.rsplit("/", 1)[1]) if path.startswith("/status/") else 200
    if path == "/headers":
        fields = [[name.decode(), value.decode()] for name, value in scope["headers"]]
        seen = {"headers": fields, "peer": scope["client"][1]}
        body = bytearray(json.dumps(seen).encode())
    echo = dict(scope["headers"]).get(b"x-echo", b"")
    headers = [
        (b"Content-Type", b"application/octet-stream"),
        (b"Content-Length", str(len(body)).encode()),
        (b"X-Echo", echo),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": bytes(body)})


def main() -> None:
    sock = socket.socket(fileno=int(sys.argv[1]))
    tls: dict[str, Any] = {}
    if len(sys.argv) > 3:
        tls = {"ssl_certfile": sys.argv[2], "ssl_keyfile": sys.argv[3]}
    if len(sys.argv) > 4:
        tls |= {"ssl_ca_certs": sys.argv[4], "ssl_cert_reqs": ssl.CERT_REQUIRED}
    config = uvicorn.Config(
        app,
        loop="uvloop",
        http="httptools",
        lifespan="off",
        access_log=False,
        log_level="warning",
        **tls,
    )
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
