"""``gateway check-config``: a config validated as ``serve`` would read it, optionally with
every replica asked whether it serves what its pool says (``--probe``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import uvloop

from gateway.api.auth import ControlAccess, refuse_unprotected
from gateway.api.tenants import TenantKeys
from gateway.config import ConfigError, GatewayConfig, load_config
from gateway.pipeline.build import explain
from gateway.preflight import config_problems, fallback_signatures, named_files
from gateway.upstream.probes.conformance import Finding, probe_config
from gateway.upstream.transport.dispatch import ProtocolTransport
from gateway.upstream.transport.grpc_client import GrpcTransport
from gateway.upstream.transport.http1 import Http1Transport

NO_FILES_HINT = (
    "(checking it away from the machine that runs it? `gateway check-config --no-files "
    "{config}` checks all but the files, keys and fallbacks it names)"
)


def check(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    refuse_unprotected(config.server.admin, config.server.host)  # as `serve` would (exit 2)
    replicas = sum(len(p.replicas) for p in config.pools.values())
    counts = f"{len(config.models)} models, {len(config.pools)} pools, {replicas} replicas"
    problems = [] if args.no_files else config_problems(config) + _key_problems(config)
    for problem in problems:
        print(f"{args.config}: {problem}", file=sys.stderr)
    if problems:
        print(f"{args.config}: invalid ({len(problems)} problem(s))", file=sys.stderr)
        if any(": no such file: " in problem for problem in problems):
            print(NO_FILES_HINT.format(config=args.config), file=sys.stderr)
        return 2
    if args.explain is not None:
        if args.explain not in config.models:
            print(f"{args.config}: no model {args.explain!r} (have {sorted(config.models)})",
                  file=sys.stderr)  # fmt: skip
            return 2
        print(f"{args.explain}: " + " -> ".join(explain(config, args.explain)))
    if not args.probe:
        print(f"{args.config}: ok ({counts})")
        return 0
    findings = uvloop.run(_probe(config))
    for finding in findings:
        print(finding)
    errors = sum(1 for f in findings if f.level == "error")
    warnings = sum(1 for f in findings if f.level == "warning")  # "info" lines are neither
    verdict = "ok" if not errors else f"{errors} mismatch(es)"
    print(f"{args.config}: {verdict} ({counts} probed; {warnings} warning(s))")
    return 1 if errors else 0


def _key_problems(config: GatewayConfig) -> list[str]:
    """The control plane's and the tenants' keys, read as `serve` reads them: an empty key
    file, an unset variable or two tenants holding one key fail here, not at start. A part
    with a key file that does not exist is left out: `config_problems` named that file."""
    missing = {key for key, path in named_files(config) if not Path(path).is_file()}
    problems = []
    if not any(key.startswith("server.admin.") for key in missing):
        try:
            ControlAccess.load(config.server.admin, config.server.host)
        except ConfigError as exc:
            problems.append(f"server.admin: {exc}")
    if not any(key.startswith("tenants.") for key in missing):
        try:
            TenantKeys.load(config.tenants)
        except ConfigError as exc:
            problems.append(f"tenants: {exc}")
    return problems


async def _probe(config: GatewayConfig) -> list[Finding]:
    transport = ProtocolTransport(Http1Transport(), GrpcTransport())  # grpc:// replicas too
    try:
        return await probe_config(config, transport, fallback_signatures(config))
    finally:
        await transport.aclose()
