"""The ``gateway`` command: ``serve``, ``up``, ``check-config [--probe]`` and ``slo-rules``.

``up`` is the main job for a newcomer (local replicas + gateway, stopped together on Ctrl-C);
``serve`` runs only the gateway, against replicas that already exist anywhere. Both drain on
SIGTERM/SIGINT and exit 0 (`gateway.server`); ``up`` restarts a local replica that exits and
stops its replicas on every way out.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import shlex
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import uvicorn
import uvloop
import yaml

from gateway import __version__
from gateway.api.app import GatewayApp
from gateway.api.auth import ControlAccess, refuse_unprotected
from gateway.api.protocol import ClientLimits, guarded_protocol
from gateway.api.tenants import TenantKeys
from gateway.banner import announce_when_listening, banner
from gateway.config import ConfigError, GatewayConfig, load_config
from gateway.launcher import Launcher, LaunchError, refuse_gateway_ports
from gateway.policies.heap_trim import return_large_buffers_to_the_os
from gateway.preflight import config_problems, fallback_signatures, named_files
from gateway.runtime import Gateway
from gateway.server import GatewayServer
from gateway.slo.rules import SliSeries, prometheus_rule, rule_groups
from gateway.telemetry.logging import configure_logging
from gateway.telemetry.slo_metrics import SLO, SloMetrics
from gateway.upstream.conformance import Finding, probe_config
from gateway.upstream.fast_transport import FastTransport
from gateway.upstream.grpc_transport import GrpcTransport
from gateway.upstream.protocol_transport import ProtocolTransport

DEFAULT_CONFIG = "config/local.yaml"
UP_GRPC_PORT = 8001  # `gateway up` serves gRPC here unless told otherwise (Triton's convention)
NO_FILES_HINT = (
    "(checking it away from the machine that runs it? `gateway check-config --no-files "
    "{config}` checks all but the files, keys and fallbacks it names)"
)
log = logging.getLogger("gateway")


def _server(
    config: GatewayConfig,
    host: str | None,
    port: int | None,
    path: str | None = None,
    grpc_port: int | None = None,
) -> GatewayServer:
    """The server, not yet listening; `ConfigError` in protected mode (`refuse_unprotected`)
    or where a file or fallback the config names is missing (`config_problems`).
    ``grpc_port``: the gRPC door's port (None: no gRPC door)."""
    _refuse_problems(path or "<config>", config)
    return_large_buffers_to_the_os()
    bind_host = host or config.server.host
    app = GatewayApp(Gateway(config), config_path=path, bind_host=bind_host)
    server = config.server
    limits = ClientLimits(server.max_header_bytes, server.header_timeout_s, server.body_timeout_s)
    return GatewayServer(
        uvicorn.Config(
            app,
            host=bind_host,
            port=port if port is not None else config.server.port,
            loop="uvloop",
            http=guarded_protocol(limits),  # httptools, with head size and read timeouts
            lifespan="on",
            access_log=False,
            proxy_headers=False,
            server_header=False,
            log_config=None,  # uvicorn's lines go through the gateway's (JSON) handler
            log_level="info",
            timeout_graceful_shutdown=10,  # set from the models' deadlines when draining
        ),
        app,
        path,
        grpc_port,
    )


def _refuse_problems(path: str, config: GatewayConfig) -> None:
    problems = config_problems(config)
    if problems:
        raise ConfigError("\n".join(f"{path}: {p}" for p in problems))


def _logging(config: GatewayConfig) -> None:
    configure_logging(json=config.log.json_lines, level=config.log.level)
    logging.getLogger("httpx").setLevel(logging.WARNING)


