"""Tensor plumbing for the vote: the reference shape of each output, stacking legs, masked stats.

Legs' answers come from different servers, so the vote first settles what a well-formed answer
looks like (the outputs at least a quorum of legs return, each with its most common shape) and
then works on ``[legs, rows, ...]`` stacks with boolean ``[legs, rows]`` masks, vectorized.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[Any]
_NUMERIC_KINDS = "iufc"


@dataclass(frozen=True, slots=True)
class VoteReference:
    """What a well-formed answer holds: output names, their shapes and dtypes, batch rows."""

    names: tuple[str, ...]
    shapes: dict[str, tuple[int, ...]]
    dtypes: dict[str, np.dtype[Any]]
    rows: int

    def fits(self, answer: Mapping[str, Array]) -> bool:
        """True if ``answer`` has every output with the reference shape."""
        return all(
            name in answer and answer[name].shape == self.shapes[name] for name in self.names
        )

    def is_numeric(self, name: str) -> bool:
        return self.dtypes[name].kind in _NUMERIC_KINDS

    def stack(
        self, answers: Mapping[str, Mapping[str, Array]], legs: Sequence[str], name: str
    ) -> Array:
        """``[legs, *shape]`` of one output over well-formed legs, in the reference dtype."""
        dtype = self.dtypes[name]
        if not legs:
            return np.zeros((0, *self.shapes[name]), dtype=dtype)
        return np.stack([np.asarray(answers[leg][name]) for leg in legs]).astype(dtype, copy=False)


def reference(answers: Mapping[str, Mapping[str, Array]], quorum: int) -> VoteReference:
    """The outputs at least ``min(quorum, legs)`` legs return, each with its most common shape.

    Raises `ValueError` if the legs share no output or the outputs disagree on the batch size.
    """
    if not answers:
        return VoteReference((), {}, {}, 0)
    first = _same_everywhere(answers)
    if first is not None:
        return first
    needed = min(quorum, len(answers))
    shapes: dict[str, Counter[tuple[int, ...]]] = {}
    dtypes: dict[tuple[str, tuple[int, ...]], np.dtype[Any]] = {}
    for answer in answers.values():
        for name, array in answer.items():
            shape = array.shape
            shapes.setdefault(name, Counter())[shape] += 1
            dtypes.setdefault((name, shape), np.asarray(array).dtype)
    names = tuple(n for n, seen in shapes.items() if seen.total() >= needed)
    if not names:
        raise ValueError("the legs share no output")
    chosen = {name: shapes[name].most_common(1)[0][0] for name in names}
    batch = {shape[0] if shape else -1 for shape in chosen.values()}
    if len(batch) != 1 or -1 in batch:
        raise ValueError(f"outputs do not share a batch dimension: {chosen}")
    return VoteReference(
        names, chosen, {name: dtypes[name, chosen[name]] for name in names}, batch.pop()
    )


def _same_everywhere(answers: Mapping[str, Mapping[str, Array]]) -> VoteReference | None:
    """The common case, cheaply: every leg has the first leg's outputs and shapes."""
    legs = iter(answers.values())
    head = next(legs)
    shapes = {name: array.shape for name, array in head.items()}
    for answer in legs:
        if len(answer) != len(shapes) or any(
            name not in answer or answer[name].shape != shape for name, shape in shapes.items()
        ):
            return None
    batch = {shape[0] if shape else -1 for shape in shapes.values()}
    if not shapes or len(batch) != 1 or -1 in batch:
        # the general path explains what is wrong
        return None
    dtypes = {name: np.asarray(array).dtype for name, array in head.items()}
    return VoteReference(tuple(shapes), shapes, dtypes, batch.pop())


def _expand(member: Array, ndim: int) -> Array:
    """``[legs, rows]`` mask broadcastable against a ``[legs, rows, ...]`` stack."""
    return member.reshape(member.shape + (1,) * (ndim - 2))


def masked_median(stack: Array, member: Array) -> Array:
    """Element-wise median over member legs, per row (float64); rows with no member get 0."""
    values = np.where(_expand(member, stack.ndim), stack.astype(np.float64), np.nan)
    if values.shape[0] == 0:
        return np.zeros(stack.shape[1:], dtype=np.float64)
    values[:, ~member.any(axis=0)] = 0.0
    median: Array = np.nanmedian(values, axis=0)
    return median


def masked_mean(stack: Array, member: Array, dtype: np.dtype[Any]) -> Array:
    """Element-wise mean over member legs, per row, cast back to ``dtype``."""
    mask = _expand(member, stack.ndim)
    total = np.where(mask, stack.astype(np.float64), 0.0).sum(axis=0)
    count = np.maximum(member.sum(axis=0), 1).reshape((-1,) + (1,) * (stack.ndim - 2))
    mean = total / count
    if dtype.kind in "iu":
        mean = np.rint(mean)
    result: Array = mean.astype(dtype)
    return result
