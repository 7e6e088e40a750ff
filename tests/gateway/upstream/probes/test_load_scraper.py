"""The load scraper on a real gateway's state, with scripted pages and a fake clock: replicas
whose answers report load are left alone, the others scraped; what cannot be read is counted
and waited for longer, never taken for an empty queue."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from gateway.config import parse_config
from gateway.control.runtime import Gateway
from gateway.errors import UpstreamConnectError
from gateway.policies.load_report import LoadReport
from gateway.upstream.probes.load import MAX_PAUSE_S, LoadScraper, metrics_endpoint
from gateway.upstream.probes.load_names import QUERY
from gateway.upstream.transport.base import Reply
from tests.gateway.fakes import FakeTransport, fail
from tests.support.clock import FakeClock

INTERVAL_S = 0.5


def page(queue: float) -> Any:
    async def behave(method: str, path: str, payload: bytes) -> Reply:
        text = f'nv_inference_pending_request_count{{model="m",version="1"}} {queue}\n'
        return Reply(200, {}, text.encode())

    return behave


def setup(**pool: Any) -> tuple[Gateway, LoadScraper, FakeTransport, FakeClock]:
    clock = FakeClock()
    doc = {
        "pools": {"p": {"model": "m", "load": {"interval_s": INTERVAL_S},
                        "replicas": [{"id": f"r{i}", "url": f"http://127.0.0.1:{9000 + i}"}
                                     for i in range(2)], **pool}},
        "models": {"m": {"pool": "p"}},
    }  # fmt: skip
    gateway = Gateway(parse_config(doc), clock=clock)
    # on the fake clock: asyncio.wait_for (3.11) may swallow a cancellation, and stop hang
    transport = FakeTransport({"127.0.0.1:9000": page(12), "127.0.0.1:9001": page(0)}, clock=clock)
    scraper = LoadScraper(gateway.registry, transport, clock, random.Random(0))
    return gateway, scraper, transport, clock


async def test_a_replica_is_scraped_for_its_queue_unless_an_answer_just_said_it() -> None:
    gateway, scraper, transport, clock = setup()
    pool = gateway.registry.pools["p"]
    r0, r1 = pool.replicas
    assert await scraper.scrape(pool, r0) == "ok"
    assert transport.calls["127.0.0.1:9000"] == [f"GET /metrics?{QUERY}"]
    assert r0.load is not None and (r0.reported_queue, r0.load.source) == (12.0, "scrape")
    assert r0.load_at == clock.now()
    r1.report_load(LoadReport(3.0), clock.now())  # an answer's report, just now
    assert await scraper.scrape(pool, r1) == "skipped"
    assert transport.calls["127.0.0.1:9001"] == []
    clock.advance(INTERVAL_S)  # no answer since: scraped
    assert await scraper.scrape(pool, r1) == "ok" and r1.reported_queue == 0.0


async def test_what_cannot_be_read_is_counted_and_the_last_reading_stands() -> None:
    gateway, scraper, transport, clock = setup()
    pool = gateway.registry.pools["p"]
    r0 = pool.replicas[0]
    await scraper.scrape(pool, r0)
    at = r0.load_at
    cases = {
        "error": fail(UpstreamConnectError("refused")),
        "silent": page(1.0).__class__ and _text(b"up 1\n"),
        "refused": _text(b'nv_inference_pending_request_count{model="m"} NaN\n'),
    }
    for result, behaviour in cases.items():
        transport.behaviours["127.0.0.1:9000"] = behaviour
        clock.advance(INTERVAL_S)
        assert await scraper.scrape(pool, r0) == result
        assert r0.load_at == at and r0.reported_queue == 12.0  # not zero: as it was, aging
    assert r0.fresh_load(clock.now(), stale_s=1.0) is None


def _text(body: bytes) -> Any:
    async def behave(method: str, path: str, payload: bytes) -> Reply:
        return Reply(200, {}, body)

    return behave


async def test_a_server_that_reports_nothing_is_asked_less_and_less_often() -> None:
    gateway, scraper, transport, clock = setup()
    transport.behaviours["127.0.0.1:9000"] = _text(b"up 1\n")
    pool = gateway.registry.pools["p"]
    scraper.start_loop("r0", scraper._loop(pool, pool.replicas[0]))
    for _ in range(200):
        if len(clock.slept) >= 10:
            break
        await asyncio.sleep(0.005)
    await scraper.stop()
    pauses = clock.slept[1:10]  # after the spread
    assert pauses[:4] == [1.0, 2.0, 4.0, 8.0] and max(pauses) == MAX_PAUSE_S
    assert scraper.scrapes[("p", "silent")] >= 9


def test_where_the_page_is_and_which_replicas_are_scraped() -> None:
    gateway, scraper, _, _ = setup()
    r0 = gateway.registry.pools["p"].replicas[0]
    config = gateway.registry.pools["p"].config.load
    assert metrics_endpoint(r0, config) == r0.endpoint
    doc = {
        "pools": {
            "g": {"model": "m", "replicas": [{"id": "g0", "url": "grpc://10.0.0.1:8001"}]},
            "h": {"model": "m", "load": {"metrics_port": 8082},
                  "replicas": [{"id": "h0", "url": "grpc://10.0.0.2:8001"}]},
            "off": {"model": "m", "load_aware": False,
                    "replicas": [{"id": "o0", "url": "http://10.0.0.3:8000"}]},
        },
        "models": {"m": {"pool": "g"}},
    }  # fmt: skip
    other = Gateway(parse_config(doc))
    scraper = LoadScraper(other.registry, FakeTransport(), other.clock, random.Random(0))
    loops = scraper.loops()
    for _, loop in loops:
        loop.close()
    names = [name for name, _ in loops]
    assert names == ["load:h:h0"]  # a gRPC replica only where a metrics port is named
    h0 = other.registry.pools["h"].replicas[0]
    endpoint = metrics_endpoint(h0, other.registry.pools["h"].config.load)
    assert endpoint is not None
    assert (endpoint.scheme, endpoint.host, endpoint.port) == ("http", "10.0.0.2", 8082)
