"""The replica's ASGI app: the V2 endpoints for one model, ``/metrics`` and the fault admin.

A raw ASGI app rather than a framework, because the infer path is the hot path of every
benchmark and chaos run: read the body, validate it against the signature, run the model in a
thread pool, encode, send, with nothing in between. Readiness is explicit state (loading,
warmed up, draining, injected fault) so a gateway can trust ``/v2/health/ready``.

    GET  /v2                                        server metadata
    GET  /v2/health/live | /v2/health/ready
    GET  /v2/models/{name}[/versions/{v}]           model metadata
    GET  /v2/models/{name}[/versions/{v}]/ready
    POST /v2/models/{name}[/versions/{v}]/infer
    GET  /metrics
    GET|POST|DELETE /admin/faults                   only with a `FaultInjector` and its key
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import parse_qs

from replicas import __version__
from replicas.accelerator import Accelerator, AcceleratorCollector
from replicas.asgi import (
    ClientDisconnected,
    Receive,
    Response,
    Scope,
    Send,
    error_response,
    header,
    json_response,
    read_body,
    send_response,
)
from replicas.errors import BadRequest, MethodNotAllowed, NotFound, NotReady, ReplicaError
from replicas.fault_admin import FaultAdmin
from replicas.fault_auth import FaultKey
from replicas.faults import FaultHooks, FaultInjector, NoFaults
from replicas.load import ReplicaLoad
from replicas.metrics import ReplicaMetrics
from replicas.model import PLATFORM, Device, OnnxModel
from v2proto.codec import HEADER_LENGTH, InferRequest, encode_infer_response, parse_infer_request
from v2proto.errors import ProtocolError
from v2proto.load import HEADER as LOAD_HEADER
from v2proto.signature import Signature
from v2proto.tensors import nonfinite_message, nonfinite_output

log = logging.getLogger("replicas.server")

MAX_BODY_BYTES = 64 * 1024 * 1024
MODELS_PREFIX = "/v2/models/"
_HEADER_LENGTH_KEY = HEADER_LENGTH.encode()
SERVER_METADATA = {"name": "replica", "version": __version__, "extensions": ["binary_tensor_data"]}

Handler = Callable[[str, Scope, Receive], Awaitable[Response]]
Loader = Callable[..., OnnxModel]


def _allow(method: str, *allowed: str) -> None:
    if method not in allowed:
        raise MethodNotAllowed(f"method {method} not allowed here; use {' or '.join(allowed)}")


def metric_names(scope: Scope) -> frozenset[str] | None:
    """The series a scrape asks for with ``?name[]=...`` (as prometheus_client's own handler
    takes them); None: all. A gateway sampling the accelerator asks for its series only."""
    query = scope.get("query_string") or b""
    if not query:
        return None
    names = parse_qs(query.decode("latin-1")).get("name[]")
    return frozenset(names) if names else None


def _parse(body: bytes, header_length: str | None, signature: Signature) -> InferRequest:
    """The request checked against the model; a malformed one is the replica's 400."""
    try:
        return parse_infer_request(body, header_length, signature)
    except ProtocolError as exc:
        raise BadRequest(exc.message) from exc


