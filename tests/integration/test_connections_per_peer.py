"""``server.max_connections_per_peer`` on both doors of ``gateway serve``: one address past its
cap is refused (REST: a JSON 503 and close; gRPC: RESOURCE_EXHAUSTED), another is served."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator

import orjson
import pytest

from tests.integration.conftest import StartReplicas
from tests.support.gateway import GatewayProcess, pool_config, start_gateway
from tests.support.h2_grpc import INFER, H2Client

pytestmark = pytest.mark.integration

ATTACKER = "127.0.0.2"  # another loopback address: another client
CAP = 2
RESOURCE_EXHAUSTED = 8


@pytest.fixture
def capped(start_replicas: StartReplicas) -> Iterator[GatewayProcess]:
    config = pool_config(start_replicas(1))
    # Each worker enforces the whole cap, and the kernel spreads a peer's connections over
    # the workers' listeners: with two, CAP held connections may sit one on each, and then
    # neither refuses the next. One worker makes the cap the gateway's.
    config["server"] = {"max_connections_per_peer": CAP, "workers": 1}
    gateway = start_gateway(config, grpc=True)
    yield gateway
    gateway.cleanup()


async def _status(port: int, source: str | None) -> tuple[int, bytes]:
    """One GET on a new connection from ``source``: its status and body (read to the close)."""
    local = None if source is None else (source, 0)
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=local)
    try:
        writer.write(b"GET /v2/health/live HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n")
        async with asyncio.timeout(10):
            reply = await reader.read()
    finally:
        writer.close()
    head, _, body = reply.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


async def test_a_rest_client_past_its_cap_gets_a_json_503(capped: GatewayProcess) -> None:
    held = []
    for _ in range(CAP):
        held.append(
            await asyncio.open_connection("127.0.0.1", capped.port, local_addr=(ATTACKER, 0))
        )
    try:
        refused: list[tuple[int, bytes]] = []

        async def refused_now() -> bool:
            refused.append(await _status(capped.port, ATTACKER))
            return refused[-1][0] == 503

        # the held connections are counted once the server has accepted them
        for _ in range(50):
            if await refused_now():
                break
            await asyncio.sleep(0.1)
        status, body = refused[-1]
        assert status == 503
        assert "too many connections from 127.0.0.2" in orjson.loads(body)["error"]
        assert (await _status(capped.port, None))[0] == 200  # another address is served
    finally:
        for _, writer in held:
            writer.close()


async def test_a_grpc_client_past_its_cap_gets_resource_exhausted(capped: GatewayProcess) -> None:
    port = capped.grpc_port
    assert port is not None
    async with contextlib.AsyncExitStack() as stack:
        held: list[tuple[H2Client, int]] = []
        for _ in range(CAP):
            client = await stack.enter_async_context(H2Client("127.0.0.1", port, source=ATTACKER))
            held.append((client, client.call(INFER, end=False)))  # in flight: waits for its message
        tries: list[tuple[float, int | None]] = []  # (seconds into the probe, code)
        started = time.monotonic()

        async def one_more(source: str) -> int | None:
            async with H2Client("127.0.0.1", port, source=source) as other:
                ended = await other.wait(other.call(INFER), 5)
            return None if ended is None else ended.code

        async def probe() -> None:
            # the held calls count once the door has taken them: until then a try is served
            while True:
                code = await one_more(ATTACKER)
                tries.append((round(time.monotonic() - started, 2), code))
                if code == RESOURCE_EXHAUSTED:
                    return
                await asyncio.sleep(0.1)

        try:
            await asyncio.wait_for(probe(), 30)
        except TimeoutError:
            ended = [
                (s.ended.code, s.ended.message, s.ended.reset, round(s.ended.at - started, 2))
                for s in (client.streams[sid] for client, sid in held)
                if s.done.is_set()
            ]
            pytest.fail(
                f"no RESOURCE_EXHAUSTED in 30 s; tries {tries}; held calls ended: {ended}; "
                f"gateway log:\n{capped.log_text()[-4000:]}"
            )
        # another address's call is served (an empty message: refused for what it is)
        assert await one_more("127.0.0.1") not in (None, RESOURCE_EXHAUSTED)
