"""Typed, frozen, validated gateway configuration loaded from YAML."""

from gateway.config.loader import ConfigError, load_config, parse_config
from gateway.config.models import GatewayConfig, ModelConfig
from gateway.config.pool import PoolConfig
from gateway.config.replica import LocalLaunch, ReplicaConfig
from gateway.config.server import ServerConfig

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
