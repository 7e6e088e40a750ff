"""docs/load.md's table of each server's load metrics is the one the scraper reads
(`gateway.upstream.probes.load_names.LOAD_METRICS`), row for row."""

from __future__ import annotations

from pathlib import Path

from gateway.upstream.probes.load_names import LOAD_METRICS

PAGE = Path(__file__).resolve().parents[2] / "docs" / "load.md"


def table_rows() -> list[tuple[str, ...]]:
    text = PAGE.read_text(encoding="utf-8")
    start = text.index("<!-- load-table")
    end = text.index("<!-- /load-table -->")
    lines = [line for line in text[start:end].splitlines() if line.startswith("| ")]
    return [tuple(cell.strip().strip("`") for cell in line.strip("|").split("|"))
            for line in lines[2:]]  # fmt: skip


def test_the_documented_table_is_the_scrapers() -> None:
    expected = [(m.name, m.server, m.role, m.kind) for m in LOAD_METRICS]
    assert table_rows() == expected
