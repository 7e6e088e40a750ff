"""A replica's load report, read from the ``endpoint-load-metrics`` header of its answers.

The header is ORCA's text form (`v2proto.load`): ``TEXT named_metrics.queue=3,
named_metrics.inflight=4`` and, from a replica with an accelerator, its temperature and ECC
counts by their DCGM names. A replica is an untrusted peer: a report is refused whole (never
partly believed) when it is longer than `MAX_CHARS`, has more than `MAX_NAMES` names, is not
the text form, repeats a name, has a value that is not a number, or one no replica can
report (negative, NaN, an infinity, over `MAX_QUEUE`, an accelerator reading out of its
range: `gateway.policies.accelerator_values`). A refusal is counted by its reason and the
replica's previous reading stands (or ages out): a report is never taken for zero.

Reading costs one dictionary look-up per answer: `LoadReports` remembers the last
`CACHED` texts it read (a queue takes a few values over and over), and forgets them all at
once when full, so a replica that sends a new text every time costs a parse each, bounded by
the length cap, and no memory beyond the cache.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from gateway.policies.accelerator_values import believable
from v2proto.load import ACCELERATOR_NAMES, INFLIGHT, NAMED, QUEUE, TEXT_FORM

# a report of ours with an accelerator is under 250
MAX_CHARS = 1024
MAX_NAMES = 32
# requests waiting on one replica: more is not a queue but a forgery
MAX_QUEUE = 1e6
# texts remembered (each at most MAX_CHARS)
CACHED = 256
# a reading's source: an answer's header
ANSWER = "answer"
_ACCELERATOR = frozenset(ACCELERATOR_NAMES)
# ORCA's own fields: allowed, not used
_STANDARD = (
    "cpu_utilization",
    "mem_utilization",
    "application_utilization",
    "rps_fractional",
    "eps",
)


@dataclass(frozen=True, slots=True)
class LoadReport:
    """What a replica reported of its load. ``queue``: what the balancer weighs (its
    waiting requests; the in-flight count where it reports only that); ``accelerator``: its
    DCGM readings (name, value), in range. ``refused``: why the text was not believed."""

    queue: float
    inflight: float | None = None
    accelerator: tuple[tuple[str, float], ...] = ()
    source: str = ANSWER
    refused: str | None = None


def _refused(why: str) -> LoadReport:
    return LoadReport(0.0, refused=why)


def parse_report(text: str) -> LoadReport:
    """The report in ``text`` (a header's value); `LoadReport.refused` says why not."""
    if len(text) > MAX_CHARS:
        return _refused("too_long")
    form, _, rest = text.strip().partition(" ")
    if form != TEXT_FORM:
        return _refused("not_text_form")
    parts = rest.split(",")
    if len(parts) > MAX_NAMES:
        return _refused("too_many_names")
    values: dict[str, float] = {}
    for part in parts:
        key, sep, raw = part.strip().partition("=")
        named = key.startswith(NAMED)
        name = key[len(NAMED) :] if named else key
        if not sep or not name or name in values:
            return _refused("malformed")
        try:
            value = float(raw)
        except ValueError:
            return _refused("malformed")
        if not _believable(name, value, named):
            return _refused("absurd")
        values[name] = value
    queue, inflight = values.get(QUEUE), values.get(INFLIGHT)
    if queue is None and inflight is None:
        return _refused("no_queue")
    accelerator = tuple((n, v) for n, v in values.items() if n in _ACCELERATOR)
    return LoadReport(queue if queue is not None else inflight or 0.0, inflight, accelerator)


def _believable(name: str, value: float, named: bool) -> bool:
    if not math.isfinite(value):
        return False
    if name in (QUEUE, INFLIGHT):
        return named and 0 <= value <= MAX_QUEUE
    if name in _ACCELERATOR:
        return named and believable(name, value)
    return value >= 0 and (named or name in _STANDARD)


class LoadReports:
    """Reads reports, remembering the texts it read; counts what it took and refused."""

    __slots__ = ("_known", "refused", "taken")

    def __init__(self) -> None:
        self._known: dict[str, LoadReport] = {}
        self.taken = 0
        # by reason
        self.refused: Counter[str] = Counter()

    def read(self, text: str) -> LoadReport | None:
        """The report ``text`` says, or None (refused: counted)."""
        report = self._known.get(text)
        if report is None:
            report = parse_report(text)
            known = self._known
            if len(known) >= CACHED:
                known.clear()
            # a text refused for its length is not kept
            if len(text) <= MAX_CHARS:
                known[text] = report
        if report.refused is not None:
            self.refused[report.refused] += 1
            return None
        self.taken += 1
        return report
