"""The prometheus-operator objects (deploy/k8s/monitoring) and the Grafana dashboard
(deploy/grafana): valid against the operator's CRDs, scraping /metrics with the metrics key,
rules that are what `gateway slo-rules` writes, and queries that name only what exists: the
gateway's metric catalog and the series its rules record."""

from __future__ import annotations

import copy
import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest
import yaml

from gateway.cli import main
from gateway.slo.rules import recorded_names
from gateway.telemetry.catalog import Catalog
from gateway.telemetry.series import HistogramFamily
from tests.deploy.crd_schemas import CRDS, crd_schemas, operator_version, validate
from tests.deploy.manifests import DEPLOY, K8S, ROOT, Doc, containers, find, of_kind, pod_spec

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed: WITH_PROMTOOL=1 make system"
)
MONITORING = K8S / "monitoring"
DASHBOARD = DEPLOY / "grafana" / "gateway.json"
SERVICE_MONITOR = find("ServiceMonitor", "gateway")
RULE = find("PrometheusRule", "gateway-slos")
# Labels Prometheus adds to every scraped series (the ServiceMonitor's target labels).
TARGET_LABELS = {"namespace", "pod", "service", "job", "instance", "endpoint", "container"}


# ---- the CRDs and validation against them ----------------------------------------------------


def test_the_crds_are_the_release_noted_beside_them() -> None:
    for path in CRDS.glob("*.yaml"):
        crd = yaml.safe_load(path.read_text(encoding="utf-8"))
        assert crd["metadata"]["annotations"]["operator.prometheus.io/version"] == (
            operator_version().lstrip("v")
        ), path.name
    assert {kind for _, kind in crd_schemas()} == {"ServiceMonitor", "PrometheusRule"}


@pytest.mark.parametrize("doc", [SERVICE_MONITOR, RULE], ids=lambda d: d.id)
def test_each_custom_resource_is_valid_for_its_crd(doc: Doc) -> None:
    assert (doc.obj["apiVersion"], doc.kind) in crd_schemas()
    validate(doc.obj)


def _broken(doc: Doc, edit: Any) -> dict[str, Any]:
    obj = copy.deepcopy(doc.obj)
    edit(obj)
    return obj


@pytest.mark.parametrize(
    "broken",
    [
        # a misspelt field, one level deep and deep inside
        _broken(SERVICE_MONITOR, lambda o: o["spec"].update(endpoint=[])),
        _broken(SERVICE_MONITOR, lambda o: o["spec"]["endpoints"][0].update(bearerTokenFil="x")),
        # a wrong type and a duration the operator refuses
        _broken(SERVICE_MONITOR, lambda o: o["spec"]["endpoints"][0].update(port=8000)),
        _broken(SERVICE_MONITOR, lambda o: o["spec"]["endpoints"][0].update(interval="15 s")),
        # two rule groups of one name; a rule without expr; bad metadata
        _broken(RULE, lambda o: o["spec"]["groups"].append(o["spec"]["groups"][0])),
        _broken(RULE, lambda o: o["spec"]["groups"][0]["rules"][0].pop("expr")),
        _broken(RULE, lambda o: o["metadata"].update(lables={})),
        # a kind with no CRD kept is refused, not skipped
        _broken(SERVICE_MONITOR, lambda o: o.update(kind="PodMonitor")),
    ],
)
def test_strict_validation_rejects_what_the_api_server_would(broken: dict[str, Any]) -> None:
    with pytest.raises(Exception) as error:  # jsonschema's, or kubernetes-validate's (no CRD)
        validate(broken)
    assert isinstance(error.value, jsonschema.ValidationError) or "PodMonitor" in str(
        getattr(error.value, "message", error.value)
    )


def test_the_monitoring_objects_are_applied_on_their_own() -> None:
    listed = yaml.safe_load((MONITORING / "kustomization.yaml").read_text(encoding="utf-8"))
    assert sorted(listed["resources"]) == ["prometheusrule.yaml", "servicemonitor.yaml"]
    root = yaml.safe_load((K8S / "kustomization.yaml").read_text(encoding="utf-8"))
    assert "monitoring" not in root["resources"]  # the plain stack needs no operator CRDs


