"""Every example config in config/ stays valid as the schema evolves."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.cli import main

EXAMPLES = sorted((Path(__file__).parents[3] / "config").glob("*.yaml"))


def test_there_are_examples() -> None:
    assert {p.name for p in EXAMPLES} >= {"local.yaml", "production.yaml", "sidecar.yaml"}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_passes_check_config(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-config", str(path)]) == 0
    assert ": ok (" in capsys.readouterr().out


def test_a_bad_config_names_the_key_and_exits_non_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "pools: {p: {model: m, replicas: [{id: a, url: 'http://x:1'}]}}\n"
        "models: {d: {pool: p, timeout_ms: -5}}\n"
    )
    assert main(["check-config", str(bad)]) == 2
    assert "models.d.timeout_ms" in capsys.readouterr().err
