"""The two planes in one test process: a control's gateway and two workers' runtimes, linked
by the messages the link carries (encoded and decoded as on the wire), on a fake clock.

What the workers' requests do reaches the control's decisions (ejections, quarantines,
metrics, statistics), and the control's decisions reach every worker's routing (membership,
health, ejection, drain, breakers), exactly as in one process.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.api.parsing import RequestParser
from gateway.config import parse_config
from gateway.config.models import GatewayConfig
from gateway.control.intake import BatchIntake
from gateway.control.runtime import Gateway
from gateway.control.view import FleetView
from gateway.errors import GatewayError, UpstreamConnectError
from gateway.memory.inflight_bytes import InflightBytes
from gateway.snapshot.codec import control_decoder, encode_frame, worker_decoder
from gateway.snapshot.messages import Batch, Call, Snapshot
from gateway.snapshot.shipper import BatchShipper
from gateway.upstream.eligibility import eligible
from gateway.worker.app import WorkerApp
from gateway.worker.runtime import WorkerRuntime
from tests.gateway.fakes import FakeTransport, fail, reply
from tests.support.clock import FakeClock

BODY = b'{"inputs":[{"name":"x","shape":[1,1],"datatype":"FP32","data":[1.0]}]}'
CONFIG: dict[str, Any] = {
    "pools": {
        "p": {
            "model": "m",
            "replicas": [
                {"id": "r0", "url": "http://127.0.0.1:9000"},
                {"id": "r1", "url": "http://127.0.0.1:9001"},
                {"id": "r2", "url": "http://127.0.0.1:9002"},
            ],
            "outlier": {"consecutive_failures": 3, "max_ejection_percent": 50},
        },
    },
    "models": {"digits": {"pool": "p", "retry": {"max_attempts": 1}}},
}


# the pool never panics: with r1 and r2 down, every try goes to r0
CONFIG_NO_PANIC: dict[str, Any] = {
    **CONFIG,
    "pools": {"p": {**CONFIG["pools"]["p"], "panic_threshold_percent": 0}},
}


class NoControl:
    async def get_json(self, path: str) -> tuple[int, Any]:
        raise OSError("no control process in this test")


def _wire(message: Any, decoder: Callable[[], Any]) -> Any:
    """``message`` as the other end reads it off the link."""
    decoded = list(decoder().feed(encode_frame(message)))
    assert len(decoded) == 1
    return decoded[0]


class Planes:
    def __init__(self, config: GatewayConfig, transport: FakeTransport, clock: FakeClock) -> None:
        self.clock = clock
        self.control = Gateway(config, clock=clock, transport=transport)
        self.view = FleetView(self.control)
        self.intake = BatchIntake(self.control, self.view)
        self.config = config
        self.transport = transport
        self.workers: list[WorkerApp] = []
        self.shippers: list[BatchShipper] = []

    async def add_worker(self, index: int, count: int) -> WorkerApp:
        shipper = BatchShipper(self.clock, self._take, worker=index)
        # seeded: which replica each request meets is the same on every run
        runtime = WorkerRuntime(
            self.config, shipper, worker=index, workers=count, clock=self.clock,
            transport=self.transport, rng=random.Random(index),
        )  # fmt: skip
        await runtime.start()
        parser = RequestParser(inline_max_bytes=1 << 20, offload="inline")
        memory = InflightBytes.from_config(runtime.config.server)
        app = WorkerApp(runtime, parser, memory, NoControl())
        self.workers.append(app)
        self.shippers.append(shipper)
        return app

    def _take(self, batch: Batch) -> None:
        self.intake.take(_wire(batch, worker_decoder))

    def ship(self) -> None:
        """Every worker's batch now, to the control."""
        for shipper in self.shippers:
            shipper.ship()

    def publish(self) -> Snapshot:
        """The control's view now, to every worker."""
        snapshot: Snapshot = _wire(self.view.snapshot(), control_decoder)
        for app in self.workers:
            app.follow(snapshot)
        return snapshot


async def ask(app: WorkerApp, body: bytes = BODY) -> int:
    edge = app.edge
    arrival = edge.arrive("digits", None, {"content-type": "application/json"}, "127.0.0.1")
    chunks = [body]

    async def read() -> tuple[bytes, bool]:
        return chunks.pop(0), False

    try:
        result = await edge.infer(arrival, read)
    except GatewayError as error:
        edge.done(arrival, error.status)
        return error.status
    edge.done(arrival, result.status, result.served_by, result.degraded, len(result.body))
    return result.status


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