def _serve(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    _logging(config)
    grpc_port = args.grpc_port if args.grpc_port is not None else config.server.grpc_port
    _server(config, args.host, args.port, args.config, grpc_port).run()
    return 0


def _up(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    _logging(config)
    launcher = Launcher(config)
    grpc_port = args.grpc_port if args.grpc_port is not None else config.server.grpc_port
    grpc_port = UP_GRPC_PORT if grpc_port is None else grpc_port
    server = _server(config, args.host, args.port, args.config, grpc_port)  # before any spawn
    refuse_gateway_ports(server.config.host, server.config.port, grpc_port)

    async def run() -> None:
        with _cancel_on_signals():  # until the server takes the signals over
            await launcher.wait_ready()
        log.info("%d local replica(s) ready; starting the gateway", len(launcher.replicas))
        # exits and restarts to the timeline of the gateway of the moment (a reload replaces it)
        launcher.on_event = lambda *event: server.app.gateway.history.supervisor(*event)
        supervisor = asyncio.create_task(launcher.supervise(), name="replica-supervisor")
        text = banner(config, server.config, len(launcher.replicas), grpc_port)
        announcer = asyncio.create_task(announce_when_listening(lambda: server.started, text))
        try:
            await server.serve()
        finally:
            supervisor.cancel()
            announcer.cancel()
            await asyncio.gather(supervisor, announcer, return_exceptions=True)

    try:
        launcher.spawn()
        uvloop.run(run())
    except (KeyboardInterrupt, asyncio.CancelledError):
        log.warning("stopped before the gateway started")
    finally:
        launcher.stop()
    return 0


@contextlib.contextmanager
def _cancel_on_signals() -> Iterator[None]:
    """SIGTERM/SIGINT cancel the current task (so ``finally`` blocks run), for the block."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    try:
        yield
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


def _check(args: argparse.Namespace) -> int:
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
    transport = ProtocolTransport(FastTransport(), GrpcTransport())  # grpc:// replicas too
    try:
        return await probe_config(config, transport, fallback_signatures(config))
    finally:
        await transport.aclose()


def _slo_rules(args: argparse.Namespace) -> int:
    """Writes the config's SLOs as Prometheus rules (`gateway.slo.rules`), named as exported."""
    config = load_config(args.config)
    slos = {name: model.slos for name, model in config.models.items() if model.slos}
    if not slos:
        raise ConfigError(f"{args.config}: no model has an SLO (models.NAME.slos): no rules")
    names = SloMetrics()
    try:
        sli = SliSeries(names.events.name, names.bad_events.name, SLO, args.selector)
    except ValueError as exc:
        raise ConfigError(f"--selector: {exc}") from exc
    groups = rule_groups(slos, sli)
    labels = dict(label.split("=", 1) for label in args.label)
    doc = (
        {"groups": groups}
        if args.format == "rules"
        else prometheus_rule(groups, args.name, args.namespace, labels)
    )
    text = (
        f"# Generated from {args.config} by: {_slo_rules_command(args)}\n"
        "# Regenerate it when the SLOs change; do not edit.\n"
        + yaml.safe_dump(doc, sort_keys=False, width=float("inf"), allow_unicode=True)
    )
    if args.output in (None, "-"):
        sys.stdout.write(text)
    else:
        Path(args.output).write_text(text, encoding="utf-8")
        print(f"{args.output}: {sum(len(g['rules']) for g in groups)} rules for "
              f"{len(groups)} SLO(s)", file=sys.stderr)  # fmt: skip
    return 0


def _slo_rules_command(args: argparse.Namespace) -> str:
    """The command line that writes the same rules again (output file aside)."""
    words = ["gateway", "slo-rules", args.config]
    if args.format != "prometheusrule":
        words += ["--format", args.format]
    if args.format == "prometheusrule" and args.name != "gateway-slos":
        words += ["--name", args.name]
    if args.format == "prometheusrule" and args.namespace:
        words += ["--namespace", args.namespace]
    for label in args.label if args.format == "prometheusrule" else ():
        words += ["--label", label]
    if args.selector:
        words += ["--selector", args.selector]
    return shlex.join(words)


def _label(text: str) -> str:
    if "=" not in text or not text.split("=", 1)[0]:
        raise argparse.ArgumentTypeError(f"{text!r}: want KEY=VALUE")
    return text


DESCRIPTION = """\
A fault-tolerant gateway for V2 (Open Inference Protocol) model servers.

Each command has its own --help. Docs: README.md; the config's full shape, with defaults,
is in its Configuration section."""
COMMAND_HELP = {  # listed once, under "commands:", in this order
    "up": "start the config's local replicas, then the gateway (what `make run` does)",
    "serve": "run the gateway against replicas that already run anywhere",
    "check-config": "validate a config file and the files and fallbacks it names, and exit "
    "(1: mismatches found by --probe, 2: invalid)",
    "slo-rules": "write the config's SLOs as Prometheus rules and exit",
}


def _formatter(prog: str) -> argparse.HelpFormatter:
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=30)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="gateway",
        description=DESCRIPTION,
        formatter_class=_formatter,
    )
    top.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = top.add_subparsers(title="commands", dest="command", required=True, metavar="COMMAND")
    for name, func in (("up", _up), ("serve", _serve)):
        help_ = COMMAND_HELP[name]
        cmd = sub.add_parser(
            name,
            help=help_,
            description=f"{help_[0].upper()}{help_[1:]}. SIGTERM or Ctrl-C drains "
            "(server.drain_s) and exits 0; SIGHUP reloads the config.",
        )
        cmd.add_argument(
            "--config", default=DEFAULT_CONFIG, help="the YAML config file (default: %(default)s)"
        )
        cmd.add_argument("--host", help="listen address (default: the config's server.host)")
        cmd.add_argument("--port", type=int, help="listen port (default: the config's server.port)")
        cmd.add_argument(
            "--grpc-port",
            type=int,
            help="the V2 gRPC service's port (default: the config's server.grpc_port; if unset, "
            + ("8001 for up" if name == "up" else "no gRPC for serve")
            + ")",
        )
        cmd.set_defaults(func=func)
    check = sub.add_parser("check-config", help=COMMAND_HELP["check-config"])
    check.add_argument("config", help="the YAML config file to check")
    check.add_argument(
        "--probe",
        action="store_true",
        help="also ask every replica whether it serves what its pool says: readiness, "
        "versions, tensor names, binary tensors, one golden inference where configured",
    )
    check.add_argument(
        "--no-files",
        action="store_true",
        help="skip checking that the files, keys and fallbacks it names exist and can be read "
        "(a config checked away from the machine that runs it, e.g. with /run/secrets paths)",
    )
    check.set_defaults(func=_check)
    _add_slo_rules(sub)
    return top


