"""This gateway's heartbeat: what it tells the fleet about itself (`gateway.state.fleet`).

`FleetBeacon.heartbeat` is called by the state sync's background task (never on a request):
the answer rate and 5xx share come from the dashboard's per-second samples of the last
`RATE_WINDOW_S`, and each replica's verdict is one word read from the replica itself and from
operators' decisions (`verdict`), so two gateways that judge one replica differently show it.
"""

from __future__ import annotations

from collections.abc import Callable

from gateway import __version__
from gateway.clock import Clock
from gateway.state.decisions import Decision, replica_key
from gateway.state.fleet import Heartbeat
from gateway.state.limits import MAX_VERDICTS
from gateway.telemetry.history_buffers import SampleRing
from gateway.upstream.registry import Registry
from gateway.upstream.replica import Replica

# the rates a heartbeat carries are averaged over this much history
RATE_WINDOW_S = 10.0

# the decision in force for a target, if any
Decided = Callable[[str], Decision | None]


def verdict(replica: Replica, now: float, wall: float, decided: Decision | None) -> str:
    """One word for how this gateway treats ``replica`` now, the most serious reason first."""
    if decided is not None and decided.holds(wall):
        return "drained" if decided.action == "drain" else "ejected"
    if replica.quarantined_until > now:
        return "quarantined"
    if replica.ejected(now):
        return "ejected"
    if replica.healthy is False:
        return "unhealthy"
    if replica.healthy is None:
        return "not probed"
    state = replica.breaker.state() if replica.breaker is not None else "closed"
    if state == "open":
        return "breaker open"
    return "half-open" if state == "half-open" else "serving"


class FleetBeacon:
    def __init__(
        self,
        instance: str,
        registry: Registry,
        samples: SampleRing,
        decided: Decided,
        clock: Clock,
        started: float,
    ) -> None:
        self.instance = instance
        self._registry = registry
        self._samples = samples
        self._decided = decided
        self._clock = clock
        self.started = started

    def heartbeat(self) -> Heartbeat:
        now, wall = self._clock.now(), self._clock.wall()
        rate, errors = self._rates(wall)
        verdicts: dict[str, str] = {}
        for pool in self._registry.pools.values():
            for replica in (*pool.replicas, *pool.draining):
                if len(verdicts) >= MAX_VERDICTS:
                    # what a heartbeat may carry (`gateway.state.limits`)
                    break
                decided = self._decided(replica_key(replica.id))
                verdicts[replica.id] = verdict(replica, now, wall, decided)
        return Heartbeat(self.instance, __version__, self.started, wall, rate, errors, verdicts)

    def _rates(self, wall: float) -> tuple[float, float]:
        """Answers per second and their 5xx share over the last `RATE_WINDOW_S` of samples."""
        rows = self._samples.since(wall - RATE_WINDOW_S)
        answers = errors = 0.0
        for row in rows:
            for cell in row["models"].values():
                rate = cell.get("rate") or 0.0
                answers += rate
                errors += rate * (cell.get("error_share") or 0.0)
        if not rows:
            return 0.0, 0.0
        share = errors / answers if answers else 0.0
        return round(answers / len(rows), 3), round(share, 4)
