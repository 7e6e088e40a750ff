"""Issue 27's forged values, written straight into a real redis-server under two real gateways
(and into a decisions file): no 500, no wrong answer, the sync never stops, nothing forged is
pushed back, at most a caps-bound ejection.

The two gateways, their replicas and the Redis are started once for the module; each forgery
is one case: written, checked on both gateways, removed, checked again. The candidate pool of
the declared (not started) rollout answers wrong on purpose: if a forged "promoted" were
obeyed, the answers would show it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import redis

from tests.support.faults import inject_faults
from tests.support.gateway import GatewayProcess, start_gateway
from tests.support.processes import ReplicaProcess, start_replica, wait_until
from tests.support.redis_server import RedisServer
from tests.support.traffic import request_bodies

pytestmark = pytest.mark.integration
NS = "forge"
SYNC_S = 0.2
SEEN_S = 20.0  # bound on a busy machine for what takes a few sync intervals
YEAR = 365 * 86_400.0
NOW_IDS = ("now-0", "now-1")  # the model pool: one of them at most may be taken out


@dataclass
class Fleet:
    redis: redis.Redis
    a: GatewayProcess
    b: GatewayProcess
    replica: ReplicaProcess  # one of the model's pool

    @property
    def gateways(self) -> tuple[GatewayProcess, GatewayProcess]:
        return self.a, self.b


def key(name: str) -> str:
    return "{" + NS + "}:" + name


@pytest.fixture(scope="module")
def fleet(models_dir: Path) -> Iterator[Fleet]:
    server = RedisServer()
    server.start()
    started: list[ReplicaProcess | GatewayProcess] = []
    try:
        model = models_dir / "digits-mlp.onnx"
        replicas = [start_replica(model, name="digits-mlp", enable_faults=True) for _ in range(3)]
        started += replicas
        inject_faults(replicas[2].url, corrupt_rate=1.0)  # the candidate answers wrong

        def config(instance: str) -> dict[str, Any]:
            listed = [{"id": rid, "url": r.url} for rid, r in zip(NOW_IDS, replicas, strict=False)]
            return {
                "pools": {
                    "now": {
                        "model": "digits-mlp",
                        "replicas": listed,
                        "outlier": {"max_ejection_s": 2},
                    },
                    "next": {
                        "model": "digits-mlp",
                        "replicas": [{"id": "next-0", "url": replicas[2].url}],
                    },
                },
                "models": {
                    "digits": {
                        "pool": "now",
                        "rollout": {
                            "candidate": "next",
                            "mode": "canary",
                            "auto_start": False,
                            "steps": [10, 50, 100],
                        },
                    }
                },
                "state": {
                    "backend": "redis",
                    "redis_url": server.url,
                    "namespace": NS,
                    "sync_interval_s": SYNC_S,
                    "instance": instance,
                },
            }

        a = start_gateway(config("gw-a"))
        started.append(a)
        b = start_gateway(config("gw-b"))
        started.append(b)
        store = redis.Redis.from_url(server.url, decode_responses=True)
        fleet = Fleet(store, a, b, replicas[0])
        wait_until(
            lambda: store.hget(key("dec"), "rollout:digits") is not None,
            SEEN_S,
            message="the declared rollout's progress in the store",
        )
        wait_until(
            lambda: all(phase(g) == "waiting" for g in fleet.gateways),
            SEEN_S,
            message="both gateways to know the rollout is waiting",
        )
        yield fleet
        store.close()
    finally:
        for proc in reversed(started):
            proc.cleanup()
        server.stop()


def get(gateway: GatewayProcess, path: str) -> dict[str, Any]:
    answer = httpx.get(gateway.url + path, trust_env=False, timeout=10)
    assert answer.status_code == 200, (path, answer.status_code, answer.text[:300])
    assert answer.headers["content-type"].startswith("application/json")
    return dict(answer.json())


def sync_state(gateway: GatewayProcess) -> dict[str, Any]:
    return dict(get(gateway, "/admin/state")["state_store"])


def phase(gateway: GatewayProcess) -> str:
    return str(get(gateway, "/admin/rollouts")["rollouts"]["digits"]["phase"])


def rejected(gateway: GatewayProcess, kind: str) -> int:
    counts = sync_state(gateway)["rejected"]
    return sum(n for name, n in counts.items() if name.endswith("/" + kind))


def answers_are_right(gateway: GatewayProcess, count: int = 6) -> None:
    """Every answer 200 and from the model's own pool (the candidate answers wrong)."""
    with httpx.Client(base_url=gateway.url, trust_env=False, timeout=10) as client:
        for body in request_bodies(count):
            answer = client.post(
                "/v2/models/digits/infer",
                content=body,
                headers={"content-type": "application/json"},
            )
            assert answer.status_code == 200, answer.text[:300]
            assert answer.headers["x-served-by"].startswith("now-"), answer.headers


