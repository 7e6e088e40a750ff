"""``GET /admin/fleet``: every gateway instance of the namespace and its replica verdicts.

Installing it also gives the gateway its heartbeat (`gateway.control.fleet.FleetBeacon`), which the
state sync publishes in the background. The answer reads only what the last pull brought
(`SharedState.heartbeats`) plus this instance's heartbeat built now, so it costs no store call;
without shared state it lists this instance alone and says so (``shared: false``).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from gateway.control.fleet import FleetBeacon
from gateway.control.runtime import Gateway
from gateway.state.fleet import fleet_document


def install_fleet(app: FastAPI, gateway: Gateway) -> None:
    """The route, and this gateway's heartbeat for the state sync to publish."""
    if isinstance(gateway, Gateway):
        # not when the app is built for its OpenAPI document
        shared = gateway.shared
        beacon = FleetBeacon(
            shared.origin,
            gateway.registry,
            gateway.history.samples,
            shared.decisions.get,
            gateway.clock,
            shared.started,
        )
        shared.beat_with(beacon.heartbeat)

    @app.get("/admin/fleet")
    async def admin_fleet() -> dict[str, Any]:
        """Every gateway instance sharing this one's state (alive or stale by last seen), and
        each replica's verdict per instance."""
        store = None
        if shared.sync is not None:
            sync = shared.sync.snapshot()
            store = {k: sync[k] for k in ("degraded", "since", "last_ok", "last_error")}
        wall = gateway.clock.wall()
        return fleet_document(
            beacon.heartbeat(), shared.heartbeats, wall, scope=shared.fleet_scope, store=store
        )
