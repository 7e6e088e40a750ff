"""The Prometheus rules `gateway slo-rules` writes, checked by Prometheus' own tools.

``promtool check rules`` lints every example config's rules; ``promtool test rules`` feeds them
synthetic counters that burn each SLO's budget at a constant rate just above and just below
each alert's factor, and one burst that has stopped, and expects exactly the alerts the
gateway's own table (`ALERT_RULES`) says fire. promtool is Debian's ``prometheus`` package
(``WITH_PROMTOOL=1 make system``).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

import gateway.slo.rules as rules_module
from gateway.cli import main
from gateway.config import load_config
from gateway.slo.alerts import ALERT_RULES, BURN_WINDOWS, AlertRule
from gateway.slo.config import SloConfig
from gateway.slo.rules import ALERT_NAME, SliSeries, duration, error_ratio, rule_groups
from gateway.telemetry.catalog import SLO, SloFamilies

ROOT = Path(__file__).resolve().parents[3]
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed: WITH_PROMTOOL=1 make system"
)
EXAMPLES = sorted(
    p
    for p in (ROOT / "config").glob("*.yaml")
    if any(m.slos for m in load_config(p).models.values())
)
NAMES = SloFamilies()
SLI = SliSeries(NAMES.events.name, NAMES.bad_events.name, SLO)
EVENTS_PER_MIN = 1000
MINUTES = 3 * 24 * 60 + 60  # past the longest window (3d), so every window is full
# Rules run every 365 min of the 3 days, twelve times, the last at the end: the alerts have no
# `for`, so only the last evaluation decides them, and each reads the ratios its own group has
# just recorded at that instant (rules of a group run in order). The CPU goes with the count.
EVAL_MINUTES = 365
assert MINUTES % EVAL_MINUTES == 0, "the last evaluation falls at the end, where alerts are read"
EVAL_EVERY = f"{EVAL_MINUTES}m"
# Besides the shipped examples: an SLO of one tenant, a half-day period, a strict objective.
EXTRA: dict[str, tuple[SloConfig, ...]] = {
    "tenant-model": (
        SloConfig(
            name="acme-latency",
            kind="latency",
            objective=0.95,
            threshold_ms=20,
            tenant="acme",
            window_days=0.5,
        ),
        SloConfig(name="strict", kind="availability", objective=0.9999, window_days=7),
    ),
}


def _slos(config: Path) -> dict[str, tuple[SloConfig, ...]]:
    return {name: m.slos for name, m in load_config(config).models.items() if m.slos}


def _all_slos() -> dict[str, tuple[SloConfig, ...]]:
    merged: dict[str, tuple[SloConfig, ...]] = {}
    for config in EXAMPLES:
        for model, slos in _slos(config).items():
            merged[model] = tuple({s.name: s for s in (*merged.get(model, ()), *slos)}.values())
    return {**merged, **EXTRA}


def _promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )


def _labels(model: str, slo: SloConfig) -> dict[str, str]:
    labels = {"model": model, "slo": slo.name}
    if slo.tenant is not None:
        labels["tenant"] = slo.tenant
    return labels


def _series(name: str, labels: dict[str, str]) -> str:
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def _expected(model: str, slo: SloConfig, rule: AlertRule) -> dict[str, Any]:
    (group,) = [g for g in rule_groups({model: (slo,)}, SLI)]
    (alert,) = [r for r in group["rules"] if r.get("labels", {}).get("burn_alert") == rule.name]
    labels = {
        **_labels(model, slo),
        "severity": rule.severity,
        "burn_alert": rule.name,
        "long_window": rule.long_window,
        "short_window": rule.short_window,
    }
    assert alert["labels"] == labels
    return {"exp_labels": labels, "exp_annotations": alert["annotations"]}


def _case(slos: dict[str, tuple[SloConfig, ...]], burn: float, stop_min: int = 0) -> dict[str, Any]:
    """Every SLO burning ``burn`` x its budget from the start (errors stop ``stop_min`` before
    the end); the alerts expected are those whose factor is below the burn in both windows."""
    series, expected = [], []
    for model, configs in slos.items():
        for slo in configs:
            labels = _labels(model, slo)
            bad = EVENTS_PER_MIN * burn * slo.error_budget
            burning = MINUTES - stop_min
            tail = f" {bad * burning:.6f}+0x{stop_min - 1}" if stop_min else ""
            series += [
                {
                    "series": _series(SLI.events, {**labels, "tenant": slo.tenant or ""}),
                    "values": f"0+{EVENTS_PER_MIN}x{MINUTES}",
                },
                {
                    "series": _series(SLI.bad_events, {**labels, "tenant": slo.tenant or ""}),
                    "values": f"0+{bad:.6f}x{burning}{tail}",
                },
            ]
            for rule in ALERT_RULES:
                if all(_burn_over(w, burn, stop_min) > rule.factor for w in _windows(rule)):
                    expected.append(_expected(model, slo, rule))
    return {
        "interval": "1m",
        "input_series": series,
        "alert_rule_test": [
            {"eval_time": f"{MINUTES}m", "alertname": ALERT_NAME, "exp_alerts": expected}
        ],
    }


def _windows(rule: AlertRule) -> tuple[str, str]:
    return rule.long_window, rule.short_window


def _burn_over(window: str, burn: float, stop_min: int) -> float:
    """The burn rate a window sees at the end when errors stopped ``stop_min`` ago."""
    minutes = BURN_WINDOWS[window] / 60
    return burn * max(0.0, minutes - stop_min) / minutes


def _cases(slos: dict[str, tuple[SloConfig, ...]]) -> list[dict[str, Any]]:
    cases = []
    for rule in ALERT_RULES:
        cases.append(_case(slos, rule.factor * 1.05))  # just above: this alert fires
        cases.append(_case(slos, rule.factor * 0.95))  # just below: it does not
    # A burst at 20x that stopped 10 minutes ago: the 1h window still burns over 14.4x, the
    # 5m window no longer does, so the fast page resolves while the slower ones still fire.
    cases.append(_case(slos, 20.0, stop_min=10))
    return cases


def _write(tmp_path: Path, groups: list[dict[str, Any]], cases: list[dict[str, Any]]) -> None:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}), encoding="utf-8")
    tests = {"rule_files": ["rules.yaml"], "evaluation_interval": EVAL_EVERY, "tests": cases}
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests, width=1000), encoding="utf-8")


@needs_promtool
@pytest.mark.parametrize("fmt", ["rules", "prometheusrule"])
@pytest.mark.parametrize("config", EXAMPLES, ids=lambda p: p.name)
def test_the_cli_writes_rules_promtool_accepts(config: Path, fmt: str, tmp_path: Path) -> None:
    out = tmp_path / "out.yaml"
    assert main(["slo-rules", str(config), "--format", fmt, "-o", str(out)]) == 0
    doc = yaml.safe_load(out.read_text(encoding="utf-8"))
    groups = doc["groups"] if fmt == "rules" else doc["spec"]["groups"]
    assert len(groups) == sum(len(slos) for slos in _slos(config).values())
    (tmp_path / "plain.yaml").write_text(yaml.safe_dump({"groups": groups}), encoding="utf-8")
    checked = _promtool("check", "rules", "plain.yaml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS" in checked.stdout


@needs_promtool
def test_each_alert_fires_at_its_burn_rate_and_not_below(tmp_path: Path) -> None:
    assert EXAMPLES, "no example config has an SLO"
    _write(tmp_path, rule_groups(_all_slos(), SLI), _cases(_all_slos()))
    tested = _promtool("test", "rules", "tests.yaml", cwd=tmp_path)
    assert tested.returncode == 0, tested.stdout[-4000:] + tested.stderr[-4000:]
    assert "SUCCESS" in tested.stdout


@needs_promtool
def test_the_promtool_test_fails_on_rules_with_other_factors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The test above is not vacuous: rules 10 % off the gateway's own table fail it."""
    off = tuple(
        AlertRule(r.name, r.severity, r.long_window, r.short_window, r.factor * 1.1)
        for r in ALERT_RULES
    )
    monkeypatch.setattr(rules_module, "ALERT_RULES", off)
    ticket = next(r for r in ALERT_RULES if r.severity == "ticket")
    _write(tmp_path, rule_groups(_all_slos(), SLI), [_case(_all_slos(), ticket.factor * 1.05)])
    tested = _promtool("test", "rules", "tests.yaml", cwd=tmp_path)
    assert tested.returncode != 0 and "FAILED" in tested.stderr + tested.stdout


