"""A hostile source of accelerator readings for integration tests: a raw TCP server speaking
just enough HTTP/1.1 to be sampled as replicas (under path prefixes) and as dcgm-exporters.

It answers every ``.../ready`` and ``.../live`` with 200 and a model's metadata like a V2
server, so the gateway keeps its "replicas" in the pool, and serves these pages:

- ``<prefix>/metrics`` (a replica's own page): one GPU, ``UUID_A``, whose temperature is 60
  plus the number in the prefix (``/r1/metrics``: 61 °C), so replicas behind one ingress on
  one host and port can be told apart;
- ``/nan-beside-hot`` (a node exporter's page): ``UUID_A`` reads NaN (temperature and XID)
  and ``UUID_B`` reads 100 °C, slowdown at 90 °C;
- ``/huge``: 15 MiB of distinct temperature series of ``UUID_A``, sent chunked (only a cap on
  what is read stops it), and ``/huge-framed``: the same with its Content-Length;
- ``/series``: 60,000 such series (about 5 MB);
- ``/switch``: a GPU's page of ``UUID_A`` at 60 °C, or ``/huge``'s flood (chunked, or framed
  as ``/huge-framed``) after a GET of ``/switch/huge`` (``/switch/huge-framed``), and the
  page again after ``/switch/off`` (for a benchmark with and without the flood).

It prints ``listening`` once bound and ``served <path> <bytes>`` after each page it wrote whole;
run as ``python -m tests.support.rogue_metrics --port P`` and stop it by PID.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re

import orjson

UUID_A = "GPU-aaaaaaaa-0000-4000-8000-000000000001"
UUID_B = "GPU-bbbbbbbb-0000-4000-8000-000000000002"
HUGE_BYTES = 15 * 1024 * 1024
SERIES = 60_000
CHUNK = 256 * 1024


def flood(count: int) -> bytes:
    """``count`` distinct temperature series of ``UUID_A`` (each one a new line to parse)."""
    return "".join(
        f'DCGM_FI_DEV_GPU_TEMP{{gpu="0",UUID="{UUID_A}",i="{i:07d}"}} 50\n' for i in range(count)
    ).encode()


def device(gpu: int, uuid: str, values: dict[str, str]) -> str:
    return "".join(
        f'{name}{{gpu="{gpu}",UUID="{uuid}"}} {value}\n' for name, value in values.items()
    )


HOT = device(1, UUID_B, {"DCGM_FI_DEV_GPU_TEMP": "100", "DCGM_FI_DEV_SLOWDOWN_TEMP": "90"})
NAN = device(
    0,
    UUID_A,
    {
        "DCGM_FI_DEV_GPU_TEMP": "NaN",
        "DCGM_FI_DEV_XID_ERRORS": "NaN",
        "DCGM_FI_DEV_SLOWDOWN_TEMP": "90",
    },
)
LINE = len(flood(1))
HUGE = flood(HUGE_BYTES // LINE + 1)
PAGES = {"/nan-beside-hot": (NAN + HOT).encode(), "/series": flood(SERIES)}
switch = ["off"]  # what /switch serves: off (the page), huge or huge-framed


def own_page(prefix: str) -> bytes:
    number = re.sub(r"\D", "", prefix) or "0"
    return device(
        0,
        UUID_A,
        {"DCGM_FI_DEV_GPU_TEMP": str(60 + int(number)), "DCGM_FI_DEV_SLOWDOWN_TEMP": "90"},
    ).encode()


def head(status: int, framing: str) -> bytes:
    return f"HTTP/1.1 {status} X\r\ncontent-type: text/plain\r\n{framing}\r\n".encode()


def framed(status: int, body: bytes) -> bytes:
    return head(status, f"content-length: {len(body)}\r\n") + body


def answer(path: str) -> bytes | None:
    """A whole reply to ``path``; None: the chunked flood (written by `serve_huge`)."""
    bare = path.split("?")[0]
    if bare.startswith("/switch/"):
        switch[0] = bare.removeprefix("/switch/")
        return framed(200, b"{}")
    if bare == "/switch":
        bare = {"off": "/r0/metrics"}.get(switch[0], f"/{switch[0]}")
    if bare == "/huge":
        return None
    if bare == "/huge-framed":
        return framed(200, HUGE)
    if bare in PAGES:
        return framed(200, PAGES[bare])
    if bare.endswith("/metrics"):
        return framed(200, own_page(bare.removesuffix("/metrics")))
    if bare.endswith(("/ready", "/live")):
        return framed(200, b"{}")
    if "/v2/models/" in bare:
        meta = {
            "name": bare.split("/v2/models/")[1].split("/")[0],
            "versions": ["1"],
            "platform": "rogue",
            "inputs": [],
            "outputs": [],
        }
        return framed(200, orjson.dumps(meta))
    return framed(404, b'{"error": "not found"}')


async def serve_huge(writer: asyncio.StreamWriter) -> None:
    writer.write(head(200, "transfer-encoding: chunked\r\n"))
    for start in range(0, len(HUGE), CHUNK):
        piece = HUGE[start : start + CHUNK]
        writer.write(b"%x\r\n" % len(piece) + piece + b"\r\n")
        await writer.drain()
        if writer.is_closing():  # the client went away (drain does not say so)
            raise ConnectionResetError("the client closed the connection")
    writer.write(b"0\r\n\r\n")
    await writer.drain()


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(
        ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError
    ):
        while True:
            request = await reader.readuntil(b"\r\n\r\n")
            path = request.split(b" ", 2)[1].decode("latin-1")
            reply = answer(path)
            if reply is None:
                await serve_huge(writer)
                size = len(HUGE)
            else:
                writer.write(reply)
                await writer.drain()
                size = len(reply)
            if not path.startswith("/switch"):  # a benchmark reads it 10 times a second
                print(f"served {path.split('?')[0]} {size}", flush=True)
    writer.close()


async def main(port: int) -> None:
    server = await asyncio.start_server(handle, "127.0.0.1", port)
    print("listening", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    asyncio.run(main(parser.parse_args().port))
