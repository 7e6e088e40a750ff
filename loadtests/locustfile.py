"""Locust load for the gateway: V2 infer users for `digits` and `digits-vote`, checked answers.

Bodies are rows of the digits test split (batch 1 and batches of 2-8); every answer is checked
for status, V2 schema and, against labels computed once from the same ONNX models, correctness
(loadtests/chaos/checks.py). With CHAOS_EVENTS=FILE each request also appends one JSON line
to FILE for the chaos runner. One command, against `make run` (gateway on :8000):

    .venv/bin/locust -f loadtests/locustfile.py --headless -u 16 -r 16 -t 60s \
        --host http://127.0.0.1:8000 --only-summary DigitsUser

At the very end, after Locust's tables, it prints how the successes were answered: plainly,
voted (by tally) or degraded (by reason: the fallback answered), per model (a degraded answer
is a success for Locust's table, the client got a right answer, but worth seeing), and what the
gateway's /metrics counted over the run that Locust cannot see: retries, connect errors and
other failed upstream attempts (`loadtests.gateway_counters`; ``$GATEWAY_METRICS_KEY`` where
/metrics takes a key).

Pacing: each user sends at most ``--rate`` requests per second (Locust's
``constant_throughput``: it waits out the rest of each 1/rate interval), so the offered load is
about users × rate requests/s until the gateway is slower than 1/rate per request; ``--rate 0``
is a closed loop (each user sends its next request when the answer comes back), which measures
the most the gateway sustains, not how it behaves at a given load.

Mix: name the user classes (DigitsUser, VoteUser; none named = both, weighted 3:1; name
them before ``--tags``, which takes every word after it), pick tasks by tag (``--tags single``
or ``--tags batch``), the shape with ``--shape steady|step|spike`` (step: ``--step-users
1,2,4,8 --step-s 5``; spike: -u/4, then -u for the middle 20 % of -t), the pace with ``--rate``
(requests/s per user, default 20, 0 = closed loop), the deadline with ``--deadline-ms``, and
send every user's traffic to one model name with ``--model`` (e.g. ``digits-mlp``, which a
replica serves directly).
"""

from __future__ import annotations

import random
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from locust import LoadTestShape, events, tag, task
from locust.contrib.fasthttp import FastHttpUser
from locust.user.wait_time import constant_throughput

from loadtests.chaos.checks import check_answer
from loadtests.chaos.events import Event, EventLog
from loadtests.chaos.reference import FALLBACK_DIR, FALLBACK_PREFIX, Reference, make_samples
from loadtests.chaos.shapes import SHAPES, plan
from loadtests.gateway_counters import report, scrape
from replicas.dataset import load_split

SINGLE: list[Any] = []  # Samples of one row
BATCH: list[Any] = []  # Samples of 2-8 rows
STATE: dict[str, Any] = {"reference": None, "log": None, "counters": []}
RULE = "=" * 100
ANSWERS: Counter[tuple[str, str]] = Counter()  # (model, "plain" | "voted 3/3" | "degraded: x")


@events.init_command_line_parser.add_listener  # type: ignore[untyped-decorator]
def _arguments(parser: Any) -> None:
    group = parser.add_argument_group("gateway load (loadtests/locustfile.py)")
    group.add_argument("--shape", choices=SHAPES, default="steady", help="load shape")
    group.add_argument("--step-users", default="", help="step shape: users per step, e.g. 1,2,4")
    group.add_argument("--step-s", type=float, default=0.0, help="step shape: seconds per step")
    group.add_argument("--rate", type=float, default=20.0, help="requests/s per user; 0 = no wait")
    group.add_argument("--deadline-ms", type=int, default=1000, help="x-request-timeout-ms")
    group.add_argument("--model", default="", help="send all users' requests to this model")
    group.add_argument("--batch-max", type=int, default=8, help="largest batch of the batch task")
    group.add_argument("--no-reference", action="store_true", help="skip the correctness check")


@events.init.add_listener  # type: ignore[untyped-decorator]
def _prepare(environment: Any, **_: Any) -> None:
    options = environment.parsed_options
    reference = None if options.no_reference else Reference()
    x = reference.x if reference is not None else load_split().X_test
    SINGLE[:] = make_samples(x, [1], len(x), seed=1)
    BATCH[:] = make_samples(x, range(2, max(2, options.batch_max) + 1), 512, seed=2)
    if reference is not None:
        names = [options.model] if options.model else [u.model for u in (DigitsUser, VoteUser)]
        fallbacks = [FALLBACK_PREFIX + p.stem for p in FALLBACK_DIR.glob("*.onnx")]
        for name in [*names, *fallbacks]:  # computed now, not on the first answer
            reference.labels(name)
    STATE["reference"], STATE["log"] = reference, EventLog.from_env()


@events.test_start.add_listener  # type: ignore[untyped-decorator]
@events.test_stop.add_listener  # type: ignore[untyped-decorator]
def _scrape_gateway(environment: Any, **_: Any) -> None:
    """The gateway's counters at the start and at the end of the load (or why not)."""
    try:
        STATE["counters"].append(scrape(environment.host or ""))
    except (OSError, ValueError) as exc:
        STATE["counters"].append(f"gateway /metrics not read: {exc}")


