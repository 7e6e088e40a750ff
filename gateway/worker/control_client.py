"""A worker's reads of its control process's HTTP API, over the control's private socket.

Only what a worker cannot answer from its snapshot goes this way, and rarely (Triton's
statistics for the gRPC door): one ``GET`` with ``connection: close`` on the control's admin
socket (`gateway.control`: uvicorn listens there, for this process's user only), its answer
read to the end within ``timeout_s`` and `MAX_ANSWER_BYTES`.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

MAX_ANSWER_BYTES = 8 * 1024 * 1024
TIMEOUT_S = 2.0


class ControlClient:
    def __init__(self, socket_path: str, timeout_s: float = TIMEOUT_S) -> None:
        self._path = socket_path
        self._timeout_s = timeout_s

    async def get_json(self, path: str) -> tuple[int, Any]:
        """The status and the JSON document the control answers ``GET path`` with;
        `OSError` or `TimeoutError` when it does not answer, `ValueError` when the answer
        is not HTTP or not JSON."""
        async with asyncio.timeout(self._timeout_s):
            reader, writer = await asyncio.open_unix_connection(self._path)
            try:
                request = f"GET {path} HTTP/1.1\r\nhost: control\r\nconnection: close\r\n\r\n"
                writer.write(request.encode("latin-1"))
                raw = await reader.read(MAX_ANSWER_BYTES + 1)
                while True:
                    more = await reader.read(MAX_ANSWER_BYTES + 1 - len(raw))
                    if not more:
                        break
                    raw += more
                    if len(raw) > MAX_ANSWER_BYTES:
                        raise ValueError(f"the control's answer to {path} is too large")
            finally:
                writer.close()
        return _parse(raw)


def _parse(raw: bytes) -> tuple[int, Any]:
    head, separator, body = raw.partition(b"\r\n\r\n")
    if not separator or not head.startswith(b"HTTP/1."):
        raise ValueError("the control's answer is not HTTP")
    status = int(head.split(b" ", 2)[1])
    if b"transfer-encoding: chunked" in head.lower():
        body = _unchunked(body)
    return status, orjson.loads(body)


def _unchunked(body: bytes) -> bytes:
    pieces: list[bytes] = []
    while True:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line.split(b";", 1)[0], 16)
        if size == 0:
            return b"".join(pieces)
        pieces.append(rest[:size])
        body = rest[size + 2 :]
