"""Real-sized V2 requests and the stack that serves them, for the payload benchmarks.

Sizes follow real traffic: one digits row (~300 B), a 60 KB batch of rows, one 1×3×224×224 FP32
image (602 KB of tensor bytes; ~1.2 MB as JSON) and a batch of ten images (6 MB; ~12 MB JSON).
Each is built as binary tensor data (``Inference-Header-Content-Length``, what tritonclient
sends by default) and as JSON. The stack: two digits replicas, two image replicas (`image-gap`
from ``replicas/image_model.py``), nginx in front of each pair, and one gateway with a plain
route per model and a vote route over the two image replicas.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from loadtests.stack import ROOT, Proc, Stack, free_port
from replicas.image_model import write_image_model

DIGITS, IMAGE = "digits-mlp", "image-gap"
BUDGET_BYTES = 64 * 1024 * 1024  # the gateway's server.inflight_bytes in these runs


@dataclass(frozen=True)
class Payload:
    label: str  # the size class: 300B, 60KB, 600KB, 6MB
    encoding: str  # binary or json
    model: str  # the replicas' model name
    body: bytes
    headers: dict[str, str]


def _tensor(name: str, array: np.ndarray[Any, Any], binary: bool) -> tuple[dict[str, Any], bytes]:
    spec: dict[str, Any] = {"name": name, "shape": list(array.shape), "datatype": "FP32"}
    if binary:
        raw = array.astype("<f4").tobytes()
        spec["parameters"] = {"binary_data_size": len(raw)}
        return spec, raw
    spec["data"] = np.round(array.astype(np.float64), 5).reshape(-1).tolist()  # short numbers
    return spec, b""


def payload(
    label: str, encoding: str, model: str, name: str, array: np.ndarray[Any, Any]
) -> Payload:
    binary = encoding == "binary"
    spec, raw = _tensor(name, array, binary)
    header = orjson.dumps({"inputs": [spec]})
    headers = {"content-type": "application/json"}
    if binary:
        headers = {
            "content-type": "application/octet-stream",
            "inference-header-content-length": str(len(header)),
        }
    return Payload(label, encoding, model, header + raw, headers)


def sweep_payloads() -> list[Payload]:
    """The sweep's requests: four sizes, each as binary and as JSON."""
    rng = np.random.default_rng(21)
    row = rng.uniform(0, 1, (1, 64)).astype(np.float32)
    rows_bin = rng.uniform(0, 1, (240, 64)).astype(np.float32)  # 61 KB of tensor bytes
    rows_json = np.round(rng.uniform(0, 1, (180, 64)), 2).astype(np.float32)  # ~60 KB of JSON
    image = rng.uniform(0, 1, (1, 3, 224, 224)).astype(np.float32)
    batch = rng.uniform(0, 1, (10, 3, 224, 224)).astype(np.float32)
    out = [payload("300B", "json", DIGITS, "input", np.round(row, 1))]
    out.append(payload("300B", "binary", DIGITS, "input", row))
    out.append(payload("60KB", "json", DIGITS, "input", rows_json))
    out.append(payload("60KB", "binary", DIGITS, "input", rows_bin))
    for label, array in (("600KB", image), ("6MB", batch)):
        out.append(payload(label, "json", IMAGE, "image", array))
        out.append(payload(label, "binary", IMAGE, "image", array))
    return out


def payload_of(label: str, encoding: str) -> Payload:
    """The sweep's payload of that size class and encoding."""
    return next(p for p in sweep_payloads() if p.label == label and p.encoding == encoding)


@dataclass
class PayloadStack:
    replicas: dict[str, list[Proc]]  # model -> its two replicas
    gateway: Proc
    nginx: Proc | None


def start(stack: Stack, budget_bytes: int | None = None) -> PayloadStack:
    """Two replicas per model, the gateway over them, nginx over each pair (if installed).
    ``budget_bytes``: the gateway's ``server.inflight_bytes`` (None: its machine default)."""
    write_image_model(ROOT / "models")  # built by build-models; written here if missing
    replicas = {
        m: [stack.replica(f"{m}-{i}", m, faults=False) for i in range(2)] for m in (DIGITS, IMAGE)
    }

    def entries(model: str) -> list[dict[str, str]]:
        return [{"id": p.name, "url": p.url} for p in replicas[model]]

    config: dict[str, Any] = {
        "server": {"max_body_bytes": 16 * 1024 * 1024},
        "pools": {
            "digits": {"model": DIGITS, "replicas": entries(DIGITS)},
            "image": {"model": IMAGE, "replicas": entries(IMAGE)},
            "image-a": {"model": IMAGE, "replicas": [{"id": "a", "url": replicas[IMAGE][0].url}]},
            "image-b": {"model": IMAGE, "replicas": [{"id": "b", "url": replicas[IMAGE][1].url}]},
        },
        "models": {
            DIGITS: {"pool": "digits"},
            IMAGE: {"pool": "image", "timeout_ms": 10_000},  # 12 MB of JSON takes a replica ~1 s
            "image-vote": {
                "vote": {"pools": ["image-a", "image-b"], "quorum": 2},
                "timeout_ms": 10_000,
            },
        },
    }
    if budget_bytes is not None:
        config["server"]["inflight_bytes"] = budget_bytes
    gateway = stack.gateway(config, name="gateway-payloads")
    return PayloadStack(replicas, gateway, _nginx(stack, replicas))


def _nginx(stack: Stack, replicas: dict[str, list[Proc]]) -> Proc | None:
    binary = shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if os.path.exists(p)), None
    )
    if binary is None:
        return None
    port = free_port()
    ups = "\n".join(
        f"  upstream {m} {{\n"
        + "".join(f"    server {p.url.removeprefix('http://')};\n" for p in procs)
        + "    keepalive 64;\n  }"
        for m, procs in replicas.items()
    )
    locations = "\n".join(
        f"    location /v2/models/{m}/ {{ proxy_pass http://{m}; proxy_http_version 1.1;"
        ' proxy_set_header Connection ""; }'
        for m in replicas
    )
    conf = stack.workdir / "nginx-payloads.conf"
    conf.write_text(
        NGINX_CONF.format(upstreams=ups, locations=locations, port=port, dir=stack.workdir)
    )
    argv = [binary, "-c", str(conf), "-p", str(stack.workdir), "-g", "daemon off;"]
    url = f"http://127.0.0.1:{port}"
    return stack.start("nginx-payloads", argv, url, f"/v2/models/{DIGITS}/ready")


# Bodies up to 16 MiB, held in memory (not spooled to disk) and streamed upstream as they
# arrive: nginx's best setting for large bodies, so the comparison is with nginx at its best.
NGINX_CONF = """
worker_processes 1;
error_log {dir}/nginx-payloads-error.log warn;
pid {dir}/nginx-payloads.pid;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_max_body_size 16m;
  client_body_buffer_size 16m;
  proxy_request_buffering off;
  client_body_temp_path {dir}/pbody;
  proxy_temp_path {dir}/pproxy;
  fastcgi_temp_path {dir}/pfastcgi;
  uwsgi_temp_path {dir}/puwsgi;
  scgi_temp_path {dir}/pscgi;
{upstreams}
  server {{
    listen 127.0.0.1:{port};
{locations}
  }}
}}
"""
