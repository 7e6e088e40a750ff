"""How far a correctness SLO's estimate can be trusted, and when it may alert at all.

A correctness SLO does not see every answer: its events are the answers judged (audited answers,
golden probe results, voted answers), a sample of the model's traffic. Its SLI is the share of
them not shown wrong, and that share is an estimate of the wrong-answer rate of the whole
traffic, so it is shown with a confidence interval from the count behind it.

The interval is Wilson's score interval with a continuity correction (Newcombe 1998, method 4),
at a 95 % confidence level. Why this one: the wrong rates that matter are small (a few in a
thousand to a few in a hundred) and the counts modest (hundreds of audits), where the plain
normal (Wald) interval collapses to zero width on zero wrong answers and covers the true rate
far less often than it says; the plain Wilson interval is better but dips well below its stated
coverage at small counts; Clopper-Pearson's exact interval never does but needs a beta quantile
the gateway has no library for. The corrected Wilson interval is closed-form, and over those
rates and counts its coverage stays within half a point of its stated 95 %: it dips just below
it at a few small counts, never further (the property test
`test_the_interval_holds_the_true_wrong_rate_at_its_stated_level` in
`tests/gateway/slo/test_correctness.py` computes the coverage exactly and holds it to that).

An alert of the SLO's table (`gateway.slo.alerts`) compares a burn rate with a factor, i.e. a
wrong rate with ``factor × (1 - objective)``. Fewer judged answers than `min_judged` cannot tell
that rate from none: at exactly that rate, a count that small shows no wrong answer at all more
often than `ALPHA` of the time. Such an alert never fires on fewer (its short window holds the
fewest).
"""

from __future__ import annotations

import math

# the normal quantile of a two-sided 95 % interval
Z_95 = 1.959963984540054
ALPHA = 0.05


def wrong_rate_interval(wrong: int, judged: int, z: float = Z_95) -> tuple[float, float]:
    """The 95 % interval of the wrong-answer rate given ``wrong`` of ``judged`` answers
    (Wilson's score interval with continuity correction); (0, 1) with nothing judged."""
    if judged <= 0:
        return 0.0, 1.0
    n, p = judged, wrong / judged
    q = 1.0 - p
    z2 = z * z
    low = 0.0
    if wrong > 0:
        root = math.sqrt(max(0.0, z2 - 2 - 1 / n + 4 * p * (n * q + 1)))
        low = max(0.0, (2 * n * p + z2 - 1 - z * root) / (2 * (n + z2)))
    high = 1.0
    if wrong < judged:
        root = math.sqrt(max(0.0, z2 + 2 - 1 / n + 4 * p * (n * q - 1)))
        high = min(1.0, (2 * n * p + z2 + 1 + z * root) / (2 * (n + z2)))
    return low, high


def min_judged(error_budget: float, factor: float, alpha: float = ALPHA) -> int:
    """The fewest judged answers on which an alert at ``factor`` may fire: below it, a wrong
    rate of ``factor × error_budget`` shows no wrong answer more often than ``alpha``."""
    rate = min(1.0, factor * error_budget)
    if rate >= 1.0:
        return 1
    return max(1, math.ceil(math.log(alpha) / math.log1p(-rate)))
