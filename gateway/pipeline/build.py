"""The whole request path, outer to inner, in one place: the edge, then the pipeline.

    REST or gRPC door (I/O only) ── edge: tenant ── model ── tenant limits ── body ── timeout
        ── parse ── schema ── call ──►
    admission ── saturation ── deadline ── fallback ── route ─┬─ single ──────────────┐
                                                              ├─ vote: k legs, vote ──┤
                                                              └─ rollout: pool or ────┴─ leg:
                                                                 candidate, + a copy compared
    (a single route may be audited: a sampled answer asked again off-path once answered; and
     escalated: voted over k versions while its correctness SLO burns)
                                   retry ── hedge ── balance ── attempt ── transport ── replica

The edge (`build_edge`; `gateway.pipeline.edge`) turns what a door received into the frozen
`InferCall`, whatever the transport:
- tenant: the API key's tenant (401 for a key nobody holds); model: the model asked for (404),
  and 401 for an anonymous request where the model needs a key;
- tenant limits: the tenant's in-flight bound and rate (429 + Retry-After), held until the
  answer, taken before the body is read so that a refusal costs almost nothing;
- body: read up to ``server.max_body_bytes`` (413);
- timeout: ``x-request-timeout-ms`` capped by the model (400), else the model's default;
  the deadline runs from arrival;
- parse: the V2 structure (400), inline when small, in a worker process when large;
- schema: the model's signature (400), so a bad input never costs a replica;
- call: the request id spliced into the body (replies must echo it), the `InferCall`.
On the way out, a replica's answer is renamed to the client's model; the door writes it.

The pipeline (`build_pipeline`):
- admission: bounded in-flight per model, shared by tenants by weight, shed at once (429 to a
  tenant over its share, 503 when the model is full; Retry-After);
- saturation: while every replica of the model's pool reports a queue over its threshold, a
  request of sheddable priority is shed at once (503 + Retry-After from the queues); only in
  the path of a model some sheddable caller may call (`gateway.pipeline.saturation`);
- deadline: nothing below runs past the request's deadline (504);
- fallback: the verified in-process model answers, degraded, when the primary path cannot;
- route: the model's pool, or a vote over pools (each leg a full single route), or a rollout
  (`gateway.rollout.route`: the candidate serves a canary's share, a copy to the other pool
  is compared in the background, bounded, outside the retry budget and the model's SLOs); one
  request counts once towards the retry budget's allowance, however many legs it has; a
  single route with ``audit`` samples answers for audits (`gateway.pipeline.audit`: asked
  again once the client is answered, bounded, shed first, outside the retry budget and the
  model's SLOs), and one whose burn policy may vote is switched to a vote while the control
  says so (`gateway.pipeline.escalate`);
- retry: one loop of tries on untried replicas; `RetryPolicy` (bounded, jittered, before the
  deadline, budgeted) decides each retry, and the attempt layer's per-try timeout; slow tries race;
  every send beyond a leg's first (a retry, a hedge, a vote's tie-break) spends the budget;
- hedge: optional second copy after the pool's p95;
- balance: eligibility (health, ejection, quarantine, breaker, spares, panic), then P2C;
- attempt: one classified exchange; its `Outcome` feeds the replica's breaker, the outlier
  detector and the latency window.
A request whose client leaves is cancelled by its door; every try, hedge, vote leg and slow
try it started then stops before admission gives its seat back (`gateway.cancel`).

What flows down (`gateway.call`): above the route, the frozen `InferCall` (its
`Ledger` counts the attempts); from the route down, a `Leg` (the call on one pool with its
`Attempts`); from the balancer to the attempt layer, an `Attempt` (the leg and the chosen
replica). What flows up is an `InferAnswer`, or one error carrying its `Outcome`.

Each model's path below admission is assembled at load for what that model uses (`plan`,
`assemble`): a fallback layer only for a model with a fallback, a hedge layer only where
hedging is on (a vote's and a rollout's legs keep theirs), the route it declares and no other
(`gateway check-config --explain MODEL` prints a model's stages, `explain`). Admission picks
the model's path with one lookup; a model the pipeline was not built with takes the path of
every route (`Router`).

Each pipeline layer is a class holding the next handler with one ``async __call__``; the edge's
steps are plain calls where they need not wait. To see or change the order a request goes
through, read or edit these two functions and nothing else. Every layer that waits (backoff,
per-try timeout, hedge delay, deadline, fallback reserve, straggler grace) waits on the
injected `Clock`.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass

from gateway.admission.layer import AdmissionLayer
from gateway.admission.tenant_limits import TenantLimits
from gateway.call import Adjuster, Handler, no_adjustment
from gateway.clock import Clock
from gateway.config.models import GatewayConfig, ModelConfig
from gateway.config.tenants import TenantConfig
from gateway.memory.inflight_bytes import InflightBytes
from gateway.pipeline.attempt import AttemptLayer
from gateway.pipeline.audit import AuditedRoute, Auditor, AuditSink
from gateway.pipeline.balance import BalanceLayer
from gateway.pipeline.deadline import DeadlineLayer
from gateway.pipeline.edge import Edge, Observer
from gateway.pipeline.edge_steps import (
    BoundedBody,
    CallBuilder,
    Caller,
    ModelOf,
    Parse,
    Parser,
    SchemaCheck,
    SchemaOf,
    TenantOf,
    timeout_of,
)
from gateway.pipeline.escalate import EscalatingRoute
from gateway.pipeline.fallback import FallbackLayer, FallbackRunner
from gateway.pipeline.hedge import HedgeLayer
from gateway.pipeline.reactions import Reactions
from gateway.pipeline.route import Counted, Router, SingleRoute
from gateway.pipeline.saturation import SaturationLayer, sheddable
from gateway.retry.budget import RetryBudget
from gateway.retry.layer import RetryLayer
from gateway.retry.policy import RetryPolicy
from gateway.rollout.controller import Rollouts
from gateway.rollout.route import RolloutRoute
from gateway.telemetry.metrics import Metrics, RequestMetrics
from gateway.telemetry.tracing import Tracer
from gateway.upstream.registry import Registry
from gateway.upstream.selection import PowerOfTwoChoices
from gateway.upstream.transport.base import Transport
from gateway.voting.quarantine import DissentSink, Suspects
from gateway.voting.route import VoteRoute


def build_edge(
    pipeline: Handler,
    clock: Clock,
    tracer: Tracer,
    observe: Observer,
    *,
    tenant_of: TenantOf,
    model_of: ModelOf,
    tenants: TenantLimits,
    max_body_bytes: int,
    parser: Parser,
    schema_of: SchemaOf,
    memory: InflightBytes | None = None,
) -> Edge:
    """The steps before ``pipeline``, in the order a request meets them (any door)."""
    return Edge(
        clock,
        tracer,
        # tenant (401), model (404; 401 if it needs a key)
        Caller(tenant_of, model_of),
        # the tenant's limits (429), held until the answer
        tenants,
        # the body (413), held as it arrives
        BoundedBody(max_body_bytes, memory),
        # x-request-timeout-ms, capped (400)
        timeout_of,
        # the V2 structure (400): inline, or in a worker when large
        Parse(parser),
        # the model's signature (400)
        SchemaCheck(schema_of),
        # the id into the body; the InferCall, its deadline from arrival
        CallBuilder(clock),
        # build_pipeline's handler: admission ... replica
        pipeline,
        # after the door has answered: metrics, SLOs, history
        observe,
        # the bytes in flight, gateway-wide: held from the body's head to the answer
        memory,
    )


@dataclass(frozen=True, slots=True)
class Pipeline:
    handler: Handler
    admission: AdmissionLayer
    fallback: FallbackLayer
    vote: VoteRoute
    hedge: HedgeLayer
    attempt: AttemptLayer
    suspects: DissentSink
    rollout: RolloutRoute | None = None
    # with an audited model only
    auditor: Auditor | None = None
    # models whose policy may vote
    escalating: Mapping[str, EscalatingRoute] | None = None

    async def aclose(self) -> None:
        """Cancels shadow copies and audits in flight, then closes the attempts' resources."""
        if self.rollout is not None:
            await self.rollout.aclose()
        if self.auditor is not None:
            await self.auditor.aclose()
        await self.attempt.aclose()


