"""The hot path: ``POST /v2/models/{m}[/versions/{v}]/infer`` as a raw ASGI handler.

Framework routing and pydantic models cost more CPU per request than the whole upstream
exchange (see DESIGN.md's performance notes), so infer skips them: know the tenant (401),
hold its limits (429, before the body is read: a refusal costs ≈ nothing), read the body,
check it, run the pipeline, rename the reply, send it. Everything else goes through FastAPI.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from gateway.api.ids import request_id_of
from gateway.api.parsing import RequestParser
from gateway.api.protocol import BODY_TIMEOUT_KEY
from gateway.api.responses import Receive, Scope, Send, send_bytes, send_error
from gateway.api.tenants import HEADERS as TENANT_HEADERS
from gateway.api.tenants import TenantKeys, require_key
from gateway.deadline import TIMEOUT_HEADER, Deadline, timeout_from_header
from gateway.errors import BadRequest, GatewayError, PayloadTooLarge, RequestTimeout
from gateway.pipeline.call import InferCall
from gateway.runtime import Gateway
from gateway.telemetry.logging import bind_request, unbind_request
from gateway.telemetry.metrics import ANONYMOUS
from gateway.telemetry.spans import RequestSpan
from gateway.v2.identity import with_request_id
from gateway.v2.request import HEADER_LENGTH, parse_infer_request
from gateway.v2.response import rename_reply
from v2proto.codec import BINARY_CONTENT_TYPE

_WANTED = frozenset(
    name.encode()
    for name in (
        HEADER_LENGTH, TIMEOUT_HEADER, "content-length", "x-request-id", "traceparent",
        "tracestate", *TENANT_HEADERS,
    )
)  # fmt: skip
_JSON = (b"content-type", b"application/json")
JSON_BODY: Mapping[str, str] = MappingProxyType({"content-type": "application/json"})
_HEADER_LENGTH = HEADER_LENGTH.encode()


class InferEndpoint:
    def __init__(
        self, gateway: Gateway, parser: RequestParser | None = None, keys: TenantKeys | None = None
    ) -> None:
        """``keys``: the tenants' keys, read by the caller; else read here (`ConfigError`)."""
        self._gateway = gateway
        self._keys = keys if keys is not None else TenantKeys.load(gateway.config.tenants)
        self._limits = gateway.tenants
        server = gateway.config.server
        self._max_body = server.max_body_bytes
        self._parser = parser or RequestParser(server.parse_inline_max_bytes, "inline")
        self._inline_max = self._parser.inline_max_bytes

    async def __call__(
        self, scope: Scope, receive: Receive, send: Send, model_name: str, version: str | None
    ) -> None:
        gateway = self._gateway
        arrived = gateway.clock.now()
        headers = _wanted_headers(scope["headers"])
        request_id = request_id_of(headers.get("x-request-id"))
        span = gateway.tracer.start_request(headers, model_name, request_id)
        token = bind_request(request_id, span)
        call: InferCall | None = None
        client_deadline_s: float | None = None  # for the SLOs: only a deadline the client chose
        tenant = ANONYMOUS
        received = rows = -1  # the body's bytes and the request's rows, once known
        try:
            tenant = self._keys.tenant(headers)
            model = gateway.model(model_name, version)
            if tenant == ANONYMOUS and model.auth.require_key:
                raise require_key(model_name)
            limiter = self._limits.get(tenant)
            limiter.enter()
            try:
                body = await self._read_body(scope, receive, headers)
                received = len(body)
                timeout_s = timeout_from_header(
                    headers.get(TIMEOUT_HEADER), model.timeout_ms, model.max_timeout_ms
                )
                if TIMEOUT_HEADER in headers:
                    client_deadline_s = timeout_s
                if len(body) <= self._inline_max:
                    request = parse_infer_request(body, headers.get(HEADER_LENGTH), model.max_rows)
                else:  # off the event loop
                    request = await self._parser.offload(
                        body, headers.get(HEADER_LENGTH), model.max_rows
                    )
                schema = gateway.schema(model_name)
                if schema is not None:  # the model's signature: a bad input never costs a replica
                    schema.check(request.header)
                rows = _rows(request.header)
                body, header_length, request = with_request_id(
                    body, headers.get(HEADER_LENGTH), request, request_id
                )
                forwarded: Mapping[str, str]
                if header_length is None:
                    forwarded = JSON_BODY
                else:  # binary tensors after the JSON header: not a JSON body (KServe parses those)
                    forwarded = {"content-type": BINARY_CONTENT_TYPE, HEADER_LENGTH: header_length}
                call = InferCall(
                    model_name=model_name,
                    model=model,
                    body=body,
                    upstream_headers=forwarded,
                    deadline=Deadline(gateway.clock, arrived, arrived + timeout_s),
                    request_id=request_id,
                    request=request,
                    span=span,
                    tenant=tenant,
                )
                result = await gateway.infer(call)
            finally:
                limiter.leave()
        except GatewayError as error:
            extra = [
                (b"x-attempts", str(call.attempts if call else 0).encode()),
                (b"x-request-id", request_id.encode()),
            ]
            if span.traceparent:
                extra.append((b"traceparent", span.traceparent.encode()))
            await send_error(send, error, extra)
            self._finish(
                span, model_name, error.status, "", arrived, None, client_deadline_s, tenant,
                received, -1, rows,
            )  # fmt: skip
            unbind_request(token)
            return
        reply, header_length = result.body, result.header_length
        if result.status == 200 and result.vote is None and result.degraded is None:
            reply, header_length = rename_reply(reply, header_length, model_name, model.version)
        ctype = result.content_type or "application/json"
        out = [
            _JSON if ctype == "application/json" else (b"content-type", ctype.encode()),
            (b"x-served-by", result.served_by.encode()),
            (b"x-attempts", b"%d" % result.attempts),
            (b"x-request-id", request_id.encode()),
        ]
        if header_length is not None:
            out.append((_HEADER_LENGTH, header_length.encode()))
        if result.degraded:
            out.append((b"x-degraded", result.degraded.encode()))
        if result.vote:
            out.append((b"x-vote", result.vote.encode()))
        if span.traceparent:
            out.append((b"traceparent", span.traceparent.encode()))
        await send_bytes(send, result.status, reply, out)
        self._finish(
            span, model_name, result.status, result.served_by, arrived, result.degraded,
            client_deadline_s, tenant, received, len(reply), rows,
        )  # fmt: skip
        unbind_request(token)

    def _finish(
        self,
        span: RequestSpan,
        model: str,
        status: int,
        served_by: str,
        arrived: float,
        degraded: str | None,
        deadline_s: float | None,
        tenant: str,
        received: int,
        sent: int,
        rows: int,
    ) -> None:
        """``received``, ``sent``: the bodies' bytes; ``rows``: the request's (-1: not known)."""
        latency = self._gateway.clock.now() - arrived
        self._gateway.observe(
            model, status, served_by, latency, degraded, deadline_s, tenant, received, sent, rows
        )
        span.end(status, served_by or None, degraded)

    async def _read_body(self, scope: Scope, receive: Receive, headers: dict[str, str]) -> bytes:
        """The whole body, up to ``max_body_bytes`` (413); the server times a slow one (408)."""
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self._max_body:
            raise PayloadTooLarge(f"request body over {self._max_body} bytes")
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                if scope.get(BODY_TIMEOUT_KEY) is not None:  # the protocol answered 408
                    raise RequestTimeout(f"body not complete in {scope[BODY_TIMEOUT_KEY]:g} s")
                raise BadRequest("client disconnected before sending the whole body")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self._max_body:
                raise PayloadTooLarge(f"request body over {self._max_body} bytes")
            chunks.append(chunk)
            if not message.get("more_body", False):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _rows(header: dict[str, Any]) -> int:
    """Rows of a valid request: its first input's first dimension (1 for a scalar)."""
    shape = header["inputs"][0]["shape"]
    return shape[0] if shape else 1


def _wanted_headers(raw: list[tuple[bytes, bytes]]) -> dict[str, str]:
    """Decodes only the request headers the gateway reads (the hot path skips the rest)."""
    return {k.decode("latin-1"): v.decode("latin-1") for k, v in raw if k in _WANTED}
