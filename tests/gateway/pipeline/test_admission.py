"""The admission layer: a bounded number of in-flight requests per model, shed at once."""

from __future__ import annotations

import asyncio

import pytest

from gateway.errors import Overloaded
from tests.gateway.conftest import make_config
from tests.gateway.fakes import hang
from tests.gateway.pipeline.rig import A, B, C, Rig


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
