"""Reported load across the two planes (the rig of `test_planes`): a reading one worker's
answers carried reaches the control and, through the snapshot, the other worker, which does
not ship it back; a scrape's reading (the control's) reaches every worker; saturation is
judged by each worker on those readings and sheds sheddable requests at once."""

from __future__ import annotations

import copy
from typing import Any

import msgspec
from prometheus_client.parser import text_string_to_metric_families

from gateway.api.parsing import RequestParser
from gateway.config import parse_config
from gateway.errors import GatewayError
from gateway.memory.inflight_bytes import InflightBytes, machine_default
from gateway.policies.load_report import LoadReport
from gateway.snapshot.codec import control_decoder
from gateway.snapshot.messages import Gauges, Loads, Snapshot
from gateway.snapshot.publisher import LOADS_EVERY_S, SnapshotPublisher
from gateway.snapshot.shipper import BatchShipper
from gateway.upstream.transport.base import Reply
from gateway.worker.app import WorkerApp
from gateway.worker.runtime import WorkerRuntime
from tests.gateway.control.test_planes import BODY, CONFIG, NoControl, Planes, _wire
from tests.gateway.fakes import FakeTransport, with_echoed_id
from tests.support.clock import FakeClock
from v2proto.load import HEADER, text_report


def reporting(queue: float) -> Any:
    """A replica whose answers report ``queue`` waiting."""

    async def behave(method: str, path: str, payload: bytes) -> Reply:
        body = with_echoed_id(payload, b'{"model_name":"m","outputs":[]}')
        headers = {"content-type": "application/json",
                   HEADER: text_report([("queue", queue), ("inflight", queue + 1)])}  # fmt: skip
        return Reply(200, headers, body)

    return behave


class GaugedPlanes(Planes):
    """The rig, each worker's batches carrying its gauges (as `gateway.worker.main`'s do)."""

    async def add_worker(self, index: int, count: int) -> WorkerApp:
        shipper = BatchShipper(self.clock, self._take, worker=index, gauges=lambda: gauges(app))
        runtime = WorkerRuntime(
            self.config, shipper, worker=index, workers=count, clock=self.clock,
            transport=self.transport,
        )  # fmt: skip
        await runtime.start()
        parser = RequestParser(inline_max_bytes=1 << 20, offload="inline")
        memory = InflightBytes.from_config(runtime.config.server)
        app = WorkerApp(runtime, parser, memory, NoControl())
        self.workers.append(app)
        self.shippers.append(shipper)
        return app


def gauges(app: WorkerApp) -> Gauges:
    return app.gateway.gauges(0, 0.0, app.memory.levels())


async def rig(clock: FakeClock, transport: FakeTransport, **model: Any) -> Planes:
    doc = copy.deepcopy(CONFIG)
    doc["models"]["digits"].update(model)
    planes = GaugedPlanes(parse_config(doc), transport, clock)
    for index in range(2):
        await planes.add_worker(index, 2)
    for replica in planes.control.registry.replicas():
        replica.mark_health(True)
    planes.publish()
    return planes


async def answer(app: WorkerApp) -> tuple[int, dict[str, str]]:
    """The status and headers a client of ``app`` gets for one request."""
    edge = app.edge
    intake = edge.arrive("digits", None, {"content-type": "application/json"}, "127.0.0.1")
    chunks = [BODY]

    async def read() -> tuple[bytes, bool]:
        return chunks.pop(0), False

    try:
        result = await edge.infer(intake, read)
    except GatewayError as error:
        edge.done(intake, error.status)
        return error.status, error.headers()
    edge.done(intake, result.status, result.served_by, result.degraded, len(result.body))
    return result.status, {}


async def test_one_workers_readings_reach_the_control_and_the_other_worker_once() -> None:
    clock = FakeClock()
    queues = {"127.0.0.1:9000": 20.0, "127.0.0.1:9001": 1.0, "127.0.0.1:9002": 2.0}
    transport = FakeTransport({a: reporting(q) for a, q in queues.items()})
    planes = await rig(clock, transport)
    first, second = planes.workers
    for _ in range(12):
        assert (await answer(first))[0] == 200
    hit = {r.id for r in first.gateway.registry.replicas() if r.load is not None}
    assert hit  # the first worker's answers reported these
    planes.ship()
    control = {r.id: r for r in planes.control.registry.replicas()}
    for replica in first.gateway.registry.replicas():
        if replica.id in hit:
            assert control[replica.id].reported_queue == replica.reported_queue
            assert control[replica.id].load_at == replica.load_at
    planes.publish()
    followed = {r.id: r for r in second.gateway.registry.replicas()}
    assert {i for i, r in followed.items() if r.load is not None} == hit
    assert all(followed[i].reported_queue == control[i].reported_queue for i in hit)
    assert gauges(second).loads == {}  # taken from the snapshot: not shipped back
    assert gauges(first).loads == {}  # shipped once