def out_of_service(gateway: GatewayProcess) -> int:
    """Replicas of the model's pool that take no traffic now (ejected or held out)."""
    pool = next(p for p in get(gateway, "/admin/state")["pools"] if p["name"] == "now")
    ejected = sum(1 for r in pool["replicas"] if r["ejected"])
    return ejected + (len(NOW_IDS) - len(pool["replicas"]))


def operator(gateway: GatewayProcess, action: str, rid: str) -> dict[str, Any]:
    answer = httpx.post(
        f"{gateway.url}/admin/replicas/{rid}/{action}",
        json={"reason": "t"},
        trust_env=False,
        timeout=10,
    )
    assert answer.status_code == 200, answer.text[:300]
    assert answer.json()["shared"] is True
    return dict(answer.json())


# --- the forgeries ---------------------------------------------------------------------------

Write = Callable[[redis.Redis], object]


def decision(target: str, action: str, version: Any, reason: str = "forged", **extra: Any) -> str:
    row = [target, action, extra.get("until", 0.0), "alice", reason, time.time(), version, "gw-x"]
    return orjson.dumps(row).decode()


def forged_progress(**change: Any) -> Write:
    def write(store: redis.Redis) -> None:
        real = orjson.loads(store.hget(key("dec"), "rollout:digits") or "null")
        doc = orjson.loads(real[4])
        doc.update(change.get("doc", {}))
        real[1], real[4] = change.get("action", real[1]), orjson.dumps(doc).decode()
        real[6], real[7] = real[6] + 1, "gw-x"  # the next version, under the current token
        store.hset(key("dec"), "rollout:digits", orjson.dumps(real).decode())

    return write


def signals_until(until: Callable[[], float]) -> Write:
    def write(store: redis.Redis) -> None:
        for rid in NOW_IDS:
            blob = orjson.dumps([rid, "closed", until(), 10**6, "gw-x", time.time()]).decode()
            store.hset(key("sig"), rid, blob)
            store.zadd(key("sexp"), {rid: (time.time() + 3600) * 1000})

    return write


def heartbeat(instance: str, seen: float, verdicts: dict[str, str]) -> Write:
    def write(store: redis.Redis) -> None:
        blob = orjson.dumps([instance, "9.9", seen - 60, seen, 1.0, 0.0, verdicts]).decode()
        store.hset(key("hb"), instance, blob)

    return write


def counters(store: redis.Redis) -> None:
    for name in [*store.hkeys(key("cnt")), "forged"]:
        store.hset(key("cnt"), name, "not-a-number")
    store.zadd(key("chg"), {"forged": 10**12})  # read by every pull


def wrong_type_dec(store: redis.Redis) -> None:
    store.delete(key("dec"))
    store.set(key("dec"), "not a hash")


@dataclass(frozen=True)
class Forgery:
    write: Write
    kind: str  # what the gateways count it as
    hash_fields: tuple[tuple[str, str], ...] = ()  # what to delete afterwards: (hash, field)
    keys: tuple[str, ...] = ()  # whole keys to delete afterwards
    at_most_out: int = 0  # replicas of the model's pool it may take out of service


FORGERIES = {
    "decision-version-1e25": Forgery(
        lambda s: s.hset(key("dec"), "replica:now-1", decision("replica:now-1", "drain", 1e25)),
        "decision",
        (("dec", "replica:now-1"),),
    ),
    "progress-promoted": Forgery(forged_progress(action="promoted", doc={"step": 2}), "progress"),
    "progress-promoted-same-step": Forgery(forged_progress(action="promoted"), "progress"),
    "progress-step-minus-100": Forgery(forged_progress(doc={"step": -100}), "progress"),
    "counter-not-an-integer": Forgery(counters, "counter", (("cnt", "forged"),)),
    "seq-not-a-number": Forgery(lambda s: s.set(key("seq"), "NaN-seq"), "seq"),
    "dec-of-the-wrong-type": Forgery(wrong_type_dec, "key"),
    "signals-eject-all-for-228-years": Forgery(
        signals_until(lambda: time.time() + 228 * YEAR),
        "signal",
        tuple(("sig", r) for r in NOW_IDS),
    ),
    "signals-eject-all-for-a-year": Forgery(
        signals_until(lambda: time.time() + YEAR),
        "capped",
        tuple(("sig", r) for r in NOW_IDS),
        at_most_out=1,
    ),
    "drain-every-replica": Forgery(
        lambda s: [
            s.hset(key("dec"), f"replica:{r}", decision(f"replica:{r}", "drain", 10**6))
            for r in NOW_IDS
        ],
        "capped",
        tuple(("dec", f"replica:{r}") for r in NOW_IDS),
        at_most_out=1,
    ),
    "decision-reason-20MB": Forgery(
        lambda s: s.hset(
            key("dec"), "replica:now-1", decision("replica:now-1", "drain", 10**6, "x" * 20_000_000)
        ),
        "oversized",
        (("dec", "replica:now-1"),),
    ),
    "heartbeat-of-a-dead-instance": Forgery(
        heartbeat("gw-dead", time.time() + YEAR, {"now-0": "serving"}),
        "heartbeat",
        (("hb", "gw-dead"),),
    ),
    "ghost-with-50k-verdicts": Forgery(
        heartbeat("gw-ghost", time.time(), {f"ghost-{i}": "serving" for i in range(50_000)}),
        "oversized",
        (("hb", "gw-ghost"),),
    ),
}


