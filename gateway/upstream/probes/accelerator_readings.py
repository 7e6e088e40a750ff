"""Prometheus text from a replica or a dcgm-exporter, read into one device's `Reading`.

The text is parsed by prometheus_client's own parser, never by hand; what is done here is
only to avoid parsing again what was parsed before, because sampling runs up to 10 times a
second per replica and the parser spends most of a line on reading its labels, character by
character. A page equal to the previous one (the replica's sampler, or
the exporter's collection, has not moved on) gives the previous reading; otherwise only the
lines that carry a DCGM field of the wanted device are looked at, and those not seen on the
previous page are parsed, together in one call (a sample line is a complete exposition by
itself). A line whose series (its name and labels: everything up to the labels' closing
brace) was parsed before has only its value and timestamp parsed again, by the parser's own
reader of one sample line (the exposition's per-line step, without its families), as the
line of a one-letter placeholder name: so a page where temperature and power moved costs
two short reads (docs/hardware.md has the figures). That reader is private to
prometheus_client (pinned in ``constraints/dev.txt``); a differential test holds it to the
whole parser's reading of the same lines, malformed values included.

What a page may cost is bounded before any of this (`gateway.upstream.probes.accelerator_pages`:
its bytes and series), and here: more than `MAX_DEVICE_LINES` lines of the wanted device
refuse the page (`PageRefused`). A value no device can report (NaN, an infinity, out of
`gateway.policies.accelerator_values.BOUNDS`) is left out of the reading and named in ``bad``.
Nothing here does I/O or reads a clock, so it runs in a worker thread.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, cast

from prometheus_client import parser as exposition
from prometheus_client.parser import text_string_to_metric_families

from gateway.policies.accelerator_values import believable
from v2proto.dcgm import BY_NAME, GPU_LABEL, NAMES, UUID_LABEL, Reading

# (name, labels, value); None: not ours
ParsedLine = tuple[str, dict[str, str], float] | None
# a sample line's name and labels, as the parser read them
Series = tuple[str, dict[str, str]]
EMPTY = Reading("", "")
# The parser's reader of one sample line (stripped): see `ReadingParser._values`. None where
# a prometheus_client release has none: then the line goes through the whole parser.
_SAMPLE_READER = cast(Callable[[str], Any] | None, getattr(exposition, "_parse_sample", None))
# series heads remembered per source (a page has a few dozen)
MAX_SERIES = 4096
# Lines of the wanted device's fields on one page: a GPU has 12 here, one split into 7 MIG
# instances 84; more is a flood, and each new one costs a parse.
MAX_DEVICE_LINES = 256


class PageRefused(ValueError):
    """A page over a cap, refused whole (its readings unknown); ``str()`` says which cap."""


def dcgm_lines(page: bytes) -> list[str]:
    """The lines of ``page`` that may carry a DCGM field (by their metric name's start)."""
    lines = page.decode("utf-8", "replace").splitlines()
    return [line for line in lines if line.startswith(NAMES)]


def parse_line(line: str) -> ParsedLine:
    """One sample line through prometheus_client's parser; None if it is not a sample."""
    try:
        for family in text_string_to_metric_families(line + "\n"):
            for sample in family.samples:
                return sample.name, dict(sample.labels), float(sample.value)
    except ValueError:
        return None
    return None


def read_value(rest: str) -> float:
    """The value of a sample line whose name and labels end before ``rest``, as the parser
    reads it; `ValueError` if it is not one."""
    line = f"v{rest}".strip()
    if _SAMPLE_READER is not None:
        return float(_SAMPLE_READER(line).value)
    parsed = parse_line(line)
    if parsed is None:
        raise ValueError(f"not a sample: {line!r}")
    return parsed[2]


class ReadingParser:
    """Reads successive pages of one source for one device (``uuid``; None: the first)."""

    def __init__(self, uuid: str | None = None) -> None:
        self._uuid = uuid
        self._page = b""
        self._reading: Reading | None = None
        self._lines: dict[str, ParsedLine] = {}
        # a line's head (up to its '}') -> what it names
        self._series: dict[str, Series] = {}
        # lines given to the parser (for the benchmark)
        self.parsed = 0
        # of those, lines whose series was known: values only
        self.values_parsed = 0
        # whether the last page differed from the one before
        self.changed = False
        # the fields of the last page left out as impossible
        self.bad: tuple[str, ...] = ()

    def seen(self, page: bytes) -> bool:
        """Whether ``page`` is the one read last (reading it again costs nothing)."""
        return page == self._page

    def read(self, page: bytes) -> Reading | None:
        """The device's reading on ``page``; None: the page shows no such device. ``changed``
        says whether it is a new measurement or the source's previous one again."""
        return self.read_lines(page, dcgm_lines(page))

    def read_lines(self, page: bytes, candidates: Sequence[str]) -> Reading | None:
        """`read`, given ``page``'s `dcgm_lines` (split once for every device of a page)."""
        self.changed = page != self._page
        if not self.changed:
            # counted when the page was new
            self.bad = ()
            return self._reading
        uuid = self._uuid
        lines = list(candidates) if uuid is None else [c for c in candidates if uuid in c]
        if len(lines) > MAX_DEVICE_LINES:
            raise PageRefused(f"{len(lines)} lines of the device's fields, over {MAX_DEVICE_LINES}")
        known = self._lines
        fresh = [line for line in lines if line not in known]
        seen = {line: known[line] for line in lines if line in known}
        seen.update(self._parse(fresh))
        values: dict[str, Any] = {}
        bad: list[str] = []
        gpu: str = ""
        device: str | None = None
        for line in lines:
            parsed = seen[line]
            if parsed is None:
                continue
            name, labels, value = parsed
            field = BY_NAME.get(name)
            found = labels.get(UUID_LABEL)
            if field is None or (uuid is not None and found != uuid):
                continue
            if device is None:
                device, gpu = found or "", labels.get(GPU_LABEL, "")
            elif found != device:
                # another device on the page: the first one is this replica's
                continue
            if believable(name, value):
                values[field.attr] = value
            else:
                bad.append(name)
        self._lines, self._page, self.bad = seen, page, tuple(bad)
        self._reading = None if device is None else replace(EMPTY, gpu=gpu, uuid=device, **values)
        return self._reading

    def _parse(self, lines: list[str]) -> dict[str, ParsedLine]:
        """The new lines through the parser: those of a known series as values only, the
        others whole, each group in one call; if any is malformed, each alone, so the others
        still count."""
        if not lines:
            return {}
        self.parsed += len(lines)
        known, whole, heads = self._series, [], []
        for line in lines:
            # a valid line has no '}' after its labels
            end = line.rfind("}") + 1
            head = line[:end]
            if end and head in known:
                heads.append((line, head, line[end:]))
            else:
                whole.append(line)
        parsed = self._whole(whole)
        if heads:
            self.values_parsed += len(heads)
            parsed.update(self._values(heads))
        return parsed

    def _whole(self, lines: list[str]) -> dict[str, ParsedLine]:
        if not lines:
            return {}
        try:
            samples = [
                (s.name, dict(s.labels), float(s.value))
                for family in text_string_to_metric_families("\n".join(lines) + "\n")
                for s in family.samples
            ]
        except ValueError:
            samples = []
        parsed: dict[str, ParsedLine] = (
            dict(zip(lines, samples, strict=True))
            if len(samples) == len(lines)
            else {line: parse_line(line) for line in lines}
        )
        if len(self._series) < MAX_SERIES:
            for line, sample in parsed.items():
                end = line.rfind("}") + 1
                if sample is not None and end:
                    self._series[line[:end]] = (sample[0], sample[1])
        return parsed

    def _values(self, heads: list[tuple[str, str, str]]) -> dict[str, ParsedLine]:
        """Lines of known series: each one's value (and timestamp) parsed by the parser's own
        sample reader, as the line of the placeholder name ``v`` (what it does to a line of
        the exposition after stripping it); a malformed one is parsed whole, alone."""
        parsed: dict[str, ParsedLine] = {}
        for line, head, rest in heads:
            try:
                value = read_value(rest)
            except (ValueError, TypeError, IndexError):
                parsed[line] = parse_line(line)
                continue
            name, labels = self._series[head]
            parsed[line] = (name, labels, value)
        return parsed
