"""Error answers through the pipeline: who is at fault is settled by evidence (the fault judge,
`gateway.faults.judge`), and the retry loop carries the verdict out."""

from __future__ import annotations

import orjson
import pytest

from gateway.call import InferCall
from gateway.errors import GatewayError, NoReplicaAvailable, RejectedByReplicas, UpstreamFailed
from gateway.upstream.breaker import CLOSED, OPEN
from gateway.upstream.transport.base import Reply
from gateway.v2.request import InferRequestInfo
from tests.gateway.conftest import make_config
from tests.gateway.fakes import Behaviour, reply
from tests.gateway.pipeline.rig import A, B, C, Rig


async def test_the_same_client_error_from_two_replicas_ends_the_tries_uncharged() -> None:
    rig = Rig(make_config(), {k: reply(400, b'{"error":"x"}') for k in (A, B, C)})
    call = rig.call()
    with pytest.raises(
        RejectedByReplicas,
        match=r"refused by r\d, r\d \(400\): replica r\d answered 400: bad request$",
    ) as info:
        await rig.pipeline.handler(call)
    assert info.value.status == 400 and call.attempts == 2  # one second opinion, no more
    assert all(rig.replica(i).failures == 0 for i in range(3))


async def test_a_replica_refusing_what_another_answers_is_charged_until_ejected() -> None:
    """A black hole (4xx to everything, fast) behind P2C: every request still gets its 200,
    and the refusals count against it until it is out of the pool."""
    rig = Rig(make_config(replicas=2), {A: reply(400, b'{"error":"no input x"}')})
    for _ in range(40):
        result = await rig.run()
        assert result.status == 200 and result.served_by == "r1"
    black_hole = rig.replica(0)
    assert black_hole.failures >= 5 and "where r1 answered" in (black_hole.last_error or "")
    assert rig.registry.pools["p"].outlier.is_ejected(black_hole) or (
        black_hole.breaker is not None and black_hole.breaker.state() == OPEN
    )
    assert len(rig.transport.calls[A]) < 10  # out of the pool after a handful of refusals
    assert rig.replica(1).failures == 0


def _poisoned(poison: bytes) -> Behaviour:
    """Answers 500 to a request whose body is ``poison``, and 200 to every other."""

    async def behave(method: str, path: str, payload: bytes) -> Reply:
        if payload == poison:
            return Reply(500, {}, b'{"error":"cannot reshape"}')
        return Reply(200, {}, b'{"outputs":[]}')

    return behave