# ---- the ServiceMonitor ---------------------------------------------------------------------


def test_the_service_monitor_scrapes_the_gateway_service_with_the_metrics_key() -> None:
    spec = SERVICE_MONITOR.obj["spec"]
    selected = [
        s
        for s in of_kind("Service")
        if s.obj["metadata"]["namespace"] in spec["namespaceSelector"]["matchNames"]
        and all(
            s.obj["metadata"]["labels"].get(k) == v
            for k, v in spec["selector"]["matchLabels"].items()
        )
    ]
    assert [s.name for s in selected] == ["gateway"]
    (endpoint,) = spec["endpoints"]
    assert endpoint["port"] in {p["name"] for p in selected[0].obj["spec"]["ports"]}
    assert endpoint["path"] == "/metrics"
    # The bearer token is the key the gateway reads from server.admin.metrics_key_file.
    config = yaml.safe_load(find("ConfigMap", "gateway-config").obj["data"]["gateway.yaml"])
    key_file = config["server"]["admin"]["metrics_key_file"]
    folder, _, name = key_file.rpartition("/")
    gateway = find("Deployment", "gateway")
    (container,) = [c for c in containers(gateway) if c["name"] == "gateway"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod_spec(gateway)["volumes"]}
    secret = volumes[mounts[folder]]["secret"]
    (item,) = [i for i in secret["items"] if i["path"] == name]
    credentials = endpoint["authorization"]["credentials"]
    assert endpoint["authorization"].get("type", "Bearer") == "Bearer"
    assert credentials == {"name": secret["secretName"], "key": item["key"]}
    assert config["server"]["allowed_hosts"] == ["*"]  # Prometheus scrapes pod IPs


# ---- the PrometheusRule -----------------------------------------------------------------------


def _header_command(path: Path) -> list[str]:
    first = path.read_text(encoding="utf-8").splitlines()[0]
    return shlex.split(first.split(" by: ", 1)[1])


