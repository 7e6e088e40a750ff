"""N-version voting: one answer from k legs' outputs, by per-row label majority and numeric median.

Diverse model versions fail differently, so a leg that answers wrong is outvoted by the others
and named as a dissenter (its strikes may quarantine it). The vote is per row of a batch: a leg
may agree on some rows and dissent on others, and one row without a quorum sinks the answer.

Rules, per row:

- Labels (outputs named in ``VoteRule.label_outputs``): the legs are grouped by their label
  values; the largest group is the candidate quorum (a tie for largest means no quorum).
- Numeric outputs without labels: the element-wise median over the legs is the reference and a
  leg agrees if every element is within ``atol + rtol * |median|`` of it (as `numpy.isclose`).
- Numeric outputs with labels: averaged over the legs that agree on the label. They are checked
  against the group's median only if ``check_numeric_with_labels`` is on, because diverse
  versions' probabilities legitimately differ (measured on the digits models, where all three
  labels agree: docs/measured.md). A NaN in a leg's row is always a dissent.
- The row has a quorum if the agreeing group has at least ``quorum`` legs.

A leg whose answer has an output the quorum returns in another shape is malformed: it dissents
on every row. A leg whose answer lacks one of them answered another question (`other_outputs`):
it is a missing answer. Outputs keep the dtype of the quorum's (labels int64, scores float32).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from gateway.policies.tensors import Array, masked_mean, masked_median, reference


@dataclass(frozen=True, slots=True)
class VoteRule:
    """How legs must agree; the defaults fit one label output plus float scores."""

    quorum: int
    label_outputs: tuple[str, ...] = ("label",)
    numeric_atol: float = 1e-3
    numeric_rtol: float = 1e-2
    check_numeric_with_labels: bool = False

    def __post_init__(self) -> None:
        if self.quorum < 1:
            raise ValueError(f"quorum must be at least 1, got {self.quorum}")
        if self.numeric_atol < 0 or self.numeric_rtol < 0:
            raise ValueError("numeric tolerances must be >= 0")


@dataclass(frozen=True, slots=True)
class VoteResult:
    """The quorum's answer (empty unless ``agreed``), the tally and who dissented where."""

    agreed: bool
    outputs: dict[str, Array]
    tally: str  # fewest agreeing legs over the rows / legs that answered, e.g. "2/3"
    dissenters: dict[str, int]  # leg id -> rows on which it disagreed with a quorum
    rows_without_quorum: list[int]
    reason: str = ""  # why there is no quorum; empty when agreed
    agreeing: dict[str, int] = field(default_factory=dict)  # leg id -> rows it agreed on


def vote(answers: Mapping[str, Mapping[str, Array]], rule: VoteRule) -> VoteResult:
    """Vote on the decoded outputs of each leg (leg id -> output name -> array)."""
    legs = list(answers)
    try:
        ref = reference(answers, rule.quorum)
    except ValueError as exc:
        return VoteResult(False, {}, f"0/{len(legs)}", {}, [], f"cannot vote: {exc}")
    legs = [leg for leg in legs if not other_outputs(answers[leg], ref.names)]
    good = [leg for leg in legs if ref.fits(answers[leg])]
    rows = ref.rows
    stacks = {name: ref.stack(answers, good, name) for name in ref.names}
    labels = [n for n in ref.names if n in rule.label_outputs or not ref.is_numeric(n)]
    numeric = [n for n in ref.names if n not in labels]

    if labels:
        member, winner, unique = _label_groups([stacks[n] for n in labels], len(good), rows)
    else:
        member = np.ones((len(good), rows), dtype=bool)
        winner = np.zeros(rows, dtype=np.intp)
        unique = np.ones(rows, dtype=bool)
    for name in numeric:
        member &= ~_has_nan(stacks[name])
    if not labels or rule.check_numeric_with_labels:
        for name in numeric:
            median = masked_median(stacks[name], member)
            close = np.isclose(
                stacks[name], median[None], atol=rule.numeric_atol, rtol=rule.numeric_rtol
            )
            member &= close.reshape(len(good), rows, -1).all(axis=2)

    count = member.sum(axis=0)
    quorate = unique & (count >= rule.quorum)
    dissent = (~member & quorate[None]).sum(axis=1)
    dissenters = {leg: int(n) for leg, n in zip(good, dissent, strict=True) if n}
    dissenters.update({leg: rows for leg in legs if leg not in good and rows})
    agreed_rows = (member & quorate).sum(axis=1)
    agreeing = {leg: 0 for leg in legs}
    agreeing.update({leg: int(n) for leg, n in zip(good, agreed_rows, strict=True)})
    fewest = int(count.min()) if rows else len(good)
    tally = f"{fewest}/{len(legs)}"
    missing = [int(r) for r in np.flatnonzero(~quorate)]
    if missing or len(good) < rule.quorum:
        reason = _no_quorum(missing, rows, len(legs), len(good), rule.quorum)
        return VoteResult(False, {}, tally, dissenters, missing, reason, agreeing)
    outputs: dict[str, Array] = {}
    for name in ref.names:
        if name in labels:
            outputs[name] = stacks[name][winner, np.arange(rows)]
        else:
            outputs[name] = masked_mean(stacks[name], member, ref.dtypes[name])
    return VoteResult(True, outputs, tally, dissenters, [], "", agreeing)


def other_outputs(answer: Mapping[str, Array], compared: Iterable[str]) -> bool:
    """Blame rule: a leg whose answer lacks an output the vote compares is a missing answer,
    never a dissent on the values nor a strike against its replica.

    It answered another question than the legs it would be compared with (a server that
    returns other outputs by default, a pool whose mapping lacks a name), which says nothing
    about whether its values are right. Outputs it returns beyond those are not compared.
    """
    return any(name not in answer for name in compared)


def _label_groups(stacks: list[Array], legs: int, rows: int) -> tuple[Array, Array, Array]:
    """Per row: which legs are in the largest label group, one of its legs, and if it is unique."""
    same = np.ones((legs, legs, rows), dtype=bool)
    for stack in stacks:
        flat = stack.reshape(legs, rows, -1)
        same &= (flat[:, None] == flat[None, :]).all(axis=3)
    support = same.sum(axis=1)  # [legs, rows]: size of each leg's group
    if legs == 0:
        empty = np.zeros(rows, dtype=np.intp)
        return np.zeros((0, rows), dtype=bool), empty, np.zeros(rows, dtype=bool)
    winner = support.argmax(axis=0)
    best = support.max(axis=0)
    unique = (support == best).sum(axis=0) == best  # legs of one group share its size
    member = same[winner, :, np.arange(rows)].T
    return member, winner, unique


def _has_nan(stack: Array) -> Array:
    legs, rows = stack.shape[:2]
    if stack.dtype.kind not in "fc":
        return np.zeros((legs, rows), dtype=bool)
    return np.asarray(np.isnan(stack).reshape(legs, rows, -1).any(axis=2))


def _no_quorum(missing: list[int], rows: int, legs: int, good: int, quorum: int) -> str:
    if good < quorum:
        return f"{good} well-formed answers of {legs} legs, quorum {quorum}"
    shown = ", ".join(str(r) for r in missing[:10]) + (", ..." if len(missing) > 10 else "")
    return f"no quorum of {quorum} on {len(missing)} of {rows} rows ({shown}); {legs} legs"
