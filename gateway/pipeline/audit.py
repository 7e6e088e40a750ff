"""Audits: a sampled share of a single-route model's answers asked again, off the client's path.

`AuditedRoute` wraps the route of a model that declares ``audit`` (and no other): it draws,
with the gateway's own random generator, whether an answer is audited (``audit.rate``), so no
header or body of the request decides it, and a tenant cannot choose which of its requests are
audited. A sampled answer carries its audit (`InferAnswer.audit`), which the edge starts once
the door has answered (`gateway.pipeline.edge.Edge.done`): the client never waits for it and
its answer never changes because of it.

The `Auditor` runs each audit as a background task, and sheds it first: not sent while the
model's admission is over `SHED_LOAD` of its bound, nor over the model's `CopyGate` (audits in
flight and per second, this worker's share). An audit is the client's request with its own
deadline and ledger, one try and no hedge, on a replica of the ``against`` pool (or of the
model's own pool other than the one that answered): it spends nothing from the retry budget,
never reaches the edge's observer (the model's availability and latency SLOs, statistics and
tenant limits see clients' requests only), and its attempt is one on that pool's replica, as
any other (its breaker, outstanding count and outlier detector count it).

The two answers are compared as the vote compares them (`gateway.rollout.compare`: labels
exactly, numbers within the tolerance). A disagreement is settled as a vote's tie-break settles
it: a third opinion (another replica of either pool, else the model's verified fallback) and a
vote of the three; the side the vote finds wrong is named (``wrong``: the client's answer;
``auditor_wrong``: the audit's), with no third opinion the audit is ``undecided``. Every
replica judged, with its rows and the rows it was found wrong on, goes to the `AuditSink`
(the correctness SLOs and the suspects' records in the control process).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import random
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import numpy as np

from gateway.call import Attempts, Handler, InferAnswer, InferCall, Ledger, Leg, LegHandler, speak
from gateway.clock import Clock
from gateway.config.audit import AuditConfig
from gateway.config.models import ModelConfig
from gateway.config.policies import HedgeConfig
from gateway.deadline import Deadline
from gateway.errors import BadRequest, GatewayError
from gateway.pipeline.fallback import FallbackRunner, fallback_outputs
from gateway.policies.copy_gate import CopyGate
from gateway.rollout.compare import compare
from gateway.rollout.route import ONE_TRY, SHED_LOAD
from gateway.upstream.registry import Pool, Registry
from gateway.v2.codec import decode_outputs
from gateway.voting.route import conform
from gateway.voting.rule import VoteRule, vote

log = logging.getLogger(__name__)
Outputs = Mapping[str, Any]
# (replica id or fallback/<name>, rows, rows found wrong)
Judged = list[tuple[str, int, int]]

# the two answers agree
AGREED = "agreed"
# the client's answer, by the third opinion
WRONG = "wrong"
# the audit's answer, by the third opinion
AUDITOR_WRONG = "auditor_wrong"
# they disagree and no third opinion settled it
UNDECIDED = "undecided"
# no audit answer to compare with
FAILED = "failed"
VERDICTS = (AGREED, WRONG, AUDITOR_WRONG, UNDECIDED, FAILED)


class AuditSink(Protocol):
    """Where audits' verdicts go: the control's
    `gateway.control.audit_verdicts.AuditVerdicts` in one process, shipped to it from a worker
    (`gateway.worker.shipped.ShippedAudits`)."""

    def audited(self, model: str, verdict: str, judged: Judged) -> None:
        """One audit's verdict and every replica it judged."""

    def shed(self, model: str, reason: str) -> None:
        """An audit drawn but not sent: ``load``, ``concurrency`` or ``rate``."""


class AuditedRoute:
    """A model's route whose answers are sampled for an audit."""

    __slots__ = ("_auditor", "_random", "_rate", "_route")

    def __init__(self, route: Handler, auditor: Auditor, rate: float, rng: random.Random) -> None:
        self._route = route
        self._auditor = auditor
        self._rate = rate
        self._random = rng.random

    async def __call__(self, call: InferCall) -> InferAnswer:
        result = await self._route(call)
        if result.status == 200 and result.degraded is None and self._random() < self._rate:
            result.audit = functools.partial(
                self._auditor.start, call, result.body, result.header_length, result.served_by
            )
        return result


