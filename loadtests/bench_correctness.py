"""Correctness as an SLO under load: a replica that corrupts a share of its answers, c8, 40 s.

Three digits-mlp replicas (and one svm, one forest for the burn policy's vote), ``digits`` a
single route with ``audit.rate`` 0.05 and a correctness SLO (objective 0.999). From second 5
one mlp replica corrupts ``--corrupt`` of its answers. Every answer is checked against the
label the same row got before any fault on the same route: the single route's (mlp's), or for
a voted answer (``x-vote``) the fault-free vote's (``digits-vote``: the versions outvote mlp
on a few rows by design, which is no wrong answer); the gateway's ``/slo`` and ``/admin/state`` are
polled twice a second. Runs (``--runs``):

- ``quarantine``: as configured: when the fast-burn alert fires, when the replica is named
  suspect and quarantined, clients' wrong-answer rate over the last 15 s, failures;
- ``vote``: the suspects' quarantine out of reach: when the model is escalated to a vote, the
  wrong rate over the last 15 s; then the fault is cleared and the run goes on until the model
  is back on its single route (or ``recover_s`` + 20 s);
- ``plain-fault``: the same fault on the plain route (no audits, no correctness SLO): the
  clients' wrong-answer rate the fault costs when nothing watches for it;
- ``clean`` and ``off``: fault-free with audits on and off: alerts, suspects, the audits' extra
  replica requests (the replicas' own request counts), latency p50 and p99 (compare them at a
  fixed ``--rate`` below saturation: closed-loop at c8 the machine's two cores are full, and
  the latency is queueing behind the audits' extra work).

The gateway is ``gateway serve`` with ``--workers`` data-plane workers (2 by default): the
audits and votes run in the workers, the SLO, the suspects, the quarantine and the escalation
are decided in the control process from every worker's shipped verdicts. Prints one JSON
document; the figures go to docs/measured.md by hand.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.config.endpoint import Endpoint
from gateway.errors import UpstreamError
from gateway.upstream.transport.http1 import Http1Transport
from loadtests.stack import Proc, Stack, clear_faults, inject_faults
from replicas.dataset import load_split

SECONDS, FAULT_AT, CONCURRENCY, LAST_S = 40.0, 5.0, 8, 15.0
WORKERS = 2


@dataclass
class Answers:
    began: float = field(default_factory=time.monotonic)
    rows: list[tuple[float, int, bool, bool, float]] = field(default_factory=list)
    # (since began, status (0: no answer), wrong, voted, latency)

    def window(self, start: float, end: float) -> dict[str, Any]:
        chosen = [r for r in self.rows if start <= r[0] < end]
        answered = [r for r in chosen if r[1] == 200]
        wrong = sum(r[2] for r in answered)
        latencies = sorted(r[4] for r in chosen)

        def quantile(q: float) -> float | None:
            return round(latencies[int(q * (len(latencies) - 1))] * 1000, 3) if latencies else None

        return {
            "sent": len(chosen),
            "failed": len(chosen) - len(answered),
            "failed_by_status": dict(Counter(r[1] for r in chosen if r[1] != 200)),
            "wrong": wrong,
            "wrong_rate": round(wrong / len(answered), 5) if answered else None,
            "voted": sum(r[3] for r in answered),
            "p50_ms": quantile(0.5),
            "p99_ms": quantile(0.99),
        }


def config(mlp: list[Proc], svm: Proc, forest: Proc, run: str, workers: int) -> dict[str, Any]:
    def pool(model: str, procs: list[Proc], prefix: str) -> dict[str, Any]:
        replicas = [{"id": f"{prefix}-{i}", "url": p.url} for i, p in enumerate(procs)]
        return {"model": model, "replicas": replicas}

    digits: dict[str, Any] = {"pool": "digits-mlp", "timeout_ms": 1000}
    if run not in ("off", "plain-fault"):
        digits["audit"] = {"rate": 0.05}
        digits["slos"] = [{"name": "right-answers", "kind": "correctness", "objective": 0.999}]
    if run == "vote":
        digits["audit"]["suspect_min_votes"] = 1_000_000  # quarantine out of reach
        digits["audit"]["suspect_window"] = 1_000_000
        digits["vote_pools"] = ["digits-mlp", "digits-svm", "digits-forest"]
        digits["burn_policy"] = {"vote": {"enabled": True, "k": 3, "recover_s": 10}}
    return {
        "server": {"workers": workers},
        "pools": {
            "digits-mlp": pool("digits-mlp", mlp, "mlp"),
            "digits-svm": pool("digits-svm", [svm], "svm"),
            "digits-forest": pool("digits-forest", [forest], "forest"),
        },
        "models": {
            "digits": digits,
            "digits-vote": {"vote": {"pools": ["digits-mlp", "digits-svm", "digits-forest"]}},
        },
    }


def bodies() -> list[bytes]:
    _, x_test, _, _ = load_split()
    return [
        orjson.dumps(
            {"inputs": [{"name": "input", "shape": [1, 64], "datatype": "FP32", "data": list(row)}]}
        )
        for row in x_test.tolist()
    ]


def label_of(body: bytes) -> int:
    outputs = orjson.loads(body)["outputs"]
    return int(next(o for o in outputs if o["name"] == "label")["data"][0])


async def reference(url: str, requests: list[bytes], model: str) -> list[int]:
    transport = Http1Transport(max_connections_per_endpoint=4)
    endpoint = Endpoint.parse(url)
    try:
        labels = []
        for body in requests:
            response = await transport.request(
                endpoint, "POST", f"/v2/models/{model}/infer", body=body, timeout=5.0
            )
            labels.append(label_of(response.body))
        return labels
    finally:
        await transport.aclose()


async def load(
    url: str,
    requests: list[bytes],
    expected: tuple[list[int], list[int]],
    seconds: float,
    answers: Answers,
    rate: float | None = None,
) -> None:
    """``expected``: the single route's labels and the vote's; ``rate``: requests per second
    (paced: each of the clients sends on its own schedule), else as fast as answered."""
    transport = Http1Transport(max_connections_per_endpoint=CONCURRENCY * 2)
    endpoint = Endpoint.parse(url)
    stop_at = answers.began + seconds
    counter = 0

    async def worker(index: int) -> None:
        nonlocal counter
        sent = 0
        while time.monotonic() < stop_at:
            if rate is not None:
                due = answers.began + (sent + index / CONCURRENCY) * CONCURRENCY / rate
                sent += 1
                if due > time.monotonic():
                    await asyncio.sleep(due - time.monotonic())
            i = counter % len(requests)
            counter += 1
            started = time.monotonic()
            status, wrong, voted = 0, False, False
            try:
                response = await transport.request(
                    endpoint, "POST", "/v2/models/digits/infer", body=requests[i], timeout=5.0
                )
                status = response.status
                if status == 200:
                    voted = "x-vote" in response.headers
                    wrong = label_of(response.body) != expected[1 if voted else 0][i]
            except UpstreamError:
                pass
            now = time.monotonic()
            answers.rows.append((started - answers.began, status, wrong, voted, now - started))

    try:
        await asyncio.gather(*(worker(i) for i in range(CONCURRENCY)))
    finally:
        await transport.aclose()


async def watch(url: str, answers: Answers, until: float, seen: dict[str, float]) -> None:
    """Polls the gateway: the first time each thing was seen, in seconds since the start."""
    async with httpx.AsyncClient(base_url=url, trust_env=False, timeout=5) as client:
        while time.monotonic() < until:
            at = time.monotonic() - answers.began
            slo = (await client.get("/slo")).json()["models"].get("digits", {})
            state = (await client.get("/admin/state")).json()
            for tracker in slo.get("slos", ()):
                if any(a["firing"] and a["severity"] == "page" for a in tracker["alerts"]):
                    seen.setdefault("alert", at)
            suspects = state["suspects"].get("digits", {})
            if any(r["dissents"] for r in suspects.values()):
                seen.setdefault("suspect", at)
            for pool in state["pools"]:
                for replica in pool["replicas"]:
                    if replica["quarantined"]:
                        seen.setdefault(f"quarantined:{replica['id']}", at)
            escalation = slo.get("vote_escalation", {})
            if escalation.get("engaged"):
                seen.setdefault("escalated", at)
            elif "escalated" in seen:
                seen.setdefault("back", at)
            seen["audits"] = state["models"]["digits"].get("audits", {}).get("outcomes", {})
            await asyncio.sleep(0.5)


def replica_requests(procs: list[Proc]) -> int:
    """Infer requests the replicas served so far (their own counters)."""
    total = 0
    for proc in procs:
        text = httpx.get(f"{proc.url}/metrics", trust_env=False, timeout=5).text
        for line in text.splitlines():
            if line.startswith("replica_requests_total"):
                total += int(float(line.rsplit(" ", 1)[1]))
    return total


async def one_run(run: str, corrupt: float, workers: int, rate: float | None) -> dict[str, Any]:
    with Stack() as stack:
        mlp = [stack.replica(f"mlp-{i}", "digits-mlp") for i in range(3)]
        svm, forest = (
            stack.replica("svm-0", "digits-svm"),
            stack.replica("forest-0", "digits-forest"),
        )
        gateway = stack.gateway(config(mlp, svm, forest, run, workers))
        requests = bodies()
        single = await reference(gateway.url, requests, "digits")
        expected = (single, await reference(gateway.url, requests, "digits-vote"))
        everyone = [*mlp, svm, forest]
        before = replica_requests(everyone)
        answers = Answers()
        seen: dict[str, float] = {}
        faulty = run in ("quarantine", "vote", "plain-fault")
        seconds = SECONDS + (30.0 if run == "vote" else 0.0)
        watcher = asyncio.create_task(watch(gateway.url, answers, answers.began + seconds, seen))
        loader = asyncio.create_task(load(gateway.url, requests, expected, seconds, answers, rate))
        if faulty:
            await asyncio.sleep(FAULT_AT)
            inject_faults(mlp[0], corrupt_rate=corrupt)
            seen["fault"] = time.monotonic() - answers.began
        if run == "vote":
            await asyncio.sleep(SECONDS - FAULT_AT)
            clear_faults(mlp[0])
            seen["cleared"] = time.monotonic() - answers.began
        await loader
        await watcher
        sent = len(answers.rows)
        extra = replica_requests(everyone) - before - sent
        return {
            "run": run,
            "workers": workers,
            "seen_s": {k: round(v, 2) if isinstance(v, float) else v for k, v in seen.items()},
            "whole": answers.window(0, seconds),
            "last_15s": answers.window(SECONDS - LAST_S, SECONDS),
            "extra_replica_requests": round(extra / sent, 4) if sent else None,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default="quarantine,vote,clean,off")
    parser.add_argument("--corrupt", type=float, default=0.1)
    parser.add_argument("--workers", type=int, default=WORKERS, help="data-plane workers")
    parser.add_argument("--rate", type=float, help="requests/s (default: closed loop, c8)")
    args = parser.parse_args()
    runs = args.runs.split(",")
    results = [asyncio.run(one_run(run, args.corrupt, args.workers, args.rate)) for run in runs]
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
