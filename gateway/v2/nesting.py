"""How deep a request's JSON may nest: `MAX_JSON_DEPTH` levels of objects and arrays.

A deeper request is refused with a 400 that says so, on every path a body takes. orjson stops
at its own limit (1024 levels); the fast path's decoder (msgspec, `gateway.v2.json_fast`)
recurses up to the interpreter's limit and raises `RecursionError`, which there means "let
the full parse judge"; and what orjson accepts is held to this bound, far below the depth
orjson writes back (255 levels, where a header is re-encoded for a replica) and below what a
replica's own parser may take. A V2 request has no use for depth: a tensor's data nests as
its shape's dimensions, and parameters hold plain values.

Only what no other check walks is walked here, and only where it holds an object or an
array: members the protocol does not name, and parameters' values. A tensor's nested data is
bounded where it is flattened (`gateway.v2.elements`). An ordinary request pays a set
comparison per object of the message.
"""

from __future__ import annotations

from typing import Any

from gateway.errors import BadRequest

MAX_JSON_DEPTH = 64
# The level of an input's ``data``: the request object, its ``inputs`` list, the tensor object.
DATA_LEVEL = 4
REQUEST_MEMBERS = frozenset({"id", "parameters", "inputs", "outputs"})
TENSOR_MEMBERS = frozenset({"name", "shape", "datatype", "parameters", "data"})
OUTPUT_MEMBERS = frozenset({"name", "parameters"})


def too_deep(where: str) -> BadRequest:
    return BadRequest(f"{where} nests deeper than {MAX_JSON_DEPTH} levels of arrays and objects")


def check_nesting(value: dict[str, Any] | list[Any], level: int, where: str) -> None:
    """`BadRequest` if ``value``, an object or array at ``level`` of the request (whose own
    object is level 1), holds objects and arrays past `MAX_JSON_DEPTH`. A level at a time,
    without recursion, and stopping at the first level past the bound."""
    containers: list[Any] = [value]
    while containers:
        if level > MAX_JSON_DEPTH:
            raise too_deep(where)
        inner = []
        for container in containers:
            for item in container.values() if type(container) is dict else container:
                if type(item) is dict or type(item) is list:
                    inner.append(item)
        containers = inner
        level += 1


def check_members(message: dict[str, Any], known: frozenset[str], level: int, where: str) -> None:
    """The nesting of ``message``'s members (an object at ``level``) that are not ``known``:
    the protocol's own are checked by their rules, the others only go on to the replica."""
    for key, value in message.items():
        if key not in known and (type(value) is dict or type(value) is list):
            check_nesting(value, level + 1, f"{where}: member {key[:40]!r}")
