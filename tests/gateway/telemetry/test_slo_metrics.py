"""SLO series from the /slo document: one alert gauge per severity over several alert rules."""

from __future__ import annotations

from gateway.telemetry.metrics import Metrics
from tests.gateway.telemetry.test_metrics import scrape, value

AVAIL = {"model": "digits", "slo": "avail", "tenant": ""}


def _set(metrics: Metrics, *firing: bool) -> None:
    """The alerts as runtime passes them: one entry per rule, two of them pages."""
    severities = ("page", "page", "ticket")
    alerts = [{"severity": s, "firing": f} for s, f in zip(severities, firing, strict=True)]
    metrics.set_slo(
        {
            "slos": [
                {
                    "name": "avail",
                    "model": "digits",
                    "alerts": alerts,
                    "events_total": 10,
                    "bad_events_total": 1,
                }
            ]
        }
    )


def test_a_severity_fires_while_any_of_its_rules_fires() -> None:
    metrics = Metrics(process=False)
    _set(metrics, True, False, False)  # the fast page fires, the slow one does not (yet)
    s = scrape(metrics)
    assert value(s, "gateway_slo_alert_firing", severity="page", **AVAIL) == 1
    assert value(s, "gateway_slo_alert_firing", severity="ticket", **AVAIL) == 0
    _set(metrics, False, True, True)
    s = scrape(metrics)
    assert value(s, "gateway_slo_alert_firing", severity="page", **AVAIL) == 1
    assert value(s, "gateway_slo_alert_firing", severity="ticket", **AVAIL) == 1
    _set(metrics, False, False, False)
    assert value(scrape(metrics), "gateway_slo_alert_firing", severity="page", **AVAIL) == 0


def test_the_event_counters_are_counters() -> None:
    metrics = Metrics(process=False)
    _set(metrics, False, False, False)
    s = scrape(metrics)
    assert value(s, "gateway_slo_events_total", **AVAIL) == 10
    assert value(s, "gateway_slo_bad_events_total", **AVAIL) == 1
    body, _ = metrics.render()
    assert b"# TYPE gateway_slo_events_total counter" in body
