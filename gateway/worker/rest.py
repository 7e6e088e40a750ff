"""The REST door on a worker's lean HTTP/1.1 server: infer, health and metadata answered here.

    POST /v2/models/{model}[/versions/{version}]/infer   the edge, then the pipeline
    GET  /v2, /v2/health/live, /v2/health/ready          this worker's view (the snapshot's)
    GET  /v2/models/{model}[/versions/{version}][/ready] metadata and readiness, the same
    anything else                                        the control process (`fallback`)

Answers are the ones the control plane's FastAPI gives for the same paths, byte for byte in
their JSON. An infer answer's bytes stay in the in-flight budget until the server has flushed
them to the client (`Edge.written`), so answers nobody reads cannot outgrow it. A client that
goes away cancels its request's task (the server does it): every try stops, the request is
recorded as `CLIENT_CLOSED` (499) and nothing is written.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import orjson

from gateway.api.answer_lines import answer_lines, refusal_lines
from gateway.api.ids import id_lines
from gateway.api.responses import error_answer
from gateway.errors import CLIENT_CLOSED, GatewayError
from gateway.pipeline.edge import Edge, Intake
from gateway.readiness import Readiness
from gateway.worker.app import WorkerApp
from gateway.worker.http.answer import Answer
from gateway.worker.http.request import Request
from gateway.worker.http.router import Handler, Router

_JSON = b"content-type: application/json\r\n"


class RestDoor:
    def __init__(self, app: WorkerApp) -> None:
        self._app = app

    def routes(self, fallback: Handler) -> Router:
        """The worker's routes; what they do not take goes to ``fallback``."""
        router = Router(fallback)
        router.add("POST", "/v2/models/{model}/infer", self.infer)
        router.add("POST", "/v2/models/{model}/versions/{version}/infer", self.infer)
        router.add("GET", "/v2", self.server_metadata)
        router.add("GET", "/v2/", self.server_metadata)
        router.add("GET", "/v2/health/live", self.live)
        router.add("GET", "/v2/health/ready", self.ready)
        router.add("GET", "/v2/models/stats", fallback)  # not a model: the control's statistics
        router.add("GET", "/v2/models/{model}", self.model_metadata)
        router.add("GET", "/v2/models/{model}/versions/{version}", self.model_metadata)
        router.add("GET", "/v2/models/{model}/ready", self.model_ready)
        router.add("GET", "/v2/models/{model}/versions/{version}/ready", self.model_ready)
        return router

    # --- infer --------------------------------------------------------------------------

    async def infer(self, request: Request, answer: Answer) -> None:
        edge = self._app.edge
        params = request.params
        intake = edge.arrive(params["model"], params.get("version"), request.wanted, request.peer)
        try:
            result = await edge.infer(intake, request.read)
        except asyncio.CancelledError:
            edge.done(intake, CLIENT_CLOSED)  # the client left: nobody to answer
            raise
        except GatewayError as error:
            head, body = error_answer(error, refusal_lines(intake))
            answer.send(error.status, head, body)
            edge.done(intake, error.status, written=False)
            answer.when_flushed(_written(edge, intake))
            return
        answer.send(result.status, answer_lines(intake, result), result.body)
        sent = len(result.body)
        edge.done(intake, result.status, result.served_by, result.degraded, sent, written=False)
        answer.when_flushed(_written(edge, intake))

    # --- health and metadata ------------------------------------------------------------

    async def server_metadata(self, request: Request, answer: Answer) -> None:
        self._json(request, answer, 200, self._app.gateway.server_metadata())

    async def live(self, request: Request, answer: Answer) -> None:
        self._json(request, answer, 200, {"live": True})

    async def ready(self, request: Request, answer: Answer) -> None:
        gateway = self._app.gateway
        self._json(request, answer, 200 if gateway.ready() else 503, gateway.readiness())

    async def model_metadata(self, request: Request, answer: Answer) -> None:
        gateway = self._app.gateway
        params = request.params
        try:
            model = gateway.model(params["model"], params.get("version"))
            doc = await gateway.model_metadata(params["model"], model)
        except GatewayError as error:
            self._error(request, answer, error)
            return
        self._json(request, answer, 200, doc)

    async def model_ready(self, request: Request, answer: Answer) -> None:
        gateway = self._app.gateway
        name = request.params["model"]
        try:
            state = gateway.model_readiness(gateway.model(name, request.params.get("version")))
        except GatewayError as error:
            self._error(request, answer, error)
            return
        document = _readiness_document(name, state)
        self._json(request, answer, 200 if state.ready else 503, document)

    def _ids(self, request: Request) -> bytes:
        wanted = request.wanted
        tracing = self._app.gateway.config.tracing.enabled
        return id_lines(wanted.get("x-request-id"), wanted.get("traceparent"), tracing)

    def _json(self, request: Request, answer: Answer, status: int, doc: Any) -> None:
        answer.send(status, _JSON + self._ids(request), orjson.dumps(doc))

    def _error(self, request: Request, answer: Answer, error: GatewayError) -> None:
        head, body = error_answer(error, self._ids(request))
        answer.send(error.status, head, body)


def _written(edge: Edge, intake: Intake) -> Callable[[bool], None]:
    def written(flushed: bool) -> None:
        edge.written(intake)

    return written


def _readiness_document(name: str, state: Readiness) -> dict[str, Any]:
    doc: dict[str, Any] = {"name": name, "ready": state.ready}
    if state.reason:
        doc["reason"] = state.reason
    return doc
