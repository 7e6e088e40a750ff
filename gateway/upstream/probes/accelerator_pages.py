"""A metrics page, bounded: read with a cap in bytes, refused over a cap in series, and read
into each of its devices' readings by a pure function that runs off the event loop.

A replica's ``/metrics`` and a dcgm-exporter's page are sent by untrusted peers, and the
sampler reads them up to 10 times a second: parsed on the event loop, a flood of series held
every request for seconds (docs/measured.md). So:

- the sampler reads pages through a transport of its own (`page_transport`) whose reply cap
  is the largest ``max_page_bytes`` of its pools: past it the read stops, the connection is
  closed, and the page is refused (`over_cap`); a smaller cap of a pool is checked on arrival;
- `read_page` refuses a page of more than ``max_page_series`` series (counted in bytes, by
  line ends, before any decoding), splits it once and hands each device's parser only the
  lines that may carry a DCGM field;
- `read_page` takes bytes and parsers and returns readings: no I/O, no clock, no event loop,
  so the sampler runs it in a worker thread (and it can move to another process as it is).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gateway.config.accelerator import AcceleratorConfig
from gateway.errors import UpstreamError, UpstreamProtocolError
from gateway.upstream.probes.accelerator_readings import PageRefused, ReadingParser, dcgm_lines
from gateway.upstream.transport.http1 import Http1Transport
from gateway.upstream.transport.limits import ReplyLimits
from gateway.upstream.transport.reply_head import cap_message
from v2proto.dcgm import Reading

# Reads of one page source at once: a source's loop reads one page at a time, so this only
# bounds replicas that share a host and port under different path prefixes.
MAX_CONNECTIONS_PER_SOURCE = 16
# How the transport words a body over its cap, up to the cap's value
_OVER_CAP = cap_message(ReplyLimits(), "reply body", "max_reply_body_bytes").partition("=")[0]


@dataclass(frozen=True, slots=True)
class PageCaps:
    max_bytes: int
    max_series: int

    @classmethod
    def of(cls, config: AcceleratorConfig) -> PageCaps:
        return cls(config.max_page_bytes, config.max_page_series)


@dataclass(frozen=True, slots=True)
class DeviceRead:
    """What one sample says of one device: its reading (None: not on the page), whether the
    page was new, the fields left out as impossible; or why there was no page (``failed``: no
    answer, an error status) or why it was refused (``refused``: over a cap)."""

    reading: Reading | None
    changed: bool = True
    bad: tuple[str, ...] = ()
    refused: str | None = None
    failed: str | None = None


def page_transport(configs: Iterable[AcceleratorConfig | None]) -> Http1Transport:
    """The sampler's own transport: its reply cap is the largest page cap of ``configs`` (the
    pools' ``accelerator:`` sections; None: a pool without one)."""
    caps = [c.max_page_bytes for c in configs if c is not None]
    cap = max(caps, default=AcceleratorConfig().max_page_bytes)
    return Http1Transport(
        max_connections_per_endpoint=MAX_CONNECTIONS_PER_SOURCE, max_reply_body_bytes=cap
    )


def over_cap(error: UpstreamError) -> bool:
    """Whether ``error`` is a page transport refusing a body over its cap (any cap value)."""
    return isinstance(error, UpstreamProtocolError) and error.message.startswith(_OVER_CAP)


def series_on(page: bytes) -> int:
    """Sample lines on ``page``, at most (comments and blank lines aside; not decoded)."""
    lines = page.count(b"\n") + (bool(page) and not page.endswith(b"\n"))
    comments = page.count(b"\n#") + page.startswith(b"#")
    blanks = page.count(b"\n\n") + page.startswith(b"\n")
    return lines - comments - blanks


def refusal(page: bytes, caps: PageCaps) -> str | None:
    """Why ``page`` is refused whole (None: within its caps)."""
    if len(page) > caps.max_bytes:
        return f"{len(page)} bytes, over max_page_bytes={caps.max_bytes}"
    series = series_on(page)
    if series > caps.max_series:
        return f"{series} series, over max_page_series={caps.max_series}"
    return None


def unchanged(page: bytes, parsers: Sequence[ReadingParser]) -> bool:
    """Whether every parser read ``page`` last: reading it again costs a comparison each."""
    return all(parser.seen(page) for parser in parsers)


def read_page(page: bytes, parsers: Sequence[ReadingParser], caps: PageCaps) -> list[DeviceRead]:
    """``page`` read for each parser's device, in order; refused whole over a cap."""
    why = refusal(page, caps)
    if why is not None:
        return [DeviceRead(None, refused=why) for _ in parsers]
    lines = [] if unchanged(page, parsers) else dcgm_lines(page)
    reads = []
    for parser in parsers:
        try:
            reading = parser.read_lines(page, lines)
        except PageRefused as refused:
            reads.append(DeviceRead(None, refused=str(refused)))
            continue
        reads.append(DeviceRead(reading, parser.changed, parser.bad))
    return reads
