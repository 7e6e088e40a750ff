"""The dashboard's static files: read from the package, typed by suffix, all shipped and used."""

from __future__ import annotations

import hashlib
import re
import tomllib
from fnmatch import fnmatch
from pathlib import Path

from gateway.api.dashboard.assets import FILES, PAGE, Asset, read_assets
from tests.support.processes import REPO_ROOT

STATIC = REPO_ROOT / "gateway" / "api" / "dashboard" / "static"


def test_the_page_and_its_files_are_read_from_the_package() -> None:
    on_disk = {p.name: p.read_bytes() for p in STATIC.iterdir()}
    assert PAGE.body == on_disk["index.html"]
    assert {url: a.body for url, a in FILES.items()} == {
        f"/dashboard/{name}": body for name, body in on_disk.items() if name != "index.html"
    }


def test_content_types_and_etags() -> None:
    assert PAGE.content_type == "text/html; charset=utf-8"
    types = {url.rsplit(".", 1)[1]: a.content_type for url, a in FILES.items()}
    assert types == {"css": "text/css; charset=utf-8", "js": "text/javascript; charset=utf-8"}
    for asset in (PAGE, *FILES.values()):
        assert asset.etag == f'"{hashlib.sha256(asset.body).hexdigest()}"'
    a, b = Asset.of("x.js", b"1"), Asset.of("y.js", b"2")
    assert a.etag != b.etag and Asset.of("z.js", b"1").etag == a.etag


def test_a_file_of_an_unknown_kind_is_not_served(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not for the browser")
    (tmp_path / "page.css").write_text("body{}")
    (tmp_path / "sub.js").mkdir()
    assert list(read_assets(tmp_path)) == ["page.css"]


def test_the_page_loads_exactly_the_files_served_and_nothing_from_elsewhere() -> None:
    page = PAGE.body.decode()
    loaded = re.findall(r"\b(?:src|href)\s*=\s*['\"]([^'\"]*)", page)
    assert loaded[0] == "data:,"  # the empty icon: no request for /favicon.ico
    assert sorted(loaded[1:]) == sorted(FILES)
    for asset in (PAGE, *FILES.values()):
        text = asset.body.decode()
        assert "http://" not in text and "https://" not in text and "//cdn" not in text
        assert "@import" not in text and "url(" not in text, asset.name


def test_the_wheel_ships_every_static_file() -> None:
    """Each file matches a ``[tool.setuptools.package-data]`` pattern of the package."""
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = pyproject["tool"]["setuptools"]["package-data"]["gateway.api.dashboard"]
    for path in STATIC.iterdir():
        assert any(fnmatch(f"static/{path.name}", p) for p in patterns), path.name
