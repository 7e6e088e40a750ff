"""The generated pages are current: the configuration reference (from the config's schema, every
key described) and the performance page (from the benchmarks' result files)."""

from __future__ import annotations

from gateway.config.reference import reference, render
from loadtests import perf_page
from tests.support.processes import REPO_ROOT

DOCS = REPO_ROOT / "docs"


def test_every_config_key_has_a_description() -> None:
    keys = list(reference().keys())
    assert len(keys) > 200  # the whole tree was walked, not one section
    missing = [key.path for key in keys if not key.description]
    assert missing == [], f"add Field(..., description=...) for: {', '.join(missing)}"


def test_the_reference_lists_every_key_of_every_section() -> None:
    page = (DOCS / "configuration.md").read_text(encoding="utf-8")
    for path in (
        "server.port",
        "pools.<name>.replicas[].url",
        "models.<name>.vote.quorum",
        "models.<name>.slos[].objective",
        "state.redis_url",
        "tenants.<name>.weight",
    ):
        assert f"| `{path}` |" in page, path


def test_the_committed_configuration_reference_is_current() -> None:
    committed = (DOCS / "configuration.md").read_text(encoding="utf-8")
    assert committed == render(reference()), (
        "docs/configuration.md is out of date: python -m gateway.config.reference "
        "-o docs/configuration.md (or make docs)"
    )


def test_the_committed_performance_page_is_current() -> None:
    committed = (DOCS / "performance.md").read_text(encoding="utf-8")
    assert committed == perf_page.render(), (
        "docs/performance.md is out of date: python loadtests/perf_page.py (or make docs)"
    )
