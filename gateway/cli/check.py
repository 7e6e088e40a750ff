"""``gateway check-config``: a config validated as ``serve`` would read it, optionally with
every replica asked whether it serves what its pool says (``--probe``).

Besides what makes a config invalid, it warns of what makes it unsafe: shared state in a Redis
beyond this machine reached without a password or without TLS (whoever reaches that Redis, or
reads the network to it, can rewrite every gateway's breakers, ejections and drains). Warnings
go to stderr and leave the exit status alone, unless ``--strict`` makes them refusals.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import uvloop

from gateway.api.auth import ControlAccess, is_loopback, refuse_unprotected
from gateway.api.tenants import TenantKeys
from gateway.config import ConfigError, GatewayConfig, load_config
from gateway.control.preflight import config_problems, fallback_signatures, named_files
from gateway.pipeline.build import explain
from gateway.state import redis_url
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
    # as `serve` would (exit 2)
    refuse_unprotected(config.server.admin, config.server.host)
    replicas = sum(len(p.replicas) for p in config.pools.values())
    counts = f"{len(config.models)} models, {len(config.pools)} pools, {replicas} replicas"
    problems = [] if args.no_files else config_problems(config) + _key_problems(config)
    unsafe = redis_warnings(config)
    if args.strict:
        problems, unsafe = problems + unsafe, []
    for warning in unsafe:
        print(f"{args.config}: warning: {warning}", file=sys.stderr)
    for problem in problems:
        print(f"{args.config}: {problem}", file=sys.stderr)
    if problems:
        print(f"{args.config}: invalid ({len(problems)} problem(s))", file=sys.stderr)
        if any(": no such file: " in problem for problem in problems):
            print(NO_FILES_HINT.format(config=args.config), file=sys.stderr)
        return 2
    if args.explain is not None:
        if args.explain not in config.models:
            print(
                f"{args.config}: no model {args.explain!r} (have {sorted(config.models)})",
                file=sys.stderr,
            )
            return 2
        print(f"{args.explain}: " + " -> ".join(explain(config, args.explain)))
    if not args.probe:
        print(f"{args.config}: ok ({counts}" + (f"; {len(unsafe)} warning(s))" if unsafe else ")"))
        return 0
    findings = uvloop.run(_probe(config))
    for finding in findings:
        print(finding)
    errors = sum(1 for f in findings if f.level == "error")
    # not "info"
    warnings = len(unsafe) + sum(1 for f in findings if f.level == "warning")
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


def redis_warnings(config: GatewayConfig) -> list[str]:
    """What is unsafe about the shared state's Redis: no password, or no TLS, to a host beyond
    this machine (``state.redis_url`` with its ``${VAR}`` read from the environment)."""
    state = config.state
    if state.backend != "redis":
        return []
    hosts, password, tls = _redis_endpoint(state.url(os.environ))
    remote = [host for host in hosts if not is_loopback(host)]
    if not remote:
        return []
    where = f"Redis at {', '.join(remote)}"
    warnings = []
    if not password:
        warnings.append(
            f"state.redis_url: {where} is reached without a password: anyone who can reach it "
            "can rewrite this fleet's breakers, ejections and drains (Redis's requirepass, "
            "and redis_url: redis://:${REDIS_PASSWORD}@host:6379/0)"
        )
    if not tls:
        warnings.append(
            f"state.redis_url: {where} is reached without TLS: its password and every state "
            "change cross the network in clear (rediss://, Redis's tls-port)"
        )
    return warnings


def _redis_endpoint(url: str) -> tuple[list[str], bool, bool]:
    """The hosts a state URL names, whether it carries a password (in the URL or its query,
    as redis-py reads them), and whether it speaks TLS."""
    if url.partition("://")[0].lower() == "unix":
        # a socket on this machine
        return [], True, True
    target = redis_url.parse(url)
    parts = urlsplit(url)
    in_query = any(parse_qs(parts.query).get("password", []))
    if target.mode == "single":
        return [parts.hostname or "localhost"], bool(parts.password) or in_query, target.tls
    hosts = [host for host, _ in target.nodes]
    return hosts, bool(target.password) or in_query, target.tls


async def _probe(config: GatewayConfig) -> list[Finding]:
    # grpc:// replicas too
    transport = ProtocolTransport(Http1Transport(), GrpcTransport)
    try:
        return await probe_config(config, transport, fallback_signatures(config))
    finally:
        await transport.aclose()
