"""The load scraper: each replica's ``/metrics`` read for its queue when its answers say none.

In a ``load_aware`` pool a replica's load comes first from its answers' reports (read by
the attempt layer, in whichever process serves: `gateway.policies.load_report`). A replica
that sent none for ``load.interval_s`` (one the balancer avoids because it is busy, an idle
one, or a server that attaches no report: MLServer, KServe, Triton) is scraped here, in the
control process, once per interval: its page (the load families only, where the server
honours ``name[]``) is read over the scraper's own transport, with a cap in bytes, and parsed
in a worker thread within caps in series and lines (`gateway.upstream.probes.load_pages`);
the reading is the replica's, stamped with the time it was read. Its series are named per
server by `gateway.upstream.probes.load_names`.

A page that shows none of those families (a server that reports no load we read), is
refused or cannot be read is counted; that replica's next scrape waits twice as long, up to
`MAX_PAUSE_S`, so a pool of servers that report nothing costs a GET each per half-minute.
A gRPC replica's ``/metrics`` is on no port the gateway knows unless ``load.metrics_port``
names one: it is not scraped otherwise.
"""

from __future__ import annotations

import asyncio
import logging
import random
import zlib
from collections import Counter
from collections.abc import Coroutine, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gateway.clock import Clock
from gateway.config.endpoint import Endpoint, Scheme
from gateway.config.load import LoadConfig
from gateway.errors import UpstreamError
from gateway.policies.load_report import ANSWER
from gateway.telemetry.throttle import LogThrottle
from gateway.upstream.probes.accelerator_pages import MAX_CONNECTIONS_PER_SOURCE, PageCaps
from gateway.upstream.probes.load_names import QUERY
from gateway.upstream.probes.load_pages import LoadTracker, PageTotals, read_load_page
from gateway.upstream.probes.prober import Prober
from gateway.upstream.registry import Pool, Registry
from gateway.upstream.replica import Replica
from gateway.upstream.transport.base import Transport
from gateway.upstream.transport.http1 import Http1Transport

log = logging.getLogger(__name__)
# the longest wait after scrapes in a row that found nothing to read
MAX_PAUSE_S = 30.0
# doublings of the pause (0.25 s * 2**7 is past MAX_PAUSE_S)
MAX_MISSES = 8
LOG_EVERY_S = 60.0


def load_transport(configs: Iterable[LoadConfig]) -> Http1Transport:
    """The scraper's own transport: its reply cap is the largest page cap of ``configs``."""
    cap = max((c.max_page_bytes for c in configs), default=LoadConfig().max_page_bytes)
    return Http1Transport(
        max_connections_per_endpoint=MAX_CONNECTIONS_PER_SOURCE, max_reply_body_bytes=cap
    )


def metrics_endpoint(replica: Replica, config: LoadConfig) -> Endpoint | None:
    """Where ``replica``'s page is: its own endpoint, or its host on ``metrics_port`` (plain
    http for a grpc:// replica, https with its TLS for grpcs://); None: not known."""
    endpoint = replica.endpoint
    port = config.metrics_port
    if port is None:
        return None if endpoint.is_grpc else endpoint
    scheme: Scheme = endpoint.scheme
    if scheme == "grpc":
        scheme = "http"
    elif scheme == "grpcs":
        scheme = "https"
    return Endpoint(endpoint.host, port, "", scheme, endpoint.tls, endpoint.headers)


