"""The floor: a minimal Python HTTP/1.1 proxy on uvloop + httptools, pooled keep-alive, no features.

What the gateway is compared with in every ``make bench`` run (``loadtests/bench_overhead.py``):
the least a proxy written in Python on the same stack must do per request (parse the request,
take an idle upstream connection, write, parse the reply, write it back). No limits, no
checks, no retries, no telemetry: whatever the gateway costs above this is its features'.
Run: ``.venv/bin/python loadtests/minimal_proxy.py --port 8080 --upstream http://127.0.0.1:9101``.
"""

from __future__ import annotations

import argparse
import asyncio

import httptools
import uvloop


class Upstream(asyncio.Protocol):
    """One keep-alive connection to the upstream: one exchange at a time."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.reply: asyncio.Future[tuple[int, bytes]] | None = None
        self.chunks: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)

    def on_message_complete(self) -> None:
        body, self.chunks = b"".join(self.chunks), []
        if self.reply is not None and not self.reply.done():
            self.reply.set_result((self.parser.get_status_code(), body))


class Proxy:
    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.idle: list[Upstream] = []

    async def exchange(self, method: bytes, url: bytes, body: bytes) -> tuple[int, bytes]:
        conn = None
        while self.idle and conn is None:  # skip those the upstream closed while they idled
            conn = self.idle.pop()
            if conn.transport is None or conn.transport.is_closing():
                conn = None
        if conn is None:
            loop = asyncio.get_running_loop()
            _, conn = await loop.create_connection(Upstream, self.host, self.port)
        head = b"%s %s HTTP/1.1\r\nhost: %s\r\ncontent-type: application/json\r\n" % (
            method,
            url,
            self.host.encode(),
        )
        conn.reply = asyncio.get_running_loop().create_future()
        assert conn.transport is not None
        conn.transport.writelines([head, b"content-length: %d\r\n\r\n" % len(body), body])
        reply = await conn.reply
        self.idle.append(conn)
        return reply


class Client(asyncio.Protocol):
    """One client connection: requests answered in order, as they complete."""

    def __init__(self, proxy: Proxy) -> None:
        self.proxy = proxy
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.chunks: list[bytes] = []
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_url(self, url: bytes) -> None:
        self.url = url

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)

    def on_message_complete(self) -> None:
        body, self.chunks = b"".join(self.chunks), []
        method = self.parser.get_method()
        asyncio.get_running_loop().create_task(self.answer(method, self.url, body))

    async def answer(self, method: bytes, url: bytes, body: bytes) -> None:
        status, reply = await self.proxy.exchange(method, url, body)
        assert self.transport is not None
        self.transport.writelines(
            [
                b"HTTP/1.1 %d OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
                % (status, len(reply)),
                reply,
            ]
        )


async def serve(port: int, upstream: str) -> None:
    host, _, up_port = upstream.removeprefix("http://").partition(":")
    proxy = Proxy(host, int(up_port))
    server = await asyncio.get_running_loop().create_server(
        lambda: Client(proxy), "127.0.0.1", port
    )
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="http://HOST:PORT")
    args = parser.parse_args()
    uvloop.run(serve(args.port, args.upstream))


if __name__ == "__main__":
    main()
