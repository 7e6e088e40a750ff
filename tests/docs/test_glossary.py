"""docs/glossary.md gives the names the code uses: every name under *Code* exists, and no
retired name (*Was*) is left in `gateway/`."""

from __future__ import annotations

import importlib
import re

import pytest

from tests.support.processes import REPO_ROOT

GLOSSARY = REPO_ROOT / "docs" / "glossary.md"
TEXT = GLOSSARY.read_text()


def _fields(label: str) -> list[str]:
    """The backticked names in every ``*label:*`` field (up to the next field or entry)."""
    spans = re.findall(rf"\*{label}:\*(.+?)(?=\*[A-Z][\w, ]*:\*|\n- \*\*|\n#|\Z)", TEXT, re.S)
    return [name for span in spans for name in re.findall(r"`([^`]+)`", span)]


CODE = sorted({n for n in _fields("Code") if n.startswith("gateway")})
RETIRED = sorted(set(_fields("Was")))


def _resolve(dotted: str) -> object:
    """``gateway.a.b.Name.attr``: the longest importable module, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            found = getattr(found, attr)
        return found
    raise ModuleNotFoundError(dotted)


def test_the_page_names_code() -> None:
    assert len(CODE) > 50 and RETIRED


def test_the_request_values_old_names_are_retired() -> None:
    """The values of `gateway.call` took the glossary's words (attempt, answer); their old names
    stay on the page as *Was*, so the check below keeps them out of the gateway."""
    assert {"InferResult", "Try", "TryHandler", "Tries"} <= set(RETIRED)


@pytest.mark.parametrize("name", CODE)
def test_every_name_it_gives_is_in_the_code(name: str) -> None:
    if "/" in name:
        assert (REPO_ROOT / name).exists(), f"docs/glossary.md names {name}, which is gone"
    else:
        _resolve(name)  # raises if the module or a name in it is gone


@pytest.mark.parametrize("name", RETIRED)
def test_no_retired_name_is_left_in_the_gateway(name: str) -> None:
    word = re.compile(rf"\b{re.escape(name)}\b")
    left = [
        str(path.relative_to(REPO_ROOT))
        for path in (REPO_ROOT / "gateway").rglob("*.py")
        if word.search(path.read_text())
    ]
    assert left == [], f"{name} is retired (docs/glossary.md) but still in {left}"


def test_the_glossary_is_in_the_nav_and_linked_from_contributing() -> None:
    assert "glossary.md" in (REPO_ROOT / "mkdocs.yml").read_text()
    assert "glossary.md" in (REPO_ROOT / "docs" / "contributing.md").read_text()


def test_no_two_classes_share_a_name() -> None:
    """One name per concept: no class name is defined twice under `gateway/` (what
    ``grep -rhoE "^class \\w+" gateway | sort | uniq -d`` checks)."""
    seen: dict[str, list[str]] = {}
    for path in sorted((REPO_ROOT / "gateway").rglob("*.py")):
        for name in re.findall(r"^class (\w+)", path.read_text(), re.M):
            seen.setdefault(name, []).append(str(path.relative_to(REPO_ROOT)))
    assert {name: where for name, where in seen.items() if len(where) > 1} == {}