class LoadScraper(Prober):
    def __init__(
        self,
        registry: Registry,
        transport: Transport,
        clock: Clock,
        rng: random.Random,
        *,
        owned: bool = True,
    ) -> None:
        """``owned``: ``transport`` is the scraper's own (`load_transport`), closed on stop."""
        super().__init__(registry, transport, clock, rng)
        self._owned = owned
        self.pools = {n: p for n, p in registry.pools.items() if p.config.load_aware}
        # (pool, result) -> count
        self.scrapes: Counter[tuple[str, str]] = Counter()
        self._trackers: dict[str, LoadTracker] = {}
        self._lines = LogThrottle(clock, LOG_EVERY_S)
        # one thread: pages read off the loop
        self._parsing: ThreadPoolExecutor | None = None

    def loops(self) -> list[tuple[str, Coroutine[Any, Any, None]]]:
        return [
            (self._name(replica), self._loop(pool, replica))
            for pool in self.pools.values()
            for replica in pool.replicas
            if metrics_endpoint(replica, pool.config.load) is not None
        ]

    def start(self) -> None:
        super().start()
        self._registry.watch(self)

    async def stop(self) -> None:
        self._registry.unwatch(self)
        await super().stop()
        if self._parsing is not None:
            self._parsing.shutdown(wait=False, cancel_futures=True)
            self._parsing = None
        if self._owned:
            await self._transport.aclose()

    def joined(self, pool: Pool, replica: Replica) -> None:
        if pool.name in self.pools and metrics_endpoint(replica, pool.config.load) is not None:
            self.start_loop(self._name(replica), self._loop(pool, replica))

    def left(self, pool: Pool, replica: Replica) -> None:
        self.stop_loop(self._name(replica))
        self._trackers.pop(replica.id, None)
        endpoint = metrics_endpoint(replica, pool.config.load)
        if endpoint is not None:
            self._transport.forget(endpoint)

    @staticmethod
    def _name(replica: Replica) -> str:
        return f"load:{replica.pool}:{replica.id}"

    async def _loop(self, pool: Pool, replica: Replica) -> None:
        """Scrapes ``replica`` once per interval; its first at a point of the interval of its
        own (its id's hash), so a pool's scrapes spread over the interval without drawing on
        the gateway's random numbers."""
        config = pool.config.load
        spread = zlib.crc32(replica.id.encode()) / 2**32
        await self._clock.sleep(config.interval_s * spread)
        # scrapes in a row that found nothing to read: the pause doubles with each
        misses = 0
        while True:
            try:
                result = await self.scrape(pool, replica)
            # a bug must not end scraping: counted, logged, skipped
            except Exception:
                result = "error"
                if self._lines.allow(("caught", replica.id)) is not None:
                    log.exception("load scrape of %s failed, skipped", replica.id)
            self.scrapes[(pool.name, result)] += 1
            misses = 0 if result in ("ok", "skipped") else min(misses + 1, MAX_MISSES)
            await self._clock.sleep(min(config.interval_s * 2**misses, MAX_PAUSE_S))

    async def scrape(self, pool: Pool, replica: Replica) -> str:
        """One scrape of ``replica``, unless an answer reported its load within the interval;
        what came of it: ok, skipped, silent (no load on the page), refused or error."""
        config = pool.config.load
        load = replica.load
        answered = load is not None and load.source == ANSWER
        if answered and self._clock.now() - replica.load_at < config.interval_s:
            return "skipped"
        endpoint = metrics_endpoint(replica, config)
        if endpoint is None:
            return "error"
        path = f"{config.metrics_path}?{QUERY}"
        try:
            response = await self._transport.request(
                endpoint, "GET", path, timeout=config.scrape_timeout_s
            )
        except UpstreamError as exc:
            self._say(replica, "error", exc.message)
            return "error"
        if response.status != 200:
            self._say(replica, "error", f"metrics answered {response.status}")
            return "error"
        at = self._clock.now()
        totals = await self._totals(pool, replica, response.body)
        if totals.refused is not None:
            self._say(replica, "refused", totals.refused)
            return "refused"
        if totals.empty:
            return "silent"
        tracker = self._trackers[replica.id]
        report = tracker.reading(at, totals)
        if report is not None:
            replica.report_load(report, at)
        return "ok"

    async def _totals(self, pool: Pool, replica: Replica, page: bytes) -> PageTotals:
        """``page`` read in the worker thread, unless it is the replica's previous one."""
        tracker = self._trackers.get(replica.id)
        if tracker is None:
            tracker = self._trackers[replica.id] = LoadTracker()
        if tracker.totals is not None and page == tracker.page:
            return tracker.totals
        if self._parsing is None:
            self._parsing = ThreadPoolExecutor(1, thread_name_prefix="load-pages")
        config = pool.config.load
        caps = PageCaps(config.max_page_bytes, config.max_page_series)
        loop = asyncio.get_running_loop()
        totals = await loop.run_in_executor(self._parsing, read_load_page, page, caps, pool.model)
        tracker.page, tracker.totals = page, totals
        return totals

    def _say(self, replica: Replica, kind: str, why: str) -> None:
        held = self._lines.allow((kind, replica.id))
        if held is not None:
            more = f" ({held} more since the last line)" if held else ""
            log.warning("load scrape of %s: %s: %s%s", replica.id, kind, why, more)
