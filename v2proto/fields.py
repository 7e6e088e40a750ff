"""Checks of the fields every V2 message shares: names, ``parameters`` objects, boolean flags.

Tensors, requests, responses and requested outputs all carry them; one definition keeps the
messages that name a bad field the same wherever it is found.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from v2proto.errors import ProtocolError


def parameters(raw: object, where: str) -> dict[str, Any]:
    """A ``parameters`` object (empty when absent)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ProtocolError(f"{where} must be an object")
    return raw


def name_of(obj: object, where: str) -> str:
    """The non-empty ``name`` of a tensor or output object."""
    if not isinstance(obj, dict):
        raise ProtocolError(f"{where} must be an object")
    value = obj.get("name")
    if not isinstance(value, str) or not value:
        raise ProtocolError(f"{where}: 'name' must be a non-empty string")
    return value


def flag(params: Mapping[str, Any], key: str, where: str, *, default: bool) -> bool:
    """A boolean parameter such as ``binary_data_output`` (``default`` when absent)."""
    value = params.get(key, default)
    if not isinstance(value, bool):
        raise ProtocolError(f"{where}.{key} must be true or false, got {value!r}")
    return value
