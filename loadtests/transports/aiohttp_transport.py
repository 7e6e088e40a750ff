"""`AiohttpTransport`: the upstream transport on one shared ``aiohttp.ClientSession``.

Why: aiohttp is the mature asyncio HTTP client and the benchmark's reference point; as a
transport under the same contract it lets tests check `Http1Transport` against a well-known
implementation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import aiohttp

from gateway.config.endpoint import Endpoint
from gateway.errors import (
    UpstreamConnectError,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamTimeout,
)
from gateway.upstream.transport.base import AnswerRoom, Reply
from gateway.v2.body import Body, as_bytes

# aiohttp adds these unless told not to. A proxy hop needs none of them, and without an
# Accept-Encoding the replica replies uncompressed, so the body we pass on is what it says it is.
_SKIP_AUTO_HEADERS = ("User-Agent", "Content-Type", "Accept", "Accept-Encoding")


def new_session(max_connections_per_endpoint: int) -> aiohttp.ClientSession:
    """A session tuned for proxying: per-host limit, keep-alive, no cookies, no decompression.

    Must be called inside a running loop (aiohttp binds the session to it).
    """
    connector = aiohttp.TCPConnector(
        limit=0, limit_per_host=max_connections_per_endpoint, keepalive_timeout=30.0
    )
    return aiohttp.ClientSession(
        connector=connector,
        auto_decompress=False,
        skip_auto_headers=_SKIP_AUTO_HEADERS,
        cookie_jar=aiohttp.DummyCookieJar(),
        trust_env=False,
        raise_for_status=False,
    )


def dropped_before_reply(exc: BaseException) -> bool:
    """The connection closed or reset before the reply's head (aiohttp's own retry condition)."""
    connect_failed = isinstance(exc, aiohttp.ClientConnectorError)
    return isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientOSError) and (
        not connect_failed
    )


def _lower_names(headers: Mapping[str, str]) -> dict[str, str]:
    """Header names lower-cased; repeated headers joined with ", " as httpx does."""
    names: dict[str, str] = {}
    for key, value in headers.items():
        name = key.lower()
        names[name] = f"{names[name]}, {value}" if name in names else value
    return names


def translate(exc: BaseException, endpoint: Endpoint) -> UpstreamError:
    """The one place where aiohttp's and asyncio's exceptions become upstream errors."""
    where = endpoint.authority
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return UpstreamConnectError(f"connect to {where} timed out")
    if isinstance(exc, TimeoutError):  # total timeout, or aiohttp's SocketTimeoutError
        return UpstreamTimeout(f"no complete reply from {where} within the timeout")
    if isinstance(exc, aiohttp.ClientConnectionError):  # refused, reset, closed before replying
        return UpstreamConnectError(f"connection to {where} failed: {exc!r}")
    return UpstreamProtocolError(f"invalid reply from {where}: {exc!r}")


class AiohttpTransport:
    """Upstream transport on aiohttp. aiohttp has no idle bound per host: idle connections are
    bounded by ``limit_per_host`` and closed after the keep-alive timeout instead."""

    name = "aiohttp"

    def __init__(
        self,
        *,
        max_connections_per_endpoint: int = 256,
        max_idle_per_endpoint: int = 64,
        connect_timeout_s: float = 1.0,
    ) -> None:
        del max_idle_per_endpoint  # not expressible in aiohttp, see the class docstring
        self._max_connections = max_connections_per_endpoint
        self._connect_timeout = connect_timeout_s
        self._session: aiohttp.ClientSession | None = None

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
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        url = f"{endpoint.base_url}{path}"
        try:
            return await self._send(method, url, as_bytes(body), headers, timeout)
        except (aiohttp.ClientError, TimeoutError) as exc:
            if not dropped_before_reply(exc):
                raise translate(exc, endpoint) from exc
        # The connection dropped before any reply: most likely a pooled connection that the
        # server closed while it sat idle. Retry once on another connection, within the same
        # deadline (aiohttp itself does so only for idempotent methods; inference requests are
        # side-effect free).
        try:
            return await self._send(method, url, as_bytes(body), headers, deadline - loop.time())
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise translate(exc, endpoint) from exc

    async def _send(
        self,
        method: str,
        url: str,
        body: bytes,
        headers: Mapping[str, str] | None,
        timeout: float,
    ) -> Reply:
        session = self._session
        if session is None:
            session = self._session = new_session(self._max_connections)
        timeout = max(timeout, 1e-3)  # aiohttp reads 0 as "no timeout"
        limits = aiohttp.ClientTimeout(
            total=timeout, sock_connect=min(timeout, self._connect_timeout)
        )
        async with session.request(
            method, url, data=body or None, headers=headers, timeout=limits
        ) as resp:
            content = await resp.read()
            return Reply(resp.status, _lower_names(resp.headers), content)

    def forget(self, endpoint: Endpoint) -> None:
        """aiohttp pools by origin and cannot drop one: its idle connections age out."""

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
