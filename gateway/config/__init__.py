"""Typed, frozen, validated gateway configuration loaded from YAML."""

from gateway.config.loader import ConfigError, load_config, parse_config
from gateway.config.models import (
    GatewayConfig,
    LocalLaunch,
    ModelConfig,
    PoolConfig,
    ReplicaConfig,
    ServerConfig,
)

__all__ = [
    "ConfigError",
    "GatewayConfig",
    "LocalLaunch",
    "ModelConfig",
    "PoolConfig",
    "ReplicaConfig",
    "ServerConfig",
    "load_config",
    "parse_config",
]
