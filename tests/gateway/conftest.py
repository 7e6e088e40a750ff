from __future__ import annotations

from typing import Any

import pytest

from gateway.config import GatewayConfig, parse_config


def make_config(replicas: int = 3, **model: Any) -> GatewayConfig:
    return parse_config(
        {
            "pools": {
                "p": {
                    "model": "digits-mlp",
                    "version": "1",
                    "binary_tensors": True,  # the fakes answer no server metadata to learn it
                    "replicas": [
                        {"id": f"r{i}", "url": f"http://127.0.0.1:{9000 + i}"}
                        for i in range(replicas)
                    ],
                }
            },
            "models": {"digits": {"pool": "p", **model}},
        }
    )


@pytest.fixture
def config() -> GatewayConfig:
    return make_config()
