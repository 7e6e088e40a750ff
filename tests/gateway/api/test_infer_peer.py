"""The REST door tells the edge who is asking: the client's address from ASGI's ``client``, to
which the request's bytes in flight count (`gateway.memory.inflight_bytes`)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from gateway.api.infer import InferEndpoint
from gateway.errors import NotFound


class Edge:
    """Records the peer each request arrives from, and refuses every one (404)."""

    def __init__(self) -> None:
        self.peers: list[str] = []
        self.done_statuses: list[int] = []

    def arrive(self, model: str, version: str | None, headers: Any, peer: str) -> Any:
        self.peers.append(peer)
        return SimpleNamespace(request_id="r", attempts=0, span=SimpleNamespace(traceparent=""))

    async def infer(self, arrival: Any, read: Any) -> Any:
        raise NotFound("model 'x' not found")

    def done(self, arrival: Any, status: int) -> None:
        self.done_statuses.append(status)


@pytest.mark.parametrize(("client", "peer"), [(("10.1.2.3", 5000), "10.1.2.3"), (None, "")])
async def test_the_client_address_reaches_the_edge(client: Any, peer: str) -> None:
    edge = Edge()
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    scope = {"type": "http", "headers": [], "client": client}
    await InferEndpoint(edge)(scope, receive, send, "x", None)  # type: ignore[arg-type]
    assert edge.peers == [peer] and edge.done_statuses == [404]
    assert sent[0]["status"] == 404
