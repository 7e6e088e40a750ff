"""A real uvicorn upstream for the transport tests: echoes request bodies; run as a script.

Why: the scripted server covers edge cases, but the happy path must also hold against the server
that replicas really run (uvicorn with httptools and uvloop). Usage: ``echo_app.py FD`` where FD
is an inherited listening socket, so the parent knows the port before the child starts.
"""

from __future__ import annotations

import socket
import sys
from typing import Any

import uvicorn


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Echo the body; ``/status/N`` replies with status N; ``x-echo`` comes back as ``X-Echo``."""
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
    config = uvicorn.Config(
        app, loop="uvloop", http="httptools", lifespan="off", access_log=False, log_level="warning"
    )
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