async def planes(clock: FakeClock, transport: FakeTransport, workers: int = 2) -> Planes:
    rig = Planes(parse_config(CONFIG), transport, clock)
    for index in range(workers):
        await rig.add_worker(index, workers)
    for replica in rig.control.registry.replicas():
        replica.mark_health(True)
    rig.publish()
    return rig


async def test_answers_reach_the_control_counted_exactly_once(clock: FakeClock) -> None:
    rig = await planes(clock, FakeTransport())
    for _ in range(7):
        assert await ask(rig.workers[0]) == 200
    for _ in range(5):
        assert await ask(rig.workers[1]) == 200
    rig.ship()
    stats = rig.control.statistics("digits")["model_stats"][0]["inference_stats"]
    assert stats["success"]["count"] == 12
    body, _ = rig.control.metrics.render()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
    }
    requests = sum(v for (name, labels), v in samples.items() if name == "gateway_requests_total")
    attempts = sum(
        v for (name, labels), v in samples.items() if name == "gateway_upstream_attempts_total"
    )
    assert requests == 12
    assert attempts == 12


async def test_failures_on_every_worker_eject_the_replica_everywhere(clock: FakeClock) -> None:
    transport = FakeTransport({"127.0.0.1:9000": reply(500, b'{"error":"boom"}')})
    rig = await planes(clock, transport)
    pool = rig.control.registry.pools["p"]
    r0 = rig.control.registry.replica("r0")
    assert r0 is not None
    failures = 0
    # two failures seen by each worker alone would not reach the streak of 3; together they do
    while failures < 4:
        for app in rig.workers:
            picked = app.gateway.registry.replica("r0")
            assert picked is not None
            for other in app.gateway.registry.replicas():  # route every try to r0
                if other.id != "r0":
                    other.mark_health(False)
            if await ask(app) != 200:
                failures += 1
        rig.ship()
    assert r0.ejected(clock.now())
    assert pool.outlier.ejected_count() == 1
    rig.publish()
    for app in rig.workers:
        worker_r0 = app.gateway.registry.replica("r0")
        assert worker_r0 is not None and worker_r0.ejected(clock.now())
        assert worker_r0.ejection_reason == r0.ejection_reason


async def test_successes_ship_as_one_record_alike_and_count_as_each_would(
    clock: FakeClock,
) -> None:
    rig = await planes(clock, FakeTransport())
    for app in rig.workers:
        for _ in range(6):
            assert await ask(app) == 200
    sent: list[Batch] = []
    for shipper in rig.shippers:
        sent.append(shipper.ship())
    calls = [(c.target, c.method) for batch in sent for c in batch.calls]
    # per worker: one successes record per replica met, one queued record per model
    assert ("fleet", "attempt") not in calls and ("metrics", "queued") not in calls
    assert calls.count(("metrics", "queued_all")) == 2
    shipped = [c for batch in sent for c in batch.calls if c.method == "successes"]
    assert sum(len(c.args[3]) for c in shipped) == 12
    registry = rig.control.registry
    assert sum(r.requests for r in registry.replicas()) == 12
    assert all(r.outstanding == 0 and r.consecutive_failures == 0 for r in registry.replicas())
    body, _ = rig.control.metrics.render()
    samples = [
        s for family in text_string_to_metric_families(body.decode()) for s in family.samples
    ]
    attempts = [s for s in samples if s.name == "gateway_upstream_attempts_total"]
    assert sum(s.value for s in attempts) == 12
    assert {s.labels["outcome"] for s in attempts} == {"success"}
    durations = [s for s in samples if s.name == "gateway_upstream_attempt_duration_seconds_count"]
    assert sum(s.value for s in durations) == 12
    queued = [s for s in samples if s.name == "gateway_request_queue_duration_seconds_count"]
    assert sum(s.value for s in queued) == 12


async def test_a_success_between_failures_ends_the_streak_as_it_did_in_order(
    clock: FakeClock,
) -> None:
    # the worker tallies successes; a failure of the same replica ships them first, so the
    # control sees F F S F F (no streak of 3), not F F F F then S
    transport = FakeTransport()
    rig = Planes(parse_config(CONFIG_NO_PANIC), transport, clock)
    app = await rig.add_worker(0, 1)
    for replica in rig.control.registry.replicas():
        replica.mark_health(replica.id == "r0")
    rig.publish()  # every try to r0
    # a 500 is charged after the fault judge's look (``fleet.charged``), a refused connection
    # at once (``fleet.attempt``): each ships the replica's tallied successes first
    boom = reply(500, b'{"error":"boom"}')
    refused = fail(UpstreamConnectError("connection refused"))
    for behaviour in (boom, boom, reply(), refused, refused, reply(), reply(), boom, refused):
        transport.behaviours["127.0.0.1:9000"] = behaviour
        assert (await ask(app) == 200) == (behaviour is not boom and behaviour is not refused)
    rig.ship()
    r0 = rig.control.registry.replica("r0")
    assert r0 is not None
    assert r0.consecutive_failures == 2 and not r0.ejected(clock.now())
    assert r0.requests == 9 and r0.failures == 6


