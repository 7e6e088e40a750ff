"""The details of audits, the correctness SLO and the burn policy's vote, across the two planes.

The rig of `test_correctness_planes` (a control's gateway and a worker's runtime linked by
wire-encoded messages, on a fake clock): where audits go (``audit.against``), when they are
shed (the model's load), what they must not touch (the retry budget, the availability and
latency SLOs) and what they are charged to, the verified fallback as the third opinion, the
golden probes' and the no-quorum votes' events of the correctness SLO, the cap on the burn
policy's vote and its switches in the audit trail.
"""

from __future__ import annotations

import asyncio
import logging
import random
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.config import parse_config
from gateway.control.runtime import Gateway
from gateway.pipeline.audit import AGREED, AUDITOR_WRONG, FAILED, UNDECIDED, WRONG
from gateway.upstream.probes.golden import GoldenSet
from gateway.upstream.probes.golden_prober import GoldenProber
from gateway.upstream.transport.base import Reply
from tests.gateway.control.test_correctness_planes import (
    RIGHT,
    WRONG_LABEL,
    answer_of,
    ask,
    config,
    rig,
    settle,
)
from tests.gateway.control.test_planes import Planes
from tests.gateway.fakes import Behaviour, FakeTransport, reply
from tests.support.clock import FakeClock
from tests.support.processes import wait_until_async
from v2proto.codec import parse_infer_request

FALLBACK = Path(__file__).resolve().parents[3] / "fallback_models"
MANIFEST = str(FALLBACK / "MANIFEST.json")
GOLDEN = str(FALLBACK / "digits-golden.json")
# a request the fallback model (digits-logreg) can answer: 64 pixels
DIGIT = orjson.dumps(
    {"inputs": [{"name": "input", "shape": [1, 64], "datatype": "FP32", "data": [0.0] * 64}]}
)


async def with_fallback(clock: FakeClock, raw: dict[str, Any]) -> Planes:
    """The rig, with the fallback model verified where the control process verifies it too
    (it refuses an unverified one to every worker)."""
    raw["fallback_manifest"] = MANIFEST
    planes = await rig(clock, raw)
    for model in planes.control.fallback_models.values():
        await model.verify()
    planes.publish()
    return planes


def _at(port: int) -> str:
    return f"127.0.0.1:{port}"


def _sent(fake: FakeTransport, ports: range) -> int:
    """Infer requests the replicas at ``ports`` were sent."""
    return sum(len(fake.calls.get(_at(port), [])) for port in ports)


def held(gate: asyncio.Event, answer: Behaviour, first: list[int] | None = None) -> Behaviour:
    """``answer`` once ``gate`` is set; with ``first`` (a shared count), only that many calls
    wait for it, the later ones answer at once."""

    async def behave(method: str, path: str, body: bytes) -> Reply:
        if first is None or first[0] > 0:
            if first is not None:
                first[0] -= 1
            await gate.wait()
        return await answer(method, path, body)

    return behave


def attempts_by_pool(gateway: Gateway) -> dict[str, float]:
    body, _ = gateway.metrics.render()
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name == "gateway_upstream_attempts_total":
                pool = sample.labels["pool"]
                counts[pool] = counts.get(pool, 0.0) + sample.value
    return counts


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


async def test_audits_go_to_the_against_pool_not_the_models_own(clock: FakeClock) -> None:
    planes = await rig(clock, config(audit={"rate": 1.0, "against": "q"}))
    app = planes.workers[0]
    labels = []
    for _ in range(30):
        status, label, _ = await ask(app)
        assert status == 200
        labels.append(label)
        await settle(app)
    planes.ship()
    served_wrong = labels.count(WRONG_LABEL)
    assert 0 < served_wrong < 30
    # every audit asked q's replica; s, another pool, was never asked
    assert _sent(planes.transport, range(9010, 9011)) == 30
    assert _sent(planes.transport, range(9020, 9021)) == 0
    # p answered the clients, and settled each disagreement as the third opinion
    assert _sent(planes.transport, range(9000, 9003)) == 30 + served_wrong
    outcomes = planes.control.verdicts.counts["digits"]
    assert outcomes[WRONG] == served_wrong and outcomes[AGREED] == 30 - served_wrong


