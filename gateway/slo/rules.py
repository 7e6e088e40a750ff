"""Prometheus rules for every SLO of a config: recording rules and multi-burn-rate alerts.

Shaped as Sloth generates them: per SLO one rule group that records the error ratio over each
burn window from the SLO's counters, the objective, the error budget and what is left of it
over the compliance period, and alerts when a long and a short window both burn faster than a
factor. The windows, factors and severities are the gateway's own alert table (`ALERT_RULES`,
`BURN_WINDOWS`), so Prometheus pages when ``/slo`` does: one table, read by both. A
correctness SLO's alert also needs its short window to hold as many judged answers as the
gateway's own alert does (`gateway.slo.correctness.min_judged`), summed over every instance.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.slo.alerts import ALERT_RULES, BURN_WINDOWS, AlertRule
from gateway.slo.config import SloConfig
from gateway.slo.correctness import min_judged

ALERT_NAME = "GatewaySloErrorBudgetBurn"
OBJECTIVE = "gateway_slo:objective:ratio"
ERROR_BUDGET = "gateway_slo:error_budget:ratio"
PERIOD_DAYS = "gateway_slo:time_period:days"
PERIOD_ERROR_RATIO = "gateway_slo:sli_error:ratio_period"
BUDGET_REMAINING = "gateway_slo:period_error_budget_remaining:ratio"
CURRENT_BURN = "gateway_slo:current_burn_rate:ratio"
_MATCHER = r'[a-zA-Z_][a-zA-Z0-9_]*\s*(=|!=|=~|!~)\s*"(?:[^"\\]|\\.)*"'
# job="x", namespace=~"a|b"
_LABEL_MATCHERS = re.compile(rf"^\s*({_MATCHER}\s*,?\s*)*$")


def error_ratio(window: str) -> str:
    """The recorded error ratio over one burn window (a key of `BURN_WINDOWS`)."""
    return f"gateway_slo:sli_error:ratio_rate{window}"


def recorded_names() -> tuple[str, ...]:
    """Every series the rules record, for dashboards and their tests."""
    windows = tuple(error_ratio(w) for w in BURN_WINDOWS)
    return (
        *windows,
        PERIOD_ERROR_RATIO,
        OBJECTIVE,
        ERROR_BUDGET,
        PERIOD_DAYS,
        BUDGET_REMAINING,
        CURRENT_BURN,
    )


@dataclass(frozen=True, slots=True)
class SliSeries:
    """The counters the rules read, named as the gateway exports them (its metric catalog).

    ``labels`` name one SLO on both (model, SLO name, tenant); ``selector`` is extra label
    matchers (``namespace="v2-gateway"``) that keep other gateways' series out.
    """

    events: str
    bad_events: str
    labels: tuple[str, str, str]
    selector: str = ""

    def __post_init__(self) -> None:
        if not _LABEL_MATCHERS.match(self.selector):
            raise ValueError(f'selector {self.selector!r}: want label matchers, e.g. job="gateway"')


def duration(seconds: float) -> str:
    """A PromQL duration in the largest unit that divides it (``3d``, ``30m``, ``90s``)."""
    whole = round(seconds)
    if whole <= 0 or whole != seconds:
        raise ValueError(f"{seconds} s is not a whole, positive number of seconds")
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if whole % size == 0:
            return f"{whole // size}{unit}"
    return f"{whole}s"


def _number(value: float) -> str:
    # 1 - 0.999 is 0.0010000000000000009: written 0.001
    return format(value, ".12g")


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _slo_labels(model: str, slo: SloConfig, sli: SliSeries) -> dict[str, str]:
    """The labels of one SLO's series (no tenant label for an SLO over every tenant)."""
    model_label, slo_label, tenant_label = sli.labels
    labels = {model_label: model, slo_label: slo.name}
    if slo.tenant is not None:
        labels[tenant_label] = slo.tenant
    return labels


def _matchers(labels: Mapping[str, str], extra: str = "") -> str:
    parts = [f"{k}={_quote(v)}" for k, v in labels.items()]
    if extra.strip().rstrip(","):
        parts.append(extra.strip().rstrip(","))
    return "{" + ",".join(parts) + "}"


