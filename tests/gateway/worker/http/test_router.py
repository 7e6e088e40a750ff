"""Routes: templates with parameters, literal segments first, the fallback for the rest."""

from __future__ import annotations

import pytest

from gateway.worker.http.answer import Answer
from gateway.worker.http.request import Request
from gateway.worker.http.router import Handler, Router


def named(name: str) -> Handler:
    async def handler(request: Request, answer: Answer) -> None:
        pass

    handler.__name__ = name
    return handler


class Flow:
    def body_taken(self) -> None:
        pass

    def continue_body(self) -> None:
        pass


def routed(router: Router, method: str, path: bytes) -> tuple[str, dict[str, str]]:
    request = Request(Flow(), method, path, b"", [], {}, "1.1", True, "", False)
    return router.route(request).__name__, dict(request.params)


@pytest.fixture
def router() -> Router:
    router = Router(named("fallback"))
    router.add("POST", "/v2/models/{model}/infer", named("infer"))
    router.add("POST", "/v2/models/{model}/versions/{version}/infer", named("infer"))
    router.add("GET", "/v2/models/{model}", named("metadata"))
    router.add("GET", "/v2/models/{model}/ready", named("ready"))
    router.add("GET", "/v2/health/live", named("live"))
    router.add("GET", "/v2/models/stats/ready", named("literal"))
    return router


@pytest.mark.parametrize(
    ("method", "path", "expected"),
    [
        ("POST", b"/v2/models/digits/infer", ("infer", {"model": "digits"})),
        ("POST", b"/v2/models/d/versions/2/infer", ("infer", {"model": "d", "version": "2"})),
        ("POST", b"/v2/models/a%2Fb%20c/infer", ("fallback", {})),  # %2F splits, as ASGI's path
        ("POST", b"/v2/models/a%20c/infer", ("infer", {"model": "a c"})),
        ("GET", b"/v2/models/digits", ("metadata", {"model": "digits"})),
        ("GET", b"/v2/models/stats/ready", ("literal", {})),  # a literal wins
        ("GET", b"/v2/models/other/ready", ("ready", {"model": "other"})),
        ("GET", b"/v2/health/live", ("live", {})),
        ("GET", b"/v2/models/digits/infer", ("fallback", {})),  # another method
        ("GET", b"/v2/models//ready", ("fallback", {})),  # an empty parameter
        ("GET", b"/metrics", ("fallback", {})),
        ("OPTIONS", b"*", ("fallback", {})),
        ("GET", b"/v2/health/live/", ("fallback", {})),
    ],
)
def test_a_request_goes_to_its_route_or_the_fallback(
    router: Router, method: str, path: bytes, expected: tuple[str, dict[str, str]]
) -> None:
    assert routed(router, method, path) == expected


def test_conflicting_routes_are_refused(router: Router) -> None:
    with pytest.raises(ValueError, match="has a handler already"):
        router.add("GET", "/v2/health/live", named("again"))
    with pytest.raises(ValueError, match="another route has"):
        router.add("GET", "/v2/models/{name}/x", named("x"))
    with pytest.raises(ValueError, match="starts with"):
        router.add("GET", "v2", named("x"))