async def test_audits_are_shed_while_the_models_load_is_high(clock: FakeClock) -> None:
    """Four requests held in flight of a bound of five: the fifth's answer is not audited
    (``shed_load``); once they are answered, audits are sent again."""
    gate = asyncio.Event()
    first = [4]
    right = reply(body=answer_of(RIGHT))
    raw = config(admission={"max_in_flight": 5}, audit={"rate": 1.0})
    planes = await rig(clock, raw)
    planes.transport.behaviours = {_at(p): held(gate, right, first) for p in (9000, 9001, 9002)}
    app = planes.workers[0]
    admission = app.gateway.pipeline.admission
    waiting = [asyncio.create_task(ask(app)) for _ in range(4)]
    await wait_until_async(
        lambda: admission.load("digits") == 0.8, 5, interval=0, message="four requests in flight"
    )
    assert (await ask(app))[0] == 200
    sent = _sent(planes.transport, range(9000, 9003))
    assert sent == 5  # the fifth's audit was not sent
    gate.set()
    assert [status for status, _, _ in await asyncio.gather(*waiting)] == [200] * 4
    await settle(app)
    planes.ship()
    outcomes = planes.control.verdicts.counts["digits"]
    assert outcomes["shed_load"] == 1
    assert outcomes[AGREED] == 4  # the four held ones, answered as the load fell
    assert _sent(planes.transport, range(9000, 9003)) == sent + 4


async def test_audits_spend_no_retry_and_no_slo_event_and_are_charged_to_their_pool(
    clock: FakeClock,
) -> None:
    """The audit pool's three replicas fail every audit (500): the model may retry (three
    attempts), yet an audit takes one try; its failures reach neither the model's availability
    nor its latency SLO, and each is an attempt on a replica of the audit pool."""
    slos = [
        {"name": "up", "kind": "availability", "objective": 0.99},
        {"name": "fast", "kind": "latency", "objective": 0.9, "threshold_ms": 100},
        {"name": "right", "kind": "correctness", "objective": 0.99},
    ]
    # no ejection, no open breaker: every audit reaches a replica of q
    forgiving = {"consecutive_failures": 100}
    raw = config(retry={"max_attempts": 3}, slos=slos, audit={"rate": 1.0, "against": "q"})
    raw["pools"]["q"] = {
        "model": "m",
        "replicas": [{"id": f"q{i}", "url": f"http://{_at(9010 + i)}"} for i in range(3)],
        "outlier": forgiving,
        "breaker": {"failure_threshold": 100},
    }
    failing = reply(500, b'{"error": "boom"}')
    right = reply(body=answer_of(RIGHT))
    planes = await rig(clock, raw)
    planes.transport.behaviours = {
        **{_at(port): right for port in (9000, 9001, 9002)},
        **{_at(port): failing for port in (9010, 9011, 9012)},
    }
    app = planes.workers[0]
    for _ in range(20):
        assert (await ask(app))[0] == 200
        await settle(app)
    planes.ship()
    assert planes.control.verdicts.counts["digits"][FAILED] == 20
    # one try each: nothing retried, nothing refused, only the clients' requests counted
    budget = app.gateway.budget
    assert (budget.requests_total, budget.spent_total, budget.refused_total) == (20, 0, 0)
    assert _sent(planes.transport, range(9010, 9013)) == 20
    doc = planes.control.slo.to_json()["models"]["digits"]["slos"]
    events = {slo["name"]: slo["events"] for slo in doc}
    clients = {"total": 20, "good": 20, "bad": 0, "degraded": 0}
    assert events["up"] == events["fast"] == clients
    assert events["right"]["total"] == 0  # a failed audit judged nothing
    # the audits' attempts: on q's replicas, as any attempt there
    assert attempts_by_pool(planes.control) == {"p": 20.0, "q": 20.0}


