"""Audits, the correctness SLO and the burn policy's vote across the two planes, on fakes.

The rig of `test_planes` (a control's gateway and workers' runtimes linked by wire-encoded
messages, on a fake clock): a worker audits a sample of its answers after the client is
answered, ships the verdicts, and the control's correctness SLO, suspects and escalation
decide; the control's decision reaches the worker through its snapshot, and the worker's
requests are then voted (``x-vote: ...; escalated``). One replica of three answers wrong.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import pytest

from gateway.api.app import GatewayApp
from gateway.config import parse_config
from gateway.control.runtime import Gateway
from gateway.errors import GatewayError
from gateway.pipeline.audit import AGREED, AUDITOR_WRONG, WRONG
from gateway.worker.app import WorkerApp
from tests.gateway.control.test_planes import BODY, Planes
from tests.gateway.fakes import FakeTransport, reply
from tests.support.clock import FakeClock

RIGHT, WRONG_LABEL = 3, 4


def answer_of(label: int) -> bytes:
    output = {"name": "label", "shape": [1], "datatype": "INT64", "data": [label]}
    return orjson.dumps({"model_name": "m", "outputs": [output]})


def _pool(name: str, ports: range) -> dict[str, Any]:
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    return {"model": "m", "replicas": [{"id": f"{name}{i}", "url": u} for i, u in enumerate(urls)]}


def config(**model: Any) -> dict[str, Any]:
    """digits on pool p (three replicas); q and s: one replica each (other versions)."""
    digits = {
        "pool": "p",
        "retry": {"max_attempts": 1},
        "audit": {"rate": 1.0, "suspect_min_votes": 1000, "suspect_window": 1000},
        "slos": [{"name": "right", "kind": "correctness", "objective": 0.99}],
        **model,
    }
    pools = {
        "p": _pool("p", range(9000, 9003)),
        "q": _pool("q", range(9010, 9011)),
        "s": _pool("s", range(9020, 9021)),
    }
    return {"pools": pools, "models": {"digits": digits}}


def transport() -> FakeTransport:
    """p0 answers every request wrong; every other replica right."""
    right = reply(body=answer_of(RIGHT))
    answers = {f"127.0.0.1:{port}": right for port in (9001, 9002, 9010, 9020)}
    answers["127.0.0.1:9000"] = reply(body=answer_of(WRONG_LABEL))
    return FakeTransport(answers)


async def rig(clock: FakeClock, raw: dict[str, Any], workers: int = 1) -> Planes:
    planes = Planes(parse_config(raw), transport(), clock)
    for index in range(workers):
        await planes.add_worker(index, workers)
    for replica in planes.control.registry.replicas():
        replica.mark_health(True)
    planes.publish()
    return planes


async def ask(app: WorkerApp, body: bytes = BODY) -> tuple[int, int | None, str | None]:
    """One request: its status, the label answered and the answer's x-vote."""
    edge = app.edge
    arrival = edge.arrive("digits", None, {"content-type": "application/json"}, "127.0.0.1")
    chunks = [body]

    async def read() -> tuple[bytes, bool]:
        return chunks.pop(0), False

    try:
        result = await edge.infer(arrival, read)
    except GatewayError as error:
        edge.done(arrival, error.status)
        return error.status, None, None
    edge.done(arrival, result.status, result.served_by, result.degraded, len(result.body))
    label = orjson.loads(result.body)["outputs"][0]["data"][0]
    return result.status, label, result.vote


def _body() -> Callable[[], Awaitable[tuple[bytes, bool]]]:
    chunks = [BODY]

    async def read() -> tuple[bytes, bool]:
        return chunks.pop(0), False

    return read


async def settle(app: WorkerApp) -> None:
    """Until the worker's audits in flight are done (they run on the fake transport)."""
    auditor = app.gateway.pipeline.auditor
    assert auditor is not None
    for _ in range(1000):
        if not auditor.in_flight():
            return
        await asyncio.sleep(0)
    raise AssertionError("audits still in flight")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


async def test_audits_reach_the_control_and_a_wrong_answer_burns_the_correctness_slo(
    clock: FakeClock,
) -> None:
    planes = await rig(clock, config())
    app = planes.workers[0]
    labels = []
    for _ in range(60):
        status, label, vote = await ask(app)
        assert status == 200 and vote is None
        labels.append(label)
        await settle(app)
    planes.ship()
    outcomes = planes.control.verdicts.counts["digits"]
    served_wrong = labels.count(WRONG_LABEL)
    # every wrong answer served was shown wrong; the other two replicas outvoted p0 as auditor
    assert outcomes[WRONG] == served_wrong > 0
    assert outcomes[AGREED] + outcomes[AUDITOR_WRONG] == 60 - served_wrong
    slo = planes.control.slo.to_json()["models"]["digits"]["slos"][0]
    events = {"total": 60, "good": 60 - served_wrong, "bad": served_wrong, "degraded": 0}
    assert slo["events"] == events
    assert slo["sources"] == {"audit": {"judged": 60, "wrong": served_wrong}}
    low, high = slo["wrong_rate_interval"]
    assert low < served_wrong / 60 < high
    assert slo["alerts"][0]["firing"]  # 60 judged answers: more than page-1h-5m needs (20)
    # the client's answers were never changed by their audits: p0's wrong labels reached it
    assert served_wrong == sum(1 for label in labels if label == WRONG_LABEL)


async def test_an_alert_waits_for_enough_judged_answers(clock: FakeClock) -> None:
    planes = await rig(clock, config())
    app = planes.workers[0]
    for _ in range(12):  # fewer than the 20 judged answers page-1h-5m needs at 0.99
        await ask(app)
        await settle(app)
    planes.ship()
    slo = planes.control.slo.to_json()["models"]["digits"]["slos"][0]
    assert slo["events"]["bad"] > 0
    assert slo["burn_rates"]["5m"] > 14.4
    assert not any(alert["firing"] for alert in slo["alerts"])
    assert slo["min_judged"]["page-1h-5m"] == 20