@pytest.mark.parametrize("name", list(FORGERIES))
def test_a_forged_value_in_redis_is_dropped_and_the_fleet_goes_on(fleet: Fleet, name: str) -> None:
    forgery = FORGERIES[name]
    failures = {g.url: sync_state(g)["failures"] for g in fleet.gateways}
    counted = {g.url: rejected(g, forgery.kind) for g in fleet.gateways}
    forged_at = time.time()
    forgery.write(fleet.redis)
    try:
        wait_until(
            lambda: any(rejected(g, forgery.kind) > counted[g.url] for g in fleet.gateways),
            SEEN_S,
            message=lambda: (
                f"a gateway to drop the forged {forgery.kind}: "
                f"{[sync_state(g) for g in fleet.gateways]}"
            ),
        )
        for gateway in fleet.gateways:
            serves_as_before(gateway, forgery, forged_at)
        shares_as_before(fleet, failures)
    finally:  # removed by hand (also when a check failed: no forgery is left for the next case)
        for hash_name, field in forgery.hash_fields:
            fleet.redis.hdel(key(hash_name), field)
    stays_gone(fleet, forgery)


def serves_as_before(gateway: GatewayProcess, forgery: Forgery, forged_at: float) -> None:
    """No 500 on any page, no ghost listed, nothing promoted, right answers, caps kept."""
    wait_until(
        lambda: (sync_state(gateway)["last_ok"] or 0) > forged_at,
        SEEN_S,
        message="a sync tick that succeeds after the forgery",
    )
    for path in ("/admin/state", "/admin/rollouts", "/admin/controls", "/metrics"):
        httpx.get(gateway.url + path, trust_env=False, timeout=10).raise_for_status()
    fleet_doc = httpx.get(gateway.url + "/admin/fleet", trust_env=False, timeout=10)
    assert fleet_doc.status_code == 200 and len(fleet_doc.content) < 100_000
    names = {i["instance"] for i in fleet_doc.json()["instances"]}
    assert names <= {"gw-a", "gw-b"}, names  # no ghost, no dead instance shown
    assert phase(gateway) == "waiting"  # nothing promoted, nothing moved
    answers_are_right(gateway)
    assert out_of_service(gateway) <= forgery.at_most_out


def shares_as_before(fleet: Fleet, failures: dict[str, int]) -> None:
    """The sync never stopped: an operator's drain on A reaches B while the forgery is there,
    and no tick failed on it (a busy machine may time one out)."""
    operator(fleet.a, "drain", "now-1")
    try:
        wait_until(
            lambda: "replica:now-1" in get(fleet.b, "/admin/controls")["decisions"],
            SEEN_S,
            message="B to learn of A's drain",
        )
    finally:
        operator(fleet.a, "restore", "now-1")
    for gateway in fleet.gateways:
        state = sync_state(gateway)
        failed = state["failures"] > failures[gateway.url]
        assert not failed or "TimeoutError" in str(state["last_error"]), state["last_error"]
        wait_until(
            lambda: sync_state(gateway)["degraded"] is False,  # noqa: B023 (this iteration's)
            SEEN_S,
            message="the sync to be up",
        )


