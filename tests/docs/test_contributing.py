"""docs/contributing.md names only what exists: every code span on the page is checked as what
it is. A command runs as written (a make target; a module or script, its options in its
``--help``; a ``gateway`` subcommand its parser accepts), a path is in the tree, a name beside a
module is defined in that module, a config key is in the reference, a heading is in the
changelog. What is none of these is a snippet of code (it has a parenthesis), or the test fails.
The page is in the site's nav and the README links it."""

from __future__ import annotations

import functools
import importlib.util
import re
import shlex
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import yaml

from gateway.cli import parser
from tests.docs.test_docs_examples import MARKED
from tests.support.processes import REPO_ROOT

PAGE = REPO_ROOT / "docs" / "contributing.md"
SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
PATH = re.compile(r"^\.?[\w-]+(?:/[\w.-]+)*/?$|^[\w-]+\.(?:py|md|toml|txt|yml|yaml|json)$")
NAME = re.compile(r"^[A-Za-z_]\w*(?:\.\w+)?$")
CONFIG_KEY = re.compile(r"^(?:server|upstream|models|pools|state|tenants)\.[\w.<>]+$")
HELP_TIMEOUT_S = 60
TOOLS = {"ruff", "mypy", "lint-imports", "pip"}  # the venv's commands, known by their first word
ROOT_FILES = {"LICENSE", "Makefile"}  # paths with neither a slash nor a suffix
BUILT = {".venv", "site/"}  # what the build makes (ignored by git): the venv, `make docs`' site
Help = tuple[str, ...]  # the argv (after the interpreter) whose --help lists a command's options


def read(relative: str) -> str:
    return (REPO_ROOT / relative).read_text(encoding="utf-8")


def make_targets() -> set[str]:
    return set(re.findall(r"^([\w-]+):", read("Makefile"), re.M))


