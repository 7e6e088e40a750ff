"""``GET|POST|DELETE /admin/faults``: the chaos tests' handle on a replica, behind its key.

The route exists only on a replica started with ``--enable-faults`` (the server never builds
this object otherwise, so the path is a plain 404). Every request must carry the fault key;
state changes only by ``POST`` with an ``application/json`` body or by ``DELETE``, so a
browser's simple cross-site request (a form post, ``text/plain``) cannot inject a fault.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson

from replicas.accelerator import Accelerator
from replicas.asgi import Receive, Response, Scope, header, json_response, read_body
from replicas.errors import BadRequest, MethodNotAllowed, UnsupportedMediaType
from replicas.fault_auth import FaultKey
from replicas.faults import FaultInjector
from replicas.metrics import ReplicaMetrics

log = logging.getLogger("replicas.server")

JSON_MEDIA_TYPE = "application/json"
_CONTENT_TYPE = b"content-type"


def _require_json(scope: Scope) -> None:
    value = header(scope, _CONTENT_TYPE)
    media_type = (value or "").partition(";")[0].strip().lower()
    if media_type != JSON_MEDIA_TYPE:
        got = f"'{media_type}'" if media_type else "none"
        raise UnsupportedMediaType(f"a fault update must be {JSON_MEDIA_TYPE}; got {got}")


class FaultAdmin:
    """The fault endpoint: checks the key, then reads, updates or clears the injector."""

    def __init__(
        self,
        injector: FaultInjector,
        key: FaultKey,
        metrics: ReplicaMetrics,
        max_body: int,
        accelerator: Accelerator | None = None,
    ) -> None:
        """``accelerator``: takes ``{"accelerator": {...} | null}`` (injected readings)."""
        self._injector = injector
        self._key = key
        self._metrics = metrics
        self._max_body = max_body
        self._accelerator = accelerator
        self._set_active()

    def _set_active(self) -> None:
        active = self._injector.faults.active()
        if self._accelerator is not None:
            active["accelerator"] = self._accelerator.injected is not None
        self._metrics.set_faults(active)

    def _state(self) -> dict[str, Any]:
        doc = self._injector.faults.to_json()
        if self._accelerator is not None:
            doc["accelerator"] = self._accelerator.injected_json()
        return doc

    async def __call__(self, method: str, scope: Scope, receive: Receive) -> Response:
        self._key.authorize(scope)
        injector = self._injector
        if method == "GET":
            return json_response(self._state())
        crash = False
        accelerator = self._accelerator
        if method == "DELETE":
            injector.clear()
            if accelerator is not None:
                accelerator.set_injected(None)
        elif method == "POST":
            _require_json(scope)
            body = await read_body(scope, receive, self._max_body)
            try:
                update: Any = orjson.loads(body)
            except orjson.JSONDecodeError as exc:
                raise BadRequest(f"malformed JSON: {exc}") from None
            readings, touched = None, False
            if isinstance(update, dict) and "accelerator" in update and accelerator is not None:
                update = dict(update)
                readings, touched = accelerator.inject(update.pop("accelerator")), True
            _, crash = injector.update(update)  # validated both before either applies
            if touched and accelerator is not None:
                accelerator.set_injected(readings)
        else:
            raise MethodNotAllowed(f"method {method} not allowed here; use GET, POST or DELETE")
        self._set_active()
        state = self._state()
        log.warning("faults now %s%s", state, " and crashing" if crash else "")
        if crash:
            return json_response({**state, "crash": True}, 202, injector.crash_soon)
        return json_response(state)
