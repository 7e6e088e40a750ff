"""Fault injection for chaos tests: latency, errors, hangs, crashes, wrong answers, unreadiness,
a poison input.

The gateway's resilience is only as believable as the failures it was tested against, so a
replica started with ``--enable-faults`` can be told at run time to misbehave in each way the
gateway must survive. Without the flag the server uses `NoFaults` (a null object) and the admin
endpoint does not exist; with it, the endpoint takes a key (`replicas.fault_auth`). Randomness
and sleeping are injected so tests are deterministic.
"""

from __future__ import annotations

import asyncio
import math
import os
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any, Protocol

import numpy as np

from replicas.errors import BadRequest, InjectedFault
from v2proto.signature import Array

CRASH_EXIT_CODE = 3
CRASH_DELAY_S = 0.01  # long enough for the 202 to leave the socket buffer


@dataclass(frozen=True, slots=True)
class Faults:
    """The active faults; the defaults mean a healthy replica."""

    latency_ms: float = 0.0
    error_rate: float = 0.0
    hang: bool = False
    corrupt_rate: float = 0.0
    ready: bool = True
    poison_value: float | None = None  # a request holding this value in an input answers 500
    wrong_id: bool = False  # answer with the previous request's id (a desynchronised server)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def active(self) -> dict[str, bool]:
        """Which faults are on, for the ``replica_faults_active`` gauge."""
        return {
            "latency_ms": self.latency_ms > 0,
            "error_rate": self.error_rate > 0,
            "hang": self.hang,
            "corrupt_rate": self.corrupt_rate > 0,
            "ready": not self.ready,
            "poison_value": self.poison_value is not None,
            "wrong_id": self.wrong_id,
        }

    def merged(self, update: object) -> tuple[Faults, bool]:
        """These faults with ``update`` applied, and whether it asks for a crash."""
        if not isinstance(update, dict):
            raise BadRequest("the fault update must be a JSON object")
        changes: dict[str, Any] = {}
        crash = False
        for key, value in update.items():
            if key == "latency_ms":
                changes[key] = _number(key, value, 0.0, 3_600_000.0)
            elif key in ("error_rate", "corrupt_rate"):
                changes[key] = _number(key, value, 0.0, 1.0)
            elif key in ("hang", "ready", "wrong_id"):
                changes[key] = _boolean(key, value)
            elif key == "poison_value":
                changes[key] = None if value is None else _number(key, value, -math.inf, math.inf)
            elif key == "crash":
                crash = _boolean(key, value)
            else:
                known = ", ".join([*self.to_json(), "crash"])
                raise BadRequest(f"unknown fault '{key}'; known faults: {known}")
        return replace(self, **changes), crash


