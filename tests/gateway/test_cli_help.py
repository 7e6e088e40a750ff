"""The CLI helps: plain-text help with every option explained and its default, --version."""

from __future__ import annotations

import pytest

from gateway import __version__
from gateway.cli import main, parser


def _help(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 0
    return capsys.readouterr().out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert _help(["--version"], capsys).strip() == f"gateway {__version__}"


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["serve", "--help"],
        ["up", "--help"],
        ["check-config", "--help"],
        ["slo-rules", "--help"],
    ],
)
def test_help_is_plain_text_and_every_option_is_explained(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    text = _help(argv, capsys)
    assert "``" not in text and ":func:" not in text  # no raw reStructuredText
    options = [line for line in text.splitlines() if line.strip().startswith("--")]
    assert options
    for line in options:
        name = line.split()[0]
        assert len(line.split()) > 1 or name == "--version", f"{name} has no help"
    if argv[0] in ("serve", "up"):
        assert "(default: config/local.yaml)" in text


def test_top_level_help_lists_each_command_once(capsys: pytest.CaptureFixture[str]) -> None:
    text = _help(["--help"], capsys)
    for command in ("up", "serve", "check-config", "slo-rules"):
        listed = [line for line in text.splitlines() if line.split()[:1] == [command]]
        assert len(listed) == 1, f"{command} listed {len(listed)} times:\n{text}"


@pytest.mark.parametrize("command", ["serve", "up"])
def test_workers_is_a_count_or_auto_and_defaults_to_the_config(command: str) -> None:
    assert parser().parse_args([command]).workers is None
    assert parser().parse_args([command, "--workers", "3"]).workers == 3
    assert parser().parse_args([command, "--workers", "auto"]).workers == "auto"


def test_a_bad_workers_value_is_refused_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--workers", "0"])
    assert exit_.value.code == 2
    assert "argument --workers: a count from 1 to 1024, or 'auto'; not 0" in capsys.readouterr().err