def test_the_shipped_rules_are_what_slo_rules_writes_now(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regenerated with the command in its header (from the repository root): no drift."""
    path = MONITORING / "prometheusrule.yaml"
    command = _header_command(path)
    assert command[:2] == ["gateway", "slo-rules"]
    monkeypatch.chdir(ROOT)
    assert main([*command[1:], "-o", str(tmp_path / "now.yaml")]) == 0
    assert (tmp_path / "now.yaml").read_text(encoding="utf-8") == path.read_text(encoding="utf-8")


def test_the_rules_cover_the_slos_of_the_deployed_config() -> None:
    source = yaml.safe_load(
        (ROOT / _header_command(MONITORING / "prometheusrule.yaml")[2]).read_text(encoding="utf-8")
    )
    deployed = yaml.safe_load(find("ConfigMap", "gateway-config").obj["data"]["gateway.yaml"])

    def slos(config: dict[str, Any]) -> dict[str, Any]:
        return {name: m.get("slos") for name, m in config["models"].items() if m.get("slos")}

    assert slos(source) == slos(deployed)
    groups = {g["name"] for g in RULE.obj["spec"]["groups"]}
    names = {f"gateway-slo/{m}/{s['name']}" for m, ss in slos(deployed).items() for s in ss}
    assert groups == names


@needs_promtool
def test_promtool_checks_the_shipped_rules(tmp_path: Path) -> None:
    plain = tmp_path / "rules.yaml"
    plain.write_text(yaml.safe_dump({"groups": RULE.obj["spec"]["groups"]}), encoding="utf-8")
    assert PROMTOOL is not None
    out = subprocess.run(
        [PROMTOOL, "check", "rules", str(plain)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr


# ---- the Grafana dashboard ------------------------------------------------------------------

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_WORD = re.compile(r"(?<![\w.:$])[a-zA-Z_:][a-zA-Z0-9_:]*")
_SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}")
KEYWORDS = {
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "inf",
    "nan",
    "Inf",
    "NaN",
}
RANGE_VARIABLES = ("$__rate_interval", "$__interval", "$__range")


def exported() -> dict[str, set[str]]:
    """Series names /metrics has, with their labels: the catalog's families (histograms as
    _bucket, _sum and _count), plus what the SLO rules record."""
    out: dict[str, set[str]] = {}
    for family in Catalog().families:
        labels = set(family.labelnames)
        if isinstance(family, HistogramFamily):
            out.update(
                {
                    family.name + "_bucket": labels | {"le"},
                    family.name + "_sum": labels,
                    family.name + "_count": labels,
                }
            )
        else:
            out[family.name] = labels
    out.update({name: {"model", "slo", "tenant"} for name in recorded_names()})
    return out


def metric_names(expr: str) -> set[str]:
    """The series a PromQL expression names: words that are not calls, keywords or labels."""
    text = _STRING.sub('""', expr)
    text = re.sub(r"\{[^}]*\}", "{}", text)
    text = re.sub(r"\[[^\]]*\]", "[]", text)
    text = _GROUPING.sub(" ", text)
    names = set()
    for match in _WORD.finditer(text):
        if text[match.end() :].lstrip().startswith("(") or match.group() in KEYWORDS:
            continue
        names.add(match.group())
    return names


def dashboard_queries() -> list[tuple[str, str]]:
    """(where, PromQL) for every panel target and every query variable's series selector."""
    board = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    out = [
        (f"panel {p['title']!r} {t['refId']}", t["expr"])
        for p in board["panels"]
        for t in p.get("targets", [])
    ]
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            inner = re.fullmatch(r"label_values\((.*),\s*\w+\)", variable["query"]["query"])
            assert inner, variable["name"]
            out.append((f"variable {variable['name']}", inner.group(1)))
    return out


QUERIES = dashboard_queries()


def test_the_dashboard_has_queries() -> None:
    assert len(QUERIES) >= 20


@pytest.mark.parametrize(("where", "expr"), QUERIES, ids=[w for w, _ in QUERIES])
def test_every_query_names_only_exported_series_and_their_labels(where: str, expr: str) -> None:
    series = exported()
    names = metric_names(expr)
    assert names, f"{where}: no series found in {expr}"
    assert names <= set(series), f"{where}: not exported: {sorted(names - set(series))}"
    known = set().union(*(series[n] for n in names)) | TARGET_LABELS
    for name, matchers in _SELECTOR.findall(_STRING.sub('""', expr)):
        labels = set(re.findall(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)", matchers))
        assert labels <= series[name] | TARGET_LABELS, f"{where}: {name} has no {labels}"
    for _, grouping in _GROUPING.findall(expr):
        labels = {w.strip() for w in grouping.split(",") if w.strip()}
        assert labels <= known, f"{where}: grouping by unknown labels {labels - known}"


def test_the_name_finder_finds_names_and_ignores_the_rest() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le, model) (rate(a_bucket{model=~"x|y"}[5m])))'
        " / on (model) group_left b:rec:ratio offset 1h > bool 1e-3 and c"
    )
    assert metric_names(expr) == {"a_bucket", "b:rec:ratio", "c"}


@needs_promtool
def test_promtool_parses_every_dashboard_query(tmp_path: Path) -> None:
    """Each query, with Grafana's range variables as a duration, as a rule promtool checks."""
    rules = []
    for i, (_, expr) in enumerate(QUERIES):
        for variable in RANGE_VARIABLES:
            expr = expr.replace(variable, "5m")
        rules.append({"record": f"dashboard:query:{i}", "expr": expr})
    path = tmp_path / "queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "q", "rules": rules}]}), encoding="utf-8")
    assert PROMTOOL is not None
    out = subprocess.run(
        [PROMTOOL, "check", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
