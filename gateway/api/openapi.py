"""The gateway's OpenAPI document: FastAPI's own, plus the infer routes and the real errors.

Infer runs on the raw fast path (`gateway.api.infer`), so FastAPI never sees it and its
document would leave out the route clients use most; and FastAPI documents 422 with
``{"detail": ...}`` where the gateway answers 400 with ``{"error": ...}``. Both are put right
once, when the document is first asked for, so tools (schemathesis, client generators) read
what the wire carries.
"""

from __future__ import annotations

from html import escape
from typing import Any

from fastapi import FastAPI
from fastapi.responses import HTMLResponse

from gateway.deadline import TIMEOUT_HEADER
from gateway.v2.request import HEADER_LENGTH

_REF = "#/components/schemas/"
_SCALAR = [{"type": "number"}, {"type": "string"}, {"type": "boolean"}]
# spec: no standard parameters; values are strings, numbers or booleans
PARAMETERS = {
    "type": "object",
    "additionalProperties": {"anyOf": _SCALAR},
}
DATATYPES = [
    "BOOL",
    "UINT8",
    "UINT16",
    "UINT32",
    "UINT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "FP16",
    "BF16",
    "FP32",
    "FP64",
    "BYTES",
]
_SHAPE = {"type": "array", "items": {"type": "integer", "minimum": 0}}
_TENSOR = {"name": {"type": "string"}, "shape": _SHAPE, "datatype": {"enum": DATATYPES}}
SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "required": ["error"],
        "properties": {"error": {"type": "string"}},
    },
    # row-major, flat or nested
    "TensorData": {
        "type": "array",
        "items": {"anyOf": [*_SCALAR, {"$ref": f"{_REF}TensorData"}]},
    },
    "RequestInput": {
        "type": "object",
        "required": ["name", "shape", "datatype", "data"],
        "properties": {
            **_TENSOR,
            "parameters": PARAMETERS,
            "data": {"$ref": f"{_REF}TensorData"},
        },
    },
    "RequestOutput": {
        "type": "object",
        "required": ["name"],
        "properties": {"name": {"type": "string"}, "parameters": PARAMETERS},
    },
    "InferenceRequest": {
        "type": "object",
        "required": ["inputs"],
        "properties": {
            "id": {"type": "string"},
            "parameters": PARAMETERS,
            "inputs": {"type": "array", "items": {"$ref": f"{_REF}RequestInput"}},
            "outputs": {"type": "array", "items": {"$ref": f"{_REF}RequestOutput"}},
        },
    },
    "ResponseOutput": {
        "type": "object",
        # no data when it is binary
        "required": ["name", "shape", "datatype"],
        "properties": {
            **_TENSOR,
            "parameters": PARAMETERS,
            "data": {"$ref": f"{_REF}TensorData"},
        },
    },
    "InferenceResponse": {
        "type": "object",
        "required": ["model_name", "outputs"],
        "properties": {
            "model_name": {"type": "string"},
            "model_version": {"type": "string"},
            "id": {"type": "string"},
            "parameters": PARAMETERS,
            "outputs": {"type": "array", "items": {"$ref": f"{_REF}ResponseOutput"}},
        },
    },
}
_BINARY = {"type": "string", "format": "binary"}
# what `gateway.errors` can send on infer
_ERRORS = {
    "400": "The request is malformed or does not fit the model's signature",
    "401": "No API key where the model requires one, or a key no tenant holds; "
    "see WWW-Authenticate",
    "404": "No such model or version",
    "408": "The request's body did not arrive in time",
    "413": "The request's body is over `server.max_body_bytes`",
    "429": "The tenant's in-flight or rate limit (before the body is read); see Retry-After",
    "4XX": "A replica rejected the request (its status and message)",
    "503": "No replica can answer now (overloaded, none available, no quorum); see Retry-After",
    "504": "The request's deadline passed",
}