def _number(key: str, value: object, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise BadRequest(f"'{key}' must be a number, got {value!r}")
    if not low <= value <= high:
        raise BadRequest(f"'{key}' must be between {low:g} and {high:g}, got {value!r}")
    return float(value)


def _boolean(key: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise BadRequest(f"'{key}' must be true or false, got {value!r}")
    return value


class FaultHooks(Protocol):
    """What the server asks of faults on every request."""

    @property
    def ready(self) -> bool: ...

    async def before_infer(self, inputs: Mapping[str, Array] | None = None) -> None: ...

    def after_infer(self, outputs: dict[str, Array]) -> dict[str, Array]: ...

    def answer_id(self, request_id: str | None) -> str | None:
        """The id the answer carries: the request's own, unless a fault says otherwise."""


class NoFaults:
    """The null object used without ``--enable-faults``: never injects anything."""

    ready = True

    async def before_infer(self, inputs: Mapping[str, Array] | None = None) -> None:
        return None

    def after_infer(self, outputs: dict[str, Array]) -> dict[str, Array]:
        return outputs

    def answer_id(self, request_id: str | None) -> str | None:
        return request_id


class FaultInjector:
    """Holds the active faults and applies them to requests."""

    def __init__(
        self,
        rng: random.Random | None = None,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        exit: Callable[[int], None] = os._exit,
    ) -> None:
        self._rng = rng or random.Random()
        self._sleep = sleep
        self._exit = exit
        self._faults = Faults()
        self._last_id: str | None = None
        self._unhung = asyncio.Event()
        self._unhung.set()

    @property
    def faults(self) -> Faults:
        return self._faults

    @property
    def ready(self) -> bool:
        return self._faults.ready

    def update(self, body: object) -> tuple[Faults, bool]:
        """Merge ``body`` into the active faults; returns them and whether to crash."""
        faults, crash = self._faults.merged(body)
        self._set(faults)
        return faults, crash

    def clear(self) -> Faults:
        self._set(Faults())
        return self._faults

    def _set(self, faults: Faults) -> None:
        self._faults = faults
        if faults.hang:
            self._unhung.clear()
        else:
            self._unhung.set()  # requests held by a hang go on now

    def crash_soon(self) -> None:
        """Exit the process at once (no cleanup), just after the current reply is written."""
        asyncio.get_running_loop().call_later(CRASH_DELAY_S, self._exit, CRASH_EXIT_CODE)

    async def before_infer(self, inputs: Mapping[str, Array] | None = None) -> None:
        if self._faults.hang:
            await self._unhung.wait()
        faults = self._faults
        if faults.latency_ms > 0:
            await self._sleep(faults.latency_ms / 1000.0)
        if faults.error_rate > 0 and self._rng.random() < faults.error_rate:
            raise InjectedFault("injected fault")
        poison = faults.poison_value
        if poison is not None and inputs is not None and _holds(inputs, poison):
            raise InjectedFault(f"injected fault: cannot take the value {poison:g}")

    def answer_id(self, request_id: str | None) -> str | None:
        """With ``wrong_id`` on: the id of the request answered before this one (another
        client's), or a made-up one for the first; the request's own otherwise."""
        previous, self._last_id = self._last_id, request_id
        if not self._faults.wrong_id or request_id is None:
            return request_id
        if previous is None or previous == request_id:
            return f"not-{request_id}"
        return previous

    def after_infer(self, outputs: dict[str, Array]) -> dict[str, Array]:
        rate = self._faults.corrupt_rate
        if rate > 0 and self._rng.random() < rate:
            return corrupt(outputs, self._rng)
        return outputs


def _holds(inputs: Mapping[str, Array], value: float) -> bool:
    """Whether a numeric input holds ``value`` (a poison input, as a runtime that crashes on
    one input while it answers every other: a 500 to that request only)."""
    return any(a.dtype.kind in "iuf" and bool(np.any(a == value)) for a in inputs.values())


def corrupt(outputs: Mapping[str, Array], rng: random.Random) -> dict[str, Array]:
    """A wrong but well-formed answer: each row gets a different label and scores agree with it.

    Integer vectors are taken as labels, 2-D float arrays as per-class scores; the wrong label
    replaces the label, and the scores of the top class and the wrong class swap places.
    Other outputs are returned unchanged.
    """
    labels = [a for a in outputs.values() if a.dtype.kind in "iu" and a.ndim == 1]
    scores = [a for a in outputs.values() if a.dtype.kind == "f" and a.ndim == 2 and a.shape[1] > 1]
    if scores:
        n_classes, rows = scores[0].shape[1], scores[0].shape[0]
        original = labels[0] if labels else scores[0].argmax(axis=1)
    elif labels:
        original = labels[0]
        n_classes, rows = max(int(original.max()) + 1, 2), original.shape[0]
    else:
        return dict(outputs)
    offsets = np.array([rng.randrange(1, n_classes) for _ in range(rows)], dtype=np.int64)
    wrong = (original.astype(np.int64) + offsets) % n_classes
    result: dict[str, Array] = {}
    for name, arr in outputs.items():
        if any(arr is a for a in labels) and arr.shape[0] == rows:
            result[name] = wrong.astype(arr.dtype)
        elif any(arr is s for s in scores) and arr.shape[0] == rows:
            result[name] = _swap_top(arr, wrong)
        else:
            result[name] = arr
    return result


def _swap_top(scores: Array, wrong: Array) -> Array:
    out = scores.copy()
    idx = np.arange(out.shape[0])
    top = out.argmax(axis=1)
    top_values = out[idx, top].copy()
    out[idx, top] = out[idx, wrong]
    out[idx, wrong] = top_values
    tied = out.argmax(axis=1) != wrong  # another class shared the top score
    out[idx[tied], wrong[tied]] = np.nextafter(out[idx[tied], wrong[tied]], np.inf)
    return out
