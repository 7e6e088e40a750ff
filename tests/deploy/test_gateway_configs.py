"""The gateway configs embedded in ConfigMaps: each passes `gateway check-config`, and each
replica it names is a Service that reaches a replica Deployment serving that model and version,
pinned to the zone the config says (how the zone gets from Kubernetes to the gateway)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from gateway.cli import main as gateway_main
from tests.deploy.manifests import (
    NAMESPACE,
    ROOT,
    WORKLOADS,
    Doc,
    arg,
    containers,
    find,
    gateway_configs,
    of_kind,
    pinned_zone,
    pod_spec,
    selects,
)

CONFIGS = gateway_configs()


IMAGE_WORKDIR = "/app/"  # Dockerfile.gateway: WORKDIR /app, COPY fallback_models there
SECRETS = "/run/secrets/"  # where the pods mount their Secrets
VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")  # a ${NAME} in a config value


def _env_for(config: dict[str, Any]) -> dict[str, str]:
    """A value for each variable the config names (the pod gets them from Secrets)."""
    admin = config.get("server", {}).get("admin", {})
    names = [admin.get("key_env"), admin.get("metrics_key_env")]
    names += [t.get("key_env") for t in config.get("tenants", {}).values()]
    names += VARIABLE.findall(config.get("state", {}).get("redis_url", ""))
    return {name: "k" * 32 for name in names if name}


def _as_on_this_machine(node: Any, secrets: Path) -> Any:
    """The config with the pod's paths mapped here: the image's /app/ is the repository (what
    the Dockerfile copies), and each file under /run/secrets/ a key file made for the test."""
    if isinstance(node, dict):
        return {k: _as_on_this_machine(v, secrets) for k, v in node.items()}
    if isinstance(node, list):
        return [_as_on_this_machine(v, secrets) for v in node]
    if isinstance(node, str) and node.startswith(IMAGE_WORKDIR):
        return str(ROOT / node.removeprefix(IMAGE_WORKDIR))
    if isinstance(node, str) and node.startswith(SECRETS):
        key = secrets / node.removeprefix(SECRETS)
        key.parent.mkdir(parents=True, exist_ok=True)
        key.write_text("k" * 32 + "\n", encoding="utf-8")
        return str(key)
    return node


@pytest.mark.parametrize(("doc", "text"), CONFIGS, ids=[d.id for d, _ in CONFIGS])
def test_the_embedded_config_passes_check_config(
    doc: Doc,
    text: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = yaml.safe_load(text)
    path = tmp_path / "etc" / "gateway.yaml"  # a directory of its own, like the mount
    path.parent.mkdir()
    mapped = _as_on_this_machine(config, tmp_path / "secrets")
    path.write_text(yaml.safe_dump(mapped, sort_keys=False), encoding="utf-8")
    for name, value in _env_for(config).items():
        monkeypatch.setenv(name, value)
    assert gateway_main(["check-config", str(path)]) == 0, capsys.readouterr().err
    assert ": ok (" in capsys.readouterr().out


@pytest.mark.parametrize(("doc", "text"), CONFIGS, ids=[d.id for d, _ in CONFIGS])
def test_the_paths_a_config_names_are_in_the_image_or_a_mounted_secret(doc: Doc, text: str) -> None:
    """Absolute paths only (a relative one would resolve against the mount, /etc/gateway):
    under /app/ a file the repository has (the image copies it), under /run/secrets/ a file a
    Secret volume of the pod mounting this ConfigMap provides."""
    (pod,) = [
        d
        for d in of_kind(*WORKLOADS)
        if any(
            v.get("configMap", {}).get("name") == doc.name for v in pod_spec(d).get("volumes", [])
        )
    ]
    volumes = {v["name"]: v for v in pod_spec(pod)["volumes"]}
    mounts = {
        m["mountPath"]: volumes[m["name"]]
        for c in containers(pod)
        for m in c.get("volumeMounts", [])
    }
    paths = [s for s in _strings(yaml.safe_load(text)) if s.startswith("/")]
    assert any(p.startswith(IMAGE_WORKDIR) for p in paths)
    for p in paths:
        if p.startswith(IMAGE_WORKDIR):
            assert (ROOT / p.removeprefix(IMAGE_WORKDIR)).is_file(), p
        elif p.startswith(SECRETS):
            folder, _, file = p.rpartition("/")
            secret = mounts[folder]["secret"]
            assert file in [i["path"] for i in secret["items"]], p


def _strings(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [s for v in node.values() for s in _strings(v)]
    if isinstance(node, list):
        return [s for v in node for s in _strings(v)]
    return [node] if isinstance(node, str) else []


def test_both_shapes_are_there() -> None:
    assert {d.name for d, _ in CONFIGS} == {"gateway-config", "digits-app-gateway"}


def _service(url: str) -> tuple[Doc, int]:
    parts = urlsplit(url)
    host = parts.hostname or ""
    name, namespace, *rest = host.split(".")
    assert namespace == NAMESPACE and rest[:1] == ["svc"], f"{url}: <service>.{NAMESPACE}.svc"
    return find("Service", name), parts.port or 80


@pytest.mark.parametrize(("doc", "text"), CONFIGS, ids=[d.id for d, _ in CONFIGS])
def test_each_replica_is_a_service_reaching_its_model_in_its_zone(doc: Doc, text: str) -> None:
    config = yaml.safe_load(text)
    workloads = of_kind(*WORKLOADS)
    for pool_name, pool in config["pools"].items():
        for replica in pool["replicas"]:
            where = f"{doc.name}: pools.{pool_name}.{replica['id']}"
            service, port = _service(replica["url"])
            assert port in {p["port"] for p in service.obj["spec"]["ports"]}, where
            (deployment,) = [d for d in workloads if selects(service.obj["spec"]["selector"], d)]
            (c,) = [c for c in containers(deployment) if arg(c, "--model")]
            assert arg(c, "--name") == pool["model"], where
            assert arg(c, "--version") == pool.get("version", "1"), where
            assert arg(c, "--model") == f"/models/{pool['model']}.onnx", where
            assert pinned_zone(deployment) == replica.get("zone"), where


def test_every_replica_deployment_serves_a_model_the_build_makes(models_dir: Path) -> None:
    manifest = json.loads((models_dir / "MANIFEST.json").read_text(encoding="utf-8"))
    built = {f"/models/{m['file']}": m["name"] for m in manifest["models"]}
    for deployment in of_kind(*WORKLOADS):
        for c in containers(deployment):
            model = arg(c, "--model")
            if model is not None:
                assert built.get(model) == arg(c, "--name"), deployment.id


def test_the_redis_url_names_the_redis_service() -> None:
    config = yaml.safe_load(find("ConfigMap", "gateway-config").obj["data"]["gateway.yaml"])
    assert config["state"]["backend"] == "redis"
    service, port = _service(config["state"]["redis_url"])
    assert port in {p["port"] for p in service.obj["spec"]["ports"]}
    statefulset = find("StatefulSet", "redis")
    assert selects(service.obj["spec"]["selector"], statefulset)
    gateway_labels = find("Deployment", "gateway").obj["spec"]["template"]["metadata"]["labels"]
    admitted = find("NetworkPolicy", "redis").obj["spec"]["ingress"][0]["from"][0]["podSelector"]
    assert all(gateway_labels.get(k) == v for k, v in admitted["matchLabels"].items())


def test_redis_requires_the_password_the_gateway_reads_from_the_same_secret() -> None:
    """Redis runs with requirepass read from the Secret as a file; the gateway gets the same
    Secret's key as the variable its redis_url names. No password anywhere in the manifests."""
    config = yaml.safe_load(find("ConfigMap", "gateway-config").obj["data"]["gateway.yaml"])
    (variable,) = VARIABLE.findall(config["state"]["redis_url"])
    assert urlsplit(config["state"]["redis_url"]).password == f"${{{variable}}}"
    gateway = find("Deployment", "gateway")
    env = {e["name"]: e for c in containers(gateway) for e in c.get("env", [])}
    secret_ref = env[variable]["valueFrom"]["secretKeyRef"]
    redis = find("StatefulSet", "redis")
    volumes = {v["name"]: v for v in pod_spec(redis)["volumes"]}
    (container,) = containers(redis)
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    (name,) = [n for n, v in volumes.items() if v.get("secret", {}).get("secretName")]
    secret = volumes[name]["secret"]
    assert secret["secretName"] == secret_ref["name"]
    (item,) = secret["items"]
    assert item["key"] == secret_ref["key"]
    path = f"{mounts[name]}/{item['path']}"
    command = " ".join(container["command"] + container["args"])
    assert f'requirepass %s\\n\' "$(cat {path})"' in command and "protected-mode" not in command
    for probe in ("startupProbe", "readinessProbe"):
        assert f'REDISCLI_AUTH="$(cat {path})"' in " ".join(container[probe]["exec"]["command"])


def test_every_pool_replica_pinned_to_a_zone_is_in_the_config() -> None:
    """No CPU replica Deployment is left out of the standalone config (the GPU one is opt-in)."""
    config = yaml.safe_load(find("ConfigMap", "gateway-config").obj["data"]["gateway.yaml"])
    hosts = {
        str(urlsplit(r["url"]).hostname).split(".")[0]
        for pool in config["pools"].values()
        for r in pool["replicas"]
    }
    replicas = {
        d.name
        for d in of_kind("Deployment")
        if d.obj["metadata"]["labels"].get("app.kubernetes.io/component") == "replica"
        and "v2-gateway.io/device" not in d.obj["metadata"]["labels"]
    }
    assert replicas == hosts
