"""A misbehaving replica beside an honest one, behind a real gateway, over real sockets.

The rogue (`tests.support.rogue_replica`) reports ready like a healthy server and answers infer
requests wrongly: 4xx to everything, another request's answer, a truncated, empty or huge
200, a 302. Clients must never see any of it: every request gets the honest replica's answer, with
its own ``id``, and the rogue is charged until it is out of the pool. In a vote, a refusing leg
is a missing answer and the quorum of the rest decides.

A rogue that re-sends an answer 300 ms late on its keep-alive connection (without the ``id``, or
with the first request's) hands it to whichever request the gateway sends there next: that
request must never get it (the reply must echo its id), and the rogue is charged once per wrong
reply it sent: the refused reply's connection is closed, so the refused request's own answer,
which follows on it, is nobody's (kept, it was the next request's, charged again). A server that
never echoes ids works only in a pool that says so (``echoes_id: false``), and there the late
copies reach nobody: each exchange has its own connection.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import orjson
import pytest

from tests.integration.conftest import StartGateway, StartReplicas
from tests.support.gateway import GatewayProcess
from tests.support.processes import ReplicaProcess, free_port, wait_until
from tests.support.traffic import request_bodies

pytestmark = pytest.mark.integration
StartRogue = Callable[[str, str], ReplicaProcess]


@pytest.fixture
def start_rogue() -> Iterator[StartRogue]:
    started: list[ReplicaProcess] = []

    def start(mode: str, model: str) -> ReplicaProcess:
        port = free_port()
        argv = [
            sys.executable,
            "-m",
            "tests.support.rogue_replica",
            "--port",
            str(port),
            "--mode",
            mode,
        ]
        proc = ReplicaProcess(argv, host="127.0.0.1", port=port, name=model, version="1")
        started.append(proc)
        wait_until(
            lambda: proc.ready() or not proc.alive(),
            20,
            message=lambda: f"rogue replica; log:\n{proc.log_text()}",
        )
        assert proc.alive(), proc.log_text()
        return proc

    yield start
    for proc in started:
        proc.cleanup()


def admin_replica(gateway: GatewayProcess, replica_id: str) -> dict[str, Any]:
    state = httpx.get(f"{gateway.url}/admin/state", trust_env=False, timeout=5).json()
    for pool in state["pools"]:
        for item in pool["replicas"]:
            if item["id"] == replica_id:
                return dict(item)
    raise KeyError(replica_id)


async def send(
    url: str, model: str, count: int, concurrency: int = 4, same_id: str | None = None
) -> list[tuple[int, str, dict[str, Any], str | None]]:
    """(status, the request's tag, the reply's JSON, x-served-by) for ``count`` requests, each
    tagged ``client-<i>`` in its parameters and carrying its tag as its id, or ``same_id``."""
    bodies = request_bodies(16)
    results: list[tuple[int, str, dict[str, Any], str | None]] = []
    queue = list(range(count))
    async with httpx.AsyncClient(base_url=url, trust_env=False, timeout=10) as client:

        async def worker() -> None:
            while queue:
                i = queue.pop()
                request = orjson.loads(bodies[i % len(bodies)])
                tag = f"client-{i}"
                request["id"] = same_id or tag
                request["parameters"] = {"tag": tag}
                response = await client.post(
                    f"/v2/models/{model}/infer",
                    content=orjson.dumps(request),
                    headers={"x-request-timeout-ms": "3000"},
                )
                results.append(
                    (
                        response.status_code,
                        tag,
                        response.json(),
                        response.headers.get("x-served-by"),
                    )
                )

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return results


@pytest.mark.parametrize("mode", ["refuse", "stale", "truncated", "empty", "redirect", "huge"])
async def test_clients_only_ever_get_the_honest_replicas_answers(
    mode: str, start_replicas: StartReplicas, start_gw: StartGateway, start_rogue: StartRogue
) -> None:
    (honest,) = start_replicas(1, "digits-mlp")
    rogue = start_rogue(mode, "digits-mlp")
    config = {
        "pools": {
            "primary": {
                "model": "digits-mlp",
                "version": "1",
                "replicas": [
                    {"id": "honest", "url": honest.url},
                    {"id": "rogue", "url": rogue.url},
                ],
            }
        },
        "models": {"digits": {"pool": "primary"}},
        "server": {"max_reply_body_bytes": 1 << 20},  # the honest replies are < 1 KiB
    }
    gateway = start_gw(config)
    results = await send(gateway.url, "digits", 60)
    wrong = [
        (s, rid, body, by)
        for s, rid, body, by in results
        if s != 200 or body.get("id") != rid or by != "honest"
    ]
    assert not wrong, wrong[:3]
    rogue_state = admin_replica(gateway, "rogue")
    print(
        f"{mode}: {len(results) - len(wrong)}/{len(results)} right; the rogue was tried "
        f"{rogue_state['requests']} times, {rogue_state['failures']} charged"
    )
    assert rogue_state["failures"] >= 1, rogue_state
    # charged until out of the pool: a handful of tries at most, not a share of the traffic
    assert rogue_state["requests"] <= 15, rogue_state
    assert admin_replica(gateway, "honest")["failures"] == 0


async def test_a_refusing_vote_leg_is_outvoted_not_fatal(
    start_replicas: StartReplicas, start_gw: StartGateway, start_rogue: StartRogue
) -> None:
    (mlp,) = start_replicas(1, "digits-mlp")
    (svm,) = start_replicas(1, "digits-svm")
    rogue = start_rogue("refuse", "digits-forest")

    def pool(model: str, proc: ReplicaProcess, rid: str) -> dict[str, Any]:
        return {"model": model, "version": "1", "replicas": [{"id": rid, "url": proc.url}]}

    config = {
        "pools": {
            "mlp": pool("digits-mlp", mlp, "mlp-0"),
            "svm": pool("digits-svm", svm, "svm-0"),
            "forest": pool("digits-forest", rogue, "forest-rogue"),
        },
        "models": {"digits-vote": {"vote": {"pools": ["mlp", "svm", "forest"], "quorum": 2}}},
    }
    gateway = start_gw(config)
    results = await send(gateway.url, "digits-vote", 10, concurrency=2)
    assert all(status == 200 and body["id"] == rid for status, rid, body, _ in results), results
    assert admin_replica(gateway, "forest-rogue")["failures"] >= 1


def _misdelivered(
    results: list[tuple[int, str, dict[str, Any], str | None]], same_id: str | None = None
) -> list[tuple[int, str, dict[str, Any], str | None]]:
    """Answers that are not the client's own: a failure, another id (or none), or an answer
    the rogue made for another request (``parameters.answer_tag``)."""
    return [
        (status, tag, body, by)
        for status, tag, body, by in results
        if status != 200
        or body.get("id") != (same_id or tag)
        or (body.get("parameters") or {}).get("answer_tag", tag) != tag
    ]


def honest_and_rogue(honest: str, rogue: str) -> dict[str, Any]:
    """One pool of an honest replica and a rogue; every try waits for its answer, so the late
    copy, not a faster retry, settles the try."""
    return {
        "pools": {
            "primary": {
                "model": "digits-mlp",
                "version": "1",
                "replicas": [{"id": "honest", "url": honest}, {"id": "rogue", "url": rogue}],
            }
        },
        "models": {"digits": {"pool": "primary", "retry": {"try_timeout": {"adaptive": False}}}},
    }


@pytest.mark.parametrize("mode", ["late-idless", "late-stale", "idless"])
async def test_a_late_or_idless_answer_never_reaches_another_client(
    mode: str, start_replicas: StartReplicas, start_gw: StartGateway, start_rogue: StartRogue
) -> None:
    (honest,) = start_replicas(1, "digits-mlp")
    rogue = start_rogue(mode, "digits-mlp")
    gateway = start_gw(honest_and_rogue(honest.url, rogue.url))
    results = await send(gateway.url, "digits", 60)
    wrong = _misdelivered(results)
    rogue_state = admin_replica(gateway, "rogue")
    print(
        f"{mode}: {len(wrong)} of {len(results)} answers not the client's own; the rogue "
        f"was tried {rogue_state['requests']} times, {rogue_state['failures']} charged, "
        f"last error: {rogue_state.get('last_error')}"
    )
    assert not wrong, wrong[:3]
    assert rogue_state["failures"] >= 1, rogue_state
    assert admin_replica(gateway, "honest")["failures"] == 0
    if mode != "idless":  # every id-less answer is wrong there, not only the late copies
        sent = rogue.log_text().count("wrong reply")
        assert rogue_state["failures"] == sent, (sent, rogue_state)
        # each connection that fell out of step was closed, not pooled for another request
        wait_until(
            lambda: rogue.log_text().count("closed out of step") == sent, 10, message=rogue.log_text
        )


async def test_clients_sending_the_same_id_never_get_each_others_late_answers(
    start_replicas: StartReplicas, start_gw: StartGateway, start_rogue: StartRogue
) -> None:
    """Every client sends id "1": the late copy of one's answer (id and all) must not be taken
    as another's, so the gateway sends each request upstream with an id of its own (the
    client's, made unique), checks the reply against it, and gives each client "1" back."""
    (honest,) = start_replicas(1, "digits-mlp")
    rogue = start_rogue("late-stale", "digits-mlp")
    gateway = start_gw(honest_and_rogue(honest.url, rogue.url))
    results = await send(gateway.url, "digits", 60, same_id="1")
    wrong = _misdelivered(results, same_id="1")
    rogue_state = admin_replica(gateway, "rogue")
    print(
        f"same id: {len(wrong)} of {len(results)} answers not the client's own; the rogue "
        f"sent {rogue.log_text().count('wrong reply')} wrong replies, "
        f"{rogue_state['failures']} charged"
    )
    assert not wrong, wrong[:3]
    assert rogue.log_text().count("wrong reply") >= 1  # the hazard was there
    assert rogue_state["failures"] >= 1, rogue_state


async def test_a_pool_that_does_not_echo_ids_gets_one_exchange_per_connection(
    start_gw: StartGateway, start_rogue: StartRogue
) -> None:
    """The id-less server alone in its pool, declared: every answer is taken, none is
    another client's (its late copies find their connections closed), nothing is charged, and
    each client gets its own id back."""
    rogue = start_rogue("idless", "digits-mlp")
    config = {
        "pools": {
            "primary": {
                "model": "digits-mlp",
                "version": "1",
                "echoes_id": False,
                "replicas": [{"id": "idless", "url": rogue.url}],
            }
        },
        "models": {"digits": {"pool": "primary", "retry": {"try_timeout": {"adaptive": False}}}},
    }
    gateway = start_gw(config)
    results = await send(gateway.url, "digits", 60)
    assert all(by == "idless" for _, _, _, by in results), results[:3]
    wrong = _misdelivered(results)  # the gateway gave each answer its request's id
    assert not wrong, wrong[:3]
    assert all("answer_for" in body["parameters"] for _, _, body, _ in results)
    assert admin_replica(gateway, "idless")["failures"] == 0
