"""The ``gateway`` command: ``serve``, ``up``, ``check-config [--probe]`` and ``slo-rules``,
one module each (`run`, `check`, `slo_rules`); here the parser and the way out.
"""

from __future__ import annotations

import argparse
import logging
import sys

from gateway import __version__
from gateway.cli import slo_rules
from gateway.cli.check import check
from gateway.cli.run import DEFAULT_CONFIG, serve, up
from gateway.config import ConfigError
from gateway.config.workers import Workers
from gateway.control.launcher import LaunchError
from gateway.control.worker_count import parse_workers
from gateway.telemetry.logging import configure_logging

DESCRIPTION = """\
A fault-tolerant gateway for V2 (Open Inference Protocol) model servers.

Each command has its own --help. Docs: README.md and docs/ (every config key, with its default,
in docs/configuration.md)."""
# listed once, under "commands:", in this order
COMMAND_HELP = {
    "up": "start the config's local replicas, then the gateway (what `make run` does)",
    "serve": "run the gateway against replicas that already run anywhere",
    "check-config": "validate a config file and the files and fallbacks it names, and exit "
    "(1: mismatches found by --probe, 2: invalid)",
    "slo-rules": slo_rules.HELP,
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
    for name, func in (("up", up), ("serve", serve)):
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
        cmd.add_argument(
            "--workers",
            type=_workers,
            metavar="N|auto",
            help="data-plane worker processes; auto: the CPUs this process may use, its "
            "cgroup's CPU quota included (default: the config's server.workers)",
        )
        cmd.set_defaults(func=func)
    checking = sub.add_parser("check-config", help=COMMAND_HELP["check-config"])
    checking.add_argument("config", help="the YAML config file to check")
    checking.add_argument(
        "--probe",
        action="store_true",
        help="also ask every replica whether it serves what its pool says: readiness, "
        "versions, tensor names, binary tensors, one golden inference where configured",
    )
    checking.add_argument(
        "--no-files",
        action="store_true",
        help="skip checking that the files, keys and fallbacks it names exist and can be read "
        "(a config checked away from the machine that runs it, e.g. with /run/secrets paths)",
    )
    checking.add_argument(
        "--strict",
        action="store_true",
        help="refuse what is only warned of otherwise (exit 2): shared state in a Redis beyond "
        "this machine without a password or without TLS",
    )
    checking.add_argument(
        "--explain",
        metavar="MODEL",
        help="also print the stages a request to MODEL goes through, door to replica, as "
        "assembled for what that model uses (gateway.pipeline.build)",
    )
    checking.set_defaults(func=check)
    slo_rules.add_parser(sub)
    return top


def _workers(text: str) -> Workers:
    try:
        return parse_workers(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def main(argv: list[str] | None = None) -> int:
    # until a config says otherwise
    configure_logging(json=False, level=logging.INFO)
    args = parser().parse_args(argv)
    try:
        result: int = args.func(args)
        return result
    except (ConfigError, LaunchError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