async def test_a_drain_and_an_operator_held_replica_reach_every_worker(clock: FakeClock) -> None:
    rig = await planes(clock, FakeTransport())
    pool = rig.control.registry.pools["p"]
    rig.control.registry.drain(pool, "r1")
    rig.control.drain("draining: test")
    rig.publish()
    for app in rig.workers:
        worker_pool = app.gateway.registry.pools["p"]
        assert [r.id for r in worker_pool.replicas] == ["r0", "r2"]
        assert "r1" not in {r.id for r in eligible(worker_pool, set(), clock.now())}
        assert not app.gateway.ready()
        assert app.gateway.readiness()["reason"].startswith("draining")


async def test_a_breaker_one_worker_opens_is_followed_by_the_other(clock: FakeClock) -> None:
    rig = await planes(clock, FakeTransport())
    first, second = rig.workers
    breaker = first.gateway.registry.replica("r2").breaker  # type: ignore[union-attr]
    assert breaker is not None
    breaker.force("open")  # as if its own requests had tripped it
    rig.ship()
    control_breaker = rig.control.registry.replica("r2").breaker  # type: ignore[union-attr]
    assert control_breaker is not None and control_breaker.state() == "open"
    snapshot = rig.publish()
    assert [(s.replica, s.state, s.origin_worker) for s in snapshot.breakers] == [("r2", "open", 0)]
    followed = second.gateway.registry.replica("r2").breaker  # type: ignore[union-attr]
    assert followed is not None and followed.state() == "open"
    rig.ship()  # the follower's forced state is not shipped back as its own transition
    assert rig.publish().breakers[0].origin_worker == 0


async def test_records_a_control_does_not_carry_out_are_counted_and_dropped(
    clock: FakeClock,
) -> None:
    rig = await planes(clock, FakeTransport(), workers=1)
    shipper = rig.shippers[0]
    shipper.calls.append(Call("os", "system", ("true",)))
    shipper.calls.append(Call("metrics", "render", ()))
    shipper.calls.append(Call("metrics", "retry", (1, 2, 3)))
    # an attempt whose outcome is not one: a kind no outcome has, a kind not a string
    shipper.calls.append(
        Call("metrics", "attempt", ("digits", "p", ["won", "r0", 0.1, 200, "", ""]))
    )
    shipper.calls.append(
        Call("metrics", "attempt", ("digits", "p", [["success"], "r0", 0.1, 200, "", ""]))
    )
    # successes' latencies that are not: none, a string, an integer, not finite, not a list
    for latencies in ([], ["0.1"], [0.1, 1], [float("nan")], [0.1, float("inf")], 0.1):
        shipper.calls.append(Call("fleet", "successes", ("digits", "p", "r0", latencies)))
    shipper.calls.append(Call("metrics", "queued_all", ("digits", [0.1, "x"])))
    rig.ship()
    assert rig.intake.refused == {
        "os.system": 1,
        "metrics.render": 1,
        "metrics.retry": 1,
        "metrics.attempt": 2,
        "fleet.successes": 6,
        "metrics.queued_all": 1,
    }
    r0 = rig.control.registry.replica("r0")
    assert r0 is not None and r0.requests == 0


async def test_each_worker_takes_its_share_of_the_gateways_limits(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PLANES_KEY", "planes-test-key-0123456789abcdef")
    config = {
        **CONFIG,
        "models": {"digits": {"pool": "p", "admission": {"max_in_flight": 9}}},
        "retry_budget": {"min_per_s": 10.0},
        "tenants": {"acme": {"key_env": "PLANES_KEY", "max_in_flight": 5, "rate_per_s": 8.0}},
    }
    rig = Planes(parse_config(config), FakeTransport(), clock)
    app = await rig.add_worker(0, 2)
    worker_config = app.gateway.config
    assert worker_config.models["digits"].admission.max_in_flight == 5
    assert worker_config.retry_budget.min_per_s == 5.0
    acme = worker_config.tenants["acme"]
    assert (acme.max_in_flight, acme.rate_per_s, acme.burst) == (3, 4.0, 4)
