"""What a broken or hostile source of accelerator readings cannot do to the sampler: end a
sampling loop (NaN, Inf, an exception), hide a hot GPU on a shared exporter page, make one
replica's loop replace another's, or have a page of any size or series count parsed."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Mapping
from typing import Any

import pytest

from gateway.accelerator.metrics import AcceleratorCollector
from gateway.accelerator.sampler import (
    IDLE_GRID_SHARE,
    LOG_EVERY_S,
    REPLICA_QUERY,
    AcceleratorSampler,
)
from gateway.config import parse_config
from gateway.config.endpoint import Endpoint
from gateway.control.runtime import Gateway
from gateway.upstream.probes.accelerator_readings import MAX_DEVICE_LINES
from gateway.upstream.transport.base import AnswerRoom, Reply
from gateway.v2.body import Body
from tests.gateway.accelerator.test_sampler import UUID, held, setup
from tests.gateway.fakes import FakeTransport, fail
from tests.support.clock import FakeClock
from tests.support.processes import wait_until_async

UUID_B = "GPU-11111111-2222-3333-4444-555555555555"
WAIT_S = 10.0  # bound on every condition below (the loops run on a fake clock, parsing in a thread)
LOGGER = "gateway.accelerator.sampler"


def sampler_of(doc: dict[str, Any], transport: Any) -> tuple[Gateway, AcceleratorSampler]:
    gateway = Gateway(parse_config(doc), clock=PacedClock())
    if isinstance(transport, FakeTransport):
        transport.clock = gateway.clock
    for replica in gateway.registry.replicas():
        replica.mark_health(True)
    sampler = AcceleratorSampler(
        gateway.registry,
        transport,
        gateway.clock,
        random.Random(0),
        gateway.shared,
        lambda pool: False,
    )
    return gateway, sampler


class PacedClock(FakeClock):
    """A fake clock whose sleeps also yield the loop for a moment, so a test's sampling loops
    pace themselves instead of spinning (time still moves only by the clock's own steps)."""

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.advance(max(0.0, seconds))
        await asyncio.sleep(0.001)


def fake(sampler: AcceleratorSampler) -> FakeTransport:
    """The sampler's fake transport, timing out on the sampler's clock (no `asyncio.wait_for`,
    which in Python 3.11 can swallow the loop's cancellation when both land at once)."""
    transport = sampler._transport
    assert isinstance(transport, FakeTransport)
    transport.clock = sampler._clock
    return transport


def ok_samples(sampler: AcceleratorSampler) -> int:
    return sampler.samples.get(("p", "ok"), 0)


async def test_nan_and_inf_in_a_replicas_reading_are_left_out_and_sampling_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Before: ``int(nan)`` in the XID rule ended the replica's loop at its first read, and its
    state stayed unknown for good, with nothing logged."""
    gateway, sampler, pages, _ = setup(1, PacedClock())
    fake(sampler)
    pages.readings[9000] = {
        "DCGM_FI_DEV_XID_ERRORS": "NaN",
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": "+Inf",
    }
    caplog.set_level(logging.WARNING, LOGGER)
    sampler.start()
    try:
        await wait_until_async(lambda: ok_samples(sampler) >= 20, WAIT_S, message="20 samples")
    finally:
        await sampler.stop()
    state = sampler.snapshot()["p"]["replicas"]["r0"]
    assert state["reading"] is not None and state["state"] == "ok"
    assert state["reading"]["temperature_c"] == 60.0 and state["reading"]["xid"] is None
    assert state["reading"]["throttle_reasons"] is None and state["weight"] == 1.0
    assert {f for (_, r, f) in sampler.bad_values if r == "r0"} == {
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
    }
    assert sampler.errors == {} and held(gateway) == set()
    logged = [r.message for r in caplog.records]
    assert any("DCGM_FI_DEV_XID_ERRORS left out, a value no device reads" in m for m in logged)


async def test_a_bad_value_is_counted_on_every_new_page_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gateway, sampler, pages, clock = setup(1)
    pool = gateway.registry.pools["p"]
    caplog.set_level(logging.WARNING, LOGGER)
    for i in range(20):  # every page new (power moves), the temperature NaN on each
        pages.readings[9000] = {"DCGM_FI_DEV_GPU_TEMP": "NaN", "DCGM_FI_DEV_POWER_USAGE": 300.0 + i}
        await sampler.sample(pool, pool.replicas[0])
        clock.advance(0.5)
    assert sampler.bad_values == {("p", "r0", "DCGM_FI_DEV_GPU_TEMP"): 20}
    lines = [r for r in caplog.records if "a value no device reads" in r.message]
    assert len(lines) == 1  # 10 s of samples: one line a minute at most
    assert sampler.snapshot()["p"]["replicas"]["r0"]["signal"] is None  # NaN is not ≥ 90 °C
    metrics = {m.name: m for m in AcceleratorCollector(sampler).collect()}
    (sample,) = metrics["gateway_accelerator_bad_values"].samples
    assert sample.labels == {"pool": "p", "replica": "r0", "field": "DCGM_FI_DEV_GPU_TEMP"}
    assert sample.value == 20


async def test_an_exception_in_a_loop_is_counted_logged_at_most_once_a_minute_and_skipped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A transport that raises what it must never raise (a bug): the loop goes on, and the
    other replica's loop is untouched."""
    _, sampler, _, clock = setup(2, PacedClock())
    fake(sampler).behaviours["127.0.0.1:9000"] = fail(RuntimeError("a bug"))
    caplog.set_level(logging.WARNING, LOGGER)
    start = clock.now()
    sampler.start()
    try:
        await wait_until_async(
            lambda: sampler.errors.get("p", 0) >= 20, WAIT_S, message="20 errors caught"
        )
        await wait_until_async(lambda: ok_samples(sampler) >= 20, WAIT_S, message="r1 sampled")
    finally:
        await sampler.stop()
    lines = [r for r in caplog.records if "sample failed, skipped" in r.message]
    assert 1 <= len(lines) <= 1 + (clock.now() - start) / LOG_EVERY_S
    assert lines[0].exc_info is not None  # the traceback, once
    assert sampler.snapshot()["p"]["replicas"]["r1"]["state"] == "ok"
    metrics = {m.name: m for m in AcceleratorCollector(sampler).collect()}
    (sample,) = metrics["gateway_accelerator_sampler_errors"].samples
    assert sample.labels == {"pool": "p"} and sample.value == sampler.errors["p"]


def node_doc(uuids: list[str], replicas: int = 3) -> dict[str, Any]:
    """A pool whose first ``len(uuids)`` replicas are read from one node exporter."""
    exporters = {f"r{i}": {"url": "http://127.0.0.1:9400", "uuid": u} for i, u in enumerate(uuids)}
    return {
        "pools": {
            "p": {
                "model": "m",
                "accelerator": {"interval_s": 0.5, "exporters": exporters},
                "replicas": [
                    {"id": f"r{i}", "url": f"http://127.0.0.1:{9000 + i}"} for i in range(replicas)
                ],
            }
        },
        "models": {"m": {"pool": "p"}},
    }


def exporter_page(text: str) -> Any:
    async def behave(method: str, path: str, payload: bytes) -> Reply:
        return Reply(200, {}, text.encode())

    return behave


async def test_a_nan_on_a_shared_exporter_page_does_not_hide_a_hot_gpu() -> None:
    """Before: r0's NaN ended the page's loop before r1, on the same page at 100 °C, was judged."""
    page = (
        f'DCGM_FI_DEV_XID_ERRORS{{gpu="0",UUID="{UUID}"}} NaN\n'
        f'DCGM_FI_DEV_GPU_TEMP{{gpu="0",UUID="{UUID}"}} NaN\n'
        f'DCGM_FI_DEV_GPU_TEMP{{gpu="1",UUID="{UUID_B}"}} 100\n'
        f'DCGM_FI_DEV_SLOWDOWN_TEMP{{gpu="1",UUID="{UUID_B}"}} 90\n'
    )
    transport = FakeTransport({"127.0.0.1:9400": exporter_page(page)})
    gateway, sampler = sampler_of(node_doc([UUID, UUID_B]), transport)
    sampler.start()
    try:
        await wait_until_async(lambda: held(gateway) == {"r1"}, WAIT_S, message="r1 drained")
    finally:
        await sampler.stop()
    replicas = sampler.snapshot()["p"]["replicas"]
    assert replicas["r1"]["drained"]["text"] == "temperature 100 °C, slowdown at 90 °C"
    assert replicas["r0"]["drained"] is None and replicas["r0"]["signal"] is None
    assert ("p", "r0", "DCGM_FI_DEV_GPU_TEMP") in sampler.bad_values


class ByPrefix:
    """A transport whose replicas share a host and port, told apart by their path prefix
    (replicas behind one ingress): each prefix's page has its own temperature."""

    name = "by-prefix"

    def __init__(self, temperatures: Mapping[str, float]) -> None:
        self.temperatures = temperatures
        self.calls: list[str] = []

    async def request(
        self,
        endpoint: Endpoint,
        method: str,
        path: str,
        *,
        body: bytes | Body = b"",
        headers: Mapping[str, str] | None = None,
        timeout: float,
        room: AnswerRoom | None = None,
    ) -> Reply:
        self.calls.append(endpoint.prefix + path.split("?")[0])
        temperature = self.temperatures[endpoint.prefix]
        text = f'DCGM_FI_DEV_GPU_TEMP{{gpu="0",UUID="{UUID}"}} {temperature}\n'
        return Reply(200, {}, text.encode())

    def forget(self, endpoint: Endpoint) -> None:
        pass

    async def aclose(self) -> None:
        pass


async def test_two_replicas_on_one_host_and_port_under_two_prefixes_are_both_sampled() -> None:
    """Before: the loops were named by host:port and path, so the second replaced the first."""
    doc = {
        "pools": {
            "p": {
                "model": "m",
                "accelerator": {"interval_s": 0.5},
                "replicas": [
                    {"id": "a", "url": "http://127.0.0.1:8080/a"},
                    {"id": "b", "url": "http://127.0.0.1:8080/b"},
                ],
            }
        },
        "models": {"m": {"pool": "p"}},
    }
    transport = ByPrefix({"/a": 61.0, "/b": 62.0})
    _, sampler = sampler_of(doc, transport)
    sampler.start()
    try:
        assert set(sampler._tasks) == {
            "accelerator:p:http://127.0.0.1:8080/a" + REPLICA_QUERY,
            "accelerator:p:http://127.0.0.1:8080/b" + REPLICA_QUERY,
        }
        await wait_until_async(
            lambda: {"a", "b"} <= sampler.states.keys(), WAIT_S, message="both replicas sampled"
        )
    finally:
        await sampler.stop()
    replicas = sampler.snapshot()["p"]["replicas"]
    assert {r: replicas[r]["reading"]["temperature_c"] for r in ("a", "b")} == {
        "a": 61.0,
        "b": 62.0,
    }
    assert {"/a/metrics", "/b/metrics"} <= set(transport.calls)
    metrics = {m.name: m for m in AcceleratorCollector(sampler).collect()}
    readings = metrics["gateway_accelerator_reading"].samples
    temperatures = {
        s.labels["replica"]: s.value
        for s in readings
        if s.labels["field"] == "DCGM_FI_DEV_GPU_TEMP"
    }
    assert temperatures == {"a": 61.0, "b": 62.0}


def flood(lines: int) -> str:
    return "".join(
        f'DCGM_FI_DEV_GPU_TEMP{{gpu="0",UUID="{UUID}",i="{i}"}} 50\n' for i in range(lines)
    )


@pytest.mark.parametrize(
    ("accelerator", "text", "why"),
    [
        ({}, flood(15 * 1024 * 1024 // 55), "bytes, over max_page_bytes=1048576"),
        ({"max_page_bytes": 8 << 20}, flood(60_000), "60000 series, over max_page_series=10000"),
        ({}, "x 1\n" * 10_001, "10001 series, over max_page_series=10000"),
        ({}, flood(MAX_DEVICE_LINES + 1), f"lines of the device's fields, over {MAX_DEVICE_LINES}"),
    ],
    ids=["15 MiB", "60k series", "10k series of another name", "too many lines of the device"],
)
async def test_a_page_over_a_cap_is_refused_unparsed_and_reads_as_unknown(
    accelerator: dict[str, Any], text: str, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: every page was parsed whole on the event loop (15 MiB: seconds a sample)."""
    caplog.set_level(logging.WARNING, LOGGER)
    gateway, sampler, _, clock = setup(1, accelerator={"interval_s": 0.5, **accelerator})
    fake(sampler).behaviours["127.0.0.1:9000"] = exporter_page(text)
    pool = gateway.registry.pools["p"]
    for _ in range(3):
        await sampler.sample(pool, pool.replicas[0])
        clock.advance(0.5)
    state = sampler.snapshot()["p"]["replicas"]["r0"]
    assert state["state"] == "unknown" and state["reading"] is None
    assert state["error"].startswith("page refused: ") and why in state["error"]
    assert sampler.samples == {("p", "refused"): 3}
    assert sampler._source(pool, pool.replicas[0]).parser.parsed == 0  # not a line parsed
    assert len([r for r in caplog.records if "page refused" in r.message]) == 1
    metrics = {m.name: m for m in AcceleratorCollector(sampler).collect()}
    (sample,) = metrics["gateway_accelerator_samples"].samples
    assert sample.labels == {"pool": "p", "result": "refused"} and sample.value == 3


async def test_a_refused_page_is_read_again_after_a_pause_that_doubles() -> None:
    """Each read of a refused page costs up to its cap and a connection: backed off, up to
    `REFUSED_PAUSE_MAX_S`; the sampler's pace again as soon as a page is within its caps
    (its readings far from every limit: the idle interval)."""
    clock = PacedClock()
    _, sampler, _, _ = setup(1, clock)
    behaviours = fake(sampler).behaviours
    good = behaviours["127.0.0.1:9000"]
    behaviours["127.0.0.1:9000"] = exporter_page("x 1\n" * 10_001)
    sampler.start()
    try:
        await wait_until_async(lambda: len(clock.slept) >= 10, WAIT_S, message="10 pauses")
        behaviours["127.0.0.1:9000"] = good
        await wait_until_async(lambda: ok_samples(sampler) >= 3, WAIT_S, message="read again")
    finally:
        await sampler.stop()
    refused = sampler.samples[("p", "refused")]
    pauses = clock.slept[1:]  # the first spreads the loops
    backed_off = [0.5 * min(2**n, 60) for n in range(1, refused + 1)]  # 30 s at most
    for pause, expected in zip(pauses, backed_off, strict=False):
        assert expected * 0.9 <= pause <= expected * 1.1
    # back to the idle interval (jittered), put off to the idle grid's next step at most
    assert 0.9 <= pauses[-1] <= 1.1 + 0.1


class WakeClock(PacedClock):
    """A paced clock that keeps when each pause ends."""

    def __init__(self) -> None:
        super().__init__()
        self.wakes: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.wakes.append(self.now() + max(0.0, seconds))
        await super().sleep(seconds)


async def test_at_the_idle_rate_reads_wake_on_one_grid() -> None:
    """Far from every limit a loop's next read waits for the idle grid's next step (a tenth
    of `idle_interval_s`), so the loops of a pool share the event loop's wake-ups."""
    clock = WakeClock()
    _, sampler, _, _ = setup(1, clock)
    fake(sampler)
    sampler.start()
    try:
        await wait_until_async(lambda: ok_samples(sampler) >= 12, WAIT_S, message="12 samples")
    finally:
        await sampler.stop()
    grid = 1.0 * IDLE_GRID_SHARE  # the default idle interval's tenth
    idle = [w for w, p in zip(clock.wakes[1:], clock.slept[1:], strict=True) if p >= 0.5]
    assert len(idle) >= 3  # the readings are far from every limit: the idle rate
    assert all(abs(w / grid - round(w / grid)) < 1e-6 for w in idle)
