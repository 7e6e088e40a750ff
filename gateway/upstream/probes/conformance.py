"""``gateway check-config --probe``: does every replica speak what its pool's config says?

A config can be valid and still wrong for the servers it names: a ``version`` on a pool whose
server answers 501 to every versioned path (KServe), tensor names the server does not have
(MLServer's ``predict``, not ``label``), binary tensors for a server without the extension
(MLServer answers them with 422). Each replica is asked, once, what a client of it would ask:
live and ready, its server metadata (extensions), its model metadata at the pool's path
(versions, tensor names), where the pool has a golden set, one golden inference through
the pool's dialect, and one inference with a known id: whether it echoes request ids (said
for every replica, as ``info``). Every mismatch is named with what to change; nothing is
changed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from gateway.config.models import GatewayConfig
from gateway.config.pool import PoolConfig
from gateway.errors import BadRequest, UpstreamError
from gateway.upstream.probes.golden import GoldenSet, golden_request
from gateway.upstream.probes.id_echo import PROBE_ID, probe_id_echo, zeros_request
from gateway.upstream.replica import Replica
from gateway.upstream.transport.base import Reply, Transport
from gateway.v2.codec import decode_outputs
from gateway.v2.dialect import Dialect
from gateway.v2.fit import fallback_misfit
from gateway.v2.reply import error_text
from gateway.v2.request import HEADER_LENGTH
from gateway.v2.schema import ModelSchema
from v2proto.signature import Signature

PROBE_TIMEOUT_S = 5.0
BINARY_EXTENSION = "binary_tensor_data"


@dataclass(frozen=True, slots=True)
class Finding:
    pool: str
    replica: str
    # "error": the config is wrong for this server; "warning": cannot be sure;
    level: str
    # "info": what the server does, as the config says (e.g. whether it echoes request ids)
    message: str

    def __str__(self) -> str:
        return f"{self.level}: pool {self.pool!r}, replica {self.replica!r}: {self.message}"


async def probe_config(
    config: GatewayConfig, transport: Transport, fallbacks: Mapping[str, Signature] | None = None
) -> list[Finding]:
    """Findings for every replica of every pool (empty: all of them speak as configured);
    ``fallbacks``: the fallback models' signatures, checked against the model metadata."""
    checks = [
        _ReplicaCheck(name, pool, Replica.from_config(name, r, None, pool.endpoint(r)), transport)
        for name, pool in config.pools.items()
        for r in pool.replicas
    ]
    for check in checks:
        check.fallbacks = fallbacks or {}
    results = await asyncio.gather(*(check.run(config) for check in checks))
    return [finding for found in results for finding in found]


