"""Load-aware balancing and saturation, measured as a user would run them (issue 41).

External load: three ``digits-mlp`` replicas behind ``gateway serve``; an outside client sends
``--outside`` requests at once straight to ``mlp-0`` while ``--through`` at once go through
the gateway for ``--seconds``; the gateway's share sent to ``mlp-0`` (its own counts, from
``/admin/state``), its p50/p99 and its failures, with ``load_aware`` on and off in the same
run (two gateways at once over the same replicas, one each way), with one worker and with
``--workers`` (each worker sees only its own outstanding
requests). Saturation: every replica held saturated (each answer waits ``--slow-ms`` and an
outside client keeps ``--outside`` requests at once on each), two tenants through the
gateway at once, ``batch`` (priority -1: sheddable) and ``live`` (priority 10): how many of
each were answered, how fast the 503s came and whether they carry ``Retry-After``.

The accelerators' sampling cost (32 replicas, all far from their limits: sampled at 1 Hz)
is `loadtests/bench_accelerator.py`'s.

``--mlserver`` runs the external-load part over three MLServer replicas instead (`make peers`).

    .venv/bin/python loadtests/bench_load_aware.py [--seconds 15] [--workers 2] [--mlserver]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere in the repo

from loadtests.loadgen import LoadResult, closed_loop
from loadtests.stack import Proc, Served, Stack, clear_faults, inject_faults, pool_config
from tests.support.traffic import request_bodies

MODEL = "digits-mlp"
MOST = 10_000_000
PATIENT = {"x-request-timeout-ms": "10000"}  # a slow answer is measured, not failed
KEYS = {"batch": "bench-batch-key-0123456789", "live": "bench-live-key-0123456789"}


def served(gateway: Proc) -> dict[str, int]:
    doc = httpx.get(gateway.url + "/admin/state", trust_env=False, timeout=10).json()
    (pool,) = doc["pools"]
    return {r["id"]: int(r["requests"]) for r in pool["replicas"]}


def summary(result: LoadResult) -> dict[str, Any]:
    ok = result.statuses.get(200, 0)
    return {
        "requests": result.requests,
        "ok": ok,
        "failed": result.requests - ok,
        "statuses": dict(result.statuses),
        "rate_per_s": round(result.rate, 1),
        "p50_ms": round(result.quantile_ms(0.5), 1),
        "p99_ms": round(result.quantile_ms(0.99), 1),
    }


async def external(
    stack: Stack,
    replicas: Sequence[Served],
    workers: int,
    args: argparse.Namespace,
    model: str = MODEL,
    load: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Two gateways over the same replicas at once, ``load_aware`` on and off, each with
    ``--through`` requests at once while the outside load is on ``mlp-0``: both see the same
    machine (a shared, busy one swings run to run)."""
    gateways = {}
    for aware in (True, False):
        config = pool_config(replicas, model)
        config["pools"]["pool"]["load_aware"] = aware
        if load is not None:
            config["pools"]["pool"]["load"] = load
        config["server"] = {"workers": workers}
        gateways[aware] = stack.gateway(config, name=f"gateway-{int(aware)}-{workers}")
    body = request_bodies(1)[0]
    try:
        before = {a: await asyncio.to_thread(served, g) for a, g in gateways.items()}
        outside, *through = await asyncio.gather(
            closed_loop(replicas[0].url, f"/v2/models/{model}/infer", body,
                        concurrency=args.outside, seconds=args.seconds + 1, max_requests=MOST),
            *(closed_loop(g.url, "/v2/models/digits/infer", body, concurrency=args.through,
                          seconds=args.seconds, max_requests=MOST, headers=PATIENT)
              for g in gateways.values()),
        )  # fmt: skip
        after = {a: await asyncio.to_thread(served, g) for a, g in gateways.items()}
    finally:
        for gateway in gateways.values():
            stack.end(gateway)
    results = []
    for aware, result in zip(gateways, through, strict=True):
        counts = {rid: after[aware][rid] - before[aware][rid] for rid in after[aware]}
        total = sum(counts.values()) or 1
        results.append({
            "load_aware": aware,
            "workers": workers,
            "gateway": summary(result),
            "outside_to_mlp0": summary(outside),
            "mlp0_share_pct": round(100 * counts[replicas[0].name] / total, 2),
            "served": counts,
        })  # fmt: skip
    return results


