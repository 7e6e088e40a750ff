"""What every answer is checked for: status, V2 schema, and the labels against the reference.

Kept apart from the locustfile so the rules are plain functions with unit tests, and so a
Locust failure message and the runner's event say the same thing about the same answer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from loadtests.chaos.reference import UNKNOWN, Reference

DEGRADED_HEADER = "x-degraded"
SERVED_BY_HEADER = "x-served-by"
VOTE_HEADER = "x-vote"
N_CLASSES = 10


@dataclass(frozen=True, slots=True)
class ObjectiveVerdict:
    """``error`` is empty for a valid 200 answer, else a kind; ``detail`` says what was seen."""

    error: str = ""
    detail: str = ""
    degraded: bool = False
    wrong: bool = False
    reason: str = ""  # x-degraded
    vote: str = ""  # x-vote
    served_by: str = ""  # x-served-by of a degraded or wrong answer


def _error_detail(status: int, body: bytes) -> str:
    try:
        message = orjson.loads(body)["error"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return f"HTTP {status} without a JSON error body: {body[:80]!r}"
    return f"HTTP {status}: {message}"


def _output(outputs: list[Any], name: str) -> dict[str, Any] | None:
    return next((o for o in outputs if isinstance(o, dict) and o.get("name") == name), None)


def _flat(data: Any) -> list[Any]:
    if isinstance(data, list) and data and isinstance(data[0], list):
        return [v for row in data for v in _flat(row)]
    return data if isinstance(data, list) else []


def parse_labels(body: bytes, model: str, rows: int) -> list[int] | str:
    """The labels of a V2 answer for ``rows`` inputs, or a message saying what is malformed."""
    try:
        reply = orjson.loads(body)
    except orjson.JSONDecodeError:
        return "body is not JSON"
    if not isinstance(reply, dict) or not isinstance(reply.get("outputs"), list):
        return "no 'outputs' list"
    if reply.get("model_name") != model:
        return f"model_name {reply.get('model_name')!r}, expected {model!r}"
    label = _output(reply["outputs"], "label")
    if label is None:
        return "no 'label' output"
    data = _flat(label.get("data"))
    if label.get("shape") != [rows] or len(data) != rows:
        return f"label shape {label.get('shape')} for {rows} rows"
    if not all(isinstance(v, int) and 0 <= v < N_CLASSES for v in data):
        return "labels are not class numbers"
    scores = _output(reply["outputs"], "probabilities")
    n_scores = len(_flat(scores.get("data"))) if scores is not None else 0
    if scores is not None and (
        scores.get("shape") != [rows, N_CLASSES] or n_scores != rows * N_CLASSES
    ):
        return f"probabilities shape {scores.get('shape')} for {rows} rows"
    return [int(v) for v in data]


def check_answer(
    status: int,
    body: bytes,
    header: Callable[[str], str | None],
    model: str,
    rows: Sequence[int],
    reference: Reference | None,
) -> ObjectiveVerdict:
    """Judge one answer; ``header`` looks a response header up by lower-case name."""
    if status == 0:
        return ObjectiveVerdict("transport", "no HTTP answer")
    if status != 200:
        return ObjectiveVerdict("status", _error_detail(status, body))
    labels = parse_labels(body, model, len(rows))
    if isinstance(labels, str):
        return ObjectiveVerdict("schema", labels)
    reason, vote = header(DEGRADED_HEADER) or "", header(VOTE_HEADER) or ""
    served_by = header(SERVED_BY_HEADER)
    wrong, detail = False, ""
    if reference is not None:
        expected = reference.expected(model, served_by, rows)
        wrong = any(e != UNKNOWN and e != got for e, got in zip(expected, labels, strict=True))
        detail = f"labels {labels}, expected {expected}" if wrong else ""
    keep = served_by or "" if (reason or wrong) else ""
    return ObjectiveVerdict("", detail, bool(reason), wrong, reason, vote, keep)