class _ReplicaCheck:
    def __init__(self, pool_name: str, pool: PoolConfig, replica: Replica, transport: Transport):
        self._pool_name, self._pool, self._replica = pool_name, pool, replica
        self._transport = transport
        # fallback model -> its signature
        self.fallbacks: Mapping[str, Signature] = {}
        self._dialect = Dialect(pool.tensors, pool.binary_tensors)
        self.findings: list[Finding] = []

    def _say(self, level: str, message: str) -> None:
        self.findings.append(Finding(self._pool_name, self._replica.id, level, message))

    async def _get(self, path: str) -> Reply | None:
        try:
            return await self._transport.request(
                self._replica.endpoint, "GET", path, timeout=PROBE_TIMEOUT_S
            )
        except UpstreamError as exc:
            self._say("error", f"GET {path}: {exc.message}")
            return None

    def _model_path(self, suffix: str = "") -> str:
        path = f"/v2/models/{self._pool.model}"
        if self._pool.version is not None:
            path += f"/versions/{self._pool.version}"
        return path + suffix

    async def run(self, config: GatewayConfig) -> list[Finding]:
        ready = await self._get("/v2/health/ready")
        if ready is None:
            # unreachable: nothing more to learn
            return self.findings
        if ready.status != 200:
            self._say("warning", f"not ready now (GET /v2/health/ready answered {ready.status})")
        await self._server_metadata()
        metadata = await self._model_metadata()
        if metadata is None:
            # the model is not where the pool says: fix that first
            return self.findings
        self._tensors(metadata, config)
        self._fallback_fit(metadata, config)
        if self._pool.golden is not None:
            await self._golden_inference()
        await self._id_echo(metadata)
        return self.findings

    async def _id_echo(self, metadata: dict[str, Any]) -> None:
        """Says whether the server returns the request's id, and whether the pool says so."""
        body = zeros_request(metadata)
        golden = self._pool.golden
        if body is None and golden is not None:
            input_name = self._dialect.mapping.pool_input(golden.input)
            golden_set = GoldenSet.read(Path(golden.file))
            body = golden_request(golden_set, [0], input_name=input_name, request_id=PROBE_ID).body
        if body is None:
            self._say(
                "warning",
                "cannot tell whether it echoes request ids: its metadata lists "
                "no inputs (configure a golden set for this pool)",
            )
            return
        path = self._model_path("/infer")
        seen = await probe_id_echo(
            self._transport, self._replica.endpoint, path, body, PROBE_TIMEOUT_S
        )
        declared = self._pool.echoes_id
        if seen.echoes is None:
            level = "error" if seen.refused else "warning"
            self._say(level, f"cannot tell whether it echoes request ids: {seen.why}")
        elif seen.echoes and not declared:
            self._say(
                "warning",
                "echoes request ids, but the pool says echoes_id: false, "
                "which costs a new connection per request: remove it",
            )
        elif not seen.echoes and declared:
            self._say(
                "error",
                "does not echo request ids: the gateway refuses its every "
                "answer; set echoes_id: false on the pool (each request then gets a "
                "connection of its own)",
            )
        else:
            self._say(
                "info",
                "echoes request ids"
                if seen.echoes
                else "does not echo request ids (echoes_id: false: one exchange a connection)",
            )

    async def _server_metadata(self) -> None:
        response = await self._get("/v2")
        if response is None or response.status != 200:
            if response is not None:
                self._say("warning", f"GET /v2 answered {response.status}: no server metadata")
            return
        doc = _json(response.body)
        extensions = doc.get("extensions") if isinstance(doc, dict) else None
        listed = isinstance(extensions, list) and BINARY_EXTENSION in extensions
        configured = self._pool.binary_tensors
        if configured is None:
            # learned at start (`gateway.upstream.probes.extensions`): say how
            how = "binary tensors" if listed else f"JSON (extensions: {extensions})"
            self._say("info", f"the gateway will send it {how}, as its server metadata says")
        elif configured and not listed:
            self._say(
                "warning",
                f"the server does not list the {BINARY_EXTENSION!r} extension "
                f"(extensions: {extensions}) but the pool says binary_tensors: true; unless "
                "it takes binary tensors all the same, remove the key (the gateway then "
                "sends it JSON)",
            )
        elif listed:
            self._say(
                "warning",
                f"the server lists {BINARY_EXTENSION!r} but the pool says binary_tensors: "
                "false, which costs a conversion to JSON: remove the key",
            )

    async def _model_metadata(self) -> dict[str, Any] | None:
        path = self._model_path()
        response = await self._get(path)
        if response is None:
            return None
        if response.status != 200:
            text = error_text(response.body)
            if self._pool.version is not None and response.status in (404, 501):
                plain = await self._get(f"/v2/models/{self._pool.model}")
                if plain is not None and plain.status == 200:
                    self._say(
                        "error",
                        f"GET {path} answered {response.status} ({text}) but the unversioned "
                        f"path answers: remove version {self._pool.version!r} from the pool",
                    )
                    return None
            self._say("error", f"GET {path} answered {response.status}: {text}")
            return None
        doc = _json(response.body)
        if not isinstance(doc, dict):
            self._say("error", f"GET {path}: the model metadata is not a JSON object")
            return None
        versions = doc.get("versions")
        version = self._pool.version
        listed = [str(v) for v in versions] if isinstance(versions, list) else []
        if version is not None and listed and version not in listed:
            self._say("error", f"version {version!r} is not among the model's {versions}")
        return doc

    def _tensors(self, metadata: dict[str, Any], config: GatewayConfig) -> None:
        """Whether the tensors the config names for this pool are the ones the server lists."""
        inputs = _names(metadata.get("inputs"))
        outputs = _names(metadata.get("outputs"))
        if not inputs and not outputs:
            self._say(
                "warning",
                "the model metadata lists no tensors: names are checked only by a golden "
                "inference (configure a golden set for this pool)",
            )
            return
        self._mapped_tensors(inputs, outputs)
        self._golden_tensors(inputs, outputs)
        self._voted_outputs(outputs, config)

    def _mapped_tensors(self, inputs: list[str], outputs: list[str]) -> None:
        """The pool's ``tensors`` mapping names tensors the server has."""
        mapping = self._pool.tensors
        for client, pool_name in mapping.inputs.items():
            if pool_name not in inputs:
                self._say("error", _missing("input", client, pool_name, inputs))
        for client, output in mapping.outputs.items():
            if output.name not in outputs:
                self._say("error", _missing("output", client, output.name, outputs))

    def _golden_tensors(self, inputs: list[str], outputs: list[str]) -> None:
        """The golden set's input and label output are tensors the server has."""
        golden, mapping = self._pool.golden, self._pool.tensors
        if golden is None:
            return
        wanted = mapping.pool_input(golden.input)
        if wanted not in inputs:
            self._say("error", _missing("input", golden.input, wanted, inputs))
        label = mapping.pool_output(golden.label_output)
        if label not in outputs:
            self._say("error", _missing("output", golden.label_output, label, outputs))

    def _voted_outputs(self, outputs: list[str], config: GatewayConfig) -> None:
        """Each model that votes on this pool compares outputs the server has."""
        mapping = self._pool.tensors
        for model_name, model in config.models.items():
            if model.vote is None or self._pool_name not in model.vote.pools:
                continue
            compared = (*model.vote.label_outputs, *(model.vote.outputs or ()))
            for label_output in dict.fromkeys(compared):
                # each leg is asked for them
                label = mapping.pool_output(label_output)
                if label not in outputs:
                    where = f"model {model_name!r} votes on output {label_output!r}"
                    missing = _missing("output", label_output, label, outputs)
                    self._say("error", f"{where}: {missing}")

    def _fallback_fit(self, metadata: dict[str, Any], config: GatewayConfig) -> None:
        """Whether each fallback of a model served first by this pool answers the model's
        tensors as this server lists them (a declared signature: `gateway.control.preflight`)."""
        if self._replica.id != self._pool.replicas[0].id:
            # said once a pool
            return
        for name, model in config.models.items():
            if model.pools[0] != self._pool_name or model.fallback is None:
                continue
            signature = self.fallbacks.get(model.fallback.model)
            if signature is None or model.signature is not None:
                continue
            schema = ModelSchema.from_metadata(self._dialect.client_metadata(metadata))
            where = f"model {name!r}: fallback {model.fallback.model!r}"
            if schema is None:
                self._say(
                    "warning",
                    f"{where}: cannot tell whether it answers the model's tensors: the server "
                    "lists none (declare the model's signature)",
                )
                continue
            why = fallback_misfit(schema, signature, model.fallback.tensors)
            if why is not None:
                self._say("error", f"{where} cannot answer the model's tensors: {why}")

    async def _golden_inference(self) -> None:
        golden_config = self._pool.golden
        assert golden_config is not None
        golden = GoldenSet.read(Path(golden_config.file))
        rows = [0, 1]
        input_name = self._dialect.mapping.pool_input(golden_config.input)
        request = golden_request(golden, rows, input_name=input_name, request_id="check-config")
        path = self._model_path("/infer")
        try:
            response = await self._transport.request(
                self._replica.endpoint,
                "POST",
                path,
                body=request.body,
                headers={"content-type": "application/json"},
                timeout=PROBE_TIMEOUT_S,
            )
        except UpstreamError as exc:
            self._say("error", f"golden inference: {exc.message}")
            return
        if response.status != 200:
            hint = " (check the pool's tensors: inputs)" if 400 <= response.status < 500 else ""
            text = error_text(response.body)
            self._say("error", f"golden inference answered {response.status}: {text}{hint}")
            return
        try:
            raw = decode_outputs(response.body, response.headers.get(HEADER_LENGTH))
            outputs = self._dialect.client_outputs(raw)
        except BadRequest as exc:
            self._say("error", f"golden inference: {exc.message}")
            return
        label = outputs.get(golden_config.label_output)
        if label is None:
            self._say(
                "error",
                f"golden inference: no output {golden_config.label_output!r} after the pool's "
                f"mapping (the server answered {sorted(raw)}); map it under tensors: outputs",
            )
        elif np.size(label) != len(rows):
            shape = list(np.shape(label))
            self._say(
                "error",
                f"golden inference: {golden_config.label_output!r} has shape {shape} for "
                f"{len(rows)} rows",
            )


def _json(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return None


def _names(specs: Any) -> list[str]:
    if not isinstance(specs, list):
        return []
    return [s["name"] for s in specs if isinstance(s, dict) and isinstance(s.get("name"), str)]


def _missing(kind: str, client: str, pool_name: str, known: Sequence[str]) -> str:
    mapped = f" (mapped from {client!r})" if client != pool_name else ""
    return (
        f"no {kind} {pool_name!r}{mapped} on the server; its {kind}s: {', '.join(known)}; "
        f"map it under tensors: {kind}s"
    )
