"""Operators' decisions kept in a local file, for a gateway without a shared store.

With Redis the store keeps them; a lone gateway (``state.backend: memory``) names a file in
``state.decisions_file`` so that a drain survives a restart. The file is small (one line per
target ever decided), rewritten whole on each action (a temporary file, then an atomic rename,
so a crash leaves the previous file or the new one) and read once at start, with the checks a
store's values get: bounds, and no stamp from the future.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

from gateway.state.decisions import Decision
from gateway.state.limits import FUTURE_SKEW_S
from gateway.state.rejects import Rejects

log = logging.getLogger(__name__)


def read_decisions(path: str, wall: float, rejects: Rejects | None = None) -> dict[str, Decision]:
    """The decisions in ``path``; none if it does not exist yet. A file that cannot be read
    is logged and taken as empty (the gateway starts; the error says what was lost); a line
    that is not a decision within its bounds (`gateway.state.limits`), or one stamped more
    than `FUTURE_SKEW_S` after ``wall`` (now, on the reader's clock: as a store's pull
    refuses one, `gateway.state.decisions`), is dropped (counted in ``rejects``, logged) and
    the rest is read."""
    rejects = rejects or Rejects()
    try:
        lines = Path(path).read_bytes().splitlines()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        log.error("decisions file %s: cannot read (%s); starting without its decisions", path,
                  exc.strerror or exc)  # fmt: skip
        return {}
    decisions: dict[str, Decision] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            decision = Decision.decode(line)
        except (ValueError, TypeError) as exc:
            rejects.drop("decisions_file", "decision", f"{path}:{number}", str(exc))
            continue
        if decision.at > wall + FUTURE_SKEW_S:  # a forged or restored stamp, not clock skew
            ahead = f"decided {decision.at - wall:.0f} s in the future"
            rejects.drop("decisions_file", "decision", f"{path}:{number}", ahead)
            continue
        if decision.supersedes(decisions.get(decision.key)):
            decisions[decision.key] = decision
    return decisions


def write_decisions(path: str, decisions: Mapping[str, Decision]) -> None:
    """Replaces ``path`` with ``decisions``, atomically (blocking: call it off the loop)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(handle, "wb") as out:
            for key in sorted(decisions):
                out.write(decisions[key].encode().encode() + b"\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
