"""Loading config files, with errors that name the bad key and the file.

Pydantic's errors are flattened into ``file: a.b.c: message`` lines, which is what an operator
running ``gateway check-config`` wants to read; an unknown key (a typo) is answered with the
closest key that place knows (`gateway.config.suggest`). Relative file paths in a config mean files
beside it (`gateway.config.paths`), whatever the working directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from gateway.config.models import GatewayConfig
from gateway.config.paths import resolve_paths
from gateway.config.suggest import did_you_mean


class ConfigError(Exception):
    """The configuration is unreadable or invalid; the message names the file and key."""


def _describe(error: ValidationError) -> str:
    lines = []
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"]) or "(top level)"
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = f"unknown key{did_you_mean(GatewayConfig, item['loc'])}"
        lines.append(f"{where}: {message}")
    return "; ".join(lines)


def parse_config(data: Any, source: str = "<config>") -> GatewayConfig:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping")
    try:
        return GatewayConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{source}: {_describe(exc)}") from exc


def load_config(path: str | Path) -> GatewayConfig:
    """The config in ``path``; the files it names are resolved against its directory."""
    return read_config(path)[1]


def read_config(path: str | Path) -> tuple[str, GatewayConfig]:
    """The text of the config file ``path`` and the config it holds (what a control process
    hands its workers: the very text it validated)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    return text, config_from_text(text, path)


def config_from_text(text: str, path: Path) -> GatewayConfig:
    """The config ``text`` holds, as if read from the file ``path`` (its relative file paths
    are resolved against its directory; errors name it)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    resolve_paths(data, path.absolute().parent)
    return parse_config(data, str(path))
