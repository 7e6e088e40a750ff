"""A metrics page, bounded: the sampler's transport stops reading past the byte cap (on a real
loopback server), series are counted without decoding, and `read_page` reads one split page
for every device on it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from gateway.config.accelerator import AcceleratorConfig
from gateway.config.endpoint import Endpoint
from gateway.errors import UpstreamError, UpstreamProtocolError
from gateway.upstream.probes.accelerator_pages import (
    DeviceRead,
    PageCaps,
    over_cap,
    page_transport,
    read_page,
    refusal,
    series_on,
)
from gateway.upstream.probes.accelerator_readings import ReadingParser
from tests.support.processes import wait_until_async

UUID_A = "GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52"
UUID_B = "GPU-11111111-2222-3333-4444-555555555555"
CAPS = PageCaps(max_bytes=1 << 20, max_series=100)
BIG = 64 << 20  # what the server offers: far over the cap, and over loopback's socket buffers


@pytest.mark.parametrize(
    ("page", "series"),
    [
        (b"", 0),
        (b"a 1", 1),
        (b"a 1\n", 1),
        (b"# HELP a x\n# TYPE a gauge\na 1\nb 2\n", 2),
        (b"a 1\n\nb 2\n\n# EOF\n", 2),
        (b"\na 1\n#c\nb 2", 2),
    ],
)
def test_series_are_counted_by_line_ends_without_decoding(page: bytes, series: int) -> None:
    assert series_on(page) == series


def test_a_page_is_refused_over_either_cap() -> None:
    assert refusal(b"a 1\n" * 100, CAPS) is None
    assert refusal(b"a 1\n" * 101, CAPS) == "101 series, over max_page_series=100"
    assert refusal(b"#" * (1 << 20) + b"#", CAPS) == "1048577 bytes, over max_page_bytes=1048576"


def test_one_page_is_read_for_each_of_its_devices() -> None:
    page = "".join(
        f'DCGM_FI_DEV_GPU_TEMP{{gpu="{i}",UUID="{u}"}} {t}\n'
        f'DCGM_FI_DEV_XID_ERRORS{{gpu="{i}",UUID="{u}"}} {x}\n'
        for i, (u, t, x) in enumerate(((UUID_A, 50, "NaN"), (UUID_B, 61, 0)))
    ).encode()
    first, second = read_page(page, [ReadingParser(UUID_A), ReadingParser(UUID_B)], CAPS)
    assert first.reading is not None and first.reading.temperature_c == 50
    assert first.reading.xid is None and first.bad == ("DCGM_FI_DEV_XID_ERRORS",)
    assert second.reading is not None and second.reading.temperature_c == 61
    assert second.reading.xid == 0 and second.bad == () and second.refused is None


def test_a_refused_page_refuses_every_device_on_it() -> None:
    reads = read_page(b"a 1\n" * 101, [ReadingParser(UUID_A), ReadingParser(UUID_B)], CAPS)
    assert reads == [DeviceRead(None, refused="101 series, over max_page_series=100")] * 2


def test_the_transport_caps_at_the_largest_page_cap_of_the_pools() -> None:
    configs = [AcceleratorConfig(max_page_bytes=1 << 16), None, AcceleratorConfig()]
    assert page_transport(configs)._limits.max_reply_body_bytes == 1 << 20
    assert page_transport([])._limits.max_reply_body_bytes == 1 << 20


@contextlib.asynccontextmanager
async def serving(framing: str, written: list[int]) -> AsyncIterator[Endpoint]:
    """A loopback server offering ``BIG`` bytes (``chunked``, or declared by ``length``);
    ``written`` gets how many of them each connection wrote (into its socket) before it saw its
    client go away."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        sent = 0
        with contextlib.suppress(ConnectionError):
            if framing == "chunked":
                writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
                piece = b"a 1\n" * (64 << 8)  # 64 KiB
                while sent < BIG and not writer.is_closing():
                    writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                    await writer.drain()
                    sent += len(piece)
                writer.write(b"0\r\n\r\n")
            else:  # refused on its head: the body is never asked for
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % BIG)
            await writer.drain()
            await reader.read()  # until the client closes
        written.append(sent)
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield Endpoint("127.0.0.1", port)


@pytest.mark.parametrize("framing", ["chunked", "length"])
async def test_the_read_stops_at_the_cap_and_is_told_from_other_errors(framing: str) -> None:
    written: list[int] = []
    transport = page_transport([AcceleratorConfig(max_page_bytes=1 << 16)])
    async with serving(framing, written) as endpoint:
        with pytest.raises(UpstreamError) as caught:
            await transport.request(endpoint, "GET", "/metrics", timeout=10.0)
        assert over_cap(caught.value)
        await transport.aclose()
        await wait_until_async(lambda: bool(written), 10.0, message="the server's write ended")
    if framing == "chunked":
        assert written[0] < BIG  # the client went away mid-body
    other = UpstreamProtocolError("reply header fields over max_reply_header_bytes=65536")
    assert not over_cap(other)
