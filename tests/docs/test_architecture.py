"""docs/architecture.md names every package (subpackages too) and top-level module of
`gateway/` with its concept,
and the README stays short."""

from __future__ import annotations

import re

from tests.support.processes import REPO_ROOT

GATEWAY = REPO_ROOT / "gateway"
ARCHITECTURE = REPO_ROOT / "docs" / "architecture.md"


def described() -> dict[str, str]:
    """The rows of the page's package table: `gateway/name` -> its concept."""
    rows = re.findall(r"^\| `(gateway/[^`]+)` \| (.+?) \|$", ARCHITECTURE.read_text(), re.M)
    return dict(rows)


def parts_of_the_gateway() -> set[str]:
    packages = {
        f"{p.parent.relative_to(REPO_ROOT).as_posix()}/" for p in GATEWAY.rglob("*/__init__.py")
    }
    modules = {f"gateway/{p.name}" for p in GATEWAY.glob("*.py") if p.name != "__init__.py"}
    return packages | modules


def test_every_package_and_module_of_the_gateway_is_described() -> None:
    rows = described()
    missing = sorted(parts_of_the_gateway() - rows.keys())
    assert missing == [], f"add to docs/architecture.md's package table: {', '.join(missing)}"
    assert all(concept.strip() for concept in rows.values())


def test_the_page_names_nothing_that_is_gone() -> None:
    """Every row names a package or a module there is (a row may describe a module inside a
    package, as the control plane's are)."""
    gone = sorted(name for name in described() if not (REPO_ROOT / name).exists())
    assert gone == []


def test_the_readme_is_short() -> None:
    assert len((REPO_ROOT / "README.md").read_text().splitlines()) <= 200
