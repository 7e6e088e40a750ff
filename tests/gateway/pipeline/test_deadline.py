"""The deadline layer: nothing runs past the deadline (504, on the clock), and an upstream
failure that escaped every inner layer is one 503 that says how the last attempt failed."""

from __future__ import annotations

import pytest

from gateway.errors import (
    DeadlineExceeded,
    RejectedByReplicas,
    UpstreamConnectError,
    UpstreamFailed,
    UpstreamTimeout,
)
from tests.gateway.conftest import make_config
from tests.gateway.fakes import fail, hang, reply
from tests.gateway.pipeline.rig import A, Rig, slow


async def test_success_reports_the_replica() -> None:
    rig = Rig(make_config(replicas=1))
    result = await rig.run()
    assert (result.status, result.served_by, result.attempts) == (200, "r0", 1)
    assert rig.transport.calls[A] == ["POST /v2/models/digits-mlp/versions/1/infer"]


async def test_hang_becomes_504_exactly_at_the_deadline() -> None:
    rig = Rig(make_config(replicas=1), {A: hang()})
    started = rig.clock.now()
    with pytest.raises(DeadlineExceeded, match="deadline of 50 ms exceeded after 1 attempt"):
        await rig.run(timeout_s=0.05)
    assert rig.clock.now() - started == pytest.approx(0.05)
    assert rig.replica(0).outstanding == 0


async def test_a_transport_timer_firing_a_hair_before_the_deadline_is_still_504() -> None:
    """uvloop's timers count whole milliseconds: the transport's timeout, set to all the time
    left, may fire just before the clock says the deadline passed. That is the deadline's 504,
    not a replica's failure (CI once saw a 503 here)."""
    rig = Rig(make_config(replicas=1))
    rig.transport.behaviours[A] = slow(rig.clock, 0.05 - 0.0004, fail(UpstreamTimeout("timer")))
    with pytest.raises(DeadlineExceeded, match="deadline of 50 ms exceeded after 1 attempt"):
        await rig.run(timeout_s=0.05)


async def test_an_expired_deadline_sends_nothing() -> None:
    rig = Rig(make_config(replicas=1))
    call = rig.call(timeout_s=0.05)
    rig.clock.advance(0.05)
    with pytest.raises(DeadlineExceeded, match="after 0 attempt"):
        await rig.pipeline.handler(call)
    assert rig.transport.sent() == 0


async def test_a_client_error_from_the_only_replica_reaches_the_client_uncharged() -> None:
    rig = Rig(make_config(replicas=1), {A: reply(400, b'{"error": "bad shape"}')})
    with pytest.raises(RejectedByReplicas) as info:
        await rig.run()
    assert info.value.message == (
        "model 'digits': the request was refused by r0 (400): replica r0 answered 400: bad request"
    )  # the replica's own words stay in the log
    assert info.value.status == 400
    assert rig.replica(0).consecutive_failures == 0


async def test_server_error_becomes_503_with_the_reason() -> None:
    rig = Rig(make_config(replicas=1), {A: reply(500, b'{"error": "boom"}')})
    with pytest.raises(UpstreamFailed, match=r"r0 answered 500: internal error$") as info:
        await rig.run()
    assert info.value.status == 503 and "boom" not in info.value.message
    replica = rig.replica(0)
    assert (replica.last_error or "").endswith(": boom")  # in the keyed /admin/state
    assert (replica.consecutive_failures, replica.outstanding) == (1, 0)


async def test_connect_error_becomes_503() -> None:
    rig = Rig(make_config(replicas=1), {A: fail(UpstreamConnectError("refused"))})
    with pytest.raises(UpstreamFailed, match=r"replica r0: could not connect$"):
        await rig.run()
