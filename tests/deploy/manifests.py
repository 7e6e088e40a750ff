"""The deploy/ tree as data: Kubernetes objects, the gateway configs they embed, Dockerfiles.

The tests in this folder read everything through these helpers, so a manifest moved or added is
picked up without editing a list; nothing here needs a cluster or a container runtime.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
DOCKER = DEPLOY / "docker"
NAMESPACE = "v2-gateway"
KUBERNETES_VERSION = "1.30.0"  # the oldest minor still in common support; native sidecars (1.29+)
CONFIG_KEY = "gateway.yaml"  # the ConfigMap key a gateway's config is mounted from

Obj = dict[str, Any]


@dataclass(frozen=True)
class Doc:
    path: Path
    obj: Obj

    @property
    def kind(self) -> str:
        return str(self.obj["kind"])

    @property
    def name(self) -> str:
        return str(self.obj["metadata"]["name"])

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(K8S)}::{self.kind}/{self.name}"


def manifest_files() -> list[Path]:
    """Every Kubernetes manifest (kustomizations are kustomize's input, not objects)."""
    return sorted(p for p in K8S.rglob("*.yaml") if p.name != "kustomization.yaml")


def docs() -> list[Doc]:
    out = []
    for path in manifest_files():
        for obj in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if obj is not None:
                out.append(Doc(path, obj))
    return out


def of_kind(*kinds: str) -> list[Doc]:
    return [d for d in docs() if d.kind in kinds]


def find(kind: str, name: str) -> Doc:
    (found,) = [d for d in docs() if d.kind == kind and d.name == name]
    return found


WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet", "Job")


def pod_spec(doc: Doc) -> Obj:
    spec: Obj = doc.obj["spec"]["template"]["spec"]
    return spec


def containers(doc: Doc) -> list[Obj]:
    """Every container of a workload, init containers (native sidecars among them) included."""
    spec = pod_spec(doc)
    return [*spec.get("initContainers", []), *spec["containers"]]


def gateway_configs() -> list[tuple[Doc, str]]:
    """The ConfigMaps that hold a gateway config, with its text."""
    return [
        (d, d.obj["data"][CONFIG_KEY])
        for d in of_kind("ConfigMap")
        if CONFIG_KEY in d.obj.get("data", {})
    ]


def pinned_zone(doc: Doc) -> str | None:
    """The one zone a workload's required node affinity pins it to, if any."""
    affinity = pod_spec(doc).get("affinity", {}).get("nodeAffinity", {})
    terms = affinity.get("requiredDuringSchedulingIgnoredDuringExecution", {})
    for term in terms.get("nodeSelectorTerms", []):
        for expr in term.get("matchExpressions", []):
            if expr["key"] == "topology.kubernetes.io/zone" and expr["operator"] == "In":
                (zone,) = expr["values"]
                return str(zone)
    return None


def selects(selector: dict[str, str], doc: Doc) -> bool:
    labels = doc.obj["spec"]["template"]["metadata"]["labels"]
    return all(labels.get(k) == v for k, v in selector.items())


def arg(container: Obj, flag: str) -> str | None:
    args = [*container.get("command", []), *container.get("args", [])]
    return str(args[args.index(flag) + 1]) if flag in args else None


# ---- Dockerfiles -------------------------------------------------------------------------


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)  # (INSTRUCTION, rest)


@dataclass(frozen=True)
class Copy:
    stage: str | None  # --from=...
    sources: tuple[str, ...]
    dest: str


def dockerfiles() -> list[Path]:
    return sorted(p for p in DOCKER.glob("Dockerfile.*") if not p.name.endswith(".dockerignore"))


def instructions(path: Path) -> Iterator[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    logical = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not logical and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):  # a comment inside a continued instruction
            continue
        if line.endswith("\\"):
            logical += line[:-1] + " "
            continue
        logical += line
        keyword, _, rest = logical.partition(" ")
        yield keyword.upper(), rest.strip()
        logical = ""


def stages(path: Path) -> list[Stage]:
    out: list[Stage] = []
    for keyword, rest in instructions(path):
        if keyword == "FROM":
            words = rest.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            out.append(Stage(words[0], name))
        elif out:
            out[-1].instructions.append((keyword, rest))
    return out


def copies(stage: Stage) -> list[Copy]:
    out = []
    for keyword, rest in stage.instructions:
        if keyword not in ("COPY", "ADD"):
            continue
        words = shlex.split(rest)
        flags = [w for w in words if w.startswith("--")]
        paths = [w for w in words if not w.startswith("--")]
        source = next((f.split("=", 1)[1] for f in flags if f.startswith("--from=")), None)
        out.append(Copy(source, tuple(paths[:-1]), paths[-1]))
    return out


def exec_form(rest: str) -> list[str]:
    """The JSON array of an exec-form instruction (CMD, ENTRYPOINT), or a shell form's words."""
    text = rest.strip()
    if text.startswith("["):
        words: list[str] = json.loads(text)
        return words
    return shlex.split(text)
