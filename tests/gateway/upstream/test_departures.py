"""A replica that leaves takes its idle connections and metric series with it; what another
replica still uses (the same address in another pool) is kept."""

from __future__ import annotations

from typing import Any

from gateway.config.loader import parse_config
from gateway.config.replica import ReplicaConfig
from gateway.telemetry.metrics import Metrics
from gateway.telemetry.topology import Topology
from gateway.upstream.departures import Departures
from gateway.upstream.registry import Registry
from tests.gateway.fakes import FakeTransport
from tests.support.clock import FakeClock

TOLD: list[str] = []  # the ids the other holders of per-replica state were told


def setup() -> tuple[Registry, FakeTransport, Metrics, Departures]:
    same_address = "http://10.0.0.1:8000"
    pools: dict[str, Any] = {
        name: {"model": "digits-mlp", "replicas": [{"id": f"{name}-0", "url": same_address}]}
        for name in ("p", "q")
    }
    config = parse_config({"pools": pools, "models": {"digits": {"pool": "p"}}})
    registry = Registry(config, FakeClock())
    transport = FakeTransport()
    topology = Topology(pools=dict.fromkeys("pq", "digits-mlp"), replicas={"p-0": "p", "q-0": "q"})
    metrics = Metrics(process=False, topology=topology)
    departures = Departures(registry, transport, metrics, (TOLD.append,))
    departures.start()
    TOLD.clear()
    return registry, transport, metrics, departures


def leave(registry: Registry, pool: str, replica_id: str) -> None:
    replica = registry.drain(registry.pools[pool], replica_id)
    assert replica is not None
    assert registry.release(registry.pools[pool], replica)


def series_naming(metrics: Metrics, replica: str) -> list[str]:
    body = metrics.render()[0].decode()
    return [line for line in body.splitlines() if f'replica="{replica}"' in line]


async def test_the_last_user_of_an_address_leaving_releases_its_connections() -> None:
    registry, transport, metrics, departures = setup()
    for rid in ("p-0", "q-0"):
        metrics.ejection(rid, "consecutive_failures")
    leave(registry, "p", "p-0")
    assert series_naming(metrics, "p-0") == [] and TOLD == ["p-0"]
    assert series_naming(metrics, "q-0") != []
    assert transport.forgotten == []  # q-0 still talks to 10.0.0.1:8000

    joined = registry.add(registry.pools["p"], ReplicaConfig(id="p-1", url="http://10.0.0.2:8000"))
    leave(registry, "q", "q-0")
    assert [e.authority for e in transport.forgotten] == ["10.0.0.1:8000"]
    leave(registry, "p", joined.id)
    assert [e.authority for e in transport.forgotten] == ["10.0.0.1:8000", "10.0.0.2:8000"]
    await departures.stop()


async def test_a_stopped_watcher_releases_nothing() -> None:
    registry, transport, _, departures = setup()
    await departures.stop()
    leave(registry, "p", "p-0")
    leave(registry, "q", "q-0")
    assert transport.forgotten == [] and TOLD == []