async def test_the_verified_fallback_is_the_third_opinion_when_no_replica_is_free(
    clock: FakeClock,
) -> None:
    """Two replicas that disagree and no third: the fallback model settles who was wrong."""
    raw = config(fallback={"model": "digits-logreg"}, audit={"rate": 1.0})
    raw["pools"]["p"]["replicas"] = raw["pools"]["p"]["replicas"][:2]
    planes = await with_fallback(clock, raw)
    app = planes.workers[0]
    fallback = app.gateway.fallbacks["digits-logreg"]
    assert fallback.ok
    outputs = await fallback.infer({"input": np.zeros((1, 64), dtype=np.float32)})
    truth = int(np.asarray(outputs["label"]).ravel()[0])
    planes.transport.behaviours = {
        _at(9000): reply(body=answer_of((truth + 1) % 10)),
        _at(9001): reply(body=answer_of(truth)),
    }
    auditor = app.gateway.pipeline.auditor
    assert auditor is not None
    labels = []
    for _ in range(20):
        status, label, _ = await ask(app, DIGIT)
        assert status == 200
        labels.append(label)
        # the fallback decodes and infers off the event loop
        await wait_until_async(lambda: not auditor.in_flight(), 10, interval=0.001)
    planes.ship()
    served_wrong = sum(1 for label in labels if label != truth)
    assert 0 < served_wrong < 20
    outcomes = planes.control.verdicts.counts["digits"]
    assert outcomes[UNDECIDED] == 0
    assert outcomes[WRONG] == served_wrong and outcomes[AUDITOR_WRONG] == 20 - served_wrong
    # only the replicas have records: p0 on the wrong side of every audit, p1 of none
    records = planes.control.suspects.to_json()["digits"]
    assert {r: (c["votes"], c["dissents"]) for r, c in records.items()} == {
        "p0": (20, 20),
        "p1": (20, 0),
    }


def _golden_labels(golden: GoldenSet, shift: int) -> Behaviour:
    """A replica answering the golden rows' true labels, each plus ``shift`` (mod 10)."""

    async def behave(method: str, path: str, body: bytes) -> Reply:
        (rows,) = parse_infer_request(body).inputs.values()
        where = [int(np.flatnonzero((golden.inputs == row).all(axis=1))[0]) for row in rows]
        labels = (golden.labels[where] + shift) % 10
        output = {"name": "label", "shape": [len(where)], "datatype": "INT64"}
        doc = {"model_name": "m", "outputs": [{**output, "data": labels.tolist()}]}
        return Reply(200, {"content-type": "application/json"}, orjson.dumps(doc))

    return behave


async def test_the_golden_probes_verdicts_are_events_of_the_correctness_slo() -> None:
    """The gateway's own golden prober: a replica failing its golden rows is a bad event of the
    correctness SLO of the model its pool serves, one passing them a good one."""
    golden = GoldenSet.read(FALLBACK / "digits-golden.json")
    raw = config()
    raw["pools"]["p"] = {**raw["pools"]["p"], "golden": {"file": GOLDEN}, "echoes_id": False}
    fake = FakeTransport(
        {_at(9000): _golden_labels(golden, 1), _at(9001): _golden_labels(golden, 0)}
    )
    gateway = Gateway(parse_config(raw), transport=fake, rng=random.Random(0))
    await gateway.start()
    try:
        # the prober the gateway started, told its verdicts as the gateway wires it
        [prober] = [s for s in gateway._services if isinstance(s, GoldenProber)]
        pool = gateway.registry.pools["p"]
        assert pool.config.golden is not None
        wrong, right, _ = pool.replicas
        for replica in (wrong, right):
            replica.mark_health(True)
        assert await prober.probe(pool, wrong, pool.config.golden, golden) is False
        assert await prober.probe(pool, right, pool.config.golden, golden) is True
        slo = gateway.slo.to_json()["models"]["digits"]["slos"][0]
        assert slo["sources"] == {"golden": {"judged": 2, "wrong": 1}}
        assert slo["events"]["bad"] == 1
    finally:
        await gateway.stop()


