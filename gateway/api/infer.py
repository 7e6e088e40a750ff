"""REST's front door for ``POST /v2/models/{m}[/versions/{v}]/infer``: ASGI in, the answer out.

Everything a request goes through is the edge's (`gateway.pipeline.edge`, composed in
`gateway.pipeline.build.build_edge`); this handler only does the I/O: it decodes the headers
the edge reads, lets the edge read the body through ASGI ``receive`` (a disconnect is a 400),
and writes the answer or the error with the gateway's headers (an answer's header lines are
built here, from values the gateway made or `checked`: `send_lines`). It is a raw ASGI handler
because framework routing and pydantic models cost more CPU per request than the whole
upstream exchange; everything else goes through FastAPI.

The data plane's REST door is the workers' (`gateway.worker.rest`, on the lean server); this
handler serves the same route where the gateway runs in one process as an ASGI app (the
in-process rigs of the tests, an embedding application). A request cancelled while the edge has
it (the server shutting down) is recorded as `CLIENT_CLOSED` and the cancellation goes on.
"""

from __future__ import annotations

import asyncio

from gateway.api.answer_lines import answer_lines, refusal_lines
from gateway.api.responses import Receive, Scope, Send, send_error, send_lines
from gateway.api.tenants import HEADERS as TENANT_HEADERS
from gateway.errors import CLIENT_CLOSED, BadRequest, GatewayError
from gateway.pipeline.edge import HEADERS as EDGE_HEADERS
from gateway.pipeline.edge import Arrival, Edge

_WANTED = frozenset(name.encode() for name in (*EDGE_HEADERS, *TENANT_HEADERS))


class InferEndpoint:
    def __init__(self, edge: Edge) -> None:
        self.edge = edge

    async def __call__(
        self, scope: Scope, receive: Receive, send: Send, model_name: str, version: str | None
    ) -> None:
        edge = self.edge
        # (host, port); None where the server knows none
        client = scope.get("client")
        peer = client[0] if client else ""
        arrival = edge.arrive(model_name, version, _wanted_headers(scope["headers"]), peer)

        async def read() -> tuple[bytes, bool]:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise BadRequest("client disconnected before sending the whole body")
            return message.get("body", b""), message.get("more_body", False)

        try:
            result = await edge.infer(arrival, read)
        except asyncio.CancelledError:
            edge.done(arrival, CLIENT_CLOSED)
            raise
        except GatewayError as error:
            await self._refuse(send, scope, arrival, error)
            return
        await send_lines(send, scope, result.status, answer_lines(arrival, result), result.body)
        edge.done(arrival, result.status, result.served_by, result.degraded, len(result.body))

    async def _refuse(
        self, send: Send, scope: Scope, arrival: Arrival, error: GatewayError
    ) -> None:
        await send_error(send, scope, error, refusal_lines(arrival))
        self.edge.done(arrival, error.status)


def _wanted_headers(raw: list[tuple[bytes, bytes]]) -> dict[str, str]:
    """Decodes only the request headers the edge reads (the hot path skips the rest)."""
    return {k.decode("latin-1"): v.decode("latin-1") for k, v in raw if k in _WANTED}
