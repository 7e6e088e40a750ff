"""The verified fallback model, run in-process: async verify and infer, off the event loop.

The gateway answers from this model when the primary path cannot, so it must be the model the
manifest pins and must still pass its golden set; anything else is refused with a reason that
readiness and ``/admin/state`` show. Hashing, loading and inference block, so they run in a
thread pool; the event loop only swaps the verified session in or out.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gateway.clock import Clock
from gateway.errors import BadRequest, FallbackUnavailable
from gateway.fallback.check import FallbackCheck, VerifiedModel, check_model
from gateway.fallback.manifest import FileStamp, find_model, manifest_file, stamp
from gateway.v2.fit import FallbackMisfit
from v2proto.errors import ManifestError
from v2proto.signature import DATATYPES, Array, Signature, datatype_of
from v2proto.tensors import nonfinite_message, nonfinite_output

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class FallbackStatus:
    """The last verification: ok, why (one line), when (wall seconds), what it found."""

    ok: bool
    reason: str
    # None: never checked
    checked_at: float | None = None
    sha256: str | None = None
    accuracy: float | None = None
    model: str = ""
    version: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "version": self.version,
            "ok": self.ok,
            "reason": self.reason,
            "checked_at": self.checked_at,
            "sha256": self.sha256,
            "accuracy": self.accuracy,
        }


class FallbackModel:
    def __init__(
        self, manifest: Path, name: str, clock: Clock, *, executor: Executor | None = None
    ) -> None:
        self.manifest = manifest_file(manifest)
        self.name = name
        self._clock = clock
        # None: the event loop's default thread pool
        self._executor = executor
        self._loaded: VerifiedModel | None = None
        self._lock = asyncio.Lock()
        self.status = FallbackStatus(False, "not verified yet", model=name)
        self.verifications = 0

    @property
    def ok(self) -> bool:
        """True while a verified session can answer."""
        return self._loaded is not None

    @property
    def signature(self) -> Signature | None:
        return None if self._loaded is None else self._loaded.signature

    async def verify(self) -> FallbackStatus:
        """Re-checks the file against the manifest and the golden set; swaps the session."""
        async with self._lock:
            loop = asyncio.get_running_loop()
            verdict, loaded = await loop.run_in_executor(
                self._executor, check_model, self.manifest, self.name, self._loaded
            )
            self._loaded = loaded
            self._record(verdict)
            return self.status

    async def infer(self, inputs: Mapping[str, Any]) -> dict[str, Array]:
        """All outputs for ``inputs``; `FallbackUnavailable` unless verified, `FallbackMisfit`
        if the inputs do not fit its signature, `BadRequest` if they overflow it
        (`nonfinite_output`)."""
        loaded = self._loaded
        if loaded is None:
            raise FallbackUnavailable(
                f"fallback {self.name!r} is unavailable: {self.status.reason}"
            )
        feed = _fit_inputs(loaded.signature, inputs)
        loop = asyncio.get_running_loop()
        try:
            outputs = await loop.run_in_executor(self._executor, loaded.run, feed)
        except Exception as exc:
            # onnxruntime's own errors
            raise FallbackUnavailable(f"fallback {self.name!r} failed: {exc}") from exc
        overflowed = nonfinite_output(outputs)
        if overflowed is not None:
            raise BadRequest(nonfinite_message(overflowed))
        return outputs

    async def stamps(self) -> tuple[FileStamp | None, ...]:
        """(mtime, size) of the manifest, model and golden files (None for a missing one)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._stamps)

    def _stamps(self) -> tuple[FileStamp | None, ...]:
        paths = [self.manifest]
        try:
            files = find_model(self.manifest, self.name)
            paths += [files.model_path, files.golden_path]
        except ManifestError:
            pass
        return tuple(stamp(p) for p in paths)

    def _record(self, verdict: FallbackCheck) -> None:
        self.verifications += 1
        previous = self.status
        self.status = FallbackStatus(
            verdict.ok,
            verdict.reason,
            self._clock.wall(),
            verdict.sha256,
            verdict.accuracy,
            self.name,
            verdict.version,
        )
        if (previous.ok, previous.reason) == (verdict.ok, verdict.reason):
            return
        if verdict.ok:
            log.info("fallback %s is available: %s", self.name, verdict.reason)
        else:
            log.warning("fallback %s is refused: %s", self.name, verdict.reason)


def _fit_inputs(signature: Signature, inputs: Mapping[str, Any]) -> dict[str, Array]:
    """The inputs as the session wants them; `FallbackMisfit` naming the first that does not
    fit its signature."""
    for name in inputs:
        if signature.input(name) is None:
            known = ", ".join(signature.input_names)
            raise FallbackMisfit(f"unknown input {name!r}; the fallback model's inputs: {known}")
    feed: dict[str, Array] = {}
    for spec in signature.inputs:
        if spec.name not in inputs:
            raise FallbackMisfit(f"missing input {spec.name!r}")
        array = np.asarray(inputs[spec.name])
        got = _datatype(array)
        if got != spec.datatype:
            raise FallbackMisfit(
                f"input {spec.name!r}: datatype {got}, the model expects {spec.datatype}"
            )
        if not spec.matches(array.shape):
            raise FallbackMisfit(
                f"input {spec.name!r}: shape {list(array.shape)} does not fit {list(spec.shape)}"
            )
        feed[spec.name] = np.ascontiguousarray(array, dtype=DATATYPES[got].newbyteorder("="))
    return feed


def _datatype(array: Array) -> str:
    try:
        return datatype_of(array.dtype)
    except ValueError:
        return str(array.dtype)
