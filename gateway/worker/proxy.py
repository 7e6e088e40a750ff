"""Control-plane requests a worker received, answered by its control process.

Every URL a worker does not serve itself (the admin API, the dashboard, ``/metrics``, ``/slo``,
Triton's statistics and repository, the OpenAPI document) is the control process's: this
forwards such a request to the control's own HTTP server on its private socket
(``RUN_DIR/admin.sock``, mode 0700 directory: only this user's processes reach it) and writes
its answer back. Control-plane traffic is small and rare, so each request is read whole
(bounded by ``max_body_bytes``: 413), sent on a connection of its own and its answer read whole
(bounded by ``max_answer_bytes``, within ``timeout_s``); h11 frames both directions.

Hop-by-hop headers (RFC 9110 7.6.1: ``connection`` and what it names, ``keep-alive``,
``proxy-*``, ``te``, ``trailer``, ``transfer-encoding``, ``upgrade``) are not forwarded, and the
client's address goes as ``x-gateway-peer`` (one a client sent is dropped: only this process
says who the client is), which the control reads in place of the socket's own peer. A control
that does not answer (stopped, hung, restarting) is a 503 saying so; one that answers garbage
or too much, a 502.
"""

from __future__ import annotations

import asyncio
import logging

import h11

from gateway.worker.http.answer import Answer
from gateway.worker.http.request import Request

log = logging.getLogger(__name__)

PEER_HEADER = b"x-gateway-peer"
MAX_ANSWER_BYTES = 64 * 1024 * 1024
TIMEOUT_S = 30.0
READ_BYTES = 64 * 1024
_HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"content-length",  # h11 frames the body itself
        b"expect",  # the body was read whole before it is forwarded
        PEER_HEADER,
    }
)
_JSON = b"content-type: application/json\r\n"


class ControlUnreachable(Exception):
    """The control process did not answer in time (or at all)."""


class BadControlAnswer(Exception):
    """The control's answer was not HTTP, or too large."""


class ControlProxy:
    def __init__(
        self,
        socket_path: str,
        *,
        max_body_bytes: int,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
        timeout_s: float = TIMEOUT_S,
    ) -> None:
        self._path = socket_path
        self._max_body = max_body_bytes
        self._max_answer = max_answer_bytes
        self._timeout_s = timeout_s

    async def handle(self, request: Request, answer: Answer) -> None:
        """The router's fallback: ``request`` answered by the control process."""
        body = await self._body(request)
        if body is None:
            answer.send_error(413, f"a control-plane request body over {self._max_body} bytes")
            return
        try:
            async with asyncio.timeout(self._timeout_s):
                status, headers, payload = await self._exchange(request, body)
        except (OSError, TimeoutError, ControlUnreachable) as exc:
            log.warning("the control process did not answer %s: %s", request.method, exc)
            answer.send_error(503, "the gateway's control process did not answer; try again")
            return
        except (h11.RemoteProtocolError, BadControlAnswer) as exc:
            log.error("the control process answered %s badly: %s", request.method, exc)
            answer.send_error(502, "the gateway's control process answered badly")
            return
        answer.send(status, headers, payload)

    async def _body(self, request: Request) -> bytes | None:
        pieces: list[bytes] = []
        size = 0
        more = True
        while more:
            chunk, more = await request.read()
            size += len(chunk)
            if size > self._max_body:
                return None
            pieces.append(chunk)
        return b"".join(pieces)

    async def _exchange(self, request: Request, body: bytes) -> tuple[int, bytes, bytes]:
        reader, writer = await asyncio.open_unix_connection(self._path)
        try:
            conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=64 * 1024)
            target = request.raw_path + (b"?" + request.query if request.query else b"")
            headers = [(k, v) for k, v in request.headers if k not in _HOP_BY_HOP]
            headers.append((b"content-length", b"%d" % len(body)))
            headers.append((PEER_HEADER, request.peer.encode("latin-1")))
            headers.append((b"connection", b"close"))
            writer.write(
                conn.send(h11.Request(method=request.method, target=target, headers=headers))
                + conn.send(h11.Data(data=body))
                + conn.send(h11.EndOfMessage())
            )
            return await self._answer(conn, reader)
        finally:
            writer.close()

    async def _answer(
        self, conn: h11.Connection, reader: asyncio.StreamReader
    ) -> tuple[int, bytes, bytes]:
        response: h11.Response | None = None
        pieces: list[bytes] = []
        size = 0
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await reader.read(READ_BYTES)
                if not data and response is None:
                    raise ControlUnreachable("the connection closed before an answer")
                conn.receive_data(data)
            elif isinstance(event, h11.Response):
                response = event
            elif isinstance(event, h11.Data):
                size += len(event.data)
                if size > self._max_answer:
                    raise BadControlAnswer(f"an answer over {self._max_answer} bytes")
                pieces.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                break
        if response is None:
            raise BadControlAnswer("no answer")
        lines = b"".join(
            b"%s: %s\r\n" % (name, value)
            for name, value in response.headers
            if name not in _HOP_BY_HOP and name != b"date"
        )
        return response.status_code, lines, b"".join(pieces)

    async def close(self) -> None:
        """Nothing is kept open between requests."""
