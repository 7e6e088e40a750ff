"""A replica's 200 is an answer only if it carries the request's ``id``: one without an id (or
with another) could be any request's answer, read off an out-of-step keep-alive connection; it
is that replica's failure and the request is retried elsewhere. A pool declared
``echoes_id: false`` takes id-less answers (its connections carry one exchange each) and the
client still gets its id back."""

from __future__ import annotations

import orjson
import pytest

from gateway.config import GatewayConfig
from gateway.outcome import OutcomeKind
from gateway.v2.request import parse_infer_request
from tests.gateway.conftest import make_config
from tests.gateway.fakes import reply
from tests.gateway.pipeline.rig import A, B, Rig

BODY = b'{"id":"client-b","inputs":[{"name":"input","shape":[1],"datatype":"FP32","data":[1]}]}'
LABEL = {"name": "label", "datatype": "INT64", "shape": [1], "data": [3]}
IDLESS = orjson.dumps({"model_name": "m", "outputs": [LABEL]})
ANOTHERS = orjson.dumps({"model_name": "m", "id": "client-a", "outputs": [LABEL]})


def _config(echoes_id: bool) -> GatewayConfig:
    config = make_config(replicas=2)
    pools = {n: p.model_copy(update={"echoes_id": echoes_id}) for n, p in config.pools.items()}
    return config.model_copy(update={"pools": pools})


async def _run(rig: Rig) -> tuple[bytes, str]:
    rig.replica(1).outstanding = 50  # P2C tries r0 first
    result = await rig.pipeline.handler(
        rig.call(body=BODY, request=parse_infer_request(BODY, None))
    )
    return result.body, result.served_by


@pytest.mark.parametrize(("answer", "problem"), [(IDLESS, "no id"), (ANOTHERS, "'client-a'")])
async def test_an_answer_without_the_requests_id_is_the_replicas_failure(
    answer: bytes, problem: str
) -> None:
    rig = Rig(_config(echoes_id=True), {A: reply(200, answer, echo_id=False), B: reply()})
    body, served_by = await _run(rig)
    assert served_by == "r1" and orjson.loads(body)["id"] == "client-b"
    rogue = rig.replica(0)
    assert rogue.failures == 1 and problem in (rogue.last_error or "")
    assert rig.registry.pools["p"].latency.count == 1  # only r1's answer counted as one


async def test_a_pool_that_does_not_echo_ids_takes_idless_answers_and_adds_the_id() -> None:
    rig = Rig(_config(echoes_id=False), {A: reply(200, IDLESS, echo_id=False)})
    body, served_by = await _run(rig)
    assert served_by == "r0" and rig.replica(0).failures == 0
    assert orjson.loads(body) == {"id": "client-b", "model_name": "m", "outputs": [LABEL]}


async def test_another_requests_id_is_refused_even_where_ids_are_not_echoed() -> None:
    rig = Rig(_config(echoes_id=False), {A: reply(200, ANOTHERS), B: reply()})
    call = rig.call(body=BODY, request=parse_infer_request(BODY, None))
    rig.replica(1).outstanding = 50
    result = await rig.pipeline.handler(call)
    assert result.served_by == "r1"
    kinds = [(o.replica, o.kind) for o in call.ledger.outcomes]
    assert ("r0", OutcomeKind.PROTOCOL_ERROR) in kinds and rig.replica(0).failures == 1
