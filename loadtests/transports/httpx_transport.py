"""`HttpxTransport`: the upstream transport on one shared ``httpx.AsyncClient``.

Why: httpx was the first choice in the design, so it stays (beside the benchmark) as a
measured candidate and a reference implementation; on this machine its default transport
costs about ten times the CPU of the alternatives (encode/httpx#3215), which is why the
gateway does not use it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import httpx

from gateway.config.endpoint import Endpoint
from gateway.errors import (
    UpstreamConnectError,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamTimeout,
)
from gateway.upstream.transport.base import AnswerRoom, Reply
from gateway.v2.body import Body, as_bytes

# httpcore's message when the connection closed before any byte of the reply
# (httpcore/_async/http11.py); the backend adapter in httpx_aiohttp.py raises it too.
SERVER_DISCONNECTED = "Server disconnected without sending a response."


def translate(exc: Exception, endpoint: Endpoint) -> UpstreamError:
    """The one place where httpx's and asyncio's exceptions become upstream errors."""
    where = endpoint.authority
    if isinstance(exc, httpx.ConnectTimeout | httpx.ConnectError):
        return UpstreamConnectError(f"cannot connect to {where}: {exc!r}")
    if isinstance(exc, httpx.TimeoutException | TimeoutError):  # read, write, pool, total
        return UpstreamTimeout(f"no complete reply from {where} within the timeout")
    if isinstance(exc, httpx.ReadError | httpx.WriteError | httpx.CloseError) or (
        isinstance(exc, httpx.RemoteProtocolError) and str(exc) == SERVER_DISCONNECTED
    ):
        return UpstreamConnectError(f"connection to {where} failed: {exc!r}")
    return UpstreamProtocolError(f"invalid reply from {where}: {exc!r}")


class HttpxTransport:
    """Upstream transport on httpx. httpx's limits bound the whole pool, not each endpoint, and
    apply to its default backend only; with ``backend`` given, that backend's limits rule."""

    def __init__(
        self,
        *,
        max_connections_per_endpoint: int = 256,
        max_idle_per_endpoint: int = 64,
        connect_timeout_s: float = 1.0,
        backend: httpx.AsyncBaseTransport | None = None,
        name: str = "httpx",
    ) -> None:
        self.name = name
        self._connect_timeout = connect_timeout_s
        limits = httpx.Limits(
            max_connections=max_connections_per_endpoint,
            max_keepalive_connections=max_idle_per_endpoint,
            keepalive_expiry=30.0,
        )
        # identity: httpx would decompress the body but keep Content-Encoding in the headers.
        self._client = httpx.AsyncClient(
            limits=limits,
            trust_env=False,
            follow_redirects=False,
            transport=backend,
            headers={"accept-encoding": "identity"},
        )

    async def request(
        self,
        endpoint: Endpoint,
        method: str,
        path: str,
        *,
        body: bytes | Body = b"",
        headers: Mapping[str, str] | None = None,
        timeout: float,
        room: AnswerRoom | None = None,
    ) -> Reply:
        url = f"{endpoint.base_url}{path}"
        limits = httpx.Timeout(timeout, connect=min(timeout, self._connect_timeout))
        try:
            async with asyncio.timeout(timeout):  # httpx's timeouts are per read, not per exchange
                try:
                    resp = await self._client.request(
                        method, url, content=as_bytes(body), headers=headers, timeout=limits
                    )
                except httpx.RemoteProtocolError as exc:
                    # Closed before any reply byte: most likely a pooled connection that the
                    # server closed while idle. Retry once (inference is side-effect free).
                    if str(exc) != SERVER_DISCONNECTED:
                        raise
                    resp = await self._client.request(
                        method, url, content=as_bytes(body), headers=headers, timeout=limits
                    )
        except (httpx.HTTPError, TimeoutError) as exc:
            raise translate(exc, endpoint) from exc
        return Reply(resp.status_code, dict(resp.headers.items()), resp.content)

    def forget(self, endpoint: Endpoint) -> None:
        """httpx pools by origin and cannot drop one: its idle connections age out."""

    async def aclose(self) -> None:
        await self._client.aclose()
