"""Answers folded in batches report what answers folded one by one report, and every reader
folds first: the metrics, the statistics, the SLOs and the dashboard's history."""

from __future__ import annotations

import math
import random
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from gateway.config import parse_config
from gateway.control.runtime import Gateway
from gateway.telemetry.catalog import BYTES_BUCKETS, LATENCY_BUCKETS, ROWS_BUCKETS
from gateway.telemetry.series import Buckets
from tests.support.clock import FakeClock

CONFIG: dict[str, Any] = {
    "pools": {
        "p": {
            "model": "m",
            "replicas": [
                {"id": "r0", "url": "http://127.0.0.1:9000"},
                {"id": "r1", "url": "http://127.0.0.1:9001"},
            ],
        },
        "q": {"model": "m", "replicas": [{"id": "q0", "url": "http://127.0.0.1:9002"}]},
    },
    "models": {
        "digits": {
            "pool": "p",
            "slos": [
                {"name": "availability", "kind": "availability", "objective": 0.99},
                {"name": "fast", "kind": "latency", "objective": 0.9, "threshold_ms": 50},
            ],
        },
        "plain": {"pool": "q"},
    },
    "tenants": {"acme": {"key_env": "ANSWERS_TEST_KEY"}},
}

BOUNDS = sorted({*LATENCY_BUCKETS, *BYTES_BUCKETS, *ROWS_BUCKETS})


@given(
    st.lists(st.one_of(st.sampled_from(BOUNDS), st.floats(0, 1e8, allow_nan=False)), max_size=60)
)
def test_a_batch_lands_in_the_buckets_one_by_one_would(values: list[float]) -> None:
    for bounds in (LATENCY_BUCKETS, BYTES_BUCKETS, ROWS_BUCKETS):
        one, batch = Buckets(bounds), Buckets(bounds)
        for value in values:
            one.observe(value)
        batch.observe_all(values)
        assert batch.counts == one.counts
        assert math.isclose(batch.sum, one.sum, rel_tol=1e-12, abs_tol=1e-12)


def _answers(clock: FakeClock, seed: int) -> list[tuple[Any, ...]]:
    """A mixed second of answers: models, outcomes, tenants, fallbacks, sizes, bounds."""
    rng = random.Random(seed)
    out = []
    for _ in range(400):
        model = rng.choice(["digits", "digits", "plain", "unknown-model"])
        status, served_by, degraded = rng.choice(
            [
                (200, "r0", None),
                (200, "r1", None),
                (503, "none", None),
                (429, "", None),
                (200, "fallback/small", "no_replica"),
                (200, "vote", "vote_no_quorum"),
            ]
        )
        latency = rng.choice([*LATENCY_BUCKETS[:6], rng.uniform(0, 0.2)])
        clock.advance(rng.uniform(0, 0.01))
        out.append(
            (
                model,
                status,
                served_by,
                latency,
                degraded,
                rng.choice([None, 0.05, 2.0]),
                rng.choice(["anonymous", "acme"]),
                rng.choice([-1, 300, 1024]),
                rng.choice([-1, 80, 65536]),
                rng.choice([-1, 1, 4]),
                clock.now(),
            )
        )
    return out


def _observe(gateway: Gateway, answer: tuple[Any, ...]) -> None:
    model, status, served_by, latency, degraded, deadline, tenant, req, resp, rows, at = answer
    gateway.observe(
        model, status, served_by, latency, degraded, deadline, tenant, req, resp, rows, at
    )


def _samples(gateway: Gateway) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    body, _ = gateway.metrics.render()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
        if not s.name.startswith(("process_", "python_"))
    }


def test_answers_folded_together_report_what_answers_folded_one_by_one_do() -> None:
    config = parse_config(CONFIG)
    one_clock, batch_clock = FakeClock(), FakeClock()
    one, batch = Gateway(config, clock=one_clock), Gateway(config, clock=batch_clock)
    answers = _answers(FakeClock(), seed=7)
    for answer in answers:
        one_clock.advance_to(answer[-1])
        batch_clock.advance_to(answer[-1])
        _observe(one, answer)
        one.answers.fold()  # as when each request updated the telemetry itself
        _observe(batch, answer)
    assert len(batch.answers.answers) == len(answers)  # nothing folded yet: no reader came
    for clock in (one_clock, batch_clock):
        clock.advance(0.5)

    one_samples, batch_samples = _samples(one), _samples(batch)  # the scrape folds first
    assert not batch.answers.answers
    assert one_samples.keys() == batch_samples.keys()
    for key, value in one_samples.items():
        if key[0].endswith("_sum"):  # the same values added in another grouping
            assert math.isclose(batch_samples[key], value, rel_tol=1e-9), key
        else:
            assert batch_samples[key] == value, key
    assert any(k[0] == "gateway_requests_total" and v > 1 for k, v in batch_samples.items())
    assert batch.statistics() == one.statistics()
    latest = max(a[-1] for a in answers if a[0] == "digits")
    assert batch.statistics("digits")["model_stats"][0]["last_inference"] == round(
        (batch_clock.wall() - (batch_clock.now() - latest)) * 1000
    )  # the latest answer's wall time, not the fold's
    assert batch.slo.to_json() == one.slo.to_json()
    one.history.sample()
    batch.history.sample()
    assert list(batch.history.samples) == list(one.history.samples)


def test_every_reader_folds_the_answers_recorded_before_it() -> None:
    clock = FakeClock()
    gateway = Gateway(parse_config(CONFIG), clock=clock)

    def answered() -> None:
        gateway.observe("digits", 503, "none", 0.01, None)

    answered()
    samples = _samples(gateway)
    labels = {
        "code": "503",
        "model": "digits",
        "route": "single",
        "served_by": "none",
        "tenant": "anonymous",
        "version": "1",
    }
    key = ("gateway_requests_total", tuple(sorted(labels.items())))
    assert samples[key] == 1
    answered()
    [entry] = gateway.statistics("digits")["model_stats"]
    assert entry["inference_stats"]["fail"]["count"] == 2
    answered()
    availability = gateway.slo.to_json()["models"]["digits"]["slos"][0]
    assert availability["events"] == {"total": 3, "good": 0, "bad": 3, "degraded": 0}
    answered()
    clock.advance(1.0)
    gateway.history.sample()
    assert list(gateway.history.samples)[-1]["models"]["digits"]["error_share"] == 1.0
    assert not gateway.answers.answers
