"""Which handler answers a request: method and path to a handler, a fallback for the rest.

Routes are path templates whose ``{name}`` segments match one segment each, decoded into
``request.params`` (``/v2/models/{model}/infer``); a literal segment wins over a parameter.
Everything no route takes (an unknown path, or a known path with another method) goes to the
fallback, which may answer 404 or 405 itself or forward the request elsewhere
(`gateway.worker.http.proxy`). Matching splits the decoded path and walks a tree of segments,
no regular expression; a path seen lately is one dictionary look-up (`CACHED_PATHS` of them,
forgotten all at once when full, so a client sending endless new paths costs only the walk).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping
from typing import Any
from urllib.parse import unquote

from gateway.worker.http.answer import Answer
from gateway.worker.http.request import NO_PARAMS, Request

Handler = Callable[[Request, Answer], Coroutine[Any, Any, None]]
CACHED_PATHS = 4096
_NO_HANDLERS: dict[str, Handler] = {}


class _Node:
    __slots__ = ("handlers", "names", "param", "static")

    def __init__(self) -> None:
        self.static: dict[str, _Node] = {}
        self.param: tuple[str, _Node] | None = None
        self.handlers: dict[str, Handler] = {}
        self.names: tuple[str, ...] = ()  # the parameters' names on the way here


class Router:
    def __init__(self, fallback: Handler) -> None:
        self.fallback = fallback
        self._root = _Node()
        # raw path -> the handlers by method there, and the path's parameters
        self._cache: dict[bytes, tuple[dict[str, Handler], Mapping[str, str]]] = {}

    def add(self, method: str, template: str, handler: Handler) -> None:
        """``handler`` answers ``method`` (upper-case) on paths matching ``template``."""
        if not template.startswith("/"):
            raise ValueError(f"a route's path starts with '/': {template!r}")
        node, names = self._root, []
        for segment in template.split("/")[1:]:
            if segment.startswith("{") and segment.endswith("}"):
                name = segment[1:-1]
                if node.param is None:
                    node.param = (name, _Node())
                elif node.param[0] != name:
                    raise ValueError(
                        f"{template}: {{{name}}} where another route has {{{node.param[0]}}}"
                    )
                names.append(name)
                node = node.param[1]
            else:
                node = node.static.setdefault(segment, _Node())
        if method in node.handlers:
            raise ValueError(f"{method} {template} has a handler already")
        node.handlers[method] = handler
        node.names = tuple(names)
        self._cache.clear()

    def route(self, request: Request) -> Handler:
        """The handler for ``request``; its path parameters go to ``request.params`` (shared
        by the requests of one path: read-only)."""
        raw = request.raw_path
        found = self._cache.get(raw)
        if found is None:
            found = self._match(raw)
            if len(self._cache) >= CACHED_PATHS:
                self._cache.clear()
            self._cache[raw] = found
        handlers, params = found
        handler = handlers.get(request.method)
        if handler is None:
            return self.fallback
        request.params = params
        return handler

    def _match(self, raw: bytes) -> tuple[dict[str, Handler], Mapping[str, str]]:
        path = unquote(raw.decode("latin-1")) if b"%" in raw else raw.decode("latin-1")
        segments = path.split("/")
        if segments[0]:
            return _NO_HANDLERS, NO_PARAMS  # not an origin-form target ("*", an absolute URL)
        values: list[str] = []
        node = _walk(self._root, segments, 1, values)
        if node is None:
            return _NO_HANDLERS, NO_PARAMS
        return node.handlers, dict(zip(node.names, values, strict=True)) if values else NO_PARAMS


def _walk(node: _Node, segments: list[str], at: int, values: list[str]) -> _Node | None:
    """The node ``segments[at:]`` lead to from ``node`` (literal segments first), its
    parameters' values appended to ``values``; None if none."""
    if at == len(segments):
        return node if node.handlers else None
    segment = segments[at]
    child = node.static.get(segment)
    if child is not None:
        found = _walk(child, segments, at + 1, values)
        if found is not None:
            return found
    if node.param is not None and segment:
        values.append(segment)
        found = _walk(node.param[1], segments, at + 1, values)
        if found is not None:
            return found
        values.pop()
    return None
