"""The admission layer: a bounded number of in-flight requests per model, shared by tenants,
shed at once."""

from __future__ import annotations

import asyncio

import pytest

from gateway.admission.layer import AdmissionLayer
from gateway.call import InferAnswer, InferCall
from gateway.config.tenants import ANONYMOUS, TenantConfig
from gateway.deadline import Deadline
from gateway.errors import GatewayError, Overloaded, TooManyRequests
from gateway.telemetry.metrics import Metrics
from gateway.v2.body import Body
from tests.gateway.conftest import make_config
from tests.gateway.fakes import hang
from tests.gateway.pipeline.rig import A, B, C, Rig
from tests.support.virtual_time import VirtualClock


async def test_admission_sheds_at_once_beyond_the_bound() -> None:
    rig = Rig(make_config(admission={"max_in_flight": 2}), {k: hang() for k in (A, B, C)})
    held = [asyncio.create_task(rig.run(timeout_s=5)) for _ in range(2)]
    await asyncio.sleep(0)
    started = rig.clock.now()
    with pytest.raises(Overloaded) as info:
        await rig.run()
    assert rig.clock.now() == started  # at once
    assert info.value.status == 503 and info.value.headers()["retry-after"] == "1"
    assert rig.pipeline.admission.shed["digits"] == 1
    for task in held:
        task.cancel()
    await asyncio.gather(*held, return_exceptions=True)
    assert rig.pipeline.admission.in_flight["digits"] == 0
    assert rig.pipeline.admission.idle.is_set()


async def test_tenants_share_the_bound_and_the_one_over_its_share_gets_429() -> None:
    """Issue 19: four anonymous requests to a model bounded at 4 left two keyed tenants 503.

    Now the tenant travels with the call: anonymous gets its share and what nobody keeps (2),
    then 429; each keyed tenant finds the slot kept for it; only a full model is 503."""
    config = make_config(admission={"max_in_flight": 4, "retry_after_s": 3})
    tenants = {name: TenantConfig(key_env=f"{name.upper()}_KEY") for name in ("acme", "globex")}
    release = asyncio.Event()

    async def hold(call: InferCall) -> InferAnswer:
        await release.wait()
        return InferAnswer(200, b"{}", None, None, "r0", 1)

    layer = AdmissionLayer(Metrics(process=False), hold, tenants)
    clock = VirtualClock()

    def call(tenant: str) -> InferCall:
        return InferCall(
            "digits",
            config.models["digits"],
            Body.of(b"{}"),
            {},
            Deadline.after(clock, 5),
            "t",
            tenant=tenant,
        )

    held = [asyncio.create_task(layer(call(ANONYMOUS))) for _ in range(4)]
    await asyncio.sleep(0)
    refused = [task.exception() for task in held if task.done()]
    assert len(refused) == 2 and all(isinstance(e, TooManyRequests) for e in refused)
    assert all(e.headers() == {"retry-after": "3"} for e in refused if isinstance(e, GatewayError))
    keyed = [asyncio.create_task(layer(call(name))) for name in ("acme", "globex")]
    await asyncio.sleep(0)
    assert not any(task.done() for task in keyed)  # both admitted, held
    with pytest.raises(TooManyRequests) as over:  # globex holds its share (1 of 4)
        await layer(call("globex"))
    assert "its share of 4 being 1" in over.value.message
    assert layer.in_flight["digits"] == 4 and layer.shed["digits"] == 3
    seats = {seat.name: seat.to_json() for seat in layer.models["digits"]}
    assert seats[ANONYMOUS] == {
        "in_flight": 2,
        "quota": 1,
        "reserve": 1,
        "owed": 0,
        "admitted": 2,
        "over_share": 2,
        "shed": 0,
    }
    assert seats["globex"]["over_share"] == 1 and seats["acme"]["in_flight"] == 1
    release.set()
    assert [r.status for r in await asyncio.gather(*keyed)] == [200, 200]
    await asyncio.gather(*held, return_exceptions=True)
    assert layer.in_flight["digits"] == 0 and layer.idle.is_set()
