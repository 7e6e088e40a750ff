"""The gateway's ASGI application: infer on the raw fast path, the rest on FastAPI.

It also owns the lifespan, starting and stopping the `Gateway` with the server, and is the
last line against bare 500s: anything unexpected becomes a JSON 500 that says so.
"""

from __future__ import annotations

import gc
import logging
import re

from gateway.api.admin import build_admin_app
from gateway.api.infer import InferEndpoint
from gateway.api.responses import Receive, Scope, Send, send_json
from gateway.runtime import Gateway

log = logging.getLogger(__name__)

INFER_PATH = re.compile(r"^/v2/models/([^/]+)(?:/versions/([^/]+))?/infer$")


class GatewayApp:
    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self._infer = InferEndpoint(gateway)
        self._admin = build_admin_app(gateway)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] == "http" and scope["method"] == "POST":
            match = INFER_PATH.match(scope["path"])
            if match is not None:
                try:
                    await self._infer(scope, receive, send, match[1], match[2])
                except Exception:  # the one place an unexpected bug meets the client
                    log.exception("unexpected error on %s", scope["path"])
                    await send_json(send, 500, {"error": "internal gateway error (logged)"})
                return
        await self._admin(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.gateway.start()
                except Exception as exc:
                    log.exception("gateway failed to start")
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                _settle_garbage_collector()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.gateway.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return


def _settle_garbage_collector() -> None:
    """Moves start-up objects out of the collector's sight and collects less often.

    A request allocates a few hundred short-lived objects; with CPython's default thresholds
    the young generation is collected every ~700 allocations and the old ones keep re-walking
    everything loaded at start-up, which shows up as tail latency under load.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 20)
