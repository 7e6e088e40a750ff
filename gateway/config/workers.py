"""``server.workers``: how many data-plane worker processes, a count or ``auto``.

The value as written (``auto`` is resolved to a number only when the gateway starts, on the
machine it starts on: `gateway.control.worker_count`). One rule for the config file and for
``--workers``, so both refuse the same values with the same words.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

MAX_WORKERS = 1024
AUTO: Literal["auto"] = "auto"
Workers = Annotated[int, Field(ge=1, le=MAX_WORKERS)] | Literal["auto"]


def check_workers(value: object) -> int | Literal["auto"]:
    """``value`` if it is a count from 1 to `MAX_WORKERS` or ``"auto"``; else `ValueError`
    (a bool is no count, and neither is a string of digits: YAML gives numbers as numbers)."""
    if value == AUTO:
        return AUTO
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_WORKERS:
        return value
    raise ValueError(f"a count from 1 to {MAX_WORKERS}, or {AUTO!r}; not {value!r}")
