"""Every Kubernetes manifest under deploy/k8s, validated offline: strict schema checks against a
pinned Kubernetes version (kubernetes-validate), plus the properties the deployment relies on
(hardened pods, probes on the V2 health routes, a grace period that covers the drain, Services
and policies that select what exists, one image naming scheme)."""

from __future__ import annotations

import copy
import re
import tomllib

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from tests.deploy.crd_schemas import validate
from tests.deploy.manifests import (
    K8S,
    KUBERNETES_VERSION,
    NAMESPACE,
    ROOT,
    WORKLOADS,
    Doc,
    arg,
    containers,
    docs,
    find,
    manifest_files,
    of_kind,
    pod_spec,
    selects,
)

ALL = docs()
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
OUR_IMAGES = re.compile(
    rf"^registry\.example\.com/v2-gateway/(gateway|replica|replica-gpu):{VERSION}$"
)


@pytest.mark.parametrize("doc", ALL, ids=lambda d: d.id)
def test_every_object_is_valid_for_the_pinned_kubernetes_version(doc: Doc) -> None:
    """Custom resources (ServiceMonitor, PrometheusRule) against their CRDs (crd_schemas)."""
    validate(doc.obj)


def test_strict_validation_rejects_an_unknown_field() -> None:
    """The check above is not vacuous: a misspelt field fails it."""
    broken = copy.deepcopy(find("Deployment", "gateway").obj)
    broken["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_each_kustomization_lists_every_manifest_beside_it() -> None:
    """`kubectl apply -k` applies what the tests checked: no file left out, none missing."""
    for kustomization in K8S.rglob("kustomization.yaml"):
        here = kustomization.parent
        listed = set(yaml.safe_load(kustomization.read_text(encoding="utf-8"))["resources"])
        files = {p.name for p in here.glob("*.yaml") if p.name != "kustomization.yaml"}
        dirs = {p.name for p in here.iterdir() if (p / "kustomization.yaml").is_file()}
        if here == K8S:  # the standalone stack; the sidecar and GPU examples are applied alone
            dirs -= {"sidecar", "gpu", "monitoring"}  # monitoring: needs the operator's CRDs
        assert listed == files | dirs, kustomization
    assert all((p.parent / "kustomization.yaml").is_file() for p in manifest_files())


def test_everything_is_in_the_namespace_and_part_of_the_product() -> None:
    for doc in ALL:
        meta = doc.obj["metadata"]
        if doc.kind != "Namespace":
            assert meta.get("namespace") == NAMESPACE, doc.id
        assert meta["labels"]["app.kubernetes.io/part-of"] == "v2-gateway", doc.id
    assert find("Namespace", NAMESPACE)


WORKLOAD_DOCS = of_kind(*WORKLOADS)


@pytest.mark.parametrize("doc", WORKLOAD_DOCS, ids=lambda d: d.id)
def test_pods_are_hardened_and_sized(doc: Doc) -> None:
    spec = pod_spec(doc)
    pod = spec["securityContext"]
    assert pod["runAsNonRoot"] is True and pod["runAsUser"] >= 10000
    assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["automountServiceAccountToken"] is False
    assert spec["serviceAccountName"] in {d.name for d in of_kind("ServiceAccount")}
    for c in containers(doc):
        sc = c["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True, c["name"]
        assert sc["allowPrivilegeEscalation"] is False, c["name"]
        assert sc["capabilities"] == {"drop": ["ALL"]}, c["name"]
        for part in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(c["resources"][part]), (c["name"], part)
        assert "livenessProbe" in c and "readinessProbe" in c, c["name"]
        image = c["image"]
        assert ":" in image and not image.endswith(":latest"), image
        if "v2-gateway/" in image:
            assert OUR_IMAGES.match(image), f"{image}: registry.example.com/v2-gateway/*:{VERSION}"


def test_workload_labels_carry_the_release_version() -> None:
    for doc in WORKLOAD_DOCS:
        if any(OUR_IMAGES.match(c["image"]) for c in containers(doc)):
            labels = doc.obj["spec"]["template"]["metadata"]["labels"]
            assert labels.get("app.kubernetes.io/version", VERSION) == VERSION, doc.id


def test_every_pod_is_covered_by_a_network_policy() -> None:
    policies = of_kind("NetworkPolicy")
    for doc in WORKLOAD_DOCS:
        assert any(selects(p.obj["spec"]["podSelector"]["matchLabels"], doc) for p in policies), (
            doc.id
        )


def test_services_select_a_workload_and_target_a_named_port() -> None:
    for svc in of_kind("Service"):
        selected = [d for d in WORKLOAD_DOCS if selects(svc.obj["spec"]["selector"], d)]
        assert selected, f"{svc.id} selects no pod"
        for port in svc.obj["spec"]["ports"]:
            for doc in selected:
                names = {p["name"] for c in containers(doc) for p in c.get("ports", [])}
                assert port["targetPort"] in names, (svc.id, port)


# ---- the standalone gateway ----------------------------------------------------------------

GATEWAY = find("Deployment", "gateway")
(GATEWAY_CONTAINER,) = pod_spec(GATEWAY)["containers"]
DRAIN_S = 10  # server.drain_s the grace period is sized for (readiness 503, serve on, then stop)


def _gateway_config() -> dict[str, object]:
    config: dict[str, object] = yaml.safe_load(
        find("ConfigMap", "gateway-config").obj["data"]["gateway.yaml"]
    )
    return config


def test_the_gateway_runs_at_least_two_pods_spread_over_zones() -> None:
    spec = GATEWAY.obj["spec"]
    assert spec["replicas"] >= 2
    keys = {t["topologyKey"]: t for t in pod_spec(GATEWAY)["topologySpreadConstraints"]}
    assert keys["topology.kubernetes.io/zone"]["whenUnsatisfiable"] == "DoNotSchedule"
    hpa = find("HorizontalPodAutoscaler", "gateway").obj["spec"]
    assert hpa["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "gateway",
    }
    assert hpa["minReplicas"] >= 2 and hpa["maxReplicas"] > hpa["minReplicas"]
    pdb = find("PodDisruptionBudget", "gateway").obj["spec"]
    assert selects(pdb["selector"]["matchLabels"], GATEWAY)
    assert pdb.get("maxUnavailable") == 1 or pdb.get("minAvailable") == 1


def test_the_gateway_probes_the_v2_health_routes() -> None:
    c = GATEWAY_CONTAINER
    assert c["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert c["startupProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert c["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    port = c["readinessProbe"]["httpGet"]["port"]
    (declared,) = [p for p in c["ports"] if p["name"] == port]
    assert declared["containerPort"] == _gateway_config()["server"]["port"]  # type: ignore[index]


def test_the_grace_period_covers_prestop_drain_the_longest_request_and_a_margin() -> None:
    pre_stop = int(GATEWAY_CONTAINER["lifecycle"]["preStop"]["exec"]["command"][-1])
    models = _gateway_config()["models"]
    longest_s = max(m["max_timeout_ms"] for m in models.values()) / 1000  # type: ignore[attr-defined]
    grace = pod_spec(GATEWAY)["terminationGracePeriodSeconds"]
    assert grace >= pre_stop + DRAIN_S + longest_s + 5
    readiness = GATEWAY_CONTAINER["readinessProbe"]
    # Out of the Service within the preStop pause: a draining gateway fails its next probe.
    assert readiness["periodSeconds"] * readiness["failureThreshold"] <= pre_stop


def test_the_admin_key_comes_from_a_secret_under_the_configs_variable() -> None:
    admin = _gateway_config()["server"]["admin"]  # type: ignore[index]
    env = {e["name"]: e for e in GATEWAY_CONTAINER["env"]}
    assert admin["key_env"] == "GATEWAY_ADMIN_KEY"
    assert "secretKeyRef" in env["GATEWAY_ADMIN_KEY"]["valueFrom"]
    metrics_dir = admin["metrics_key_file"].rsplit("/", 1)[0]
    mounts = {m["mountPath"]: m["name"] for m in GATEWAY_CONTAINER["volumeMounts"]}
    volumes = {v["name"]: v for v in pod_spec(GATEWAY)["volumes"]}
    secret = volumes[mounts[metrics_dir]]["secret"]
    assert secret["secretName"] == env["GATEWAY_ADMIN_KEY"]["valueFrom"]["secretKeyRef"]["name"]
    assert [i["key"] for i in secret["items"]] == ["metrics-key"]  # the admin key stays out


def test_the_config_is_mounted_where_the_gateway_reads_it() -> None:
    for doc in WORKLOAD_DOCS:
        for c in containers(doc):
            config = arg(c, "--config")
            if config is None:
                continue
            folder, _, key = config.rpartition("/")
            mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
            volumes = {v["name"]: v for v in pod_spec(doc)["volumes"]}
            config_map = find("ConfigMap", volumes[mounts[folder]]["configMap"]["name"])
            assert key in config_map.obj["data"], doc.id


# ---- replicas, GPU, sidecar --------------------------------------------------------------


def test_gpu_replicas_ask_for_a_gpu_tolerate_its_taint_and_use_the_gpu_image() -> None:
    gpu = [d for d in WORKLOAD_DOCS if any("replica-gpu" in c["image"] for c in containers(d))]
    assert gpu
    for doc in gpu:
        (c,) = pod_spec(doc)["containers"]
        assert c["resources"]["limits"]["nvidia.com/gpu"] == 1
        tolerations = pod_spec(doc)["tolerations"]
        assert any(t["key"] == "nvidia.com/gpu" for t in tolerations)


def test_the_sidecar_runs_the_gateway_beside_the_app_on_loopback() -> None:
    doc = find("Deployment", "digits-app")
    (gateway,) = [c for c in pod_spec(doc)["initContainers"] if "v2-gateway/gateway" in c["image"]]
    assert gateway["restartPolicy"] == "Always"  # a native sidecar: up before the app, down after
    config_map = find("ConfigMap", "digits-app-gateway")
    server = yaml.safe_load(config_map.obj["data"]["gateway.yaml"])["server"]
    assert server["host"] == "127.0.0.1"
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        command = " ".join(gateway[probe]["exec"]["command"])
        assert f"http://127.0.0.1:{server['port']}/v2/health/" in command
    (app,) = pod_spec(doc)["containers"]
    assert f"127.0.0.1:{server['port']}" in str(app["env"])
