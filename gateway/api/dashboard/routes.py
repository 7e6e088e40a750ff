"""How the dashboard is served: the page under its Content-Security-Policy, its files by ETag.

``GET /dashboard`` and ``GET /status`` answer the same page (`gateway.api.guard` opens
``/dashboard`` and the page's files without a key, since they hold no data, and keeps
``/status`` behind the admin key). The page is never cached, so a new gateway version is seen
at once; its files are revalidated on each load (``no-cache`` with an ETag, a 304 while
unchanged), so a page never runs another version's script. The policy lets the page load
scripts and its sheet from this origin only, fetch from this origin only, and nothing else:
no inline script runs, no other site's frame can hold it (the charts' colours and bar widths
are style attributes, hence ``'unsafe-inline'`` for styles alone).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, Response

from gateway.api.dashboard.assets import FILES, PAGE, Asset

PAGE_URL = "/dashboard"
# the same page, behind the admin key
STATUS_URL = "/status"
# What opens without a key (under an allowed Host): the page and the files it loads.
PAGE_PATHS = frozenset({PAGE_URL, *FILES})
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)
# a script runs only when served as one
NOSNIFF = {"x-content-type-options": "nosniff"}
PAGE_HEADERS = {"content-security-policy": CSP, "cache-control": "no-store", **NOSNIFF}

Endpoint = Callable[[Request], Awaitable[Response]]


def page_response() -> HTMLResponse:
    """The page, never cached, under `CSP`."""
    return HTMLResponse(PAGE.body, headers=PAGE_HEADERS)


def not_modified(if_none_match: str | None, etag: str) -> bool:
    """Whether an ``If-None-Match`` names ``etag`` (weak comparison, as RFC 9110 asks)."""
    if if_none_match is None:
        return False
    tags = (tag.strip().removeprefix("W/") for tag in if_none_match.split(","))
    return any(tag in ("*", etag) for tag in tags)


def file_response(asset: Asset, if_none_match: str | None) -> Response:
    """One of the page's files: the bytes, or a 304 while the browser holds the same."""
    headers = {"cache-control": "no-cache", "etag": asset.etag, **NOSNIFF}
    if not_modified(if_none_match, asset.etag):
        return Response(status_code=304, headers=headers)
    return Response(asset.body, media_type=asset.content_type, headers=headers)


def _file_endpoint(asset: Asset) -> Endpoint:
    async def serve_file(request: Request) -> Response:
        return file_response(asset, request.headers.get("if-none-match"))

    return serve_file


def install_dashboard(app: FastAPI) -> None:
    """The page at ``/status`` and ``/dashboard``, and its files under ``/dashboard/``."""

    @app.get(STATUS_URL, response_class=HTMLResponse)
    @app.get(PAGE_URL, response_class=HTMLResponse)
    async def dashboard() -> Response:
        return page_response()

    for url, asset in FILES.items():
        app.add_api_route(url, _file_endpoint(asset), methods=["GET"], include_in_schema=False)
