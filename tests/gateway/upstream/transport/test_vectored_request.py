"""A large request body in pieces leaves as one vectored write and arrives byte for byte.

On uvloop (the gateway's loop) and on asyncio's own: a real socket, a server that reads the
request as any HTTP/1.1 server does and answers with what it got; retried sends of the same
`Body` carry the same bytes.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable

import orjson
import pytest
import uvloop

from gateway.config.endpoint import Endpoint
from gateway.upstream.transport.http1 import Http1Transport
from gateway.v2.body import Body

HANDLERS: set[asyncio.Task[None]] = set()


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    task = asyncio.current_task()
    assert task is not None
    HANDLERS.add(task)
    task.add_done_callback(HANDLERS.discard)
    while True:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            break
        fields = dict(
            line.split(": ", 1) for line in head.decode("latin-1").split("\r\n")[1:] if line
        )
        body = await reader.readexactly(int(fields["content-length"]))
        reply = orjson.dumps({"size": len(body), "sha": hashlib.sha256(body).hexdigest()})
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(reply), reply))
        await writer.drain()
    writer.close()


async def _exchange(body: Body) -> list[dict[str, object]]:
    server = await asyncio.start_server(_serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    transport = Http1Transport()
    try:
        answers = []
        for _ in range(2):  # a retry sends the same pieces again
            response = await transport.request(
                Endpoint("127.0.0.1", port),
                "POST",
                "/v2/models/m/infer",
                body=body,
                headers={"content-type": "application/octet-stream"},
                timeout=10.0,
            )
            answers.append(orjson.loads(response.body))
        return answers
    finally:
        await transport.aclose()
        server.close()
        await server.wait_closed()
        # each handler ends on the closed connection's EOF; one left running would be cancelled
        # by the runner, and asyncio would log its CancelledError with a traceback
        await asyncio.wait_for(asyncio.gather(*HANDLERS), timeout=10.0)


@pytest.mark.parametrize(
    "loop_factory", [uvloop.new_event_loop, asyncio.new_event_loop], ids=["uvloop", "asyncio"]
)
def test_a_body_in_pieces_arrives_whole(
    loop_factory: Callable[[], asyncio.AbstractEventLoop],
) -> None:
    tensor = bytes(range(256)) * 8192  # 2 MiB: more than a socket buffer takes at once
    chunks = [b'{"id":"a"}', tensor[:100_000], tensor[100_000:1_500_000], tensor[1_500_000:]]
    body = Body(chunks).spliced(7, b"~x-1")  # the id grown, as the edge does
    expected = b"".join(chunks)[:7] + b"~x-1" + b"".join(chunks)[7:]
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        answers = runner.run(_exchange(body))
    want = {"size": len(expected), "sha": hashlib.sha256(expected).hexdigest()}
    assert answers == [want, want]
