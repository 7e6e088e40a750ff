"""What the gateway did behind Locust's back during a run, read from its ``/metrics``.

Why: Locust sees one answer per request. A replica killed mid-run costs connect errors and
retries that the client never sees (the retry answered), so Locust's tables show a clean run;
the gateway's counters show what the run cost. `scrape` reads them before and after the load
(``GET /metrics``, with ``$GATEWAY_METRICS_KEY`` as the bearer key where /metrics asks for
one), and `report` prints the difference: retries sent and refused by the budget, hedges, and
the upstream attempts by outcome (connect errors, timeouts, replica 5xx...).
"""

from __future__ import annotations

import os
import urllib.request
from collections import Counter
from collections.abc import Mapping

from prometheus_client.parser import text_string_to_metric_families

KEY_ENV = "GATEWAY_METRICS_KEY"
TIMEOUT_S = 5.0
Sample = tuple[str, tuple[tuple[str, str], ...]]  # (series name, sorted labels)
WANTED = (
    "gateway_retries_total",
    "gateway_retries_refused_total",
    "gateway_hedges_total",
    "gateway_upstream_attempts_total",
    "gateway_upstream_per_try_timeouts_total",
)


def scrape(host: str, environ: Mapping[str, str] = os.environ) -> dict[Sample, float]:
    """The gateway's counters that Locust cannot see; `OSError` or `ValueError` if unread."""
    request = urllib.request.Request(f"{host.rstrip('/')}/metrics")
    if environ.get(KEY_ENV):
        request.add_header("Authorization", f"Bearer {environ[KEY_ENV]}")
    with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): float(sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name in WANTED
    }


def report(before: Mapping[Sample, float], after: Mapping[Sample, float]) -> list[str]:
    """The lines for the run's end: what each counter gained between the two scrapes."""
    gained = {key: value - before.get(key, 0.0) for key, value in after.items()}

    def total(name: str, **match: str) -> int:
        return round(
            sum(
                n
                for (series, labels), n in gained.items()
                if series == name and match.items() <= dict(labels).items()
            )
        )

    attempts: Counter[str] = Counter()
    for (series, labels), n in gained.items():
        if series == "gateway_upstream_attempts_total":
            attempts[dict(labels).get("outcome", "?")] += round(n)
    failed = {"connect_error": attempts["connect_error"]}
    failed |= {k: n for k, n in attempts.items() if k not in ("success", "connect_error") and n}
    return [
        "Gateway /metrics over the run (what Locust's table does not show):",
        f"  retries sent {total('gateway_retries_total')}, refused by the retry budget "
        f"{total('gateway_retries_refused_total')}; hedges {total('gateway_hedges_total')}",
        f"  upstream attempts {sum(attempts.values())}: success {attempts['success']}; "
        + ", ".join(f"{k} {n}" for k, n in failed.items()),
    ]