async def test_a_voted_answer_served_without_a_quorum_is_a_bad_event(clock: FakeClock) -> None:
    """Three versions that all disagree: the fallback answers in the vote's place, and that
    answer is one the correctness SLO counts wrong; answers with a quorum count right."""
    raw = config(vote={"pools": ["p", "q", "s"], "quorum": 2}, fallback={"model": "digits-logreg"})
    digits = raw["models"]["digits"]
    del digits["pool"], digits["audit"]
    planes = await with_fallback(clock, raw)
    app = planes.workers[0]
    behaviours = planes.transport.behaviours
    for port, label in ((9000, 1), (9001, 1), (9002, 1), (9010, 2), (9020, 3)):
        behaviours[_at(port)] = reply(body=answer_of(label))
    for _ in range(5):
        status, _, tally = await ask(app, DIGIT)
        assert status == 200 and tally is None  # the fallback's answer, not a tally
    behaviours[_at(9020)] = reply(body=answer_of(1))
    for _ in range(15):
        assert await ask(app, DIGIT) == (200, 1, "2/3")
    planes.ship()
    slo = planes.control.slo.to_json()["models"]["digits"]["slos"][0]
    assert slo["sources"] == {"vote": {"judged": 20, "wrong": 5}}
    assert slo["events"] == {"total": 20, "good": 15, "bad": 5, "degraded": 0}


def _escalation(max_extra: int = 64) -> dict[str, Any]:
    policy = {"vote": {"enabled": True, "k": 3, "recover_s": 30, "max_extra_in_flight": max_extra}}
    return config(vote_pools=["p", "q", "s"], burn_policy=policy, audit={"rate": 0.01})


def burn(gateway: Gateway, wrong: int = 30) -> None:
    """Audits that find ``wrong`` answers wrong: a fast burn of the correctness SLO (20 judged
    answers are enough at its objective)."""
    for _ in range(wrong):
        gateway.slo.judge("digits", False, "audit")
    gateway.slo.evaluate()


async def test_past_its_cap_on_extra_capacity_the_escalated_model_takes_its_single_route(
    clock: FakeClock,
) -> None:
    """A cap of two extra legs is one vote over three versions in flight: a second request
    meanwhile takes the single route; once the vote is answered, the next is voted again."""
    planes = await rig(clock, _escalation(max_extra=2))
    burn(planes.control)
    assert "digits" in planes.control.slo.escalated
    planes.publish()
    app = planes.workers[0]
    gate = asyncio.Event()
    right = held(gate, reply(body=answer_of(RIGHT)))
    planes.transport.behaviours = {_at(p): right for p in (9000, 9001, 9002, 9010, 9020)}
    escalating = app.gateway.pipeline.escalating
    assert escalating is not None
    route = escalating["digits"]
    voted = asyncio.create_task(ask(app))
    await wait_until_async(lambda: route.in_flight == 1, 5, interval=0, message="a vote in flight")
    single = asyncio.create_task(ask(app))
    await wait_until_async(
        lambda: route.over_cap == 1, 5, interval=0, message="a request over the cap"
    )
    gate.set()
    (_, _, tally), (_, _, plain) = await asyncio.gather(voted, single)
    assert tally is not None and tally.endswith("; escalated")
    assert plain is None
    assert (await ask(app))[2] is not None  # the cap is free again
    assert route.over_cap == 1


async def test_the_switch_to_a_vote_and_back_is_in_the_audit_trail(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    planes = await rig(clock, _escalation())
    control = planes.control
    caplog.set_level(logging.WARNING, logger="gateway.audit")
    burn(control)
    assert "digits" in control.slo.escalated
    for _ in range(1000):  # right answers dilute the burn: it stops
        control.slo.judge("digits", True, "audit")
    control.slo.evaluate()
    clock.advance(31)
    control.slo.evaluate()
    assert "digits" not in control.slo.escalated
    trail = [r for r in caplog.records if r.name == "gateway.audit"]
    switches = [(r.who, r.action, r.target) for r in trail]  # type: ignore[attr-defined]
    assert switches == [
        ("burn_policy", "escalate_to_vote", "model:digits"),
        ("burn_policy", "back_to_single_route", "model:digits"),
    ]
    engaged, released = (str(r.reason) for r in trail)  # type: ignore[attr-defined]
    assert engaged.startswith("correctness burn: ") and "digits/right" in engaged
    assert released == "no correctness burn for 30 s"
