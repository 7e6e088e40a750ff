"""`make run`'s stack for tests: config/local.yaml's pools and models, each listed replica a real
process (as `gateway up` starts them, on free ports), and a real gateway in front.

Only the addresses differ from the config: the README's and the docs' examples run against it
with the gateway's port put in place of :8000 (and of :8001 for its gRPC door).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from tests.support.gateway import GatewayProcess, start_gateway
from tests.support.processes import REPO_ROOT, ReplicaProcess, start_replica

LOCAL = REPO_ROOT / "config" / "local.yaml"


@contextmanager
def local_stack(models_dir: Path, *, grpc: bool = False) -> Iterator[GatewayProcess]:
    config: dict[str, Any] = yaml.safe_load(LOCAL.read_text())
    replicas: list[ReplicaProcess] = []
    try:
        for pool in config["pools"].values():
            local = pool.pop("local")
            model = models_dir / Path(local["model_path"]).name
            if "golden" in pool:
                pool["golden"]["file"] = str((LOCAL.parent / pool["golden"]["file"]).resolve())
            for listed in pool["replicas"]:
                replica = start_replica(model, name=pool["model"], version=pool["version"])
                replicas.append(replica)
                listed["url"] = replica.url
        config["server"].pop("port", None)
        gateway = start_gateway(config, ready_timeout=60, grpc=grpc)
        try:
            yield gateway
        finally:
            gateway.cleanup()
    finally:
        for replica in replicas:
            replica.cleanup()
