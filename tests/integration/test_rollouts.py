"""Issue-level proofs for rollouts with real replica processes and real gateways: a shadow
measures the agreement two models really have; a canary corrupting answers is rolled back at
its first step; a clean one is promoted under load without a failed request; progress and its
audit trail survive a reload and a restart with Redis."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import orjson
import pytest

from replicas.dataset import load_split
from tests.integration.conftest import StartGateway, StartReplicas
from tests.support.faults import inject_faults
from tests.support.gateway import GatewayProcess, start_gateway
from tests.support.processes import ReplicaProcess, wait_until
from tests.support.redis_server import RedisServer, new_namespace

pytestmark = pytest.mark.integration
Rows = np.ndarray[Any, Any]
ALICE = "alice-key-0123456789abcdef"
AS_ALICE = {"authorization": f"Bearer {ALICE}"}  # ignored where no admin keys are set


def rollout_config(
    current: list[ReplicaProcess], candidate: list[ReplicaProcess], **rollout: Any
) -> dict[str, Any]:
    def pool(replicas: list[ReplicaProcess], prefix: str) -> dict[str, Any]:
        listed = [{"id": f"{prefix}{i}", "url": r.url} for i, r in enumerate(replicas)]
        return {"model": replicas[0].model_name, "replicas": listed}

    return {
        "pools": {"now": pool(current, "now-"), "next": pool(candidate, "next-")},
        "models": {
            "digits": {
                "pool": "now",
                "timeout_ms": 3000,
                "rollout": {"candidate": "next", **rollout},
            }
        },
    }


def body(rows: Rows) -> bytes:
    tensor = {
        "name": "input",
        "shape": list(rows.shape),
        "datatype": "FP32",
        "data": rows.ravel().tolist(),
    }
    return orjson.dumps({"inputs": [tensor]})


def labels_of(doc: dict[str, Any]) -> list[int]:
    label = next(o for o in doc["outputs"] if o["name"] == "label")
    return [int(x) for x in label["data"]]


def direct_labels(replica: ReplicaProcess, rows: Rows) -> list[int]:
    """The replica's own answers, asked directly (no gateway)."""
    url = f"{replica.url}/v2/models/{replica.model_name}/infer"
    response = httpx.post(url, content=body(rows), trust_env=False, timeout=30)
    response.raise_for_status()
    return labels_of(response.json())


def rollouts(gateway: GatewayProcess) -> dict[str, Any]:
    doc = httpx.get(
        f"{gateway.url}/admin/rollouts", headers=AS_ALICE, trust_env=False, timeout=5
    ).json()
    return dict(doc["rollouts"]["digits"])


Answer = tuple[int, int | None, str]


async def drive(
    url: str, rows: Rows, until: Any, timeout_s: float, concurrency: int = 8
) -> list[tuple[int, Answer]]:
    """Rows in turn (one a request) until ``until()`` holds (checked between requests) or
    ``timeout_s``; every answer as (row index, (status, label, served by))."""
    answers: list[tuple[int, Answer]] = []
    stop = time.monotonic() + timeout_s
    counter = iter(range(10**9))
    headers = {"x-request-timeout-ms": "3000"}
    done = False
    async with httpx.AsyncClient(base_url=url, trust_env=False, timeout=10) as client:

        async def worker() -> None:
            nonlocal done
            while not done and time.monotonic() < stop:
                i = next(counter) % len(rows)
                response = await client.post(
                    "/v2/models/digits/infer", content=body(rows[i : i + 1]), headers=headers
                )
                label = labels_of(response.json())[0] if response.status_code == 200 else None
                answers.append(
                    (i, (response.status_code, label, response.headers.get("x-served-by", "")))
                )

        async def watch() -> None:
            nonlocal done
            while not done and time.monotonic() < stop:
                done = await asyncio.to_thread(until)
                await asyncio.sleep(0.05)

        await asyncio.gather(watch(), *(worker() for _ in range(concurrency)))
    return answers