def _add_slo_rules(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    rules = sub.add_parser(
        "slo-rules",
        help=COMMAND_HELP["slo-rules"],
        description="Write a PrometheusRule (or a plain rules file) for every SLO in the "
        "config: per SLO, the error ratio recorded over each burn window, its objective and "
        "error budget, and the multi-window burn-rate alerts /slo evaluates (same windows and "
        "factors). The rules read gateway_slo_events_total and gateway_slo_bad_events_total "
        "from /metrics. Check them with `promtool check rules`.",
    )
    rules.add_argument("config", help="the YAML config file whose models' slos to write")
    rules.add_argument(
        "--format",
        choices=("prometheusrule", "rules"),
        default="prometheusrule",
        help="prometheusrule: a prometheus-operator PrometheusRule object; rules: a plain "
        "Prometheus rules file (rule_files:) (default: %(default)s)",
    )
    rules.add_argument("--output", "-o", help="the file to write (default: standard output)")
    rules.add_argument(
        "--name", default="gateway-slos", help="the PrometheusRule's name (default: %(default)s)"
    )
    rules.add_argument(
        "--namespace", help="the PrometheusRule's namespace (default: none, kubectl's current)"
    )
    rules.add_argument(
        "--label",
        action="append",
        default=[],
        type=_label,
        metavar="KEY=VALUE",
        help="a label for the PrometheusRule, e.g. the one your Prometheus' ruleSelector "
        "matches (repeatable; app.kubernetes.io/name and part-of are always set)",
    )
    rules.add_argument(
        "--selector",
        default="",
        metavar="MATCHERS",
        help='extra label matchers for the gateway\'s counters, e.g. namespace="v2-gateway", '
        "when several gateways' series share one Prometheus (default: none)",
    )
    rules.set_defaults(func=_slo_rules)


def main(argv: list[str] | None = None) -> int:
    configure_logging(json=False, level=logging.INFO)  # until a config says otherwise
    args = parser().parse_args(argv)
    try:
        result: int = args.func(args)
        return result
    except (ConfigError, LaunchError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
