"""The load table (`gateway.upstream.probes.load_names`) against real MLServer and KServe: the
control's scraper reads each one's own queue metrics off its ``/metrics`` under a load.

MLServer runs with its metrics on a port of their own (the pool's ``load.metrics_port``): in
one process, adaptive batching on, it shows neither ``batch_request_queue`` nor
``parallel_request_queue``; with a parallel worker it shows the second, which is read.
KServe times each predict (``request_predict_seconds``), whose growth per second is its
requests in predict.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from gateway.clock import MonotonicClock
from gateway.config import parse_config
from gateway.control.runtime import Gateway
from gateway.upstream.probes.load import LoadScraper, load_transport
from gateway.upstream.probes.load_names import NAMES
from gateway.upstream.probes.load_pages import SCRAPE
from tests.peers.conftest import Rows
from tests.support.peers import MLSERVER, PeerProcess, start_mlserver

pytestmark = [pytest.mark.integration, pytest.mark.peers]

AT_ONCE = 24


@pytest.fixture(scope="module")
def queued_mlserver() -> Iterator[PeerProcess]:
    reason = MLSERVER.missing()
    if reason is not None:
        pytest.skip(reason)
    proc = start_mlserver(queued=True)
    yield proc
    proc.cleanup()


@pytest.fixture(scope="module")
def parallel_mlserver() -> Iterator[PeerProcess]:
    reason = MLSERVER.missing()
    if reason is not None:
        pytest.skip(reason)
    proc = start_mlserver(parallel=1)
    yield proc
    proc.cleanup()


def scraper_of(peer: PeerProcess) -> tuple[Gateway, LoadScraper]:
    load: dict[str, Any] = {"interval_s": 0.25}
    if peer.metrics_port is not None:
        load["metrics_port"] = peer.metrics_port
    doc = {
        "pools": {"p": {"model": peer.model_name, "load": load,
                        "replicas": [{"id": "r0", "url": peer.url}]}},
        "models": {"digits": {"pool": "p"}},
    }  # fmt: skip
    config = parse_config(doc)
    gateway = Gateway(config, clock=MonotonicClock())
    transport = load_transport([config.pools["p"].load])
    return gateway, LoadScraper(gateway.registry, transport, gateway.clock, random.Random(0))


async def burst(peer: PeerProcess, rows: Rows, count: int = 96) -> None:
    """``count`` infer requests, ``AT_ONCE`` at a time."""
    body = {"inputs": [{"name": "input", "shape": [1, 64], "datatype": "FP32",
                        "data": rows.x[0].tolist()}]}  # fmt: skip
    gate = asyncio.Semaphore(AT_ONCE)
    async with httpx.AsyncClient(base_url=peer.url, trust_env=False, timeout=30) as client:

        async def one() -> None:
            async with gate:
                answer = await client.post(f"/v2/models/{peer.model_name}/infer", json=body)
                assert answer.status_code == 200, answer.text

        await asyncio.gather(*(one() for _ in range(count)))


async def scraped_under_load(peer: PeerProcess, rows: Rows) -> tuple[str, str, float, Any]:
    """Two scrapes with a burst between: what each came to, and the reading."""
    gateway, scraper = scraper_of(peer)
    pool = gateway.registry.pools["p"]
    (replica,) = pool.replicas
    try:
        await burst(peer, rows, count=8)  # the server's histograms exist from here on
        first = await scraper.scrape(pool, replica)
        await burst(peer, rows)
        second = await scraper.scrape(pool, replica)
    finally:
        await scraper.stop()
    return first, second, replica.reported_queue, replica.load


async def test_mlserver_without_parallel_workers_reports_no_queue_and_is_not_taken_for_idle(
    queued_mlserver: PeerProcess, digits_rows: Rows
) -> None:
    """MLServer 1.7.1 in one process (no parallel workers) shows no queue family on its
    metrics port, adaptive batching on or not: the scrape says ``silent`` (counted, asked
    less often) and its load stays unknown, never zero."""
    first, second, _, load = await scraped_under_load(queued_mlserver, digits_rows)
    url = f"http://127.0.0.1:{queued_mlserver.metrics_port}/metrics"
    async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
        page = (await client.get(url)).text
    assert "rest_server_requests_total" in page  # its page is read ...
    assert not any(name in page for name in NAMES)  # ... and holds no load family
    assert (first, second) == ("silent", "silent") and load is None


async def test_mlserver_with_a_parallel_worker_reports_its_queue_and_it_is_read(
    parallel_mlserver: PeerProcess, digits_rows: Rows
) -> None:
    """With a parallel worker (a child process), MLServer observes the queue before it into
    ``parallel_request_queue`` as each request arrives: the scrape reads the mean of those
    observed since the last one, and ``AT_ONCE`` requests at a time make it more than zero."""
    first, second, queue, load = await scraped_under_load(parallel_mlserver, digits_rows)
    assert (first, second) == ("ok", "ok")
    assert load is not None and load.source == SCRAPE and load.queue is not None
    assert 0 < queue <= AT_ONCE, load


async def test_kserve_busy_time_is_read_as_its_requests_in_predict(
    kserve: PeerProcess, digits_rows: Rows
) -> None:
    first, second, queue, load = await scraped_under_load(kserve, digits_rows)
    assert (first, second) == ("ok", "ok")
    assert load is not None and load.source == SCRAPE and load.inflight is not None
    assert 0 < queue < AT_ONCE, load  # in predict part of the time, never more than sent
