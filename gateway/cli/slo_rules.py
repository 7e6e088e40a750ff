"""``gateway slo-rules``: the config's SLOs written as Prometheus rules (`gateway.slo.rules`),
reading the counters under the names /metrics exports them."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

import yaml

from gateway.config import ConfigError, load_config
from gateway.slo.rules import SliSeries, prometheus_rule, rule_groups
from gateway.telemetry.catalog import SLO, SloFamilies

HELP = "write the config's SLOs as Prometheus rules and exit"


def run(args: argparse.Namespace) -> int:
    """Writes the config's SLOs as Prometheus rules (`gateway.slo.rules`), named as exported."""
    config = load_config(args.config)
    slos = {name: model.slos for name, model in config.models.items() if model.slos}
    if not slos:
        raise ConfigError(f"{args.config}: no model has an SLO (models.NAME.slos): no rules")
    names = SloFamilies()
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
        print(
            f"{args.output}: {sum(len(g['rules']) for g in groups)} rules for {len(groups)} SLO(s)",
            file=sys.stderr,
        )
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


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    rules = sub.add_parser(
        "slo-rules",
        help=HELP,
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
    rules.set_defaults(func=run)