def test_shadow_of_the_forest_measures_the_agreement_the_models_have_offline(
    start_replicas: StartReplicas, start_gw: StartGateway
) -> None:
    (mlp,) = start_replicas(1, "digits-mlp")
    (forest,) = start_replicas(1, "digits-forest")
    _, x_test, _, _ = load_split()
    mine, theirs = direct_labels(mlp, x_test), direct_labels(forest, x_test)
    offline = float(np.mean(np.array(mine) == np.array(theirs)))
    # bounds wide enough that no copy is shed or times out when the machine stalls a moment
    wide = {
        "shadow_rate_per_s": 5000,
        "shadow_concurrency": 500,
        "shadow_timeout_ms": 10_000,
        "shed_loop_lag_ms": 1000,
    }
    gateway = start_gw(rollout_config([mlp], [forest], mode="shadow", **wide))
    answers = asyncio.run(each_once(gateway.url, x_test))
    served = [by for _, (status, _, by) in answers if status == 200]
    # clients are answered by the pool alone; a busy 2-core machine may miss a deadline or two
    assert set(served) == {"now-0"} and len(served) >= 440, Counter(s for _, (s, _, _) in answers)

    def all_compared() -> bool:
        total = rollouts(gateway)["evidence"]["total"]
        seen = total["compared"] + total["compare_errors"] + total["shadow_shed"]
        return bool(seen >= len(served))

    wait_until(all_compared, 30, message="every shadow copy compared")
    state = rollouts(gateway)
    total = state["evidence"]["total"]
    missed = (total["compare_errors"], total["shadow_shed"], gateway.log_text()[-3000:])
    assert total["compared"] >= len(served) - 10, missed
    low, high = total["interval"]
    assert low <= offline <= high, (offline, total)
    if total["compared"] == 450:  # the same inputs: the same agreement
        assert abs(total["agreement"] - offline) < 1e-9, (offline, total)
        assert total["disagreements"]["label"] == round((1 - offline) * 450), total
    assert state["phase"] == "shadow" and state["share_percent"] == 0
    stats = httpx.get(f"{gateway.url}/v2/models/digits/stats", trust_env=False).json()
    counted = stats["model_stats"][0]["inference_stats"]["success"]["count"]
    assert counted == len(served)  # clients' requests only: no copy in the statistics


async def each_once(url: str, rows: Rows) -> list[tuple[int, Answer]]:
    left = list(range(len(rows)))
    answers: list[tuple[int, Answer]] = []
    async with httpx.AsyncClient(base_url=url, trust_env=False, timeout=10) as client:

        async def worker() -> None:
            while left:
                i = left.pop()
                response = await client.post(
                    "/v2/models/digits/infer", content=body(rows[i : i + 1])
                )
                label = labels_of(response.json())[0] if response.status_code == 200 else None
                answers.append(
                    (i, (response.status_code, label, response.headers.get("x-served-by", "")))
                )

        await asyncio.gather(*(worker() for _ in range(4)))
    return answers


CANARY = {
    "mode": "canary",
    "steps": [2, 50, 100],
    "hold_s": 1,
    "hold_requests": 100000,
    "compare_percent": 100,
    "min_comparisons": 25,
    "agreement_target": 0.95,
    "max_latency_ratio": 20,
    "latency_slack_ms": 50,
    "shed_loop_lag_ms": 1000,
}  # a shared 2-core box lags: these tests compare every copy


