"""Which handler answers a request: method and path to a handler, a fallback for the rest.

Routes are path templates whose ``{name}`` segments match one segment each, decoded into
``request.params`` (``/v2/models/{model}/infer``); a literal segment wins over a parameter.
Everything no route takes (an unknown path, or a known path with another method) goes to the
fallback, which may answer 404 or 405 itself or forward the request elsewhere
(`gateway.worker.http.proxy`). Matching splits the decoded path once and walks a tree of
segments: no regular expression, no scope.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any
from urllib.parse import unquote

from gateway.worker.http.answer import Answer
from gateway.worker.http.request import Request

Handler = Callable[[Request, Answer], Coroutine[Any, Any, None]]


class _Node:
    __slots__ = ("handlers", "param", "static")

    def __init__(self) -> None:
        self.static: dict[str, _Node] = {}
        self.param: tuple[str, _Node] | None = None
        self.handlers: dict[str, tuple[Handler, tuple[str, ...]]] = {}


class Router:
    def __init__(self, fallback: Handler) -> None:
        self.fallback = fallback
        self._root = _Node()

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
                    raise ValueError(f"{template}: {{{name}}} where another route has "
                                     f"{{{node.param[0]}}}")  # fmt: skip
                names.append(name)
                node = node.param[1]
            else:
                node = node.static.setdefault(segment, _Node())
        if method in node.handlers:
            raise ValueError(f"{method} {template} has a handler already")
        node.handlers[method] = (handler, tuple(names))

    def route(self, request: Request) -> Handler:
        """The handler for ``request``; its path parameters go to ``request.params``."""
        raw = request.raw_path
        path = unquote(raw.decode("latin-1")) if b"%" in raw else raw.decode("latin-1")
        segments = path.split("/")
        if segments[0]:
            return self.fallback  # not an origin-form target ("*", or an absolute URL)
        values: list[str] = []
        node = _walk(self._root, segments, 1, values)
        if node is None:
            return self.fallback
        found = node.handlers.get(request.method)
        if found is None:
            return self.fallback
        handler, names = found
        if names:
            request.params = dict(zip(names, values, strict=True))
        return handler


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
