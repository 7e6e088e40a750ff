"""The correctness SLO: its estimate's interval, its alerts' minimum of judged answers, its
Prometheus rules, and the burn policy's vote it engages.

The property the SLO is shown with: the stated 95 % interval holds the true wrong rate at
least 94.5 % of the time (within half a point of its level: the continuity-corrected Wilson
interval dips just below 95 % at a few small counts, as `gateway.slo.correctness` says),
whatever the rate and the audit count. It is checked exactly, not by sampling: for a rate p
and n audits, the coverage is the sum over every wrong count k of P(k; n, p) where the
interval of (k, n) holds p, computed from the binomial distribution.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.slo.alerts import ALERT_RULES
from gateway.slo.config import BurnPolicyConfig, SloConfig, VoteEscalationConfig
from gateway.slo.correctness import min_judged, wrong_rate_interval
from gateway.slo.engine import SloBook, SloTracker
from gateway.slo.escalation import VoteEscalation
from gateway.slo.rules import rule_groups
from tests.gateway.slo.test_rules import SLI, _promtool, needs_promtool
from tests.support.clock import FakeClock

CORRECT = SloConfig(name="right", kind="correctness", objective=0.999)


def _binomial(n: int, p: float) -> np.ndarray:
    """P(k; n, p) for k = 0..n, in log space (no underflow at large n)."""
    k = np.arange(n + 1)
    lgamma = np.vectorize(math.lgamma)
    log = lgamma(n + 1) - lgamma(k + 1) - lgamma(n - k + 1)
    log = log + k * math.log(p) + (n - k) * math.log1p(-p)
    return np.asarray(np.exp(log))


def coverage(n: int, p: float) -> float:
    """How often the interval of a count drawn from Binomial(n, p) holds p: exactly."""
    pmf = _binomial(n, p)
    held = [low <= p <= high for low, high in (wrong_rate_interval(k, n) for k in range(n + 1))]
    return float(pmf[np.array(held)].sum())


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    rate=st.floats(min_value=0.001, max_value=0.3),
    audits=st.integers(min_value=20, max_value=3000),
)
def test_the_interval_holds_the_true_wrong_rate_at_its_stated_level(
    rate: float, audits: int
) -> None:
    # 95 % stated, held to within half a point: the worst case over these rates and counts
    # is 94.9 % (n = 22 audits, a rate near 0.0024), found on a dense grid
    assert coverage(audits, rate) >= 0.945


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    rate=st.sampled_from([0.0, 0.005, 0.02, 0.033, 0.1]),
    audits=st.integers(min_value=1, max_value=2000),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
)
def test_the_slo_reports_the_audits_wrong_share_and_its_interval(
    rate: float, audits: int, seed: int
) -> None:
    """Audits of a replica set that answers wrong at ``rate``: the SLO's estimate is exactly the
    wrong share it judged, and its interval is the one the property above holds for."""
    clock = FakeClock()
    tracker = SloTracker("digits", CORRECT, clock)
    rng = random.Random(seed)
    wrong = 0
    for _ in range(audits):
        shown_wrong = rng.random() < rate
        wrong += shown_wrong
        tracker.judge(not shown_wrong, "audit")
    doc = tracker.to_json()
    assert doc["wrong_rate"] == round(wrong / audits, 6)
    low, high = wrong_rate_interval(wrong, audits)
    assert doc["wrong_rate_interval"] == [round(low, 6), round(high, 6)]
    assert doc["sli_interval"] == [round(1 - high, 6), round(1 - low, 6)]
    assert low <= wrong / audits <= high
    assert doc["sources"] == {"audit": {"judged": audits, "wrong": wrong}}


def test_the_interval_at_its_edges() -> None:
    assert wrong_rate_interval(0, 0) == (0.0, 1.0)
    low, high = wrong_rate_interval(0, 1000)
    assert low == 0.0 and 0.003 < high < 0.006  # no wrong answer is not "exactly 0"
    low, high = wrong_rate_interval(1000, 1000)
    assert high == 1.0 and low > 0.99


def test_an_alert_needs_as_many_judged_answers_as_its_rate_can_be_seen_in() -> None:
    assert min_judged(0.001, 14.4) == 207  # (1 - 0.0144)^207 < 5 %
    assert min_judged(0.001, 6.0) == 498
    assert min_judged(0.01, 14.4) == 20
    assert (1 - 14.4 * 0.001) ** 206 > 0.05 > (1 - 14.4 * 0.001) ** 207
    assert min_judged(0.5, 14.4) == 1


def test_answers_are_no_events_of_a_correctness_slo() -> None:
    clock = FakeClock()
    book = SloBook({"digits": (CORRECT,)}, clock)
    book.record("digits", 500, 0.01)
    book.record("digits", 200, 0.01)
    book.judge("digits", False, "golden")
    tracker = book.trackers["digits"][0]
    assert tracker.window.counts(3600).total == 1
    assert tracker.sources == {"golden": [1, 1]}


def test_a_correctness_alert_fires_only_on_enough_judged_answers() -> None:
    clock = FakeClock()
    book = SloBook({"digits": (CORRECT,)}, clock)
    for _ in range(150):
        book.judge("digits", True, "audit")
    for _ in range(50):  # 25 % wrong: a burn of 250x, on 200 judged answers (207 needed)
        book.judge("digits", False, "audit")
    book.evaluate()
    assert book.trackers["digits"][0].burn_rates["5m"] > 200
    assert not book.burning("digits")
    for _ in range(10):
        book.judge("digits", False, "audit")
    book.evaluate()
    assert book.burning("digits")


def test_the_vote_engages_on_a_correctness_burn_and_recovers_after_recover_s() -> None:
    clock = FakeClock()
    switches: list[tuple[str, bool, str]] = []
    escalation = VoteEscalation("digits", VoteEscalationConfig(enabled=True, recover_s=30), clock)
    escalation.update(True, "burning", lambda *s: switches.append(s))
    assert escalation.engaged and "burning" in (escalation.reason or "")
    escalation.update(False, "", lambda *s: switches.append(s))  # the burn stopped: quiet from now
    clock.advance(29)
    escalation.update(False, "", lambda *s: switches.append(s))
    assert escalation.engaged
    escalation.update(True, "again", lambda *s: switches.append(s))  # a burn restarts the count
    clock.advance(29)
    escalation.update(False, "", lambda *s: switches.append(s))
    clock.advance(30)
    escalation.update(False, "", lambda *s: switches.append(s))
    assert not escalation.engaged
    assert [(m, e) for m, e, _ in switches] == [("digits", True), ("digits", False)]


def test_only_a_correctness_burn_engages_the_vote() -> None:
    clock = FakeClock()
    availability = SloConfig(name="up", kind="availability", objective=0.99)
    policy = BurnPolicyConfig(vote=VoteEscalationConfig(enabled=True))
    book = SloBook({"digits": (availability, CORRECT)}, clock, policies={"digits": policy})
    for _ in range(100):
        book.record("digits", 503, 0.01)
    book.evaluate()
    assert book.burning("digits") and "digits" not in book.escalated
    for _ in range(300):
        book.judge("digits", False, "audit")
    book.evaluate()
    assert "digits/right" in book.escalated["digits"]


@needs_promtool
def test_correctness_alerts_pass_promtool_and_wait_for_enough_judged_answers(
    tmp_path: Path,
) -> None:
    """At 30x its budget, the alert fires on 1,000 judged answers a minute and not on 20 (100
    in its 5 min window, fewer than the 207 it needs)."""
    groups = rule_groups({"busy": (CORRECT,), "sparse": (CORRECT,)}, SLI)
    minutes = 120
    series = []
    for model, per_min in (("busy", 1000), ("sparse", 20)):
        labels = f'model="{model}",slo="right",tenant=""'
        bad = per_min * 30 * CORRECT.error_budget
        series += [
            {"series": f"{SLI.events}{{{labels}}}", "values": f"0+{per_min}x{minutes}"},
            {"series": f"{SLI.bad_events}{{{labels}}}", "values": f"0+{bad:.6f}x{minutes}"},
        ]
    page = ALERT_RULES[0]
    (alert,) = [r for r in groups[0]["rules"] if r.get("labels", {}).get("burn_alert") == page.name]
    assert "increase(" in alert["expr"] and ">= 207" in alert["expr"]
    case = {
        "interval": "1m",
        "input_series": series,
        "alert_rule_test": [
            {
                "eval_time": f"{minutes}m",
                "alertname": "GatewaySloErrorBudgetBurn",
                "exp_alerts": [
                    {"exp_labels": alert["labels"], "exp_annotations": alert["annotations"]}
                ],
            }
        ],
    }
    for group in groups:  # only the fast page is asked about: drop the slower alerts
        kept = [
            r for r in group["rules"] if r.get("labels", {}).get("burn_alert") in (None, page.name)
        ]
        group["rules"] = kept
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}), encoding="utf-8")
    tests = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": [case]}
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests, width=1000), encoding="utf-8")
    checked = _promtool("check", "rules", "rules.yaml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = _promtool("test", "rules", "tests.yaml", cwd=tmp_path)
    assert tested.returncode == 0, tested.stdout[-3000:] + tested.stderr[-3000:]


@pytest.mark.parametrize("bad", [{"tenant": "acme"}, {"threshold_ms": 5}, {"min_deadline_ms": 5}])
def test_a_correctness_slo_counts_judged_answers_alone(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        SloConfig(name="right", kind="correctness", objective=0.999, **bad)


def test_the_vote_stays_while_a_replica_of_its_pool_is_still_wrong() -> None:
    """Judged against its peers: the versions' honest disagreement (1.5 % here) is no reason
    to stay; a replica 10 % over its peers is."""
    clock = FakeClock()
    switches: list[tuple[str, bool, str]] = []
    config = VoteEscalationConfig(enabled=True, recover_s=30)
    escalation = VoteEscalation("digits", config, clock)
    escalation.limit = 0.006
    escalation.update(True, "burning", lambda *s: switches.append(s))
    escalation.update(False, "", lambda *s: switches.append(s))  # quiet from now
    for replica, dissented in (("mlp-0", 115), ("mlp-1", 15), ("mlp-2", 16)):
        escalation.observe(replica, 1000, dissented)
    clock.advance(30)
    escalation.update(False, "", lambda *s: switches.append(s))
    assert escalation.engaged and escalation.evidence == {}  # a fresh quiet time
    for replica, dissented in (("mlp-0", 19), ("mlp-1", 15), ("mlp-2", 12)):
        escalation.observe(replica, 1000, dissented)
    clock.advance(30)
    escalation.update(False, "", lambda *s: switches.append(s))
    assert not escalation.engaged
    assert [e for _, e, _ in switches] == [True, False]