def test_the_rules_read_the_counters_the_gateway_exports() -> None:
    (group,) = rule_groups({"digits": (EXTRA["tenant-model"][0],)}, SLI)
    ratios = {r["record"]: r["expr"] for r in group["rules"] if "record" in r}
    assert set(BURN_WINDOWS) == {w for w in BURN_WINDOWS if error_ratio(w) in ratios}
    five = ratios[error_ratio("5m")]
    assert five == (
        'sum(rate(gateway_slo_bad_events_total{model="digits",slo="acme-latency",'
        'tenant="acme"}[5m])) / sum(rate(gateway_slo_events_total{model="digits",'
        'slo="acme-latency",tenant="acme"}[5m]))'
    )
    period = ratios["gateway_slo:sli_error:ratio_period"]
    assert "[12h]" in period  # the SLO's own period: window_days 0.5


def test_a_selector_narrows_the_counters_and_a_bad_one_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = str(EXAMPLES[0])
    assert main(["slo-rules", config, "--selector", 'namespace="v2-gateway"']) == 0
    text = capsys.readouterr().out
    assert 'tenant="",namespace="v2-gateway"}[5m]' in text
    assert main(["slo-rules", config, "--selector", "namespace=v2-gateway"]) == 2
    assert "--selector" in capsys.readouterr().err


def test_durations() -> None:
    assert [duration(s) for s in (300, 1800, 86_400 * 30, 43_200, 90)] == [
        "5m",
        "30m",
        "30d",
        "12h",
        "90s",
    ]
    with pytest.raises(ValueError):
        duration(0.5)


def test_a_config_without_slos_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["slo-rules", str(ROOT / "config" / "local.yaml")]) == 2
    assert "no model has an SLO" in capsys.readouterr().err
