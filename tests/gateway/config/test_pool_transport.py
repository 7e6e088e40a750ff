"""A pool's ``tls`` and ``headers``: what the config accepts and refuses, what endpoints carry."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import SecretStr, ValidationError

from gateway import cli
from gateway.config.endpoint import Endpoint
from gateway.config.headers import NO_HEADERS, ExtraHeaders
from gateway.config.pool import PoolConfig
from gateway.config.tls import TlsConfig
from gateway.upstream.transport.http1 import encode_request


def _pool(url: str = "https://127.0.0.1:8443", **fields: Any) -> PoolConfig:
    replicas = [{"id": "r", "url": url}]
    return PoolConfig.model_validate({"model": "m", "replicas": replicas, **fields})


def _secrets(**values: str) -> dict[str, SecretStr]:
    return {k: SecretStr(v) for k, v in values.items()}


# --- URLs ------------------------------------------------------------------------------------


def test_https_url_defaults_to_port_443_and_default_tls() -> None:
    endpoint = Endpoint.parse("https://kserve.example/prefix/")
    assert (endpoint.scheme, endpoint.port, endpoint.prefix) == ("https", 443, "/prefix")
    assert endpoint.tls == TlsConfig()
    assert endpoint.base_url == "https://kserve.example:443/prefix"
    assert Endpoint.parse("http://h").port == 80


@pytest.mark.parametrize("url", ["ftp://h:1", "h:1", "https://:1"])
def test_other_schemes_are_refused(url: str) -> None:
    with pytest.raises(ValueError, match="http://host:port"):
        Endpoint.parse(url)


def test_credentials_in_the_url_are_refused_without_showing_them() -> None:
    with pytest.raises(ValueError, match="credentials") as info:
        Endpoint.parse("https://user:hunter2@h:1")
    assert "hunter2" not in str(info.value)


def test_tls_and_plaintext_endpoints_never_share_connections() -> None:
    plain, secure = Endpoint("h", 8000), Endpoint("h", 8000, scheme="https", tls=TlsConfig())
    other_cert = Endpoint("h", 8000, scheme="https", tls=TlsConfig(server_name="x"))
    assert len({plain, secure, other_cert}) == 3
    with pytest.raises(ValueError, match="exactly when"):
        Endpoint("h", 8000, tls=TlsConfig())


# --- tls -------------------------------------------------------------------------------------


def test_pool_tls_reaches_every_replica_endpoint(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("")
    pool = _pool(tls={"ca_file": str(ca), "server_name": "model.example"})
    endpoint = pool.endpoint(pool.replicas[0])
    assert endpoint.tls == TlsConfig(ca_file=str(ca), server_name="model.example")
    assert endpoint.server_name == "model.example"
    assert Endpoint.parse("https://127.0.0.1:1").server_name == "127.0.0.1"


def test_tls_on_plain_replicas_is_refused() -> None:
    with pytest.raises(ValidationError, match="replicas r are not https"):
        _pool("http://127.0.0.1:1", tls={"verify": False})
    with pytest.raises(ValidationError, match="replicas r are not https:// or grpcs://"):
        _pool("grpc://127.0.0.1:1", tls={"verify": False})


def test_grpcs_replicas_take_the_pools_tls(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("")
    pool = _pool("grpcs://127.0.0.1:8001", tls={"ca_file": str(ca)})
    endpoint = pool.endpoint(pool.replicas[0])
    assert endpoint.is_grpc and endpoint.tls == TlsConfig(ca_file=str(ca))
    assert _pool("grpc://127.0.0.1:8001").replicas[0].endpoint.tls is None
    with pytest.raises(ValidationError, match="verify: false is not possible for grpcs"):
        _pool("grpcs://127.0.0.1:8001", tls={"verify": False})


def test_tls_files_must_exist_and_a_key_needs_its_certificate(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match=r"tls.ca_file: no such file: /nonexistent/ca.pem"):
        _pool(tls={"ca_file": "/nonexistent/ca.pem"})
    key = tmp_path / "key.pem"
    key.write_text("")
    with pytest.raises(ValidationError, match=r"key_file needs tls\.cert_file"):
        _pool(tls={"key_file": str(key)})


def test_local_replicas_must_be_plain_http() -> None:
    with pytest.raises(ValidationError, match="local replicas serve plain http"):
        _pool(local={"model_path": "models/x.onnx"})


# --- headers ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "Content-Length",
        "transfer-encoding",
        "Connection",
        "Keep-Alive",
        "TE",
        "Upgrade",
        "Trailer",
        "Content-Type",
        "traceparent",
        "Inference-Header-Content-Length",
    ],
)
def test_framing_hop_by_hop_and_gateway_headers_are_refused(name: str) -> None:
    with pytest.raises(ValidationError, match=f"header '{name}' cannot be set per pool"):
        _pool(headers={name: "x"})


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ({"bad name": "x"}, "not an HTTP field name"),
        ({"x-a": "one\r\nx-b: two"}, "printable ASCII"),
        ({"x-a": " padded"}, "printable ASCII"),
        ({"X-A": "1", "x-a": "2"}, "given twice"),
    ],
)
def test_bad_header_names_and_values_are_refused(headers: dict[str, str], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        _pool(headers=headers)


def test_host_and_authorization_are_allowed_and_values_stay_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KSERVE_TOKEN", "s3cret")
    headers = {"Host": "digits.models.example", "Authorization": "Bearer ${KSERVE_TOKEN}"}
    pool = _pool(headers=headers)
    assert set(pool.headers) == {"host", "authorization"}
    assert "s3cret" not in repr(pool) and "Bearer" not in repr(pool)
    endpoint = pool.endpoint(pool.replicas[0])
    assert "s3cret" not in repr(endpoint) and "s3cret" not in repr(endpoint.headers)
    assert endpoint.headers.host == "digits.models.example"
    assert endpoint.headers.lines == "authorization: Bearer s3cret\r\n"


def test_a_missing_variable_is_named_at_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    with pytest.raises(ValidationError, match=r"authorization \(\$\{NOT_SET_ANYWHERE\}\)"):
        _pool(headers={"Authorization": "${NOT_SET_ANYWHERE}"})


def test_a_variable_that_would_smuggle_a_header_is_refused() -> None:
    with pytest.raises(ValueError, match="from the environment must be printable"):
        ExtraHeaders.resolve(_secrets(**{"x-token": "${T}"}), {"T": "a\r\nx-evil: 1"})


# --- what the transport writes ---------------------------------------------------------------


def test_the_request_carries_the_pools_host_and_headers_once() -> None:
    extra = ExtraHeaders.resolve(_secrets(host="m.example", authorization="Bearer t"), {})
    endpoint = Endpoint.parse("https://10.0.0.1:8443").with_pool(None, extra)
    raw = encode_request(endpoint, "POST", "/v2/models/m/infer", b"{}", {"host": "client"})
    assert isinstance(raw, bytes)
    head = raw.split(b"\r\n\r\n")[0].decode().split("\r\n")
    assert head == [
        "POST /v2/models/m/infer HTTP/1.1",
        "host: m.example",
        "authorization: Bearer t",
        "content-length: 2",
    ]
    plain = encode_request(Endpoint("h", 1), "GET", "/v2", b"", None)
    assert plain == b"GET /v2 HTTP/1.1\r\nhost: h:1\r\n\r\n"
    assert Endpoint("h", 1).headers is NO_HEADERS


def test_a_pool_that_does_not_echo_ids_asks_for_one_exchange_per_connection() -> None:
    """``echoes_id: false`` (default true): its endpoints are not kept alive, send
    ``Connection: close``, and never share a connection pool with kept-alive ones."""
    assert _pool("http://10.0.0.1:8000").endpoint(_pool().replicas[0]).keep_alive
    pool = _pool("http://10.0.0.1:8000", echoes_id=False, headers={"authorization": "t"})
    endpoint = pool.endpoint(pool.replicas[0])
    assert not endpoint.keep_alive and endpoint != Endpoint.parse("http://10.0.0.1:8000")
    raw = encode_request(endpoint, "GET", "/v2", b"", {"x-a": "b"})
    assert isinstance(raw, bytes)
    head = raw.split(b"\r\n\r\n")[0].decode().split("\r\n")
    assert head == [
        "GET /v2 HTTP/1.1",
        "host: 10.0.0.1:8000",
        "connection: close",
        "authorization: t",
        "x-a: b",
    ]


def test_a_smuggling_variable_is_refused_at_load_by_check_config_and_serve_alike(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SMUGGLE", "t0k\r\nx-evil: 1")
    with pytest.raises(ValidationError, match="from the environment must be printable"):
        _pool(headers={"x-token": "${SMUGGLE}"})
    path = tmp_path / "gateway.yaml"
    pool = {
        "model": "m",
        "replicas": [{"id": "r", "url": "http://127.0.0.1:9"}],
        "headers": {"x-token": "${SMUGGLE}"},
    }
    path.write_text(yaml.safe_dump({"pools": {"p": pool}, "models": {"m": {"pool": "p"}}}))
    for argv in (["check-config", "--no-files", str(path)], ["serve", "--config", str(path)]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert "the value from the environment must be printable ASCII" in err, err
        assert "Traceback" not in err and "t0k" not in err  # the value is never shown
