"""An `Outcome` as plain values, for the `Call` records a worker ships to its control process."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gateway.outcome import Outcome, OutcomeKind

OutcomeArgs = tuple[str, str, float, int | None, str, str]
# a kind's member by its value: a lookup, where ``OutcomeKind(value)`` is the enum's call
_KINDS: dict[object, OutcomeKind] = {kind.value: kind for kind in OutcomeKind}


def outcome_args(outcome: Outcome) -> OutcomeArgs:
    """An `Outcome` as plain values for a `Call`. Its kind is the member itself: a `StrEnum`
    member is its value, a string on the wire, and reading ``.value`` costs two Python calls
    (the enum's property) on every attempt."""
    return (
        outcome.kind,
        outcome.replica,
        outcome.latency_s,
        outcome.status,
        outcome.detail,
        outcome.note,
    )


def outcome_of(args: Iterable[Any]) -> Outcome:
    """The `Outcome` of `outcome_args`' values; `ValueError` or `TypeError` if they are not."""
    kind, replica, latency_s, status, detail, note = args
    if not isinstance(replica, str) or not isinstance(detail, str) or not isinstance(note, str):
        raise TypeError("an outcome's replica, detail and note are strings")
    if status is not None and not isinstance(status, int):
        raise TypeError("an outcome's status is an integer or none")
    member = _KINDS.get(kind) if isinstance(kind, str) else None
    if member is None:
        raise ValueError(f"{kind!r} is not an outcome's kind")
    return Outcome(member, replica, float(latency_s), status, detail, note)
