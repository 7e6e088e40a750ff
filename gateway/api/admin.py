"""Everything but infer, on FastAPI: V2 health and metadata, admin state and controls, docs.

These endpoints are cheap to call rarely and benefit from FastAPI's docs and validation; the
exception handlers make sure even FastAPI's own 404/405/422 leave as ``{"error": ...}``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import Body, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException

from gateway import __version__
from gateway.api.controls import ReasonBody, install_controls
from gateway.api.dashboard import install_dashboard
from gateway.api.fleet import install_fleet
from gateway.api.guard import operator_of
from gateway.api.openapi import install_openapi
from gateway.api.rollouts import install_rollouts
from gateway.control.introspection import slo_document, state_document
from gateway.control.runtime import Gateway
from gateway.errors import Conflict, GatewayError
from gateway.readiness import Readiness

_BODY = Body(default=None)
# (who, reason): the reload's result
Reload = Callable[[str, str], Awaitable[dict[str, Any]]]


def build_admin_app(gateway: Gateway, reload: Reload | None = None) -> FastAPI:
    """The control plane's app: its routes in the order FastAPI matches them."""
    app = FastAPI(title="v2-gateway", version=__version__, docs_url=None, redoc_url=None)
    # infer (served outside FastAPI) in /openapi.json; /docs offline
    install_openapi(app)
    _install_error_handlers(app)
    _install_v2_server(app, gateway)
    _install_v2_models(app, gateway)
    _install_triton_parity(app, gateway)
    _install_state(app, gateway)
    # the page at /status and /dashboard, its files under /dashboard/
    install_dashboard(app)
    _install_reload(app, reload)
    # operators' drain, eject, restore, pause, resume
    install_controls(app, gateway)
    # rollouts: their state, start, pause, promote, abort
    install_rollouts(app, gateway)
    # every gateway of the namespace; this one's heartbeat
    install_fleet(app, gateway)
    _install_telemetry(app, gateway)
    return app


def _install_v2_server(app: FastAPI, gateway: Gateway) -> None:
    """V2 server metadata and health."""

    @app.get("/v2")
    @app.get("/v2/")
    async def server_metadata() -> dict[str, Any]:
        return gateway.server_metadata()

    @app.get("/v2/health/live")
    async def live() -> dict[str, bool]:
        return {"live": True}

    @app.get("/v2/health/ready")
    async def ready() -> Response:
        ok = gateway.ready()
        return JSONResponse(gateway.readiness(), status_code=200 if ok else 503)


def _install_v2_models(app: FastAPI, gateway: Gateway) -> None:
    """V2 model metadata and readiness, and every model's statistics."""

    # before /v2/models/{name}, which would take "stats"
    @app.get("/v2/models/stats")
    async def all_statistics() -> dict[str, Any]:
        return gateway.statistics()

    @app.get("/v2/models/{name}")
    async def model_metadata(name: str) -> dict[str, Any]:
        return await gateway.model_metadata(name, gateway.model(name))

    @app.get("/v2/models/{name}/versions/{version}")
    async def model_version_metadata(name: str, version: str) -> dict[str, Any]:
        return await gateway.model_metadata(name, gateway.model(name, version))

    @app.get("/v2/models/{name}/ready")
    async def model_ready(name: str) -> Response:
        return _ready(name, gateway.model_readiness(gateway.model(name)))

    @app.get("/v2/models/{name}/versions/{version}/ready")
    async def model_version_ready(name: str, version: str) -> Response:
        return _ready(name, gateway.model_readiness(gateway.model(name, version)))


def _install_triton_parity(app: FastAPI, gateway: Gateway) -> None:
    """Triton/KServe parity: what tritonclient calls besides health, metadata and infer."""

    @app.post("/v2/repository/index")
    async def repository_index() -> list[dict[str, Any]]:
        return gateway.repository_index()

    @app.get("/v2/models/{name}/config")
    async def model_config(name: str) -> dict[str, Any]:
        return await gateway.model_config(name, gateway.model(name))

    @app.get("/v2/models/{name}/versions/{version}/config")
    async def model_version_config(name: str, version: str) -> dict[str, Any]:
        return await gateway.model_config(name, gateway.model(name, version))

    @app.get("/v2/models/{name}/stats")
    async def model_statistics(name: str) -> dict[str, Any]:
        gateway.model(name)
        return gateway.statistics(name)

    @app.get("/v2/models/{name}/versions/{version}/stats")
    async def model_version_statistics(name: str, version: str) -> dict[str, Any]:
        gateway.model(name, version)
        return gateway.statistics(name)


def _install_state(app: FastAPI, gateway: Gateway) -> None:
    """The gateway's state and its history, as the dashboard reads them."""

    @app.get("/admin/state")
    async def admin_state() -> dict[str, Any]:
        return state_document(gateway)

    @app.get("/admin/history")
    async def admin_history(
        seconds: float | None = Query(None, gt=0, description="only the last N seconds"),
        events: int | None = Query(None, ge=0, description="at most N events, newest first"),
    ) -> dict[str, Any]:
        return gateway.history.to_json(seconds, events)


def _install_reload(app: FastAPI, reload: Reload | None) -> None:
    """``POST /admin/reload``: the config file read again (absent: a 409)."""

    @app.post("/admin/reload")
    async def admin_reload(request: Request, body: ReasonBody | None = _BODY) -> dict[str, Any]:
        """Re-reads the config file (audited with the operator's name and ``reason``)."""
        if reload is None:
            raise Conflict("reload is not available here")
        return await reload(operator_of(request.scope), body.reason if body else "")


def _install_telemetry(app: FastAPI, gateway: Gateway) -> None:
    """``/slo`` and ``/metrics``."""

    @app.get("/slo")
    async def slo() -> dict[str, Any]:
        return slo_document(gateway)

    @app.get("/metrics")
    async def metrics(request: Request) -> Response:
        body, content_type = gateway.metrics.render(request.headers.get("accept"))
        return Response(body, media_type=content_type)


def _ready(name: str, state: Readiness) -> Response:
    doc: dict[str, Any] = {"name": name, "ready": state.ready}
    if state.reason:
        doc["reason"] = state.reason
    return JSONResponse(doc, status_code=200 if state.ready else 503)


def _install_error_handlers(app: FastAPI) -> None:
    async def gateway_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, GatewayError)
        return JSONResponse({"error": exc.message}, exc.status, headers=exc.headers())

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        if exc.status_code == 404:
            message = f"no such endpoint: {request.method} {request.url.path}"
        elif exc.status_code == 405:
            message = f"method {request.method} not allowed on {request.url.path}"
        return JSONResponse({"error": message}, exc.status_code, headers=exc.headers)

    async def validation_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        where = ".".join(str(p) for p in first["loc"])
        return JSONResponse({"error": f"{where}: {first['msg']}"}, 400)

    app.add_exception_handler(GatewayError, gateway_error)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(RequestValidationError, validation_error)