class Auditor:
    def __init__(
        self,
        registry: Registry,
        leg: LegHandler,
        clock: Clock,
        sink: AuditSink,
        load: Callable[[str], float],
        fallbacks: Mapping[str, FallbackRunner],
    ) -> None:
        """``load``: the model's requests in flight over its admission bound (0..1)."""
        self._registry = registry
        self._leg = leg
        self._clock = clock
        self._sink = sink
        self._load = load
        self._fallbacks = fallbacks
        self._gates: dict[str, CopyGate] = {}
        self._models: dict[int, ModelConfig] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self, call: InferCall, body: bytes, header_length: str | None, served: str) -> None:
        """Audits the answer ``served`` gave to ``call`` in the background, unless shed."""
        name = call.model_name
        audit = call.model.audit
        assert audit is not None, "only an audited model's route draws audits"
        gate = self._gate(name, audit)
        why = "load" if self._load(name) > SHED_LOAD else gate.admit()
        if why is not None:
            self._sink.shed(name, why)
            return
        task = asyncio.create_task(self._audit(call, audit, body, header_length, served))
        self._tasks.add(task)

        def done(task: asyncio.Task[None]) -> None:
            # even when cancelled before it ran
            self._tasks.discard(task)
            gate.release()

        task.add_done_callback(done)

    def _gate(self, name: str, audit: AuditConfig) -> CopyGate:
        gate = self._gates.get(name)
        if gate is None:
            gate = self._gates[name] = CopyGate(audit.max_in_flight, audit.max_per_s, self._clock)
        return gate

    async def _audit(
        self, call: InferCall, audit: AuditConfig, body: bytes, length: str | None, served: str
    ) -> None:
        name = call.model_name
        try:
            verdict, judged = await self._judge(call, audit, body, length, served)
            self._sink.audited(name, verdict, judged)
        except Exception:
            # an audit must never take anything else down
            log.exception("audit of a %s answer failed", name)

    async def _judge(
        self, call: InferCall, audit: AuditConfig, body: bytes, length: str | None, served: str
    ) -> tuple[str, Judged]:
        try:
            mine = decode_outputs(body, length)
        except BadRequest:
            return FAILED, []
        copy = self._copy(call, audit)
        own = self._registry.pools[call.model.pools[0]]
        against = self._registry.pools[audit.against] if audit.against else own
        second = await self._ask(copy, against, {served})
        if second is None:
            return FAILED, []
        auditor, theirs = second
        rule = VoteRule(2, audit.label_outputs, audit.numeric_atol, audit.numeric_rtol)
        agreed, _ = compare(mine, theirs, rule)
        rows = _rows(mine, audit.label_outputs)
        if agreed:
            return AGREED, [(served, rows, 0), (auditor, rows, 0)]
        third = await self._third(copy, (own, against), {served, auditor})
        if third is None:
            return UNDECIDED, []
        judge, outputs = third
        answers = {
            leg: {name: np.asarray(value) for name, value in given.items() if name in mine}
            for leg, given in ((served, mine), (auditor, theirs), (judge, outputs))
        }
        result = vote(conform(answers), rule)
        if not result.agreed:
            return UNDECIDED, []
        judged = [(leg, rows, result.dissenters.get(leg, 0)) for leg in answers]
        if result.dissenters.get(served):
            return WRONG, judged
        if result.dissenters.get(auditor):
            return AUDITOR_WRONG, judged
        return AGREED, judged

    async def _third(
        self, copy: InferCall, pools: tuple[Pool, Pool], asked: set[str]
    ) -> tuple[str, Outputs] | None:
        """A third opinion: another replica of either pool, else the verified fallback."""
        for pool in pools[:1] if pools[0] is pools[1] else pools:
            answer = await self._ask(copy, pool, asked)
            if answer is not None:
                return answer
        fallback = copy.model.fallback
        runner = self._fallbacks.get(fallback.model) if fallback is not None else None
        if fallback is None or runner is None or not runner.ok:
            return None
        try:
            outputs = await fallback_outputs(copy, runner)
        except Exception:
            # a fallback that cannot answer gives no opinion
            log.warning("audit of %s: the fallback gave no third opinion", copy.model_name)
            return None
        return f"fallback/{fallback.model}", outputs

    async def _ask(
        self, copy: InferCall, pool: Pool, asked: set[str]
    ) -> tuple[str, Outputs] | None:
        """One try on a replica of ``pool`` not in ``asked``: who answered, and what."""
        call = dataclasses.replace(copy, ledger=Ledger())
        attempts = Attempts(call.ledger, pool, tried=set(asked))
        try:
            result = await self._leg(Leg(speak(call, pool), attempts))
        except GatewayError:
            return None
        if result.status != 200:
            return None
        try:
            return result.served_by, decode_outputs(result.body, result.header_length)
        except BadRequest:
            return None

    def _copy(self, call: InferCall, audit: AuditConfig) -> InferCall:
        """The client's request for an audit: its own deadline and ledger, one try, no hedge
        (nothing from the retry budget), no trace span and no room in the client's in-flight
        bytes (not the client's work)."""
        model = call.model
        copy_model = self._models.get(id(model))
        if copy_model is None:
            copy_model = model.model_copy(update={"retry": ONE_TRY, "hedge": HedgeConfig()})
            self._models[id(model)] = copy_model
        deadline = Deadline.after(self._clock, audit.timeout_ms / 1000)
        return dataclasses.replace(
            call, model=copy_model, deadline=deadline, span=None, ledger=Ledger(), room=None
        )

    def in_flight(self) -> int:
        return len(self._tasks)

    async def aclose(self) -> None:
        """Cancels the audits still in flight (the gateway stops)."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def _rows(outputs: Outputs, labels: tuple[str, ...]) -> int:
    """Rows of an answer (its batch), from a label output, else from any output."""
    for name in [n for n in labels if n in outputs] or list(outputs):
        shape = np.shape(outputs[name])
        if shape:
            return int(shape[0])
    return 1


def audited(route: Handler, auditor: Auditor, model: ModelConfig, rng: random.Random) -> Handler:
    """``route`` with its answers sampled for audits where ``model`` declares them."""
    if model.audit is None:
        return route
    return AuditedRoute(route, auditor, model.audit.rate, rng)