class ReplicaApp:
    """Serves one version of one ONNX model over the V2 REST protocol."""

    def __init__(
        self,
        model_path: str | Path,
        *,
        name: str,
        version: str = "1",
        device: Device = "cpu",
        threads: int = 1,
        faults: FaultInjector | None = None,
        fault_key: FaultKey | None = None,
        max_body_bytes: int = MAX_BODY_BYTES,
        loader: Loader = OnnxModel,
        accelerator: Accelerator | None = None,
    ) -> None:
        """``accelerator``: the GPU's readings for ``/metrics`` (default: none, unless
        injected through the fault endpoint)."""
        self.model_path = Path(model_path)
        self.name = name
        self.version = version
        self.device: Device = device
        self.model: OnnxModel | None = None
        self.load_error: str | None = None
        self.draining = False
        self.load = ReplicaLoad(threads)
        self.metrics = ReplicaMetrics(name, version, self.load)
        self.accelerator = accelerator or Accelerator("no accelerator sampled")
        self.metrics.registry.register(AcceleratorCollector(self.accelerator))
        self.faults: FaultHooks = faults if faults is not None else NoFaults()
        self._loader = loader
        self._max_body = max_body_bytes
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="infer")
        self._startup: asyncio.Task[None] | None = None
        self._routes: dict[str, Handler] = {
            "/v2": self._server_metadata,
            "/v2/": self._server_metadata,
            "/v2/health/live": self._live,
            "/v2/health/ready": self._ready,
            "/metrics": self._metrics,
        }
        if faults is not None:  # without faults there is no /admin route at all: a plain 404
            if fault_key is None:
                raise ValueError("fault injection needs a fault key to guard /admin/faults")
            admin = FaultAdmin(faults, fault_key, self.metrics, max_body_bytes, self.accelerator)
            self._routes["/admin/faults"] = admin

    # ------------------------------------------------------------------ lifecycle

    async def startup(self) -> None:
        """Load the model and warm it up in the thread pool; ready only if both pass."""
        loop = asyncio.get_running_loop()
        try:
            model = await loop.run_in_executor(self._executor, self._load_and_warm_up)
        except Exception as exc:
            self.load_error = f"model failed to load: {exc}"
            log.error("%s: %s", self.model_path, self.load_error)
            return
        self.model = model
        log.info(
            "model %s version %s ready (%s, provider %s)",
            self.name,
            self.version,
            self.model_path,
            model.provider,
        )

    def _load_and_warm_up(self) -> OnnxModel:
        model = self._loader(self.model_path, device=self.device)
        model.warm_up()
        return model

    @property
    def executor(self) -> ThreadPoolExecutor:
        """The inference thread pool (every door runs the model here, never on the loop)."""
        return self._executor

    def begin_shutdown(self) -> None:
        """Report not-ready from now on; requests already in flight still complete."""
        if not self.draining:
            log.info("shutting down: readiness is now false")
        self.draining = True

    async def shutdown(self) -> None:
        self.begin_shutdown()
        if self._startup is not None and not self._startup.done():
            self._startup.cancel()
        self._executor.shutdown(wait=False, cancel_futures=True)

    def not_ready_reason(self) -> str | None:
        if self.draining:
            return "shutting down"
        if self.model is None:
            return self.load_error or "model is loading"
        if not self.faults.ready:
            return "injected fault: not ready"
        return None

    # ------------------------------------------------------------------ ASGI

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                # Load in the background so /v2/health/live answers while the model loads.
                self._startup = asyncio.create_task(self.startup())
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        method, path = scope["method"], scope["path"]
        try:
            handler = self._routes.get(path)
            if handler is not None:
                response = await handler(method, scope, receive)
            elif path.startswith(MODELS_PREFIX):
                response = await self._model_route(method, path, scope, receive)
            else:
                raise NotFound(f"no route for {path}")
        except ReplicaError as exc:
            response = error_response(exc.status, exc.message, exc.headers)
        except ClientDisconnected:
            return
        except asyncio.CancelledError:
            # uvicorn cancels requests still running when the graceful shutdown times out
            # (a hang fault, say); without this the client would get a text/plain 500.
            response = error_response(503, "replica shut down before answering")
        except Exception as exc:  # never a bare 500: say what broke, as JSON
            log.exception("unexpected error on %s %s", method, path)
            response = error_response(500, f"internal error: {exc}")
        if path.endswith("/infer"):  # every infer answer, refusals too, says the load as it leaves
            response.headers = {**(response.headers or {}), LOAD_HEADER: self.report()}
        await send_response(send, response)
        if response.after is not None:
            response.after()

    def report(self) -> str:
        """The load report an answer carries (`replicas.load`), sent as it leaves."""
        return self.load.report(self.accelerator.current())

    # ------------------------------------------------------------------ server routes

    async def _server_metadata(self, method: str, scope: Scope, receive: Receive) -> Response:
        _allow(method, "GET")
        return json_response(SERVER_METADATA)

    async def _live(self, method: str, scope: Scope, receive: Receive) -> Response:
        _allow(method, "GET")
        return json_response({"live": True})

    async def _ready(self, method: str, scope: Scope, receive: Receive) -> Response:
        _allow(method, "GET")
        reason = self.not_ready_reason()
        if reason is None:
            return json_response({"ready": True})
        return json_response({"ready": False, "error": reason}, 503)

    async def _metrics(self, method: str, scope: Scope, receive: Receive) -> Response:
        _allow(method, "GET")
        self.metrics.set_ready(self.not_ready_reason() is None)
        names = metric_names(scope)
        return Response(200, self.metrics.render(names), self.metrics.content_type)

    # ------------------------------------------------------------------ model routes

    async def _model_route(
        self, method: str, path: str, scope: Scope, receive: Receive
    ) -> Response:
        name, *rest = path[len(MODELS_PREFIX) :].split("/")
        version = None
        if len(rest) >= 2 and rest[0] == "versions":
            version, rest = rest[1], rest[2:]
        if name != self.name:
            raise NotFound(f"model '{name}' not found")
        if version is not None and version != self.version:
            raise NotFound(f"version '{version}' of model '{name}' not found")
        action = rest[0] if len(rest) == 1 else ""
        if len(rest) > 1 or action not in ("", "ready", "infer"):
            raise NotFound(f"no route for {path}")
        if action == "infer":
            _allow(method, "POST")
            return await self._infer(scope, receive)
        _allow(method, "GET")
        if action == "ready":
            reason = self.not_ready_reason()
            if reason is None:
                return json_response({"name": self.name, "ready": True})
            return json_response({"name": self.name, "ready": False, "error": reason}, 503)
        return self._model_metadata()

    def _model_metadata(self) -> Response:
        model = self.model
        if model is None:
            raise NotReady(f"model '{self.name}' is not loaded: {self.not_ready_reason()}")
        return json_response(
            {
                "name": self.name,
                "versions": [self.version],
                "platform": PLATFORM,
                "inputs": [t.to_json() for t in model.signature.inputs],
                "outputs": [t.to_json() for t in model.signature.outputs],
                "parameters": {
                    "execution_provider": model.provider,
                    "requested_device": model.requested_device,
                },
            }
        )

    async def _infer(self, scope: Scope, receive: Receive) -> Response:
        started = time.perf_counter()
        status, rows = 500, 0
        self.load.began()
        try:
            model = self.model
            if model is None:
                raise NotReady(f"model '{self.name}' is not ready: {self.not_ready_reason()}")
            body = await read_body(scope, receive, self._max_body)
            request = _parse(body, header(scope, _HEADER_LENGTH_KEY), model.signature)
            await self.faults.before_infer(request.inputs)
            loop = asyncio.get_running_loop()
            outputs = await loop.run_in_executor(self._executor, model.run, request.inputs)
            overflowed = nonfinite_output(outputs)
            if overflowed is not None:
                raise BadRequest(nonfinite_message(overflowed))
            outputs = self.faults.after_infer(outputs)
            requested = request.requested(model.signature.output_names)
            encoded = encode_infer_response(
                self.name,
                self.version,
                [(o.name, outputs[o.name], o.binary) for o in requested],
                request_id=self.faults.answer_id(request.id),
            )
            status, rows = 200, request.rows
            extra = None
            if encoded.json_length is not None:
                extra = {HEADER_LENGTH: str(encoded.json_length)}
            return Response(200, encoded.body, encoded.content_type, extra)
        except ReplicaError as exc:
            status = exc.status
            raise
        except asyncio.CancelledError:
            status = 503
            raise
        finally:
            self.load.ended()
            self.metrics.observe(status, time.perf_counter() - started, rows)