def _alert(
    rule: AlertRule,
    model: str,
    slo: SloConfig,
    labels: Mapping[str, str],
    selector: str,
    events: str,
) -> dict[str, Any]:
    """``events``: the SLO's events counter with its matchers (a correctness SLO's alert
    waits for enough of them in its short window)."""
    threshold = f"({_number(rule.factor)} * {_number(slo.error_budget)})"
    long_, short = error_ratio(rule.long_window), error_ratio(rule.short_window)
    what = f"{model}/{slo.name}"
    expr = f"({long_}{selector} > {threshold}) and ({short}{selector} > {threshold})"
    if slo.kind == "correctness":
        needed = min_judged(slo.error_budget, rule.factor)
        window = duration(BURN_WINDOWS[rule.short_window])
        expr += f" and on() (sum(increase({events}[{window}])) >= {needed})"
    return {
        "alert": ALERT_NAME,
        "expr": expr,
        "labels": {
            **labels,
            "severity": rule.severity,
            "burn_alert": rule.name,
            "long_window": rule.long_window,
            "short_window": rule.short_window,
        },
        "annotations": {
            "summary": f"SLO {what} ({slo.kind}, objective {_number(slo.objective)}): error "
            f"budget burning over {_number(rule.factor)}x in {rule.long_window} and "
            f"{rule.short_window}",
            "description": f"Burning {_number(rule.factor)}x spends the "
            f"{_number(slo.window_days)}-day error budget in "
            f"{format(slo.window_days / rule.factor, '.3g')} days. The gateway's own view: "
            "GET /slo (the same alert table).",
        },
    }


def _record(name: str, expr: str, labels: Mapping[str, str]) -> dict[str, Any]:
    return {"record": name, "expr": expr, "labels": dict(labels)}


def slo_group(model: str, slo: SloConfig, sli: SliSeries) -> dict[str, Any]:
    """One SLO's rule group: error ratios per burn window, budget records, then alerts."""
    labels = _slo_labels(model, slo, sli)
    model_label, slo_label, tenant_label = sli.labels
    # tenant="" matches the series of an SLO over every tenant (exported with no tenant)
    counters = _matchers(
        {model_label: model, slo_label: slo.name, tenant_label: slo.tenant or ""}, sli.selector
    )
    own = _matchers(labels)
    rules: list[dict[str, Any]] = []
    for window, seconds in sorted(BURN_WINDOWS.items(), key=lambda item: item[1]):
        rng = duration(seconds)
        bad = f"sum(rate({sli.bad_events}{counters}[{rng}]))"
        rules.append(
            _record(
                error_ratio(window), f"{bad} / sum(rate({sli.events}{counters}[{rng}]))", labels
            )
        )
    shortest = error_ratio(min(BURN_WINDOWS, key=BURN_WINDOWS.__getitem__)) + own
    period = duration(slo.window_s)
    budget = _number(slo.error_budget)
    rules += [
        _record(OBJECTIVE, f"vector({_number(slo.objective)})", labels),
        _record(ERROR_BUDGET, f"vector({budget})", labels),
        _record(PERIOD_DAYS, f"vector({_number(slo.window_days)})", labels),
        _record(CURRENT_BURN, f"{shortest} / {budget}", labels),
        _record(
            PERIOD_ERROR_RATIO,
            f"sum_over_time({shortest}[{period}]) / count_over_time({shortest}[{period}])",
            labels,
        ),
        _record(BUDGET_REMAINING, f"1 - {PERIOD_ERROR_RATIO}{own} / {budget}", labels),
    ]
    events = f"{sli.events}{counters}"
    rules += [_alert(rule, model, slo, labels, own, events) for rule in ALERT_RULES]
    return {"name": f"gateway-slo/{model}/{slo.name}", "rules": rules}


def rule_groups(slos: Mapping[str, Sequence[SloConfig]], sli: SliSeries) -> list[dict[str, Any]]:
    """Every SLO's group, models in the config's order (a plain rules file's ``groups``)."""
    return [slo_group(model, slo, sli) for model, configs in slos.items() for slo in configs]


def prometheus_rule(
    groups: list[dict[str, Any]], name: str, namespace: str | None, labels: Mapping[str, str]
) -> dict[str, Any]:
    """The groups as a prometheus-operator ``PrometheusRule`` (``labels``: for its ruleSelector)."""
    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    metadata["labels"] = {
        "app.kubernetes.io/name": "gateway",
        "app.kubernetes.io/part-of": "v2-gateway",
        **labels,
    }
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": metadata,
        "spec": {"groups": groups},
    }
