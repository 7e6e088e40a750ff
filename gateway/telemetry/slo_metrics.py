"""SLO gauges (objective, error budget remaining, burn rates, alerts) from the /slo document.

The SLO recorder already computes everything for ``GET /slo``; exporting that same document
keeps /metrics and /slo from ever disagreeing, and costs nothing per request: call
``Metrics.set_slo(recorder.document())`` from a scrape hook (``Metrics.on_scrape``). The
families themselves are declared with every other metric, in `gateway.telemetry.catalog`.
Every series names the SLO by ``model`` and ``slo`` (its name within the model) and
``tenant`` ("" for an SLO over every tenant's requests, which Prometheus reads as no label).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from gateway.telemetry.catalog import SloFamilies


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def set_slos(families: SloFamilies, doc: Mapping[str, Any] | Iterable[Mapping[str, Any]]) -> None:
    """Replaces every SLO series with those in ``doc``.

    Expected shape (unknown keys ignored, missing ones skipped)::

        {"slos": [{"name": "availability",
                   "model": "digits",
                   "tenant": "acme",
                   "objective": 0.999,
                   "budget_remaining": 0.83,
                   "burn_rates": {"5m": 14.2, "1h": 2.1, "6h": 0.9},
                   "alerts": {"page": true, "ticket": false},
                   "events_total": 1200, "bad_events_total": 3}]}

    ``model`` and ``tenant`` may be missing or null (""). ``slos`` may also be a mapping
    from name to entry, and ``doc`` the bare list;
    ``burn_rates`` may be a list of ``{"window": "5m", "burn_rate": 14.2}``, and ``alerts``
    a list of ``{"severity": "page", "firing": true}``.
    """
    for family in families.families:
        family.clear()
    for name, entry in _entries(doc):
        set_slo(
            families,
            name,
            model=str(entry.get("model") or ""),
            tenant=str(entry.get("tenant") or ""),
            objective=_number(entry.get("objective")),
            budget_remaining=_number(
                entry.get("budget_remaining", entry.get("error_budget_remaining"))
            ),
            burn_rates=_pairs(entry.get("burn_rates"), "window", ("burn_rate", "rate")),
            alerts=_pairs(entry.get("alerts"), "severity", ("firing",), combine=max),
            events=_number(entry.get("events_total")),
            bad_events=_number(entry.get("bad_events_total")),
            wrong_rate_interval=_interval(entry.get("wrong_rate_interval")),
        )


def set_slo(
    families: SloFamilies,
    name: str,
    *,
    model: str = "",
    tenant: str = "",
    objective: float | None = None,
    budget_remaining: float | None = None,
    burn_rates: Mapping[str, float] | None = None,
    alerts: Mapping[str, float] | None = None,
    events: float | None = None,
    bad_events: float | None = None,
    wrong_rate_interval: tuple[float, float] | None = None,
) -> None:
    """Sets one SLO's gauges (the simple-arguments form of `set_slos`)."""
    labels = (model, name, tenant)
    if objective is not None:
        families.objective.labels(*labels).set(objective)
    if budget_remaining is not None:
        families.budget.labels(*labels).set(budget_remaining)
    for window, rate in (burn_rates or {}).items():
        families.burn.labels(*labels, window).set(rate)
    for severity, firing in (alerts or {}).items():
        families.alert.labels(*labels, severity).set(1.0 if firing else 0.0)
    if events is not None:
        families.events.labels(*labels).set(events)
    if bad_events is not None:
        families.bad_events.labels(*labels).set(bad_events)
    if wrong_rate_interval is not None:
        families.wrong_rate.labels(*labels, "low").set(wrong_rate_interval[0])
        families.wrong_rate.labels(*labels, "high").set(wrong_rate_interval[1])


def _interval(value: object) -> tuple[float, float] | None:
    """``[low, high]`` as numbers, or None."""
    if not isinstance(value, list | tuple) or len(value) != 2:
        return None
    low, high = _number(value[0]), _number(value[1])
    return None if low is None or high is None else (low, high)


def _entries(doc: Mapping[str, Any] | Iterable[Mapping[str, Any]]) -> list[tuple[str, Any]]:
    slos = doc.get("slos", ()) if isinstance(doc, Mapping) else doc
    if isinstance(slos, Mapping):
        return [(str(k), v) for k, v in slos.items() if isinstance(v, Mapping)]
    return [
        (str(e["name"]), e) for e in slos if isinstance(e, Mapping) and e.get("name") is not None
    ]


def _pairs(
    value: object,
    key: str,
    value_keys: tuple[str, ...],
    combine: Callable[[float, float], float] | None = None,
) -> dict[str, float]:
    """``{"5m": 1.2}`` or ``[{"window": "5m", "burn_rate": 1.2}]`` as ``{"5m": 1.2}``.

    ``combine`` merges entries of one key (two page alerts: firing if either fires); without
    it the last one wins.
    """
    out: dict[str, float] = {}
    if isinstance(value, Mapping):
        items: Iterable[tuple[object, object]] = value.items()
    elif isinstance(value, list):
        items = [
            (e.get(key), next((e[k] for k in value_keys if k in e), None))
            for e in value
            if isinstance(e, Mapping)
        ]
    else:
        return out
    for k, v in items:
        number = 1.0 if v is True else 0.0 if v is False else _number(v)
        if k is not None and number is not None:
            name = str(k)
            out[name] = combine(out[name], number) if combine and name in out else number
    return out


def slo_gauges(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The /slo document reshaped for `set_slos`: one entry per model and SLO."""
    entries = []
    for model, entry in doc.get("models", {}).items():
        for slo in entry.get("slos", []):
            entries.append(
                {
                    "name": slo["name"],
                    "model": model,
                    "tenant": slo.get("tenant"),
                    "objective": slo["objective"],
                    "budget_remaining": slo["error_budget"]["remaining"],
                    "burn_rates": slo["burn_rates"],
                    "alerts": [
                        {"severity": a["severity"], "firing": a["firing"]} for a in slo["alerts"]
                    ],
                    "events_total": slo["counted_here"]["total"],
                    "bad_events_total": slo["counted_here"]["bad"],
                    "wrong_rate_interval": slo.get("wrong_rate_interval"),
                }
            )
    return {"slos": entries}