def build_pipeline(
    registry: Registry,
    transport: Transport,
    budget: RetryBudget,
    clock: Clock,
    rng: random.Random,
    fallbacks: Mapping[str, FallbackRunner] | None = None,
    metrics: RequestMetrics | None = None,
    adjust: Adjuster | None = None,
    tenants: Mapping[str, TenantConfig] | None = None,
    rollouts: Rollouts | None = None,
    models: Mapping[str, ModelConfig] | None = None,
    suspects: DissentSink | None = None,
    reactions: Reactions | None = None,
    audits: AuditSink | None = None,
    escalated: Mapping[str, str] | None = None,
) -> Pipeline:
    """The pipeline; with ``models``, each model's path below admission is assembled for what
    that model uses (`assemble`), and a model not named there takes the path of every route.
    ``suspects``: where votes' dissents go (default: quarantined through ``registry``);
    ``reactions``: what every attempt's outcome feeds (default: all of it, here); ``audits``:
    where audits' verdicts go (no audits without it); ``escalated``: the models the burn
    policy serves by a vote now (model -> why), kept in place by whoever decides."""
    metrics = metrics or Metrics(process=False)
    adjust = adjust or no_adjustment
    retry = RetryPolicy(budget, adjust, metrics, clock, rng)
    attempt = AttemptLayer(transport, retry, clock, metrics, reactions or Reactions(metrics))
    balance = BalanceLayer(PowerOfTwoChoices(rng), clock, attempt)
    hedge = HedgeLayer(retry, clock, metrics, adjust, balance)
    leg = RetryLayer(retry, hedge)
    suspects = suspects or Suspects(registry)
    vote = VoteRoute(registry, leg, clock, metrics, retry.pay, suspects)
    routes: dict[str, Handler] = {"single": SingleRoute(registry, leg), "vote": vote}
    rollout = None
    if rollouts is not None:
        rollout = RolloutRoute(registry, leg, rollouts, clock, lambda m: admission.load(m))
        # models that declare a rollout (not voted ones)
        routes["rollout"] = rollout
    router = Router(routes, retry.count_request)
    fallback = FallbackLayer(fallbacks or {}, clock, metrics, adjust, router)
    # every route, for a model not assembled
    deadline = DeadlineLayer(clock, fallback)
    models = models or {}
    auditor = None
    if audits is not None and any(m.audit is not None for m in models.values()):
        auditor = Auditor(
            registry, leg, clock, audits, lambda m: admission.load(m), fallbacks or {}
        )
    escalating: dict[str, EscalatingRoute] = {}
    paths: dict[str, Handler] = {}
    for name, model in models.items():
        pools = [registry.pools[p] for p in model.pools if p in registry.pools]
        chosen = plan(model, tenants, any(p.config.load_aware for p in pools))
        if chosen.route == "rollout" and rollout is None:
            continue
        route: Handler = model_route(chosen, registry, retry, balance, leg, vote, rollout)
        if auditor is not None and model.audit is not None:
            route = AuditedRoute(route, auditor, model.audit.rate, rng)
        if chosen.escalates and escalated is not None:
            voted = Counted(vote, retry.count_request)
            route = escalating[name] = EscalatingRoute(name, model, route, voted, escalated)
        path = assemble(chosen, clock, route, fallback)
        # a sheddable caller may call it: shed while its pool is full
        if chosen.shed:
            path = SaturationLayer(pools, chosen.shed, clock, metrics, path)
        paths[name] = path
    admission = AdmissionLayer(metrics, deadline, tenants, paths, attempt.stop)
    return Pipeline(
        admission,
        admission,
        fallback,
        vote,
        hedge,
        attempt,
        suspects,
        rollout,
        auditor,
        escalating,
    )


