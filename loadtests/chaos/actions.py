"""Faults a timeline can inject: /admin/faults over HTTP, process signals, restarts, Redis.

Each action is a named callable on a `Cluster`, so a scenario's timeline reads as a list of
what happens to which replica, and the runner can log and time each one the same way.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from loadtests.chaos.cluster import Cluster, replica_id
from loadtests.stack import clear_faults as clear_replica_faults
from loadtests.stack import inject_faults


@dataclass(frozen=True, slots=True)
class Action:
    label: str
    run: Callable[[Cluster], None]

    def __call__(self, cluster: Cluster) -> None:
        self.run(cluster)


def _names(pool: str, indexes: Sequence[int]) -> str:
    return ", ".join(replica_id(pool, i) for i in indexes)


def _admin(
    cluster: Cluster, pool: str, indexes: Sequence[int], faults: dict[str, Any] | None
) -> None:
    for i in indexes:
        replica = cluster.replica(pool, i)
        if faults:
            inject_faults(replica, **faults)
        else:
            clear_replica_faults(replica)


def set_faults(pool: str, indexes: Sequence[int], **faults: Any) -> Action:
    """POST /admin/faults with ``faults`` (latency_ms, error_rate, hang, corrupt_rate, ...)."""
    text = ", ".join(f"{k}={v}" for k, v in faults.items())
    return Action(f"{text} on {_names(pool, indexes)}", lambda c: _admin(c, pool, indexes, faults))


def clear_faults(pool: str, indexes: Sequence[int]) -> Action:
    """DELETE /admin/faults: the replica is healthy again."""
    return Action(
        f"clear faults on {_names(pool, indexes)}", lambda c: _admin(c, pool, indexes, None)
    )


def _signal(pool: str, indexes: Sequence[int], sig: signal.Signals) -> Callable[[Cluster], None]:
    def run(cluster: Cluster) -> None:
        for i in indexes:
            cluster.signal_replica(pool, i, sig)

    return run


def kill(pool: str, indexes: Sequence[int]) -> Action:
    return Action(f"SIGKILL {_names(pool, indexes)}", _signal(pool, indexes, signal.SIGKILL))


def pause(pool: str, indexes: Sequence[int]) -> Action:
    return Action(f"SIGSTOP {_names(pool, indexes)}", _signal(pool, indexes, signal.SIGSTOP))


def resume(pool: str, indexes: Sequence[int]) -> Action:
    return Action(f"SIGCONT {_names(pool, indexes)}", _signal(pool, indexes, signal.SIGCONT))


def restart(pool: str, indexes: Sequence[int]) -> Action:
    """Stop each replica (SIGTERM; a dead one is just reaped) and start it on the same port."""

    def run(cluster: Cluster) -> None:
        for i in indexes:
            cluster.restart_replica(pool, i)

    return Action(f"restart {_names(pool, indexes)} (same port, wait until ready)", run)


def kill_redis() -> Action:
    return Action("SIGKILL redis-server", lambda c: c.kill_redis())


def start_redis() -> Action:
    return Action("start redis-server (same port)", lambda c: c.start_redis())
