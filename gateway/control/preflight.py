"""What a config names must exist before a gateway is built from it: files and fallbacks.

Validation (`gateway.config`) checks a config's shape; this checks it against the disk: every
file it names (golden sets, key files, TLS files, local models, the fallback manifest and the
files of each fallback it uses) exists, the sentinels' password (``state``) can be read, and
every fallback a model names is in the manifest with a golden set and onnxruntime, which runs
it, is installed (an extra: the base install has no fallback), and can answer the model's
declared signature (`gateway.v2.fit`). ``check-config``,
``serve``/``up`` and a reload all ask it, so a config that passes ``check-config`` is one the
gateway will take, and a reload that would leave a model without its fallback, or crash the
new gateway's golden prober, is refused whole. Every problem is named (the key and the path),
not just the first.
"""

from __future__ import annotations

import os
from pathlib import Path

from gateway.config.models import GatewayConfig
from gateway.fallback.check import runtime_missing
from gateway.fallback.manifest import configured_manifest, find_model
from gateway.v2.fit import fallback_misfit
from gateway.v2.schema import ModelSchema
from v2proto.errors import ManifestError
from v2proto.manifest import GoldenSet
from v2proto.signature import Signature


def config_problems(config: GatewayConfig) -> list[str]:
    """One line per problem (empty: none); paths are as the loader resolved them."""
    problems = [
        f"{key}: no such file: {path}" for key, path in named_files(config) if not _is_file(path)
    ]
    for name, pool in config.pools.items():
        if pool.golden is not None and _is_file(pool.golden.file):
            try:
                GoldenSet.read(Path(pool.golden.file))
            except ManifestError as exc:
                problems.append(f"pools.{name}.golden.file: {exc}")
    return problems + _sentinel_problems(config) + _fallback_problems(config)


def named_files(config: GatewayConfig) -> list[tuple[str, str]]:
    """Every (key, path) of a file the config names, in the config's order."""
    admin = config.server.admin
    files = [
        ("server.admin.key_file", admin.key_file),
        ("server.admin.metrics_key_file", admin.metrics_key_file),
    ]
    operators = admin.operators.items()
    files += [(f"server.admin.operators.{n}.key_file", o.key_file) for n, o in operators]
    for name, pool in config.pools.items():
        where = f"pools.{name}"
        if pool.local is not None:
            files.append((f"{where}.local.model_path", pool.local.model_path))
        if pool.golden is not None:
            files.append((f"{where}.golden.file", pool.golden.file))
        if pool.tls is not None:
            tls = pool.tls
            files += [(f"{where}.tls.{k}", getattr(tls, k)) for k in ("ca_file", "cert_file")]
            files.append((f"{where}.tls.key_file", tls.key_file))
    files += [(f"tenants.{n}.keys_file", t.keys_file) for n, t in config.tenants.items()]
    return [(key, path) for key, path in files if path is not None]


def _sentinel_problems(config: GatewayConfig) -> list[str]:
    """The sentinels' password, read as the store will read it (messages never quote it)."""
    try:
        config.state.sentinel_auth(os.environ)
    except ValueError as exc:
        return [f"state.{exc}"]
    return []


def _fallback_problems(config: GatewayConfig) -> list[str]:
    users: dict[str, list[str]] = {}
    for name, model in config.models.items():
        if model.fallback is not None:
            users.setdefault(model.fallback.model, []).append(f"models.{name}.fallback.model")
    missing = runtime_missing() if users else None
    manifest = configured_manifest(config.fallback_manifest)
    problems = []
    for fallback, keys in users.items():
        if missing is not None:
            problems.append(f"{keys[0]}: {fallback!r}: {missing}")
        try:
            files = find_model(manifest, fallback)
        except ManifestError as exc:
            problems += [f"{key}: {fallback!r}: {exc} ({manifest})" for key in keys]
            continue
        for kind, path in (("model", files.model_path), ("golden set", files.golden_path)):
            if not path.is_file():
                problems.append(f"{keys[0]}: {fallback!r}: its {kind} {path} does not exist")
        signature = Signature(files.entry.inputs, files.entry.outputs)
        problems += _misfits(config, fallback, signature)
    return problems


def _misfits(config: GatewayConfig, fallback: str, signature: Signature) -> list[str]:
    """Each model with a declared signature that ``fallback`` (its manifest's signature)
    cannot answer (`fallback_misfit`); the replicas' metadata is compared by ``--probe``."""
    problems = []
    for name, model in config.models.items():
        if model.fallback is None or model.fallback.model != fallback or model.signature is None:
            continue
        schema = ModelSchema.from_metadata(model.signature.metadata())
        why = None if schema is None else fallback_misfit(schema, signature, model.fallback.tensors)
        if why is not None:
            problems.append(
                f"models.{name}.fallback: {fallback!r} cannot answer the model's signature: {why}"
            )
    return problems


def fallback_signatures(config: GatewayConfig) -> dict[str, Signature]:
    """The manifest's signature of each fallback the config names (those it has)."""
    manifest = configured_manifest(config.fallback_manifest)
    found = {}
    for name in {m.fallback.model for m in config.models.values() if m.fallback is not None}:
        try:
            entry = find_model(manifest, name).entry
        except ManifestError:
            # named by `config_problems`
            continue
        found[name] = Signature(entry.inputs, entry.outputs)
    return found


def _is_file(path: str) -> bool:
    return Path(path).is_file()