def test_a_canary_corrupting_a_fifth_of_its_answers_is_rolled_back_at_its_first_step(
    start_replicas: StartReplicas, start_gw: StartGateway
) -> None:
    current = start_replicas(2, "digits-mlp")
    candidate = start_replicas(1, "digits-mlp")
    inject_faults(candidate[0].url, corrupt_rate=0.2)
    _, x_test, _, _ = load_split()
    truth = direct_labels(current[0], x_test)
    # the first step, 1 %: one request in a hundred is the candidate's (a smooth
    # split), so the wrong answers it gives before the evidence says no stay under 1 %.
    # Advancing takes min_comparisons at 95 % agreement: with CANARY's 25, a candidate wrong
    # one time in five passes them (at most 1 of 25 wrong) in 2.7 % of runs, and one CI run
    # saw it step to 50 %; with the default 100 (at most 5 wrong), in 2 of 100,000. The
    # rollback does not wait for them (10 comparisons and a confident interval).
    config = {**CANARY, "steps": [1, 50, 100], "min_comparisons": 100}
    gateway = start_gw(rollout_config(current, candidate, **config))
    rolled_back = lambda: rollouts(gateway)["phase"] == "rolled_back"  # noqa: E731
    # bounded by the condition: 10-30 of the candidate's answers decide it (about 1,000-3,000
    # requests at a 1 % share), which took 18-38 s here and over 90 s in a CI run on a machine
    # starved by other work
    answers = asyncio.run(drive(gateway.url, x_test, rolled_back, 180))
    state = rollouts(gateway)
    assert state["phase"] == "rolled_back", (state, len(answers))
    decisions = [(e["action"], e["share_before"], e["share_percent"]) for e in state["trail"]]
    assert decisions == [("start", 0, 1), ("rollback", 1, 0)]
    last = state["trail"][-1]
    assert last["who"] == "rule:agreement" and last["evidence"]["disagreements"]["label"] > 0
    wrong = sum(1 for i, (status, label, _) in answers if status != 200 or label != truth[i])
    served = sum(1 for _, (_, _, by) in answers if by.startswith("next-"))
    print(f"canary: {served} served by the candidate, {wrong} wrong of {len(answers)}")
    assert served > 0 and wrong < 0.01 * len(answers), (wrong, served, len(answers))
    after = asyncio.run(each_once(gateway.url, x_test[:100]))  # all back on the model's pool
    assert all(by.startswith("now-") for _, (_, _, by) in after)


def test_a_clean_canary_is_promoted_through_every_step_under_load_without_a_failed_request(
    start_replicas: StartReplicas, start_gw: StartGateway
) -> None:
    current = start_replicas(2, "digits-mlp")
    candidate = start_replicas(2, "digits-mlp")
    _, x_test, _, _ = load_split()
    gateway = start_gw(rollout_config(current, candidate, **CANARY))

    def handed_over() -> bool:  # promoted, and the candidate swapped in as the model's pool
        state = rollouts(gateway)
        return bool(state["phase"] == "promoted" and not state["in_config"])

    answers = asyncio.run(drive(gateway.url, x_test, handed_over, 120))
    state = rollouts(gateway)
    assert handed_over(), state
    steps = [(e["action"], e["share_percent"]) for e in state["trail"]]
    assert steps == [("start", 2), ("step", 50), ("step", 100), ("promote", 100)]
    assert all(e["evidence"]["compared"] >= 25 for e in state["trail"][1:])
    assert [status for _, (status, _, _) in answers if status != 200] == []
    after = asyncio.run(each_once(gateway.url, x_test[:200]))  # the promotion answered all
    assert len(after) == 200 and all(s == 200 and by.startswith("next-") for _, (s, _, by) in after)


def timeline(gateway: GatewayProcess) -> list[str]:
    """The rollout's events in the dashboard's timeline, oldest first."""
    doc = httpx.get(f"{gateway.url}/admin/history", headers=AS_ALICE, trust_env=False).json()
    return [e["detail"] for e in reversed(doc["events"]) if e["subject"] == "rollout:digits"]


@pytest.fixture
def redis() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    yield server
    server.stop()


