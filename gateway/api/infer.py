"""REST's front door for ``POST /v2/models/{m}[/versions/{v}]/infer``: ASGI in, the answer out.

Everything a request goes through is the edge's (`gateway.pipeline.edge`, composed in
`gateway.pipeline.build.build_edge`); this handler only does the I/O: it decodes the headers
the edge reads, lets the edge read the body through ASGI ``receive`` (a disconnect is a 400, or
the 408 the protocol already answered for a body not complete in time), and writes the answer
or the error with the gateway's headers (an answer's header lines are built here, from values
the gateway made or `checked`, and written past uvicorn's validation: `send_lines`). It is a raw
ASGI handler because framework routing and pydantic models cost more CPU per request than the
whole upstream exchange (docs/measured.md, "Gateway overhead"); everything else goes through
FastAPI.

A client that leaves while the edge has its request (`gateway.pipeline.cancel`): the handler
offers the server protocol a hook in the request's scope (`CLIENT_LEFT_KEY`: the handler task's
``cancel``) for as long as the edge has the request; the protocol takes it and calls it when
the connection is lost (`gateway.server.body_cycle.PiecesCycle.lost`). The request stops, is
recorded as `CLIENT_CLOSED` (499), and the handler returns without writing: nobody is there.
"""

from __future__ import annotations

import asyncio

from gateway.api.answer_lines import answer_lines, refusal_lines
from gateway.api.responses import Receive, Scope, Send, send_error, send_lines
from gateway.api.tenants import HEADERS as TENANT_HEADERS
from gateway.errors import CLIENT_CLOSED, BadRequest, GatewayError, RequestTimeout
from gateway.pipeline.edge import HEADERS as EDGE_HEADERS
from gateway.pipeline.edge import Arrival, Edge

# Set in a request's scope by the server protocol when its body timed out, so the app
# records the 408 the protocol already answered.
BODY_TIMEOUT_KEY = "gateway.body_timeout"
# Set in a request's scope by the infer handler while the edge has its request: a call that
# cancels the request (its task). The server protocol takes it and calls it when the connection
# is lost before the answer; taken, it tells the handler that its client left.
CLIENT_LEFT_KEY = "gateway.client_left"

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
                if scope.get(BODY_TIMEOUT_KEY) is not None:
                    # the protocol answered 408
                    raise RequestTimeout(f"body not complete in {scope[BODY_TIMEOUT_KEY]:g} s")
                raise BadRequest("client disconnected before sending the whole body")
            return message.get("body", b""), message.get("more_body", False)

        task = asyncio.current_task()
        assert task is not None, "an ASGI handler runs in a task"
        scope[CLIENT_LEFT_KEY] = task.cancel
        try:
            result = await edge.infer(arrival, read)
        except asyncio.CancelledError:
            if not self._left(scope, arrival):
                # cancelled by the server (its shutdown)
                edge.done(arrival, CLIENT_CLOSED)
                raise
            # nobody to answer, and nothing for uvicorn to log
            return
        except GatewayError as error:
            if not self._left(scope, arrival):
                await self._refuse(send, scope, arrival, error)
            return
        except BaseException:
            # a bug: uvicorn answers 500; the hook goes (it holds the task)
            scope.pop(CLIENT_LEFT_KEY, None)
            raise
        if self._left(scope, arrival):
            # as the answer came
            return
        await send_lines(send, scope, result.status, answer_lines(arrival, result), result.body)
        edge.done(arrival, result.status, result.served_by, result.degraded, len(result.body))

    async def _refuse(
        self, send: Send, scope: Scope, arrival: Arrival, error: GatewayError
    ) -> None:
        await send_error(send, scope, error, refusal_lines(arrival))
        self.edge.done(arrival, error.status)

    def _left(self, scope: Scope, arrival: Arrival) -> bool:
        """Takes the hook back; True when the protocol had taken it (the client left): the
        request is then recorded as `CLIENT_CLOSED` and nothing is written."""
        if scope.pop(CLIENT_LEFT_KEY, None) is not None:
            return False
        self.edge.done(arrival, CLIENT_CLOSED)
        return True


def _wanted_headers(raw: list[tuple[bytes, bytes]]) -> dict[str, str]:
    """Decodes only the request headers the edge reads (the hot path skips the rest)."""
    return {k.decode("latin-1"): v.decode("latin-1") for k, v in raw if k in _WANTED}
