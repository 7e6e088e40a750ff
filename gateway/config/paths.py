"""The file paths a config names, resolved against the config file's own directory.

A config is deployed as a unit with the files it names (golden sets, the fallback manifest,
local models, key, TLS and password files), so ``golden: {file: golden.json}`` must mean the
file next to the config, whatever directory the gateway was started from. Absolute paths are
kept as they are. Resolution happens on the raw mapping, before validation, because some
validators (TLS files) check that the files exist.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# Where a file path may appear; "*" is any key of a mapping (a pool, a tenant).
PATH_KEYS: tuple[tuple[str, ...], ...] = (
    ("fallback_manifest",),
    ("server", "admin", "key_file"),
    ("server", "admin", "metrics_key_file"),
    ("server", "admin", "operators", "*", "key_file"),
    ("pools", "*", "local", "model_path"),
    ("pools", "*", "golden", "file"),
    ("pools", "*", "tls", "ca_file"),
    ("pools", "*", "tls", "cert_file"),
    ("pools", "*", "tls", "key_file"),
    ("tenants", "*", "keys_file"),
    ("state", "sentinel_password_file"),
    ("state", "decisions_file"),
)


def path_fields(data: Any) -> Iterator[tuple[str, dict[str, Any], str]]:
    """Every path the mapping names: (dotted key, the mapping that holds it, its last key)."""
    for spec in PATH_KEYS:
        yield from _walk(data, spec, ())


def _walk(
    node: Any, spec: tuple[str, ...], where: tuple[str, ...]
) -> Iterator[tuple[str, dict[str, Any], str]]:
    if not isinstance(node, dict):
        return
    head, rest = spec[0], spec[1:]
    keys = [k for k in node if isinstance(k, str)] if head == "*" else [head]
    for key in keys:
        if not rest:
            if isinstance(node.get(key), str):
                yield ".".join((*where, key)), node, key
        elif key in node:
            yield from _walk(node[key], rest, (*where, key))


def resolve_paths(data: Any, base: Path) -> None:
    """Rewrites, in place, each relative path in ``data`` as one under ``base``."""
    for _, holder, key in path_fields(data):
        path = Path(holder[key]).expanduser()
        if not path.is_absolute():
            holder[key] = os.path.normpath(base / path)