async def saturated(stack: Stack, replicas: list[Proc], args: argparse.Namespace) -> Any:
    config = pool_config(replicas, MODEL)
    config["tenants"] = {
        "batch": {"key_env": "BENCH_BATCH_KEY", "priority": -1},
        "live": {"key_env": "BENCH_LIVE_KEY", "priority": 10},
    }
    env = {"BENCH_BATCH_KEY": KEYS["batch"], "BENCH_LIVE_KEY": KEYS["live"]}
    gateway = stack.gateway(config, name="gateway-saturation", env=env)
    body = request_bodies(1)[0]
    for replica in replicas:
        inject_faults(replica, latency_ms=args.slow_ms)
    try:
        outside = [
            closed_loop(r.url, f"/v2/models/{MODEL}/infer", body, concurrency=args.outside,
                        seconds=args.seconds + 2, max_requests=MOST)
            for r in replicas
        ]  # fmt: skip

        async def tenant(name: str) -> LoadResult:
            await asyncio.sleep(1.0)  # the replicas' queues fill and are read first
            headers = {**PATIENT, "authorization": f"Bearer {KEYS[name]}"}
            return await closed_loop(gateway.url, "/v2/models/digits/infer", body,
                                     concurrency=args.through // 2, seconds=args.seconds,
                                     max_requests=MOST, headers=headers)  # fmt: skip

        async def one_shed() -> dict[str, Any]:
            """A sheddable request's 503 as its client sees it, and the state beside it."""
            await asyncio.sleep(args.seconds / 2)
            headers = {"authorization": f"Bearer {KEYS['batch']}"}
            async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
                for _ in range(50):
                    answer = await client.post(gateway.url + "/v2/models/digits/infer",
                                               content=body, headers=headers)  # fmt: skip
                    if answer.status_code == 503:
                        break
                state = (await client.get(gateway.url + "/admin/state")).json()
            return {"status": answer.status_code, "retry_after": answer.headers.get("retry-after"),
                    "error": answer.json().get("error"),
                    "saturated": state["pools"][0]["saturated"],
                    "reported_queue": {r["id"]: r["reported_queue"]
                                       for r in state["pools"][0]["replicas"]}}  # fmt: skip

        *_, batch, live, sample = await asyncio.gather(
            *outside, tenant("batch"), tenant("live"), one_shed()
        )
    finally:
        for replica in replicas:
            clear_faults(replica)
        stack.end(gateway)
    shed = [lat for lat, code in zip(batch.latencies_s, batch.codes, strict=True) if code == 503]
    shed.sort()
    return {
        "batch": summary(batch),
        "batch_503_p99_ms": round(1000 * shed[int(0.99 * (len(shed) - 1))], 1) if shed else None,
        "live": summary(live),
        "one_shed_request": sample,
    }


async def with_mlserver(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The external-load runs over three MLServer replicas, each with one parallel worker (its
    queue: ``parallel_request_queue``, scraped off its metrics port; MLServer sends no load
    report on its answers). Each binds a loopback address of its own (127.0.0.2-4), so the
    three share one metrics port, as replicas on three hosts would."""
    from tests.support.peers import MLSERVER, PeerProcess, start_mlserver
    from tests.support.processes import free_port

    reason = MLSERVER.missing()
    if reason is not None:
        raise SystemExit(reason)
    metrics_port = free_port()
    peers: list[PeerProcess] = []
    results = []
    try:
        for i in range(3):
            peer = start_mlserver(parallel=1, host=f"127.0.0.{2 + i}", metrics_port=metrics_port)
            peer.name = f"mlp-{i}"
            peers.append(peer)
        with Stack() as stack:
            for workers in sorted({1, args.workers}):
                load = {"metrics_port": metrics_port}
                for result in await external(stack, peers, workers, args, "digits", load):
                    result["replicas"] = "MLServer 1.7.1, one parallel worker each"
                    print(json.dumps(result), flush=True)
                    results.append(result)
    finally:
        for peer in peers:
            peer.cleanup()
    return results


async def run(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {"external": [], "saturation": None}
    if args.mlserver:
        results["external"] = await with_mlserver(args)
        return results
    with Stack() as stack:
        replicas = [stack.replica(f"mlp-{i}", MODEL) for i in range(3)]
        for workers in sorted({1, args.workers}):
            for result in await external(stack, replicas, workers, args):
                print(json.dumps(result), flush=True)
                results["external"].append(result)
        if not args.skip_saturation:
            results["saturation"] = await saturated(stack, replicas, args)
            print(json.dumps(results["saturation"]), flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--outside", type=int, default=32, help="outside requests at once")
    parser.add_argument("--through", type=int, default=8, help="the gateway's at once")
    parser.add_argument("--workers", type=int, default=2, help="workers of the second runs")
    parser.add_argument("--slow-ms", type=float, default=100.0, help="saturation: each answer")
    parser.add_argument("--skip-saturation", action="store_true")
    parser.add_argument(
        "--mlserver", action="store_true", help="the external-load runs over MLServer replicas"
    )
    parser.add_argument("--out", type=Path, help="write the results here (JSON)")
    args = parser.parse_args()
    results = asyncio.run(run(args))
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
