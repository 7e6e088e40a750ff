"""The rollouts of a gateway's models: where each request goes, what is seen, what is decided.

`Rollouts` holds one `Run` per model that declares a rollout. The request path asks `plan`
(serve on the candidate? compare with the other pool?) and reports what happened (`served`,
`compared`, `copy_failed`, `shed`); every report is judged at once (`gateway.rollout.steps`),
so a rollback follows the evidence that calls for it, not a timer. `tick` (periodic) adopts
progress decided elsewhere (another gateway, the store after a restart), starts declared
rollouts once the store has been read, and judges steps held long enough.

Every change of phase or step is a decision (`gateway.rollout.progress`: stored and shared as
an operator's drain is) and an audit event (the ``gateway.audit`` log line and the timeline):
who asked (an operator's name) or which rule decided (``rule:agreement``, ...), and the
evidence. Decisions are taken only once the gateway is `activate`d (after a reload's carry-over
or the first start), so a reload's new gateway never restarts what the outgoing one was running.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import orjson

from gateway.clock import Clock
from gateway.config.models import ModelConfig
from gateway.config.rollout import RolloutConfig
from gateway.errors import Conflict
from gateway.policies.copy_gate import CopyGate
from gateway.policies.voting import VoteRule
from gateway.rollout.compare import rule_of
from gateway.rollout.evidence import RolloutEvidence
from gateway.rollout.pooled import COUNTS, DISAGREE, EvidencePool, step_key
from gateway.rollout.progress import COMPARING_PHASES, Progress, fingerprint, rollout_key
from gateway.rollout.split import SmoothSplit
from gateway.rollout.steps import judge_canary
from gateway.rollout.transitions import legal, target
from gateway.state.decisions import Decision
from gateway.state.lease import Lease, fenced_version, token_of
from gateway.telemetry.audit import AuditEvent

OPERATOR_ACTIONS = frozenset({"start", "pause", "promote", "abort"})


class Decide(Protocol):
    def __call__(self, key: str, action: str, by: str, reason: str, *, floor: int) -> Decision: ...


@dataclass(frozen=True, slots=True)
class Plan:
    candidate: bool  # the candidate serves this request
    compare: bool  # a copy goes to the other pool, compared off the client's path


KEEP = Plan(False, False)


@dataclass(slots=True, eq=False)
class Run:
    model: str
    pool: str
    config: RolloutConfig
    declared: str
    gate: CopyGate
    rule: VoteRule
    split: SmoothSplit  # which requests the candidate serves (a canary's share)
    began: float  # monotonic: when the current step began here
    progress: Progress | None = None  # None: not known yet (the store not read)
    step: RolloutEvidence = field(default_factory=RolloutEvidence)
    total: RolloutEvidence = field(default_factory=RolloutEvidence)
    refused: bool = False  # the store held progress refused (`Rollouts.vet`): write ours again

    def both(self) -> tuple[RolloutEvidence, RolloutEvidence]:
        return self.step, self.total

    def to_json(self, now: float) -> dict[str, Any]:
        z = self.config.confidence_z
        doc: dict[str, Any] = {
            "model": self.model,
            "pool": self.pool,
            "candidate": self.config.candidate,
            "mode": self.config.mode,
            "steps": list(self.config.steps),
            "agreement_target": self.config.agreement_target,
            "shadow_in_flight": self.gate.in_flight,
            "held_s": round(now - self.began, 3),
            "evidence": {"step": self.step.to_json(z), "total": self.total.to_json(z)},
        }
        if self.progress is None:
            unknown = {"phase": "unknown", "step": 0, "share_percent": 0.0, "version": 0}
            return {**doc, **unknown, "trail": []}  # the store not read yet
        return {**doc, **self.progress.to_json(self.config), "trail": list(self.progress.trail)}


class Rollouts:
    def __init__(
        self,
        models: Mapping[str, ModelConfig],
        clock: Clock,
        rng: random.Random,
        *,
        decide: Decide,
        known: Callable[[str], Decision | None],
        audit: Callable[[AuditEvent], None],
        burning: Callable[[str], bool],
        synced: Callable[[], bool],
        origin: str,
        leased: bool = False,
    ) -> None:
        """``leased``: a fleet shares a store: only the holder of a model's lease (`leased`)
        starts, advances and promotes its rollout, on the fleet's pooled evidence; without
        one, this gateway decides alone."""
        self._clock = clock
        self._rng = rng
        self._decide, self._known, self._audit = decide, known, audit
        self._burning, self._synced, self._origin = burning, synced, origin
        self._fleet = leased
        self._leases: dict[str, Lease] = {}  # by model: the latest answer of the store
        self.pool = EvidencePool(clock.wall)
        self.active = False
        self.unpublished = False  # decisions taken here since the last publish
        self.hand_over: Callable[[], None] | None = None  # makes promoted candidates the pools
        self.loop_lag: Callable[[], float] = lambda: 0.0  # seconds (`gateway.rollout.lag`)
        self.runs: dict[str, Run] = {}
        for name, model in models.items():
            if model.rollout is not None and model.pool is not None:
                config = model.rollout
                gate = CopyGate(config.shadow_concurrency, config.shadow_rate_per_s, clock)
                self.runs[name] = Run(name, model.pool, config, fingerprint(model.pool, config),
                                      gate, rule_of(config), SmoothSplit(rng),
                                      clock.now())  # fmt: skip
        self.declared = frozenset(self.runs)  # a promoted one is kept after its hand-over

    # --- the request path -----------------------------------------------------------------

    def plan(self, model: str) -> Plan:
        run = self.runs.get(model)
        progress = run.progress if run is not None else None
        if run is None or progress is None:
            return KEEP
        if progress.phase == "promoted":
            return Plan(True, False)
        if progress.phase not in COMPARING_PHASES:
            return KEEP
        if run.config.mode == "shadow":
            paused = progress.phase == "paused"
            return Plan(False, not paused and self._draw(run.config.shadow_percent))
        candidate = run.split.take(progress.share(run.config))
        return Plan(candidate, candidate and self._draw(run.config.compare_percent))

    def _draw(self, percent: float) -> bool:
        return percent >= 100 or (percent > 0 and self._rng.random() * 100 < percent)

    def gate(self, model: str) -> CopyGate:
        return self.runs[model].gate

    def busy(self, model: str) -> bool:
        """Whether the gateway is too busy for copies (its loop lags past the bound)."""
        return self.loop_lag() * 1000 > self.runs[model].config.shed_loop_lag_ms

    def served(self, model: str, candidate: bool, ok: bool, latency_s: float) -> None:
        """A client's request answered by one pool (ok: not an error of that pool)."""
        run = self.runs[model]
        if candidate:
            self._count(run, candidate_requests=1, candidate_errors=int(not ok))
        if ok:
            for evidence in run.both():
                side = evidence.candidate_latency if candidate else evidence.current_latency
                side.append(latency_s)
        self._judge(run)

    def compared(self, model: str, agreed: bool, differing: list[str], copy_s: float) -> None:
        """A copy's answer compared with the client's (the copy took ``copy_s``)."""
        run = self.runs[model]
        for evidence in run.both():
            evidence.disagreements.update(differing)
        shadow = run.config.mode == "shadow"  # the copy went to the candidate
        self._count(run, compared=1, agreed=int(agreed), candidate_requests=int(shadow),
                    **{f"{DISAGREE}{name}": 1 for name in differing})  # fmt: skip
        if shadow:
            for evidence in run.both():
                evidence.candidate_latency.append(copy_s)
        self._judge(run)

    def copy_failed(self, model: str) -> None:
        """A copy got no comparable answer (an error, a timeout, an undecodable reply)."""
        run = self.runs[model]
        shadow = int(run.config.mode == "shadow")
        self._count(run, compare_errors=1, candidate_requests=shadow, candidate_errors=shadow)
        self._judge(run)

    def _count(self, run: Run, **counts: int) -> None:
        """Adds to the step's and the total evidence, and to what the fleet is told."""
        step = self._step_key(run)
        for name, amount in counts.items():
            if step is not None:
                self.pool.add(step, name, amount)
            if name in COUNTS:
                for evidence in run.both():
                    setattr(evidence, name, getattr(evidence, name) + amount)

    def _step_key(self, run: Run) -> str | None:
        progress = run.progress
        if not self._fleet or progress is None:
            return None
        return step_key(run.model, run.declared, progress.step, progress.since)

    def shed(self, model: str) -> None:
        for evidence in self.runs[model].both():
            evidence.shadow_shed += 1

    # --- deciding ---------------------------------------------------------------------------

    def activate(self) -> None:
        self.active = True
        self.tick()

    def tick(self) -> None:
        for run in self.runs.values():
            if run.refused and self.active and run.progress is not None and self._leading(run):
                run.refused = False  # the leader's progress replaces the refused one in the store
                self._take(run, run.progress.phase, run.progress.step, "rule:store", "lead",
                           "the progress stored by someone else was refused")  # fmt: skip
            self._adopt(run)
            if run.progress is None and self.active and self._synced() and self._leading(run):
                phase = run.config.mode if run.config.auto_start else "waiting"
                waits = "" if run.config.auto_start else " (auto_start false: waits for start)"
                action = "start" if phase != "waiting" else "declare"
                self._take(run, phase, 0, "rule:config", action, "declared in the config" + waits)
            self._judge(run)
        if self.hand_over is not None and self.active and self.promoted():
            hand_over, self.hand_over = self.hand_over, None  # once per gateway
            hand_over()

    def promoted(self) -> list[str]:
        """Models the config still declares a rollout for, whose candidate is promoted."""
        return sorted(
            name
            for name in self.declared
            if (progress := self.runs[name].progress) is not None and progress.phase == "promoted"
        )

    def _adopt(self, run: Run) -> None:
        """Progress stored by another gateway, or before a restart, if newer and declared
        alike (progress under another declaration is not resumed: it starts again)."""
        decision = self._known(rollout_key(run.model))
        if decision is None:
            return
        if run.progress is not None and decision.version <= run.progress.version:
            return
        progress = Progress.from_decision(decision, run.config)
        if progress is None or progress.declared != run.declared:
            return
        if run.progress is None or (progress.phase, progress.step) != (
            run.progress.phase,
            run.progress.step,
        ):
            run.step, run.began = RolloutEvidence(), self._clock.now()
        run.progress = progress

    def _judge(self, run: Run) -> None:
        progress = run.progress
        if not self.active or progress is None or progress.phase != "canary":
            return
        held_s = self._clock.now() - run.began
        step = self._step_key(run)
        evidence = self.pool.pooled(step, run.step) if step is not None else run.step
        verdict = judge_canary(
            run.config, progress.step, evidence, held_s, self._burning(run.model)
        )
        if verdict.action != "rollback" and not self._leading(run):
            return  # the lease holder moves it on; any gateway rolls back on what it sees
        if verdict.action == "advance":
            self._take(run, "canary", progress.step + 1, "rule:evidence", "step", verdict.why)
        elif verdict.action == "promote":
            self._take(run, "promoted", progress.step, "rule:evidence", "promote", verdict.why)
        elif verdict.action == "rollback":
            self._take(run, "rolled_back", progress.step, f"rule:{verdict.rule}", "rollback",
                       verdict.why)  # fmt: skip

    def vet(self, decision: Decision) -> str | None:
        """Why progress read back from the store must not be obeyed, or None (the decision
        book asks, `DecisionBook.vet`): a step outside the plan; or, once progress is known
        here, a fencing token below the current lease's, or a move the plan has no action for
        (`gateway.rollout.transitions`). Progress of another declaration is not for this
        gateway to judge_canary (it is not resumed either)."""
        kind, _, model = decision.key.partition(":")
        run = self.runs.get(model)
        if kind != "rollout" or run is None:
            return None
        loose = Progress.from_decision(decision)
        if loose is not None and loose.declared != run.declared:
            return None
        progress = Progress.from_decision(decision, run.config)
        if progress is None:
            run.refused = True
            return f"not a progress of the plan of {len(run.config.steps)} steps"
        if run.progress is None:
            return None  # the first read after a start: whatever the plan allows
        lease = self._leases.get(model)
        if lease is not None and token_of(decision.version) < lease.token:
            why: str | None = f"fencing token {token_of(decision.version)} below {lease.token}"
        else:
            why = legal(run.progress, progress, run.config)
        run.refused = run.refused or why is not None
        return why

    # --- the fleet's lease ------------------------------------------------------------------

    def _leading(self, run: Run) -> bool:
        if not self._fleet:
            return True
        lease = self._leases.get(run.model)
        return lease is not None and lease.held

    def leased(self, model: str, lease: Lease | None) -> None:
        """The store's answer on this gateway's lease for ``model`` (None: lost, the store did
        not answer). A new holder records its lead (its token in the version), so that no
        stale holder's progress stands after it."""
        before = self._leases.get(model)
        if lease is None:
            if before is not None:
                self._leases[model] = Lease(False, before.token, "")
            return
        self._leases[model] = lease
        run = self.runs.get(model)
        if run is None or run.progress is None or not lease.held or not self.active:
            return
        if token_of(run.progress.version) < lease.token:
            self._take(run, run.progress.phase, run.progress.step, "rule:lease", "lead",
                       f"gateway {self._origin} decides (lease token {lease.token})")  # fmt: skip

    def _floor(self, model: str) -> int:
        lease = self._leases.get(model)
        return fenced_version(lease.token) if lease is not None else 0

    def act(self, model: str, action: str, who: str, reason: str) -> dict[str, Any]:
        """An operator's start, pause, promote or abort (`Conflict` where it cannot apply)."""
        run = self.runs[model]
        if run.progress is None:
            raise Conflict(f"rollout of {model!r}: its progress is not known yet (state store)")
        phase, step = run.progress.phase, run.progress.step
        goes = target(action, (phase, step), run.config) if action in OPERATOR_ACTIONS else None
        if goes is None:
            raise Conflict(f"rollout of {model!r} is {phase}: cannot {action} it")
        why = reason or f"{action} asked"
        self._take(run, goes[0], goes[1], who, action, why)
        return run.to_json(self._clock.now())

    def _take(self, run: Run, phase: str, step: int, who: str, action: str, why: str) -> None:
        wall = self._clock.wall()
        key = self._step_key(run)
        pooled = self.pool.pooled(key, run.step) if key is not None else run.step
        evidence = pooled.to_json(run.config.confidence_z)
        before = run.progress or Progress("waiting", 0, run.declared, wall)
        share_before = before.share(run.config)
        progress = before.then(phase, step, wall, {})
        entry = {"at": wall, "who": who, "action": action, "phase": phase, "step": step,
                 "share_percent": progress.share(run.config), "share_before": share_before,
                 "why": why, "evidence": evidence, "gateway": self._origin}  # fmt: skip
        progress = before.then(phase, step, wall, entry)
        decision = self._decide(rollout_key(run.model), phase, who, progress.reason(),
                                floor=self._floor(run.model))  # fmt: skip
        run.progress = replace(progress, version=decision.version)
        if (phase, step) != (before.phase, before.step):
            run.step, run.began = RolloutEvidence(), self._clock.now()
        self.unpublished = True
        self._audit(AuditEvent(wall, who, f"rollout {action}", rollout_key(run.model),
                               f"{why}; share {share_before:g} % -> "
                               f"{progress.share(run.config):g} %; evidence "
                               f"{orjson.dumps(evidence).decode()}",
                               "applied", self._origin))  # fmt: skip

    # --- views and reloads ------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        now = self._clock.now()
        return {
            "rollouts": {
                name: {**run.to_json(now), "in_config": name in self.declared}
                for name, run in sorted(self.runs.items())
            }
        }

    def carry_from(self, old: Rollouts) -> list[str]:
        """A reload: a rollout declared alike goes on (progress, evidence, step timer); one
        declared otherwise starts again. Activates this side either way."""
        carried = []
        for name, run in self.runs.items():
            before = old.runs.get(name)
            if before is not None and before.declared == run.declared:
                run.progress, run.step, run.total = before.progress, before.step, before.total
                run.began = before.began
                carried.append(name)
        for name, before in old.runs.items():  # handed over: kept for its trail
            progress = before.progress
            if name not in self.runs and progress is not None and progress.phase == "promoted":
                self.runs[name] = before
        self.activate()
        return carried