@events.quitting.add_listener  # type: ignore[untyped-decorator]
def _close(**_: Any) -> None:
    if STATE["log"] is not None:
        STATE["log"].close()


@events.quit.add_listener  # type: ignore[untyped-decorator]
def _summary(**_: Any) -> None:
    """Printed after Locust's own tables and on their stream (stderr, as Locust logs them),
    so they are the last lines of the run, not lost between log lines."""
    text = final_report(ANSWERS, STATE["counters"])
    print(f"{RULE}\n{text}\n{RULE}", file=sys.stderr, flush=True)


def final_report(answers: Counter[tuple[str, str]], counters: list[Any]) -> str:
    """How the answers were made, then what the gateway counted between the two scrapes."""
    problem = next((c for c in counters if isinstance(c, str)), None)
    if problem is not None:
        lines = [problem]
    elif len(counters) == 2:
        lines = report(*counters)
    else:
        lines = ["gateway /metrics: no load ran"]
    return "\n".join([answers_summary(answers), *lines])


def answers_summary(answers: Counter[tuple[str, str]]) -> str:
    """How the successful answers were made, per model (printed after Locust's tables)."""
    lines = ["Answers (successes) by how they were made:"]
    for model in sorted({m for m, _ in answers}):
        kinds = {k: n for (m, k), n in answers.items() if m == model}
        total = sum(kinds.values())
        shown = ", ".join(f"{k} {n} ({100 * n / total:.1f} %)" for k, n in sorted(kinds.items()))
        lines.append(f"  {model}: {total}: {shown}")
    if len(lines) == 1:
        lines.append("  none")
    return "\n".join(lines)


class InferUser(FastHttpUser):
    """Posts V2 infer requests for ``model`` and checks every answer."""

    abstract = True
    model = "digits"
    network_timeout = 10.0
    connection_timeout = 5.0

    def on_start(self) -> None:
        options = self.environment.parsed_options
        self.target = options.model or self.model
        self.path = f"/v2/models/{self.target}/infer"
        self.headers = {
            "content-type": "application/json",
            "x-request-timeout-ms": str(options.deadline_ms),
        }
        self._pace = constant_throughput(options.rate) if options.rate > 0 else None

    def wait_time(self) -> float:
        return float(self._pace(self)) if self._pace is not None else 0.0

    @tag("single")
    @task(3)
    def single(self) -> None:
        self._infer(random.choice(SINGLE), "batch 1")

    @tag("batch")
    @task(1)
    def batch(self) -> None:
        self._infer(random.choice(BATCH), "batch 2+")

    def _infer(self, sample: Any, kind: str) -> None:
        name = f"{self.target} {kind}"
        with self.client.post(
            self.path, data=sample.body, headers=self.headers, name=name, catch_response=True
        ) as response:
            status = int(response.status_code or 0)
            headers = response.headers
            verdict = check_answer(
                status,
                response.content or b"",
                lambda key: headers.get(key) if headers is not None else None,
                self.target,
                sample.rows,
                STATE["reference"],
            )
            if verdict.error:
                response.failure(f"{verdict.error}: {verdict.detail}")
            elif verdict.wrong:
                response.failure(f"wrong answer: {verdict.detail}")
            else:
                response.success()
                kind = "plain"
                if verdict.degraded:
                    kind = f"degraded: {verdict.reason}"
                elif verdict.vote:
                    kind = f"voted {verdict.vote}"
                ANSWERS[(self.target, kind)] += 1
            log = STATE["log"]
            if log is not None:
                meta = response.request_meta
                log.write(
                    Event(
                        t=float(meta["start_time"]),
                        ms=float(meta["response_time"]),
                        model=self.target,
                        rows=len(sample.rows),
                        status=status,
                        error=verdict.error,
                        degraded=verdict.degraded,
                        wrong=verdict.wrong,
                        reason=verdict.reason,
                        vote=verdict.vote,
                        served_by=verdict.served_by,
                    )
                )


class DigitsUser(InferUser):
    """The plain model: one pool behind `digits`."""

    model = "digits"
    weight = 3


class VoteUser(InferUser):
    """The voted model: `digits-vote`, a majority over three diverse versions."""

    model = "digits-vote"
    weight = 1


class Shape(LoadTestShape):
    """steady (-u for -t), step (levels of users) or spike (-u/4, then -u mid-run, then -u/4)."""

    use_common_options = True

    def tick(self) -> tuple[int, float] | None:
        assert self.runner is not None, "Locust sets the runner before the first tick"
        options = self.runner.environment.parsed_options
        assert options is not None
        steps = [int(s) for s in options.step_users.split(",") if s.strip()]
        return plan(
            options.shape,
            time.perf_counter() - float(self.start_time),
            users=options.num_users,
            spawn_rate=options.spawn_rate,
            run_time_s=options.run_time,
            steps=steps,
            step_s=options.step_s or None,
        )
