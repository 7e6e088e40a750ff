"""What `gateway up` prints once it listens: where to send requests and open the dashboard.

Why: the log is JSON lines by default, and a newcomer running `make run` should not have to
find the URLs in it. The banner is plain text on stderr, printed once the server is listening
(not when it is about to), so a URL it shows answers.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import TextIO

from gateway.config import GatewayConfig

# the longest a start may take before the banner gives up (startup failed)
WAIT_S = 120.0
POLL_S = 0.05
ANY_ADDRESS = {"0.0.0.0", "::", ""}


def banner(
    config: GatewayConfig, host: str, port: int, replicas: int, grpc_port: int | None = None
) -> str:
    """The lines for a gateway listening on ``host:port`` with ``replicas`` local replicas."""
    name = "127.0.0.1" if host in ANY_ADDRESS else host
    base = f"http://{name}:{port}"
    models = ", ".join(sorted(config.models))
    lines = [
        f"gateway up: {replicas} local replica(s) ready, serving {base}",
        f"  V2 REST    {base}/v2/models/<model>/infer   (models: {models})",
        f"  dashboard  {base}/dashboard",
        f"  metrics    {base}/metrics   SLOs {base}/slo   state {base}/admin/state",
        "  Ctrl-C (or SIGTERM) drains, then stops the gateway and its replicas",
    ]
    if grpc_port is not None:
        lines.insert(2, f"  V2 gRPC    {name}:{grpc_port}")
    return "\n".join(lines)


async def announce_when_listening(
    started: Callable[[], bool], text: str, out: TextIO = sys.stderr
) -> bool:
    """Prints ``text`` once ``started()`` is true (within ``WAIT_S``); False if it never was."""
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while not started():
        if asyncio.get_running_loop().time() >= deadline:
            return False
        await asyncio.sleep(POLL_S)
    print(text, file=out, flush=True)
    return True
