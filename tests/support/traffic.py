"""Bounded V2 traffic for integration tests: fixed count, fixed concurrency, events on cue.

Events fire when a given number of requests has completed (not at a wall-clock time), so a
fault lands "mid-load" on a busy machine as reliably as on an idle one. Traffic that must go
on until the gateway reaches some state (`drive_until`) is bounded by time instead: a count of
requests that suffices on one machine runs out too early on a faster one.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import httpx
import orjson

from replicas.dataset import load_split

Event = Callable[[], Awaitable[None] | None]


@dataclass
class Answer:
    status: int
    latency_s: float
    served_by: str | None
    body: bytes
    retry_after: str | None


# What a client's own clock adds to an answer the gateway gave by its deadline, on a 2-core
# machine with both cores busy: the load generator and the gateway wait their turn to run (an
# answer given inside its 1 s deadline was read at 1.19 s with stress-ng on both cores). A
# deadline the gateway missed is a 504, counted in `Traffic.failed`, whatever this clock says.
SCHEDULING_SLACK_S = 0.5


@dataclass
class Traffic:
    answers: list[Answer] = field(default_factory=list)
    transport_errors: list[str] = field(default_factory=list)

    def count(self, status: int) -> int:
        return sum(1 for a in self.answers if a.status == status)

    @property
    def failed(self) -> int:
        return sum(1 for a in self.answers if a.status != 200) + len(self.transport_errors)

    @property
    def max_latency_s(self) -> float:
        return max(a.latency_s for a in self.answers)

    def served_by(self) -> Counter[str]:
        return Counter(a.served_by for a in self.answers if a.served_by)

    def __repr__(self) -> str:
        """Counts and the first failures, what a failed ``assert traffic.failed == 0`` needs
        (not thousands of answers)."""
        bad = [(a.status, a.served_by, a.body[:300]) for a in self.answers if a.status != 200]
        statuses = Counter(a.status for a in self.answers)
        return (
            f"Traffic({len(self.answers)} answers {dict(statuses)}, first failures {bad[:3]}, "
            f"transport errors {self.transport_errors[:3]})"
        )


def request_bodies(count: int = 64) -> list[bytes]:
    _, x_test, _, _ = load_split()
    return [
        orjson.dumps(
            {
                "inputs": [
                    {"name": "input", "shape": [1, 64], "datatype": "FP32", "data": row.tolist()}
                ]
            }
        )
        for row in x_test[:count]
    ]


async def drive(
    url: str,
    *,
    requests: int,
    concurrency: int,
    timeout_ms: int = 1000,
    events: dict[int, Event] | None = None,
    model: str = "digits",
) -> Traffic:
    """Sends ``requests`` infer calls; ``events[n]`` runs once after n answers arrived."""
    bodies = request_bodies()
    traffic = Traffic()
    pending = dict(events or {})
    sent = 0
    headers = {"x-request-timeout-ms": str(timeout_ms)}
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(
        base_url=url, limits=limits, timeout=timeout_ms / 1000 + 5, trust_env=False
    ) as client:

        async def fire_due() -> None:
            done = len(traffic.answers) + len(traffic.transport_errors)
            for at in sorted(k for k in pending if k <= done):
                result = pending.pop(at)()
                if inspect.isawaitable(result):
                    await result

        async def worker() -> None:
            nonlocal sent
            while sent < requests:
                body = bodies[sent % len(bodies)]
                sent += 1
                started = time.perf_counter()
                try:
                    response = await client.post(
                        f"/v2/models/{model}/infer", content=body, headers=headers
                    )
                except httpx.HTTPError as exc:
                    traffic.transport_errors.append(repr(exc))
                else:
                    traffic.answers.append(
                        Answer(
                            response.status_code,
                            time.perf_counter() - started,
                            response.headers.get("x-served-by"),
                            response.content,
                            response.headers.get("retry-after"),
                        )
                    )
                await fire_due()

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return traffic


async def drive_until(
    url: str,
    done: Callable[[Traffic], bool],
    *,
    timeout_s: float,
    message: str | Callable[[], str],
    requests: int = 50,
    concurrency: int = 4,
    timeout_ms: int = 1000,
    model: str = "digits",
) -> Traffic:
    """Sends batches of ``requests`` until ``done(all traffic so far)`` holds after a batch.

    Returns all the traffic sent; `TimeoutError` (with ``message`` and the failure count) if
    ``done`` still fails once ``timeout_s`` seconds have passed.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    traffic = Traffic()
    while True:
        batch = await drive(
            url, requests=requests, concurrency=concurrency, timeout_ms=timeout_ms, model=model
        )
        traffic.answers += batch.answers
        traffic.transport_errors += batch.transport_errors
        if done(traffic):
            return traffic
        if loop.time() >= deadline:
            text = message() if callable(message) else message
            raise TimeoutError(
                f"timed out after {timeout_s:g}s of traffic ({len(traffic.answers)} answers, "
                f"{traffic.failed} failed) waiting for {text}"
            )