@dataclass(frozen=True, slots=True)
class Plan:
    """What one model's path holds below admission: its route, and whether it has a fallback
    layer and a hedge layer (a vote's and a rollout's legs keep theirs: the vote and the
    rollout route are one object each, the gateway's)."""

    # "single", "vote" or "rollout"
    route: str
    # the fallback model, when the model has one
    fallback: str | None
    hedge: bool
    # a single route whose answers are sampled for audits
    audit: bool = False
    # a single route the burn policy may switch to a vote
    escalates: bool = False
    # its sheddable callers (a saturation layer if any)
    shed: frozenset[str] = frozenset()

    def stages(self) -> list[str]:
        """The stages in order, admission to replica."""
        route = {
            "single": "route(single)",
            "vote": "route(vote: k legs, then a vote)",
            "rollout": "route(rollout: pool or candidate, a copy compared off-path)",
        }[self.route]
        names = ["admission", *(["saturation"] if self.shed else []), "deadline"]
        if self.fallback is not None:
            names.append(f"fallback({self.fallback})")
        if self.escalates:
            names.append("escalation(a vote while its correctness SLO burns)")
        if self.audit:
            names.append("audit(a sampled answer asked again off-path)")
        names += [route, "retry", *(["hedge"] if self.hedge else []), "balance", "attempt"]
        return names