def module_file(module: str) -> Path | None:
    """The repository file that ``python -m module`` runs; None for one installed elsewhere."""
    base = REPO_ROOT / module.replace(".", "/")
    for candidate in (base / "__main__.py", base.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


@functools.cache
def help_text(argv: Help) -> str:
    done = subprocess.run(
        [sys.executable, *argv, "--help"],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=HELP_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, f"{' '.join(argv)} --help: {done.stderr[-2000:]}"
    return done.stdout


def check_option(option: str, help_of: Help) -> None:
    assert re.search(rf"{re.escape(option)}\b", help_text(help_of)), f"{help_of}: no {option}"


def check_arguments(words: list[str], help_of: Help | None) -> None:
    """Options appear in the command's ``--help``; path arguments exist."""
    for word in words:
        if word.startswith("--") and help_of is not None:
            check_option(word, help_of)
        elif "/" in word:
            assert (REPO_ROOT / word).exists(), word


def check_command(span: str) -> Help | None:
    """Checks ``span`` as a command. Returns the argv whose ``--help`` lists its options (empty
    when it has none to check); None when ``span`` is no command."""
    words = shlex.split(span)
    first = words[0]
    help_of: Help = ()
    if first == "make":
        missing = set(words[1:]) - make_targets()
        assert not missing, f"{span}: no such target in the Makefile"
    elif first in ("python", ".venv/bin/python") and words[1] == "-m":
        module, rest = words[2], words[3:]
        here = module_file(module) is not None
        assert here or importlib.util.find_spec(module) is not None, f"{span}: no such module"
        help_of = ("-m", module) if here else ()
        check_arguments(rest, help_of or None)
    elif first == "python":
        assert (REPO_ROOT / words[1]).is_file(), f"{span}: no such script"
        help_of = (words[1],)
        check_arguments(words[2:], help_of)
    elif first == "gateway":
        parser().parse_args(words[1:])  # SystemExit on a subcommand or an option it lacks
        check_arguments([w for w in words[1:] if not w.startswith("--")], None)
    elif first in TOOLS:
        assert (Path(sys.executable).parent / first).is_file(), f"{span}: not installed"
    else:
        return None
    return help_of


def defined(name: str, modules: list[Path]) -> bool:
    """``name`` (or ``Class.member``) is defined at the start of a line in one of ``modules``."""
    outer, _, member = name.partition(".")
    where = rf"^\s*(?:async def|def|class) {outer}\b|^{outer}\b\s*[:=]"
    within = rf"^\s+(?:async def|def) {member}\b"
    for module in modules:
        text = module.read_text(encoding="utf-8")
        if re.search(where, text, re.M) and (not member or re.search(within, text, re.M)):
            return True
    return False


def kind_of(span: str, modules: list[Path], help_of: Help) -> str:
    """Checks ``span`` and says what it was checked as; ``modules``: the paragraph's modules,
    ``help_of``: the paragraph's last command (a bare option is one of its options)."""
    if span.startswith("--") and help_of:
        check_option(span, help_of)
        return "option"
    if span.startswith("<!-- docs-test:"):
        assert MARKED.search(f"{span}\n```sh\ntrue\n```\n"), f"{span}: not a docs-test marker"
        return "marker"
    if span in BUILT:
        assert span.rstrip("/") in read(".gitignore"), f"{span}: not a build output"
        return "built"
    if span.startswith("#"):
        assert re.search(rf"^{re.escape(span)}$", read("CHANGELOG.md"), re.M), span
        return "heading"
    if span.startswith("[tool."):
        assert f"\n{span}\n" in read("pyproject.toml"), span
        return "heading"
    if CONFIG_KEY.match(span):
        assert f"| `{span}` |" in read("docs/configuration.md"), f"{span}: no such config key"
        return "key"
    if span.startswith("_"):
        assert re.search(rf'"gateway_\w+{span}"', read("gateway/telemetry/catalog.py")), span
        return "suffix"
    if span in ROOT_FILES or (PATH.match(span) and ("/" in span or "." in span)):
        assert (REPO_ROOT / span).exists(), f"{span}: no such path"
        return "path"
    if NAME.match(span):
        assert defined(span, modules), f"{span}: defined in none of {modules}"
        return "name"
    assert "(" in span, f"{span}: neither a command, a path, a name nor a snippet of code"
    return "snippet"


def checked_spans() -> dict[str, list[str]]:
    """Every code span of the page, checked, by what it was checked as."""
    kinds: dict[str, list[str]] = defaultdict(list)
    for paragraph in re.split(r"\n\s*\n", PAGE.read_text(encoding="utf-8")):
        found = SPAN.findall(paragraph)
        modules = [REPO_ROOT / s for s in found if PATH.match(s) and s.endswith(".py")]
        help_of: Help = ()
        for span in found:
            command = check_command(span)
            if command is not None:
                kinds["command"].append(span)
                help_of = command
            else:
                kinds[kind_of(span, modules, help_of)].append(span)
    return kinds


def test_every_command_path_name_and_key_it_names_exists() -> None:
    kinds = checked_spans()
    # The checks reached the page: each kind, in numbers.
    assert len(kinds["command"]) >= 10, kinds["command"]
    assert len(kinds["path"]) >= 30, kinds["path"]
    assert len(kinds["name"]) >= 5, kinds["name"]
    assert kinds["key"] and kinds["heading"] and kinds["option"], dict(kinds)


def test_it_says_how_to_add_each_kind_of_change() -> None:
    page = PAGE.read_text(encoding="utf-8")
    for needed in (
        "make run",
        "make test",
        "make fmt",
        "gateway/pipeline/build.py",
        "python -m gateway.config.reference",
        "gateway/telemetry/catalog.py",
        "mkdocs.yml",
        "loadtests/chaos/",
        "docs/measured.md",
        "CHANGELOG.md",
        "lint-imports",
        "gateway/control/",
        "gateway/snapshot/",
        "(architecture.md)",
    ):
        assert needed in page or needed.removeprefix("docs/") in page, needed


def test_the_checks_refuse_what_does_not_exist() -> None:
    for wrong in (
        "make formatting",
        "python -m gateway.nothing_here",
        "python loadtests/perf_page.py --no-such-option",
        "gateway check --explain digits",
    ):
        try:
            check_command(wrong)
        except (AssertionError, SystemExit):
            continue
        raise AssertionError(f"not refused: {wrong}")
    build = REPO_ROOT / "gateway" / "pipeline" / "build.py"
    for span in ("gateway/no_such_module.py", "no_such_name", "models.<name>.no_such_key"):
        try:
            kind_of(span, [build], ())
        except AssertionError:
            continue
        raise AssertionError(f"not refused: {span}")


def test_the_page_is_in_the_nav_and_linked_from_the_readme() -> None:
    nav = yaml.safe_load(read("mkdocs.yml"))["nav"]
    assert {"Contributing": "contributing.md"} in nav
    assert "(docs/contributing.md)" in read("README.md")
