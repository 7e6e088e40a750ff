"""The OpenAPI document and ``/docs``: infer is in it, errors are as sent, nothing external."""

from __future__ import annotations

from typing import Any, cast

import httpx
import pytest
from fastapi import FastAPI

from gateway.api.admin import build_admin_app
from gateway.control.runtime import Gateway

INFER = "/v2/models/{name}/infer"
VERSIONED_INFER = "/v2/models/{name}/versions/{version}/infer"


@pytest.fixture
def app() -> FastAPI:
    # neither /openapi.json nor /docs touches the gateway
    return build_admin_app(cast(Gateway, None))


def test_infer_routes_are_documented(app: FastAPI) -> None:
    doc = app.openapi()
    for path in (INFER, VERSIONED_INFER):
        infer = doc["paths"][path]["post"]
        body = infer["requestBody"]["content"]
        assert set(body) == {"application/json", "application/octet-stream"}
        assert body["application/json"]["schema"]["$ref"].endswith("/InferenceRequest")
        headers = {p["name"] for p in infer["parameters"] if p["in"] == "header"}
        assert headers == {"x-request-timeout-ms", "inference-header-content-length"}
        for status in ("400", "404", "408", "413", "503", "504"):
            error = infer["responses"][status]["content"]["application/json"]["schema"]
            assert error == {"$ref": "#/components/schemas/Error"}
    request = doc["components"]["schemas"]["InferenceRequest"]
    assert request["required"] == ["inputs"] and set(request["properties"]) == {
        "id",
        "parameters",
        "inputs",
        "outputs",
    }
    tensor = doc["components"]["schemas"]["RequestInput"]
    assert tensor["required"] == ["name", "shape", "datatype", "data"]


def test_errors_are_documented_as_the_gateway_sends_them(app: FastAPI) -> None:
    doc = app.openapi()
    statuses = {
        f"{method} {path}": set(op["responses"])
        for path, ops in doc["paths"].items()
        for method, op in ops.items()
    }
    assert not any("422" in codes for codes in statuses.values())
    assert {"400", "404", "503"} <= statuses["get /v2/models/{name}"]
    assert "503" in statuses["get /v2/models/{name}/ready"]
    assert "HTTPValidationError" not in doc["components"]["schemas"]


def test_the_document_is_built_once(app: FastAPI) -> None:
    assert app.openapi() is app.openapi()


async def test_openapi_json_and_an_offline_docs_page(app: FastAPI) -> None:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        served: dict[str, Any] = (await client.get("/openapi.json")).json()
        docs = await client.get("/docs")
        redoc = await client.get("/redoc")
    assert INFER in served["paths"] and VERSIONED_INFER in served["paths"]
    assert docs.status_code == 200 and docs.headers["content-type"].startswith("text/html")
    assert "href='/openapi.json'" in docs.text and INFER in docs.text
    assert "<script" not in docs.text and "https://" not in docs.text  # works offline
    assert redoc.status_code == 404 and "error" in redoc.json()