async def test_the_replica_found_wrong_is_quarantined_and_every_worker_routes_around_it(
    clock: FakeClock,
) -> None:
    audit = {"rate": 1.0, "suspect_min_votes": 10, "suspect_window": 20, "suspect_ratio": 0.5}
    planes = await rig(clock, config(audit=audit), workers=2)
    for _ in range(40):
        for app in planes.workers:
            await ask(app)
            await settle(app)
        planes.ship()
    p0 = planes.control.registry.replica("p0")
    assert p0 is not None and p0.quarantined_until > clock.now()
    assert "audits" in (p0.quarantine_reason or "")
    assert not any(
        r.quarantined_until > clock.now()
        for r in planes.control.registry.replicas()
        if r.id != "p0"
    )
    planes.publish()
    for app in planes.workers:
        worker_p0 = app.gateway.registry.replica("p0")
        assert worker_p0 is not None and worker_p0.quarantined_until > clock.now()
        for _ in range(10):
            assert (await ask(app))[1] == RIGHT


async def test_a_burning_correctness_slo_escalates_the_model_to_a_vote_and_back(
    clock: FakeClock,
) -> None:
    escalation = {"vote": {"enabled": True, "k": 3, "recover_s": 30}}
    raw = config(vote_pools=["p", "q", "s"], burn_policy=escalation)
    planes = await rig(clock, raw)
    app = planes.workers[0]
    for _ in range(60):
        await ask(app)
        await settle(app)
    planes.ship()
    planes.control.slo.evaluate()
    assert "correctness burn" in planes.control.slo.escalated["digits"]
    snapshot = planes.publish()
    assert snapshot.models["digits"].escalation is not None
    results = [await ask(app) for _ in range(30)]
    assert all(status == 200 and label == RIGHT for status, label, _ in results)
    assert all(vote is not None and vote.endswith("; escalated") for _, _, vote in results)
    planes.ship()
    state = planes.control.slo.to_json()["models"]["digits"]["vote_escalation"]
    assert state["engaged"] and state["changes"] == 1
    # voted answers are judged answers too: the burn stops within a few hundred of them
    for _ in range(400):
        await ask(app)
    planes.ship()
    planes.control.slo.evaluate()
    assert not planes.control.slo.burning("digits")
    # but the votes show p0 still wrong on its pool's legs: recover_s later, still voted
    for _ in range(60):
        await ask(app)
    planes.ship()
    clock.advance(31)
    planes.control.slo.evaluate()
    assert "digits" in planes.control.slo.escalated
    # p0 answers right again: recover_s of votes that show it, and the model goes back
    planes.transport.behaviours["127.0.0.1:9000"] = reply(body=answer_of(RIGHT))
    for _ in range(60):
        await ask(app)
    planes.ship()
    clock.advance(31)
    planes.control.slo.evaluate()
    assert "digits" not in planes.control.slo.escalated
    escalation = planes.control.slo.to_json()["models"]["digits"]["vote_escalation"]
    assert escalation["changes"] == 2 and not escalation["engaged"]
    planes.publish()
    assert (await ask(app))[2] is None  # the single route again


async def test_without_audits_a_model_pays_nothing(clock: FakeClock) -> None:
    raw = config()
    del raw["models"]["digits"]["audit"]
    planes = await rig(clock, raw)
    app = planes.workers[0]
    assert app.gateway.pipeline.auditor is None
    status, _, _ = await ask(app)
    assert status == 200
    planes.ship()
    assert planes.control.verdicts.counts == {}


async def test_which_answers_are_audited_is_the_gateways_draw_not_the_request(
    clock: FakeClock,
) -> None:
    """The same requests with any headers are sampled alike under the same seed."""
    raw = config(audit={"rate": 0.5})
    drawn = []
    for seed, request_id in ((7, "a"), (7, "b"), (8, "a")):
        rng = random.Random(seed)
        gateway = Gateway(parse_config(raw), clock=clock, transport=transport(), rng=rng)
        await gateway.start_serving()
        try:
            edge = GatewayApp(gateway).edge
            picks = []
            for _ in range(20):
                headers = {"content-type": "application/json", "x-request-id": request_id}
                arrival = edge.arrive("digits", None, headers)
                result = await edge.infer(arrival, _body())
                picks.append(result.audit is not None)
                edge.done(arrival, result.status, result.served_by, None, len(result.body))
            drawn.append(picks)
        finally:
            await gateway.stop_serving()
    assert drawn[0] == drawn[1]
    assert drawn[0] != drawn[2]
    assert 0 < sum(drawn[0]) < 20


async def test_audits_over_their_bounds_are_shed_and_counted(clock: FakeClock) -> None:
    planes = await rig(clock, config(audit={"rate": 1.0, "max_in_flight": 1, "max_per_s": 1.0}))
    app = planes.workers[0]
    for _ in range(10):  # one after another, audits never waited for: over both bounds
        assert (await ask(app))[0] == 200
    await settle(app)
    planes.ship()
    outcomes = planes.control.verdicts.counts["digits"]
    audited = sum(outcomes[v] for v in (AGREED, WRONG, AUDITOR_WRONG))
    assert audited == 1
    assert outcomes["shed_concurrency"] + outcomes["shed_rate"] == 9
    slo = planes.control.slo.to_json()["models"]["digits"]["slos"][0]
    assert slo["events"]["total"] == 1  # shed audits judged nothing
