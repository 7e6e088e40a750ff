"""The lean HTTP/1.1 server: listens, serves each connection with `HttpProtocol`, drains.

    server = HttpServer(router, ClientLimits(...), wanted_headers=("x-request-id", ...))
    await server.start(host="0.0.0.0", port=8000, reuse_port=True)   # or start(sock=...)
    ...
    await server.drain(grace_s=10.0)   # stop accepting, finish what is in flight, close

It listens on a socket it is given (inherited from a parent process) or binds ``host:port``,
with ``SO_REUSEPORT`` when asked, so that several worker processes accept on one port. A drain
stops accepting, closes idle keep-alive connections at once, lets requests in flight finish
(their answers say ``connection: close``) within a grace, then cuts what is left, cancelling its
handlers. The ``date`` header is refreshed once a second while it serves.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterable

from gateway.worker.http.answer import Date
from gateway.worker.http.connections import Connections
from gateway.worker.http.limits import ClientLimits
from gateway.worker.http.protocol import HttpProtocol
from gateway.worker.http.router import Router

BACKLOG = 2048


class HttpServer:
    def __init__(
        self,
        router: Router,
        limits: ClientLimits | None = None,
        wanted_headers: Iterable[str] = (),
    ) -> None:
        """``wanted_headers``: header names the handlers read, decoded once per request into
        ``Request.wanted`` (lower-case names)."""
        self.router = router
        self.limits = limits or ClientLimits()
        self.connections = Connections(self.limits)
        self._wanted = {name.lower().encode("latin-1"): name.lower() for name in wanted_headers}
        self._server: asyncio.Server | None = None
        self._port = 0
        self._ticker: asyncio.TimerHandle | None = None

    async def start(
        self,
        sock: socket.socket | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        reuse_port: bool = False,
        backlog: int = BACKLOG,
    ) -> None:
        """Listens on ``sock`` or, without one, on ``host:port`` (0: any free port)."""
        loop = asyncio.get_running_loop()
        if sock is not None:
            self._server = await loop.create_server(self._protocol, sock=sock, backlog=backlog)
        else:
            self._server = await loop.create_server(
                self._protocol, host, port, reuse_port=reuse_port or None, backlog=backlog
            )
        self._port = int(self._server.sockets[0].getsockname()[1])
        self._tick()

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return tuple(self._server.sockets) if self._server is not None else ()

    @property
    def port(self) -> int:
        """The port it listens on (the one chosen for port 0), the first socket's."""
        return self._port

    def held(self) -> int:
        """Bytes the open connections hold for their clients (`Connections.held`)."""
        return self.connections.held()

    def stop_accepting(self) -> None:
        if self._server is not None:
            self._server.close()

    async def drain(self, grace_s: float) -> bool:
        """Stops accepting, lets requests in flight finish within ``grace_s``, then cuts the
        rest; True if every connection closed by itself."""
        self.stop_accepting()
        connections = self.connections
        connections.drain()
        closed = await connections.closed(grace_s)
        if not closed:
            connections.abort()
            await connections.closed(grace_s)
        if self._server is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), grace_s)
        if self._ticker is not None:
            self._ticker.cancel()
            self._ticker = None
        return closed

    def _protocol(self) -> HttpProtocol:
        return HttpProtocol(self.router, self.limits, self.connections, self._wanted)

    def _tick(self) -> None:
        Date.refresh()
        self._ticker = asyncio.get_running_loop().call_later(1.0, self._tick)