async def test_a_scraped_reading_reaches_every_worker_and_saturation_sheds_at_once() -> None:
    clock = FakeClock()
    transport = FakeTransport({f"127.0.0.1:{9000 + i}": reporting(9.0) for i in range(3)})
    planes = await rig(clock, transport, priority=-1)  # anonymous requests: sheddable
    for replica in planes.control.registry.replicas():  # as the control's scraper reads them
        replica.report_load(LoadReport(9.0, source="scrape"), clock.now())
    planes.publish()
    for app in planes.workers:
        status, headers = await answer(app)
        assert status == 503 and int(headers["retry-after"]) >= 1
    assert transport.calls == {} or all(not c for c in transport.calls.values())
    clock.advance(planes.config.pools["p"].load.stale_s + 0.1)  # stale: never taken as full
    for app in planes.workers:
        assert (await answer(app))[0] == 200


async def test_a_change_of_loads_alone_reaches_the_workers_as_readings_only() -> None:
    """Through the publisher and the link's codec: once nothing but loads changed, the
    workers get `Loads`, take each reading fresher than theirs, and the version moves on."""
    clock = FakeClock()
    transport = FakeTransport({f"127.0.0.1:{9000 + i}": reporting(1.0) for i in range(3)})
    planes = await rig(clock, transport)
    sent: list[Snapshot | Loads] = []
    publisher = SnapshotPublisher(planes.view.snapshot, sent.append, clock)

    def deliver() -> None:
        for message in sent:
            wired = _wire(message, control_decoder)
            for app in planes.workers:
                if isinstance(wired, Loads):
                    app.follow_loads(wired)
                else:
                    app.follow(wired)
        sent.clear()

    publisher.tick()
    deliver()
    clock.advance(LOADS_EVERY_S)
    for replica in planes.control.registry.replicas():
        replica.report_load(LoadReport(7.0, source="scrape"), clock.now())
    publisher.tick()
    [message] = sent
    assert isinstance(message, Loads) and set(message.loads) == {
        r.id for r in planes.control.registry.replicas()
    }
    deliver()
    for app in planes.workers:
        assert app.runtime.mirror.version == publisher.version == 2
        assert all(r.reported_queue == 7.0 for r in app.gateway.registry.replicas())
    # an older reading than a worker's own is not taken
    older = {r: msgspec.structs.replace(v, queue=99.0, at=0.0) for r, v in message.loads.items()}
    stale = Loads(3, clock.now(), older)
    planes.workers[0].follow_loads(stale)
    assert all(r.reported_queue == 7.0 for r in planes.workers[0].gateway.registry.replicas())


async def test_the_workers_in_flight_bytes_add_up_on_the_controls_metrics() -> None:
    """Each worker holds its share of ``server.inflight_bytes``; /metrics shows their sum:
    held, waiting, refused and the limit (``gateway_inflight_*``)."""
    clock = FakeClock()
    transport = FakeTransport({f"127.0.0.1:{9000 + i}": reporting(0.0) for i in range(3)})
    planes = await rig(clock, transport)
    first, second = planes.workers
    first.memory.add(1000)
    second.memory.add(24)
    second.memory.refused += 2  # as two waits that ran out
    planes.ship()
    body, _ = planes.control.metrics.render()
    samples = {
        s.name: s.value
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
        if s.name.startswith("gateway_inflight_")
    }
    configured = planes.config.server.inflight_bytes or machine_default()
    assert samples == {
        "gateway_inflight_bytes": 1024,
        "gateway_inflight_bytes_limit": configured // 2 * 2,  # each worker's half
        "gateway_inflight_waiting_requests": 0,
        "gateway_inflight_refused_total": 2,
        "gateway_inflight_reclaimed_total": 0,
    }
