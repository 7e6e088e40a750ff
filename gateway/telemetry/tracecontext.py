"""W3C Trace Context by hand: parse and write ``traceparent``, make ids, sample at the root.

The gateway propagates and echoes trace context on every request, recorded or not. Doing it
with strings costs about a microsecond; going through the SDK's propagator and spans costs
tens (see ``loadtests/bench_telemetry.py``). Ids stay lowercase hex strings, the wire format,
and become integers only when a span is exported.

Both headers come from anyone and go on to the replicas, so nothing of them is forwarded
unless it has the W3C syntax (`parse_traceparent`, `clean_tracestate`): a CR, LF, NUL or any
byte outside printable ASCII never reaches a replica's request line, headers or gRPC metadata.
The SDK's own ``TraceState.from_header`` is not used for ``tracestate``: it logs a warning
quoting each bad member, a log line any client could make the gateway write per request.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Final

TRACEPARENT: Final = "traceparent"
TRACESTATE: Final = "tracestate"
# W3C: a vendor may drop a longer tracestate
MAX_TRACESTATE = 512
# W3C: a list holds at most 32 list-members
MAX_TRACESTATE_MEMBERS = 32
# A future version's fields after the flags are opaque, but printable ASCII like the rest.
_TRACEPARENT = re.compile(
    r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-[\x20-\x7e]*)?"
)
_VERSION_00 = re.compile(r"00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")
# the flags byte's low bit is "sampled"
_SAMPLED_DIGITS = frozenset("13579bdf")
_INVALID_TRACE = "0" * 32
_INVALID_SPAN = "0" * 16
# TraceIdRatioBased compares the low 64 bits of the trace id
_ID_LIMIT = 2**64
# A tracestate list-member, as W3C Trace Context (Level 2) writes it: a key of lower-case
# letters, digits and ``_-*/@`` starting with a letter or digit (at most 256), "=", a value of
# printable ASCII but "," and "=", ending in a non-space (at most 256). Level 1's keys are
# among these.
_KEY = r"[a-z0-9][a-z0-9_\-*/@]{0,255}"
_VALUE = r"[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]"
_MEMBER = re.compile(f"({_KEY})={_VALUE}")
# optional whitespace around a list-member
_OWS = " \t"


@dataclass(slots=True)
class TraceParent:
    """A valid incoming ``traceparent``: the caller's trace, its span and its sampling flag."""

    trace_id: str
    span_id: str
    sampled: bool


def parse_traceparent(value: str | None) -> TraceParent | None:
    """The parsed header, or None when absent or invalid (then a new trace starts)."""
    if not value:
        return None
    if len(value) != 55 or _VERSION_00.fullmatch(value) is None:
        # fast path: version 00
        match = _TRACEPARENT.fullmatch(value.strip(_OWS))
        if match is None or match.group(1) == "ff":
            return None
        if match.group(1) == "00" and match.group(5) is not None:
            # version 00 has exactly four fields
            return None
        value = match.group(0)
    trace_id, span_id = value[3:35], value[36:52]
    if trace_id == _INVALID_TRACE or span_id == _INVALID_SPAN:
        return None
    return TraceParent(trace_id, span_id, value[54] in _SAMPLED_DIGITS)


def format_traceparent(trace_id: str, span_id: str, sampled: bool) -> str:
    return f"00-{trace_id}-{span_id}-{'01' if sampled else '00'}"


def clean_traceparent(value: str | None) -> str | None:
    """The header to forward as it came (less surrounding whitespace) when valid, else None."""
    if parse_traceparent(value) is None:
        return None
    # a parsed header was given
    assert value is not None
    return value.strip(_OWS)


def clean_tracestate(value: str | None) -> str | None:
    """The ``tracestate`` to forward: its list-members in order, joined by commas, when the
    whole header has the W3C syntax (at most `MAX_TRACESTATE` characters and
    `MAX_TRACESTATE_MEMBERS` members, each key once); else None, and nothing is forwarded.

    Empty members and the whitespace around members, which W3C allows, are left out: the
    list is the same, and a tab (legal in HTTP, not in gRPC metadata) never goes on. The
    gateway adds no member of its own.
    """
    if not value or len(value) > MAX_TRACESTATE:
        return None
    members = []
    keys = set()
    for part in value.split(","):
        member = part.strip(_OWS)
        if not member:
            continue
        match = _MEMBER.fullmatch(member)
        if match is None or match.group(1) in keys:
            return None
        keys.add(match.group(1))
        members.append(member)
    if not members or len(members) > MAX_TRACESTATE_MEMBERS:
        return None
    return ",".join(members)


def new_trace_id() -> str:
    return f"{random.getrandbits(128) or 1:032x}"


def new_span_id() -> str:
    return f"{random.getrandbits(64) or 1:016x}"


class RootSampler:
    """ParentBased(TraceIdRatioBased): follow the caller's flag, else keep ``ratio`` of traces.

    The same rule as the SDK's default with a ratio, so a trace is kept or dropped the same
    way by every service that sees it.
    """

    def __init__(self, ratio: float) -> None:
        if not 0.0 <= ratio <= 1.0:
            raise ValueError(f"sample ratio {ratio} is not within [0, 1]")
        self._bound = round(ratio * _ID_LIMIT)

    def sampled(self, trace_id: str, parent: TraceParent | None) -> bool:
        if parent is not None:
            return parent.sampled
        if self._bound >= _ID_LIMIT:
            return True
        return self._bound > 0 and int(trace_id[16:], 16) < self._bound