def test_a_rollout_survives_a_reload_and_a_restart_with_redis_and_keeps_its_audit_trail(
    start_replicas: StartReplicas, redis: RedisServer
) -> None:
    current = start_replicas(1, "digits-mlp")
    candidate = start_replicas(1, "digits-mlp")
    _, x_test, _, _ = load_split()
    config = rollout_config(
        current, candidate, **{**CANARY, "steps": [10, 50, 100], "min_comparisons": 10}
    )
    config["state"] = {
        "backend": "redis",
        "redis_url": redis.url,
        "sync_interval_s": 0.2,
        "namespace": new_namespace(),
    }
    config["server"] = {"admin": {"operators": {"alice": {"key_env": "ALICE_KEY"}}}}
    gateway = start_gateway(config, env={"ALICE_KEY": ALICE})
    try:
        asyncio.run(drive(gateway.url, x_test, lambda: rollouts(gateway)["step"] >= 1, 60))
        paused = httpx.post(
            f"{gateway.url}/admin/rollouts/digits/pause",
            trust_env=False,
            json={"reason": "look at step 2"},
            headers=AS_ALICE,
        )
        assert paused.status_code == 200, paused.text
        before = rollouts(gateway)
        actions = [e.split(" by ")[0] for e in timeline(gateway)]
        assert actions == ["rollout start", "rollout step", "rollout pause"], actions
        assert (before["phase"], before["step"]) == ("paused", 1)
        reloaded = httpx.post(
            f"{gateway.url}/admin/reload", trust_env=False, timeout=30, json={}, headers=AS_ALICE
        )
        assert reloaded.status_code == 200, reloaded.text
        assert reloaded.json()["carried_over"]["rollouts"] == ["digits"]
        kept = rollouts(gateway)
        assert (kept["phase"], kept["step"], kept["trail"]) == ("paused", 1, before["trail"])
        again = httpx.post(
            f"{gateway.url}/admin/rollouts/digits/pause", trust_env=False, json={}, headers=AS_ALICE
        )
        assert again.status_code == 409  # already paused: nothing to pause twice
    finally:
        gateway.cleanup()
    restarted = start_gateway(config, env={"ALICE_KEY": ALICE})
    try:
        wait_until(
            lambda: rollouts(restarted)["phase"] == "paused",
            10,
            message="the stored progress read back",
        )
        # the restarted gateway is another instance: it takes the lease and records its lead
        wait_until(
            lambda: rollouts(restarted)["trail"][-1]["action"] == "lead",
            10,
            message="the restarted gateway's lead",
        )
        after = rollouts(restarted)
        resumed = (after["phase"], after["step"], after["trail"][:-1])
        assert resumed == ("paused", 1, before["trail"])
        trail = [(e["action"], e["who"]) for e in after["trail"]]
        assert trail == [
            ("start", "rule:config"),
            ("step", "rule:evidence"),
            ("pause", "alice"),
            ("lead", "rule:lease"),
        ]
        assert all("evidence" in e and "why" in e for e in after["trail"])
        assert after["trail"][1]["evidence"]["compared"] >= 10
        assert not any("rollout start" in e for e in timeline(restarted))  # nothing restarted
    finally:
        restarted.cleanup()


def test_two_gateways_on_one_redis_one_decides_on_the_evidence_of_both(
    start_replicas: StartReplicas, redis: RedisServer
) -> None:
    current = start_replicas(1, "digits-mlp")
    candidate = start_replicas(1, "digits-mlp")
    _, x_test, _, _ = load_split()
    namespace = new_namespace()

    def config(instance: str) -> dict[str, Any]:
        doc = rollout_config(
            current, candidate, **{**CANARY, "steps": [10, 100], "min_comparisons": 15}
        )
        doc["state"] = {
            "backend": "redis",
            "redis_url": redis.url,
            "sync_interval_s": 0.2,
            "namespace": namespace,
            "instance": instance,
        }
        return doc

    leader = start_gateway(config("gw-a"))
    try:
        wait_until(lambda: rollouts(leader)["phase"] == "canary", 10, message="gw-a starts it")
        follower = start_gateway(config("gw-b"))
        try:
            wait_until(lambda: rollouts(follower)["phase"] == "canary", 10, message="gw-b follows")
            # every request goes to gw-b; gw-a decides on what gw-b counted

            def promoted() -> bool:
                return bool(rollouts(follower)["phase"] == "promoted")

            answers = asyncio.run(drive(follower.url, x_test, promoted, 90))
            assert promoted(), rollouts(follower)
            assert [s for _, (s, _, _) in answers if s != 200] == []
            trail = rollouts(follower)["trail"]
            decisions = [e for e in trail if e["action"] != "lead"]
            assert [e["action"] for e in decisions] == ["start", "step", "promote"]
            assert decisions[0]["gateway"] == "gw-a"
            # Each decision is the lease holder's: gw-a's, unless a stall on a busy machine let
            # its lease lapse and gw-b took the lead (a "lead" entry), after which gw-b decides.
            holder = "gw-a"
            for entry in trail:
                if entry["action"] == "lead":
                    holder = entry["gateway"]
                else:
                    assert entry["gateway"] == holder, trail
            assert all(e["evidence"]["compared"] >= 15 for e in decisions[1:])
            assert rollouts(leader)["evidence"]["total"]["compared"] == 0  # its own: none
            wait_until(lambda: rollouts(leader)["phase"] == "promoted", 5, message="gw-a")
        finally:
            follower.cleanup()
    finally:
        leader.cleanup()
