"""REST's front door for ``POST /v2/models/{m}[/versions/{v}]/infer``: ASGI in, the answer out.

Everything a request goes through is the edge's (`gateway.pipeline.edge`, composed in
`gateway.pipeline.build.build_edge`); this handler only does the I/O: it decodes the headers
the edge reads, lets the edge read the body through ASGI ``receive`` (a disconnect is a 400, or
the 408 the protocol already answered for a body not complete in time), and writes the answer
or the error with the gateway's headers. It is a raw ASGI handler because framework routing
and pydantic models cost more CPU per request than the whole upstream exchange (README,
"Measured figures"); everything else goes through FastAPI.
"""

from __future__ import annotations

from gateway.api.protocol import BODY_TIMEOUT_KEY
from gateway.api.responses import Receive, Scope, Send, send_bytes, send_error
from gateway.api.tenants import HEADERS as TENANT_HEADERS
from gateway.errors import BadRequest, GatewayError, RequestTimeout
from gateway.pipeline.edge import HEADERS as EDGE_HEADERS
from gateway.pipeline.edge import Edge
from gateway.v2.request import HEADER_LENGTH

_WANTED = frozenset(name.encode() for name in (*EDGE_HEADERS, *TENANT_HEADERS))
_JSON = (b"content-type", b"application/json")
_HEADER_LENGTH = HEADER_LENGTH.encode()


class InferEndpoint:
    def __init__(self, edge: Edge) -> None:
        self.edge = edge

    async def __call__(
        self, scope: Scope, receive: Receive, send: Send, model_name: str, version: str | None
    ) -> None:
        edge = self.edge
        intake = edge.arrive(model_name, version, _wanted_headers(scope["headers"]))

        async def read() -> tuple[bytes, bool]:
            message = await receive()
            if message["type"] == "http.disconnect":
                if scope.get(BODY_TIMEOUT_KEY) is not None:  # the protocol answered 408
                    raise RequestTimeout(f"body not complete in {scope[BODY_TIMEOUT_KEY]:g} s")
                raise BadRequest("client disconnected before sending the whole body")
            return message.get("body", b""), message.get("more_body", False)

        span = intake.span
        try:
            result = await edge.infer(intake, read)
        except GatewayError as error:
            extra = [
                (b"x-attempts", b"%d" % intake.attempts),
                (b"x-request-id", intake.request_id.encode()),
            ]
            if span.traceparent:
                extra.append((b"traceparent", span.traceparent.encode()))
            await send_error(send, error, extra)
            edge.done(intake, error.status)
            return
        ctype = result.content_type or "application/json"
        out = [
            _JSON if ctype == "application/json" else (b"content-type", ctype.encode()),
            (b"x-served-by", result.served_by.encode()),
            (b"x-attempts", b"%d" % result.attempts),
            (b"x-request-id", intake.request_id.encode()),
        ]
        if result.header_length is not None:
            out.append((_HEADER_LENGTH, result.header_length.encode()))
        if result.degraded:
            out.append((b"x-degraded", result.degraded.encode()))
        if result.vote:
            out.append((b"x-vote", result.vote.encode()))
        if span.traceparent:
            out.append((b"traceparent", span.traceparent.encode()))
        await send_bytes(send, result.status, result.body, out)
        edge.done(intake, result.status, result.served_by, result.degraded, len(result.body))


def _wanted_headers(raw: list[tuple[bytes, bytes]]) -> dict[str, str]:
    """Decodes only the request headers the edge reads (the hot path skips the rest)."""
    return {k.decode("latin-1"): v.decode("latin-1") for k, v in raw if k in _WANTED}
