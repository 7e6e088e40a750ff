"""The dashboard's static files, read once from the package: the page, its sheet and scripts.

They ship as package data (``static/``, pyproject ``[tool.setuptools.package-data]``) and are
read with `importlib.resources` when this module is first imported, so a request touches no
disk and a wheel installed anywhere serves the same bytes as a checkout. Each file is an
`Asset` with its content type and a strong ETag (its SHA-256), so a browser can revalidate it
for the price of a header.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import PurePosixPath
from types import MappingProxyType

PAGE_FILE = "index.html"
# where the page loads its sheet and scripts from (index.html)
FILES_URL = "/dashboard/"
CONTENT_TYPES: Mapping[str, str] = MappingProxyType(
    {
        ".html": "text/html; charset=utf-8",
        ".css": "text/css; charset=utf-8",
        # RFC 9239
        ".js": "text/javascript; charset=utf-8",
    }
)


@dataclass(frozen=True, slots=True)
class Asset:
    """One static file as served: its bytes, content type and ETag."""

    name: str
    body: bytes
    content_type: str
    # '"<sha256 hex>"': the same bytes give the same tag on every gateway
    etag: str

    @classmethod
    def of(cls, name: str, body: bytes) -> Asset:
        content_type = CONTENT_TYPES[PurePosixPath(name).suffix]
        return cls(name, body, content_type, f'"{hashlib.sha256(body).hexdigest()}"')


def static_folder() -> Traversable:
    return resources.files(__package__).joinpath("static")


def read_assets(folder: Traversable) -> dict[str, Asset]:
    """Every file of ``folder`` with a known suffix, by name (anything else is not served)."""
    return {
        entry.name: Asset.of(entry.name, entry.read_bytes())
        for entry in sorted(folder.iterdir(), key=lambda e: e.name)
        if entry.is_file() and PurePosixPath(entry.name).suffix in CONTENT_TYPES
    }


_ASSETS = read_assets(static_folder())
PAGE: Asset = _ASSETS[PAGE_FILE]
# The page's sheet and scripts, by the URL path the page loads them from.
FILES: Mapping[str, Asset] = MappingProxyType(
    {FILES_URL + name: asset for name, asset in _ASSETS.items() if name != PAGE_FILE}
)