def plan(
    model: ModelConfig,
    tenants: Mapping[str, TenantConfig] | None = None,
    load_aware: bool = False,
) -> Plan:
    """The path ``model`` uses: no fallback layer without a fallback, no hedge layer on a
    single route with hedging off, no vote or rollout machinery on a plain route, no audit
    or escalation where the model declares none, no saturation layer unless a pool of it is
    ``load_aware`` and some caller (``tenants``, and anonymous ones) is sheddable."""
    route = "rollout" if model.rollout is not None else model.route
    fallback = model.fallback.model if model.fallback is not None else None
    hedge = model.hedge.enabled or route != "single"
    audit = model.audit is not None
    shed = sheddable(model, tenants or {}) if load_aware else frozenset()
    return Plan(route, fallback, hedge, audit, model.burn_policy.vote.enabled, shed)


def model_route(
    chosen: Plan,
    registry: Registry,
    retry: RetryPolicy,
    balance: BalanceLayer,
    hedged_leg: RetryLayer,
    vote: VoteRoute,
    rollout: RolloutRoute | None,
) -> Handler:
    """The route of ``chosen`` from the pipeline's own layers (one of each: the vote's
    suspects, the hedge's counts and the rollout's copies are the gateway's)."""
    if chosen.route == "rollout" and rollout is not None:
        return Counted(rollout, retry.count_request)
    if chosen.route == "vote":
        return Counted(vote, retry.count_request)
    leg = hedged_leg if chosen.hedge else RetryLayer(retry, balance)
    return SingleRoute(registry, leg, retry.count_request)


def assemble(chosen: Plan, clock: Clock, route: Handler, fallback: FallbackLayer) -> Handler:
    """The handler of ``chosen`` above its route: its fallback, if any, and its deadline."""
    if chosen.fallback is not None:
        route = fallback.over(route)
    return DeadlineLayer(clock, route)


def explain(config: GatewayConfig, name: str) -> list[str]:
    """The stages a request to model ``name`` goes through in a gateway built from
    ``config``, door to replica (`gateway check-config --explain MODEL`)."""
    tenants = config.tenants
    edge = ["tenant (API key)" if tenants else "tenant: anonymous only (no keys)", "model"]
    if any(t.max_in_flight or t.rate_per_s for t in tenants.values()):
        edge.append("tenant limits")
    edge += ["body", "timeout", "parse", "schema", "call"]
    model = config.models[name]
    aware = any(config.pools[p].load_aware for p in model.pools if p in config.pools)
    return [*edge, *plan(model, tenants, aware).stages()]