async def test_an_input_that_makes_working_replicas_fail_ejects_none_of_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The mirror case: the same 500 from two replicas that answer other requests well is
    the request's fault: a 400 naming them and their status (their message is logged), and
    no replica charged."""
    caplog.set_level("INFO", logger="gateway.upstream.fault_actions")
    poison = b'{"poison":1}'
    rig = Rig(make_config(replicas=3), {k: _poisoned(poison) for k in (A, B, C)})
    served = {(await rig.run()).served_by for _ in range(30)}  # seeded: deterministic
    assert served == {"r0", "r1", "r2"}  # each has answered well
    for _ in range(30):
        assert (await rig.run()).status == 200
        call = rig.call(body=poison)
        with pytest.raises(RejectedByReplicas, match=r"r\d answered 500: internal error$") as info:
            await rig.pipeline.handler(call)
        assert info.value.status == 400 and "cannot reshape" not in info.value.message
    assert "cannot reshape" in caplog.text
    assert all(rig.replica(i).failures == 0 for i in range(3))
    assert all(not rig.registry.pools["p"].outlier.is_ejected(rig.replica(i)) for i in range(3))


async def test_a_pool_failing_everything_alike_is_broken_not_asked_wrong() -> None:
    """Every replica 500s on every request (a bad driver): not the request's fault; the
    failures count, breakers open and the pool answers fast 503s (the fallback's cue)."""
    rig = Rig(make_config(replicas=3), {k: reply(500) for k in (A, B, C)})
    errors: list[type[BaseException]] = []
    for _ in range(30):
        with pytest.raises((RejectedByReplicas, UpstreamFailed, NoReplicaAvailable)) as info:
            await rig.run()
        errors.append(info.type)
    # the first pair of 500s looks like a poison input; from the next request on it is not
    assert errors.count(RejectedByReplicas) <= 1 and RejectedByReplicas not in errors[1:]
    assert all(rig.replica(i).breaker.state() == OPEN for i in range(3))  # type: ignore[union-attr]


async def test_two_replicas_starting_to_fail_alike_do_not_blame_the_request() -> None:
    """Two of three replicas begin answering 500 to everything (the chaos suite's 5xx burst):
    a request that meets both still gets the third's answer, and the two are charged; two
    alike 500s alone looked like a poison input (6 of 5,136 requests got 400 in that run)."""
    rig = Rig(make_config(replicas=3), {A: reply(500), B: reply(500)})
    both_bad_first = 0
    for _ in range(20):
        call = rig.call()
        result = await rig.pipeline.handler(call)
        assert result.status == 200 and result.served_by == "r2"
        both_bad_first += call.attempts == 3
    assert both_bad_first >= 1  # the case in question happened (seeded: deterministic)
    assert rig.replica(0).failures >= 1 and rig.replica(1).failures >= 1
    assert rig.replica(2).failures == 0


async def test_a_poison_input_needs_three_replicas_alike_where_there_are_three() -> None:
    poison = b'{"poison":1}'
    rig = Rig(make_config(replicas=3), {k: _poisoned(poison) for k in (A, B, C)})
    call = rig.call(body=poison)
    with pytest.raises(RejectedByReplicas, match=r"refused by r\d, r\d, r\d \(500\)"):
        await rig.pipeline.handler(call)
    assert call.attempts == 3 and all(rig.replica(i).failures == 0 for i in range(3))


NULLS = b'{"outputs":[{"name":"probabilities","datatype":"FP32","shape":[1,2],"data":[null,0.5]}]}'


async def test_null_outputs_are_a_refusal_judged_by_evidence() -> None:
    """A 200 whose JSON data holds null (NaN out of an input that overflowed the model) is
    never relayed: from every replica it is the request's 400; from one, another answers."""
    rig = Rig(make_config(replicas=3), {k: reply(200, NULLS) for k in (A, B, C)})
    with pytest.raises(RejectedByReplicas, match="an output is not finite for this input") as info:
        await rig.pipeline.handler(rig.call())
    assert info.value.status == 400 and all(rig.replica(i).failures == 0 for i in range(3))

    rig = Rig(make_config(replicas=2), {A: reply(200, NULLS)})
    for _ in range(10):
        assert (await rig.run()).served_by == "r1"
    assert rig.replica(0).failures >= 1 and rig.replica(1).failures == 0


async def test_nan_literals_are_the_same_refusal_and_another_requests_answer_is_not() -> None:
    """Python's json writes NaN as a bare ``NaN`` (not JSON): for this request's id, the same
    overflow refusal; under another request's id, still a broken reply (charged)."""
    nan = b'{"outputs":[{"name":"probabilities","datatype":"FP32","shape":[1,2],"data":[NaN,0.5]}]}'
    rig = Rig(make_config(replicas=3), {k: reply(200, nan) for k in (A, B, C)})
    with pytest.raises(RejectedByReplicas, match="an output is not finite for this input"):
        await rig.pipeline.handler(rig.call())
    assert all(rig.replica(i).failures == 0 for i in range(3))

    stray = nan.replace(b'{"outputs"', b'{"id":"someone-else","outputs"')
    rig = Rig(make_config(replicas=2), {A: reply(200, stray)})
    for _ in range(10):
        assert (await rig.run()).served_by == "r1"
    assert rig.replica(0).failures >= 1


def _v2_call(rig: Rig, request_id: str, value: float) -> InferCall:
    """A V2 request with its own id (as the edge makes it), holding ``value``."""
    tensor = {"name": "input", "shape": [1, 3], "datatype": "FP32", "data": [value, 1.0, 2.0]}
    header = {"id": request_id, "inputs": [tensor]}
    return rig.call(body=orjson.dumps(header), request=InferRequestInfo(request_id, header, 0))


def _poison_value(marker: bytes) -> Behaviour:
    """Answers 500 to any request whose body holds ``marker``, and 200 to every other."""

    async def behave(method: str, path: str, payload: bytes) -> Reply:
        if marker in payload:
            return Reply(500, {}, b'{"error":"cannot convert"}')
        return Reply(200, {}, b'{"outputs":[]}')

    return behave


async def test_a_poison_input_in_good_traffic_does_not_take_out_a_pool_of_one() -> None:
    """One replica, a poison input (its own id each time) between good requests: the input is
    charged to the replica twice, then it is the request's 400; the replica keeps serving."""
    rig = Rig(make_config(replicas=1), {A: _poison_value(b"99.5")})
    errors: list[GatewayError] = []
    for i in range(20):
        assert (await rig.run()).status == 200
        with pytest.raises(GatewayError) as info:
            await rig.pipeline.handler(_v2_call(rig, f"poison-{i}", 99.5))
        errors.append(info.value)
    assert not any(isinstance(e, RejectedByReplicas) for e in errors[:2])
    assert all(isinstance(e, RejectedByReplicas) and e.status == 400 for e in errors[2:])
    assert "as on earlier requests with the same input" in str(errors[2])
    sole = rig.replica(0)
    assert sole.failures == 2 and sole.breaker is not None and sole.breaker.state() == CLOSED
    assert not rig.registry.pools["p"].outlier.is_ejected(sole)


async def test_a_pool_of_one_failing_everything_is_still_charged_until_its_breaker_opens() -> None:
    """The same request over and over to a sole replica that 500s everything: after a few
    error answers in a row the pool is broken, not asked wrong, and each 500 is charged."""
    rig = Rig(make_config(replicas=1), {A: reply(500, b'{"error":"driver"}')})
    for _ in range(10):
        with pytest.raises(GatewayError):
            await rig.run()
    sole = rig.replica(0)
    assert sole.breaker is not None and sole.breaker.state() == OPEN
    assert sole.failures >= 5
