"""Helpers for the fallback tests: an inline executor and file tampering."""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any, TypeVar

COMMITTED = Path(__file__).resolve().parents[3] / "fallback_models"
NAME = "digits-logreg"
FILES = ("MANIFEST.json", f"{NAME}.onnx", "digits-golden.json")
T = TypeVar("T")


class InlineExecutor(Executor):
    """Runs each submitted call at once, in the caller's thread, so tests are deterministic."""

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        future: Future[T] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:
            future.set_exception(exc)
        return future


def tamper(path: Path, offset: int = 100) -> None:
    """Flips one byte and moves the mtime on, as an edit a few seconds later would."""
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))
    bump_mtime(path)


def bump_mtime(path: Path) -> None:
    later = path.stat().st_mtime_ns + 5_000_000_000
    os.utime(path, ns=(later, later))
