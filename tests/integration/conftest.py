"""Real replica processes and real gateways on loopback for integration tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.gateway import GatewayProcess, pool_config, start_gateway
from tests.support.processes import ReplicaProcess, start_replica

pytestmark = pytest.mark.integration

StartReplicas = Callable[..., list[ReplicaProcess]]
StartGateway = Callable[[dict[str, Any]], GatewayProcess]


@pytest.fixture
def start_replicas(models_dir: Path) -> Iterator[StartReplicas]:
    """Starts ``count`` replicas of a model (faults enabled); all are stopped by PID after."""
    started: list[ReplicaProcess] = []

    def start(count: int = 3, model: str = "digits-mlp") -> list[ReplicaProcess]:
        batch = [
            start_replica(models_dir / f"{model}.onnx", name=model, enable_faults=True)
            for _ in range(count)
        ]
        started.extend(batch)
        return batch

    yield start
    for proc in started:
        proc.cleanup()


@pytest.fixture
def start_gw() -> Iterator[StartGateway]:
    started: list[GatewayProcess] = []

    def start(config: dict[str, Any]) -> GatewayProcess:
        proc = start_gateway(config)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.cleanup()


__all__ = ["pool_config"]
