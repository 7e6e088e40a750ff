"""`AiohttpBackend`: an ``httpx.AsyncBaseTransport`` that sends httpx's requests with aiohttp.

Why: it separates the two costs of httpx, its client layer and its default transport
(httpcore), so the benchmark can tell which one is slow; it is the "httpx with an aiohttp
transport" candidate of the transport issue.
"""

from __future__ import annotations

import aiohttp
import httpx

from loadtests.transports.aiohttp_transport import dropped_before_reply, new_session
from loadtests.transports.httpx_transport import SERVER_DISCONNECTED


def _to_httpx(exc: Exception, request: httpx.Request) -> httpx.TransportError:
    """aiohttp's exceptions as the httpx ones that `HttpxTransport` already translates."""
    message = repr(exc)
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return httpx.ConnectTimeout(message, request=request)
    if isinstance(exc, TimeoutError):
        return httpx.ReadTimeout(message, request=request)
    if isinstance(exc, aiohttp.ClientConnectorError):
        return httpx.ConnectError(message, request=request)
    if dropped_before_reply(exc):
        return httpx.RemoteProtocolError(SERVER_DISCONNECTED, request=request)
    if isinstance(exc, aiohttp.ClientConnectionError):
        return httpx.ReadError(message, request=request)
    return httpx.RemoteProtocolError(message, request=request)


class AiohttpBackend(httpx.AsyncBaseTransport):
    """Sends each httpx request through one shared aiohttp session (created on first use)."""

    def __init__(self, *, max_connections_per_endpoint: int = 256) -> None:
        self._max_connections = max_connections_per_endpoint
        self._session: aiohttp.ClientSession | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        session = self._session
        if session is None:
            session = self._session = new_session(self._max_connections)
        timeouts = request.extensions.get("timeout", {})
        limits = aiohttp.ClientTimeout(
            sock_connect=timeouts.get("connect"), sock_read=timeouts.get("read")
        )
        body = await request.aread()
        try:
            async with session.request(
                request.method,
                str(request.url),
                headers=request.headers.multi_items(),
                data=body or None,
                timeout=limits,
            ) as resp:
                content = await resp.read()
                raw_headers = resp.raw_headers
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise _to_httpx(exc, request) from exc
        return httpx.Response(resp.status, headers=list(raw_headers), content=content)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
