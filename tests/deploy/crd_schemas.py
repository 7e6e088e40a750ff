"""Every manifest validated strictly: built-in kinds by kubernetes-validate, custom resources
(ServiceMonitor, PrometheusRule) against their CRD's ``openAPIV3Schema``.

kubernetes-validate knows only the built-in kinds, so the prometheus-operator CRDs are kept in
``tests/deploy/crds`` (their release in ``crds/VERSION``) and a custom resource is checked as
``kubectl apply --validate=strict`` would: an unknown field fails (every object of the schema
is closed unless it preserves unknown fields), list-map keys are unique, and its metadata is
checked as a built-in object's metadata is, for the pinned Kubernetes version. A kind with no
CRD kept here goes to kubernetes-validate, which refuses it: nothing is skipped.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import kubernetes_validate  # type: ignore[import-untyped]
import yaml

from tests.deploy.manifests import KUBERNETES_VERSION

CRDS = Path(__file__).resolve().parent / "crds"
Obj = dict[str, Any]


def _close(schema: Obj) -> Obj:
    """The schema with every object closed to the fields it names (as strict validation is)."""
    schema = copy.deepcopy(schema)
    for node in _nodes(schema):
        if (
            "properties" in node
            and "additionalProperties" not in node
            and not node.get("x-kubernetes-preserve-unknown-fields")
        ):
            node["additionalProperties"] = False
    return schema


def _nodes(schema: Any) -> Iterator[Obj]:
    if isinstance(schema, dict):
        yield schema
        for value in schema.values():
            yield from _nodes(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _nodes(value)


def _list_map_keys(
    validator: Any, keys: list[str], instance: Any, schema: Obj
) -> Iterator[jsonschema.ValidationError]:
    """``x-kubernetes-list-type: map``: no two items share their keys (the API server's 422)."""
    if not isinstance(instance, list):
        return
    seen: set[tuple[Any, ...]] = set()
    for item in instance:
        key = tuple(item.get(k) for k in keys) if isinstance(item, dict) else (item,)
        if key in seen:
            yield jsonschema.ValidationError(f"duplicate entry for keys {keys}: {key}")
        seen.add(key)


Validator = jsonschema.validators.extend(
    jsonschema.Draft7Validator, {"x-kubernetes-list-map-keys": _list_map_keys}
)


@cache
def crd_schemas() -> dict[tuple[str, str], Any]:
    """(apiVersion, kind) -> a validator for every served version of every CRD kept here."""
    out: dict[tuple[str, str], Any] = {}
    for path in sorted(CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text(encoding="utf-8"))
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            if version["served"]:
                schema = _close(version["schema"]["openAPIV3Schema"])
                out[(f"{group}/{version['name']}", kind)] = Validator(schema)
    return out


def operator_version() -> str:
    """The prometheus-operator release the CRDs come from (first word after its name)."""
    return (CRDS / "VERSION").read_text(encoding="utf-8").split()[1]


def validate(obj: Obj) -> None:
    """Raises a `jsonschema.ValidationError` (or kubernetes-validate's errors) if invalid."""
    validator = crd_schemas().get((str(obj.get("apiVersion")), str(obj.get("kind"))))
    if validator is None:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        return
    validator.validate(obj)
    # Metadata is ObjectMeta for every kind: checked inside a built-in object of the version.
    probe = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": obj.get("metadata", {})}
    kubernetes_validate.validate(probe, KUBERNETES_VERSION, strict=True)
    if not obj.get("metadata", {}).get("name"):
        raise jsonschema.ValidationError("metadata.name: required")