def stays_gone(fleet: Fleet, forgery: Forgery) -> None:
    """Removed by hand, the forged values stay gone: no gateway pushes one back."""
    store = fleet.redis
    time.sleep(5 * SYNC_S)
    for hash_name, field in forgery.hash_fields:
        again = store.hget(key(hash_name), field)
        assert again is None or "gw-x" not in again, (hash_name, field, again[:200])
    wait_until(
        lambda: '"gw-x"' not in (store.hget(key("dec"), "rollout:digits") or ""),
        SEEN_S,
        message="the leader's progress written over a forged one",
    )
    assert store.type(key("dec")) == "hash"
    for gateway in fleet.gateways:
        wait_until(
            lambda: out_of_service(gateway) == 0,  # noqa: B023 (this iteration's)
            SEEN_S,
            message="every replica back in service",
        )


def test_a_decisions_file_with_a_version_of_1e25_does_not_break_operator_actions(
    tmp_path: Path, fleet: Fleet
) -> None:
    replica = fleet.replica
    path = tmp_path / "decisions.jsonl"
    path.write_text(decision("replica:r0", "drain", 1e25) + "\n")
    config = {
        "pools": {"p": {"model": "digits-mlp", "replicas": [{"id": "r0", "url": replica.url}]}},
        "models": {"digits": {"pool": "p"}},
        "state": {"decisions_file": str(path)},
    }
    gateway = start_gateway(config)
    try:
        assert sync_state(gateway)["rejected"] == {"decisions_file/decision": 1}
        answers_are_right_anywhere(gateway)
        drained = operator_local(gateway, "drain")
        assert drained["version"] == 1 and drained["outcome"] == "applied"
        restored = operator_local(gateway, "restore")
        assert restored["outcome"] == "applied"
        stored = [orjson.loads(line) for line in path.read_text().splitlines()]
        assert [(row[1], row[6]) for row in stored] == [("restore", 2)]  # persisted
        history = get(gateway, "/admin/history")["events"]
        audited = [e["detail"] for e in history if e["subject"] == "replica:r0"]
        assert any("restore" in d for d in audited) and any("drain" in d for d in audited)
        answers_are_right_anywhere(gateway)
    finally:
        gateway.cleanup()


def operator_local(gateway: GatewayProcess, action: str) -> dict[str, Any]:
    answer = httpx.post(
        f"{gateway.url}/admin/replicas/r0/{action}",
        json={"reason": "t"},
        trust_env=False,
        timeout=10,
    )
    assert answer.status_code == 200, answer.text[:300]
    assert answer.headers["content-type"].startswith("application/json")
    return dict(answer.json())


def answers_are_right_anywhere(gateway: GatewayProcess) -> None:
    with httpx.Client(base_url=gateway.url, trust_env=False, timeout=10) as client:
        for body in request_bodies(4):
            answer = client.post(
                "/v2/models/digits/infer",
                content=body,
                headers={"content-type": "application/json"},
            )
            assert answer.status_code == 200, answer.text[:300]


@pytest.mark.parametrize(
    ("field", "ahead_s"),
    [("gw-a", YEAR), ("gw-a", 3.0), ("gw-zz", 3.0)],
    ids=["a-year-ahead", "seconds-ahead-from-another-run", "under-another-field"],
)
def test_a_heartbeat_forged_under_a_live_gateways_name_does_not_hide_it(
    fleet: Fleet, field: str, ahead_s: float
) -> None:
    """A year ahead, it once outranked every heartbeat of gw-a in the store, and readers left
    it out as from the future: gw-a vanished from the fleet view. Seconds ahead, B showed the
    forgery as gw-a. Now gw-a's next heartbeat takes the store back from a stamp that far
    ahead, and B keeps gw-a's live heartbeat over one from another run (or another field)."""

    def b_sees_a_itself() -> bool:
        doc = get(fleet.b, "/admin/fleet")
        a = next((i for i in doc["instances"] if i["instance"] == "gw-a"), None)
        return a is not None and a["alive"] and a["version"] != "9.9"

    wait_until(b_sees_a_itself, SEEN_S, message="B to list gw-a")
    blob = orjson.dumps(["gw-a", "9.9", time.time() - 60, time.time() + ahead_s, 1.0, 0.0, {}])
    fleet.redis.hset(key("hb"), field, blob.decode())
    try:
        watch_until = time.monotonic() + 4.0  # two heartbeats, twenty syncs
        while time.monotonic() < watch_until:
            assert b_sees_a_itself(), get(fleet.b, "/admin/fleet")["instances"]
            time.sleep(0.1)
        wait_until(
            lambda: '"9.9"' not in (fleet.redis.hget(key("hb"), "gw-a") or ""),
            SEEN_S,
            message="gw-a's own heartbeat back in the store",
        )
    finally:
        if field != "gw-a":
            fleet.redis.hdel(key("hb"), field)