def install_openapi(app: FastAPI) -> None:
    """Makes ``app.openapi()`` return the gateway's document, built once, and serves ``/docs``.

    ``/docs`` is a plain page without external assets (FastAPI's loads Swagger UI from a CDN,
    and shows nothing offline); build the app with ``docs_url=None`` for it to take the path.
    """
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = extend(build())
        return app.openapi_schema

    async def docs() -> HTMLResponse:
        return HTMLResponse(render_docs(openapi()))

    app.openapi = openapi  # type: ignore[method-assign]
    app.add_api_route("/docs", docs, methods=["GET"], include_in_schema=False)


def extend(document: dict[str, Any]) -> dict[str, Any]:
    """Adds the infer routes and rewrites FastAPI's validation errors (in place)."""
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    for path, operations in document["paths"].items():
        for operation in operations.values():
            _errors_as_sent(path, operation["responses"])
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    schemas.update(SCHEMAS)
    document["paths"]["/v2/models/{name}/infer"] = {"post": _infer("name")}
    document["paths"]["/v2/models/{name}/versions/{version}/infer"] = {
        "post": _infer("name", "version")
    }
    return document


def _errors_as_sent(path: str, responses: dict[str, Any]) -> None:
    if responses.pop("422", None) is not None:
        responses["400"] = _error("A path parameter is invalid")
    if "{name}" in path:
        responses["404"] = _error("No such model or version")
        if not path.endswith(("/ready", "/stats")):
            responses["503"] = _error("No replica could answer")
    if path.endswith("/ready"):
        responses["503"] = {"description": "Not ready (the JSON body says why)"}
    if path == "/admin/reload":
        responses["400"] = _error("The config file is invalid; nothing changed")
        responses["409"] = _error("This gateway was not started from a config file")
    if path == "/metrics":
        text = {"schema": {"type": "string"}}
        responses["200"]["content"] = {"text/plain": text, "application/openmetrics-text": text}


def _error(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": f"{_REF}Error"}}},
    }


def _infer(*path_parameters: str) -> dict[str, Any]:
    parameters: list[dict[str, Any]] = [
        {"name": p, "in": "path", "required": True, "schema": {"type": "string"}}
        for p in path_parameters
    ]
    parameters += [
        {
            "name": TIMEOUT_HEADER,
            "in": "header",
            "description": "The request's deadline in ms (capped by the model's max_timeout_ms)",
            "schema": {"type": "number", "exclusiveMinimum": 0},
        },
        {
            "name": HEADER_LENGTH,
            "in": "header",
            "description": "Binary tensor extension: the JSON header's length in the body",
            "schema": {"type": "integer", "minimum": 0},
        },
    ]
    json_response = {"schema": {"$ref": f"{_REF}InferenceResponse"}}
    return {
        "summary": "Inference",
        "operationId": "infer" + "_".join(["", *path_parameters]),
        "description": (
            "A V2 inference request. JSON bodies may come without a content type; binary "
            f"tensors follow the JSON header, whose length `{HEADER_LENGTH}` gives."
        ),
        "parameters": parameters,
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": {"$ref": f"{_REF}InferenceRequest"}},
                "application/octet-stream": {"schema": _BINARY},
            },
        },
        "responses": {
            "200": {
                "description": "The outputs (binary ones after the JSON header)",
                "content": {"application/json": json_response, "application/octet-stream": {}},
            },
            **{status: _error(text) for status, text in _ERRORS.items()},
        },
    }


def render_docs(document: dict[str, Any]) -> str:
    """The routes as one self-contained HTML page, linking to the JSON document."""
    rows = [
        f"<tr><td>{escape(method.upper())}</td><td><code>{escape(path)}</code></td>"
        f"<td>{escape(str(op.get('summary', '')))}</td>"
        f"<td>{escape(' '.join(sorted(op.get('responses', {}))))}</td></tr>"
        for path, ops in document["paths"].items()
        for method, op in ops.items()
    ]
    title = escape(f"{document['info']['title']} {document['info']['version']}")
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{title} API</title></head>"
        f"<body><h1>{title}</h1><p>The OpenAPI document: <a href='/openapi.json'>"
        "/openapi.json</a></p><table border='1' cellpadding='4'><tr><th>Method</th>"
        "<th>Path</th><th>Summary</th><th>Statuses</th></tr>" + "".join(rows) + "</table>"
        "</body></html>"
    )
