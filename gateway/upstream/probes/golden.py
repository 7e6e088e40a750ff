"""Golden probes: known inputs sent to a replica, its answers checked against the known labels.

A replica can be live, ready and fast while answering wrong; golden probes catch that between
votes. The golden labels are the *true* labels, not each primary's own answers, and a healthy
primary misses a few of them (on the golden rows: docs/measured.md), so a
fixed "all rows right" or "accuracy >= min" test on a sample of rows would flap. Instead a probe
fails only when its misses are implausible for a model meeting ``min_accuracy``: more than the
binomial bound that such a model exceeds with probability below ``alpha``. With
``min_accuracy`` 0.9 that allows 4 misses of 8 rows, 7 of 20, 20 of 100: more than any healthy
primary makes on the whole golden set, so they never fail, while a replica whose labels are
corrupted fails every probe of 4 rows or more. Rows whose ``probabilities`` are not a valid
distribution or disagree with the row's label (healthy models: never, on every digit)
count as misses too, which catches scores corrupted behind a right label.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from v2proto.codec import EncodedBody, encode_infer_request
from v2proto.manifest import GoldenSet
from v2proto.signature import Array

__all__ = ["GoldenSet", "GoldenVerdict", "allowed_misses", "check_golden_answer"]

ALPHA = 1e-3
LABEL_OUTPUT = "label"
SCORES_OUTPUT = "probabilities"
SUM_TOLERANCE = 1e-3


@dataclass(frozen=True, slots=True)
class GoldenVerdict:
    passed: bool
    wrong: int
    total: int
    reason: str
    wrong_rows: tuple[int, ...] = ()  # golden-set indices of the rows answered wrong


@lru_cache(maxsize=256)
def allowed_misses(total: int, min_accuracy: float, alpha: float = ALPHA) -> int:
    """Most misses of ``total`` rows still plausible (P >= alpha) at ``min_accuracy``."""
    p = 1.0 - min_accuracy
    pmf = [math.comb(total, m) * p**m * (1 - p) ** (total - m) for m in range(total + 1)]
    tail = 0.0  # P(misses >= m), summed from the top so small tails stay exact
    for m in range(total, -1, -1):
        tail += pmf[m]
        if tail >= alpha:
            return m  # the most misses still plausible
    return 0


def sample_rows(golden: GoldenSet, k: int, rng: random.Random) -> list[int]:
    """``k`` distinct golden rows (all of them if ``k`` is larger), in ascending order."""
    n = len(golden.labels)
    return sorted(rng.sample(range(n), min(k, n)))


def golden_request(
    golden: GoldenSet,
    rows: Sequence[int],
    *,
    input_name: str = "input",
    outputs: Sequence[str] | None = None,
    request_id: str = "golden-probe",
) -> EncodedBody:
    """A plain JSON V2 infer body (every V2 server speaks it) for the golden ``rows``."""
    inputs = {input_name: golden.inputs[np.asarray(rows, dtype=np.intp)]}
    return encode_infer_request(inputs, outputs, request_id=request_id)


def check_golden_answer(
    expected_labels: Array,
    answer_outputs: Mapping[str, Any],
    sample_indices: Sequence[int],
    *,
    min_accuracy: float,
    alpha: float = ALPHA,
    label_output: str = LABEL_OUTPUT,
    scores_output: str | None = SCORES_OUTPUT,
) -> GoldenVerdict:
    """Judges a replica's outputs (in the client's names) for the golden rows
    ``sample_indices`` (in that order); scores are checked when the reply has them."""
    rows = np.asarray(sample_indices, dtype=np.intp)
    total = len(rows)
    expected = np.asarray(expected_labels).reshape(-1)[rows]
    labels = answer_outputs.get(label_output)
    if labels is None:
        return _broken(total, f"the reply has no {label_output!r} output")
    labels = np.asarray(labels)
    if labels.size != total or labels.dtype.kind not in "iuf":
        return _broken(
            total,
            f"{label_output!r} is {labels.dtype} {list(labels.shape)}, "
            f"expected {total} integer labels",
        )
    labels = labels.reshape(-1)
    bad = labels != expected
    scores = answer_outputs.get(scores_output) if scores_output is not None else None
    if scores is not None:
        scores = np.asarray(scores)
        if scores.ndim != 2 or scores.shape[0] != total or scores.dtype.kind != "f":
            return _broken(total, f"{scores_output!r} has shape {list(scores.shape)}")
        bad |= ~_valid_scores(scores, labels)
    wrong = int(bad.sum())
    wrong_rows = tuple(int(r) for r in rows[bad])
    allowed = allowed_misses(total, min_accuracy, alpha)
    shown = ", ".join(str(r) for r in wrong_rows[:10]) + ("…" if wrong > 10 else "")
    reason = (
        f"golden probe: {wrong} of {total} rows wrong{f' ({shown})' if wrong else ''}, "
        f"at most {allowed} allowed at min accuracy {min_accuracy:.2f}"
    )
    return GoldenVerdict(wrong <= allowed, wrong, total, reason, wrong_rows)


def _valid_scores(scores: Array, labels: Array) -> Array:
    """Per row: finite, in [0, 1], summing to 1, and the label's score is the top one."""
    finite = np.isfinite(scores).all(axis=1)
    safe = np.where(np.isfinite(scores), scores, 0.0)
    in_range = ((safe >= -SUM_TOLERANCE) & (safe <= 1 + SUM_TOLERANCE)).all(axis=1)
    sums = np.abs(safe.sum(axis=1) - 1.0) <= SUM_TOLERANCE
    index = np.clip(labels.astype(np.int64), 0, scores.shape[1] - 1)
    known = (labels >= 0) & (labels < scores.shape[1])
    top = safe[np.arange(len(safe)), index] >= safe.max(axis=1) - 1e-6
    result: Array = finite & in_range & sums & known & top
    return result


def _broken(total: int, what: str) -> GoldenVerdict:
    return GoldenVerdict(False, total, total, f"golden probe: {what}")
