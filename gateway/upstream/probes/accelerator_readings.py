"""Prometheus text from a replica or a dcgm-exporter, read into one device's `Reading`.

The text is parsed by prometheus_client's own parser, never by hand; what is done here is
only to avoid parsing again what was parsed before, because sampling runs up to 10 times a
second per replica and the parser costs hundreds of microseconds a page. A page equal to the
previous one (the replica's sampler, or the exporter's collection, has not moved on) gives
the previous reading; otherwise only the lines that carry a DCGM field of the wanted device
are looked at, and those not seen on the previous page are parsed, together in one call (a
sample line is a complete exposition by itself). So a page where temperature and power moved
costs one parse of two lines.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from v2proto.dcgm import BY_NAME, GPU_LABEL, NAMES, UUID_LABEL, Reading

ParsedLine = tuple[str, dict[str, str], float] | None  # (name, labels, value); None: not ours
EMPTY = Reading("", "")


def parse_line(line: str) -> ParsedLine:
    """One sample line through prometheus_client's parser; None if it is not a sample."""
    try:
        for family in text_string_to_metric_families(line + "\n"):
            for sample in family.samples:
                return sample.name, dict(sample.labels), float(sample.value)
    except ValueError:
        return None
    return None


class ReadingParser:
    """Reads successive pages of one source for one device (``uuid``; None: the first)."""

    def __init__(self, uuid: str | None = None) -> None:
        self._uuid = uuid
        self._page = b""
        self._reading: Reading | None = None
        self._lines: dict[str, ParsedLine] = {}
        self.parsed = 0  # lines given to the parser (for the benchmark)
        self.changed = False  # whether the last page differed from the one before

    def read(self, page: bytes) -> Reading | None:
        """The device's reading on ``page``; None: the page shows no such device. ``changed``
        says whether it is a new measurement or the source's previous one again."""
        self.changed = page != self._page
        if not self.changed:
            return self._reading
        text = page.decode("utf-8", "replace")
        uuid = self._uuid
        lines = [line for line in text.splitlines()
                 if line.startswith(NAMES) and (uuid is None or uuid in line)]  # fmt: skip
        known = self._lines
        fresh = [line for line in lines if line not in known]
        seen = {line: known[line] for line in lines if line in known}
        seen.update(self._parse(fresh))
        values: dict[str, Any] = {}
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
                continue  # another device on the page: the first one is this replica's
            values[field.attr] = value
        self._lines, self._page = seen, page
        self._reading = None if device is None else replace(EMPTY, gpu=gpu, uuid=device, **values)
        return self._reading

    def _parse(self, lines: list[str]) -> dict[str, ParsedLine]:
        """The new lines through the parser in one call (one sample each, in order); if any
        is malformed, each alone, so the others still count."""
        if not lines:
            return {}
        self.parsed += len(lines)
        try:
            samples = [(s.name, dict(s.labels), float(s.value))
                       for family in text_string_to_metric_families("\n".join(lines) + "\n")
                       for s in family.samples]  # fmt: skip
        except ValueError:
            samples = []
        if len(samples) == len(lines):
            return dict(zip(lines, samples, strict=True))
        return {line: parse_line(line) for line in lines}
