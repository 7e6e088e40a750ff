"""What a reload keeps: the outgoing gateway's judgements of replicas and models that stay.

A reload builds a new `Gateway` from the new file; without this step every quarantine, open
breaker, ejection and health verdict was forgotten (a replica answering wrong served again at
once) and the SLO history and alert states started from zero. Kept, by key:

- a replica whose pool name, pool model/version, replica id and URL are all unchanged: its
  health verdict and probe streaks, ejection, quarantine, golden-probe streak, failure counts
  and latency average (`Replica.carry_from`), and its breaker (`ReplicaBreaker.carry_from`);
  its pool's learned latencies when the pool keeps its name and model/version;
- an SLO whose model and name stay and whose events mean the same (kind, latency threshold,
  tenant): its counted events, burn rates and alert states; a model's burn policy while its
  config is unchanged (`SloBook.carry_from`);
- the dashboard's samples and event timeline, with a "reload" event (`HistoryRecorder`);
- operators' decisions (drained, ejected, paused: `SharedState.carry_from`), obeyed by the new
  registry before it takes traffic;
- a rollout declared alike (same model pool and rollout block): its phase, step, step timer
  and evidence (`Rollouts.carry_from`); one declared otherwise starts again;
- a tenant's limiter while its limits stay (its requests in flight and its token bucket), and
  the retry budget's window while its config stays;
- a discovered pool's members, when the pool stays and asks DNS the same question (name,
  record, port, nameserver): the new gateway starts with the outgoing one's members and their
  verdicts, and its own resolution goes on from there. Without this, its pool was empty until
  the first answer was resolved and probed, and requests in between failed (under load in
  `tests/integration/test_discovery.py`; how many: docs/measured.md).

What changed is new, on purpose: a replica at a new URL is another server. Both gateways read
one clock (the reload hands the outgoing one's to the new), so carried instants stay comparable.
"""

from __future__ import annotations

from gateway.config.discovery import DiscoveryConfig
from gateway.config.replica import ReplicaConfig
from gateway.control.runtime import Gateway
from gateway.upstream.registry import Pool, Registry


def carry_over(old: Gateway, new: Gateway) -> dict[str, list[str]]:
    """Copies ``old``'s state into ``new`` for what both hold; returns what was carried."""
    carried = {
        "replicas": _carry_replicas(old.registry, new.registry),
        "slos": new.slo.carry_from(old.slo),
        "tenants": new.tenants.carry_from(old.tenants, old.config.tenants, new.config.tenants),
        "retry_budget": ["window"] if new.budget.carry_from(old.budget) else [],
    }
    new.history.carry_from(old.history)
    # operators' drains, ejects and pauses: obeyed at once
    new.shared.carry_from(old.shared)
    # after the decisions
    carried["rollouts"] = new.rollouts.carry_from(old.rollouts)
    return carried


def _same_pool(a: Pool, b: Pool) -> bool:
    return a.name == b.name and a.model == b.model and a.version == b.version


def _carry_replicas(old: Registry, new: Registry) -> list[str]:
    carried = []
    for name, pool in new.pools.items():
        before = old.pools.get(name)
        if before is None or not _same_pool(before, pool):
            continue
        pool.latency = before.latency
        previous = {r.id: r for r in before.replicas}
        _carry_members(new, before, pool)
        for replica in pool.replicas:
            was = previous.get(replica.id)
            if was is None or was.endpoint != replica.endpoint:
                continue
            replica.carry_from(was)
            if replica.breaker is not None and was.breaker is not None:
                replica.breaker.carry_from(was.breaker)
            carried.append(f"{name}/{replica.id}")
    return carried


def _same_question(a: DiscoveryConfig | None, b: DiscoveryConfig | None) -> bool:
    if a is None or b is None:
        return False
    return (a.dns, a.record, a.port, a.nameserver) == (b.dns, b.record, b.port, b.nameserver)


def _carry_members(registry: Registry, before: Pool, pool: Pool) -> None:
    """A discovered pool starts with the members DNS last gave the outgoing gateway (the
    probers watch them as joiners; what they learned is carried like any other replica's)."""
    discovery = pool.config.discovery
    if discovery is None or not _same_question(before.config.discovery, discovery):
        return
    present = {r.id for r in pool.replicas}
    for member in before.replicas[: discovery.max_members]:
        # a lowered cap applies at once
        if member.id not in present:
            # standby: its SRV priority's role, until DNS says otherwise
            config = ReplicaConfig(
                id=member.id, url=member.url, zone=discovery.zone, standby=member.standby
            )
            registry.add(pool, config)
