"""The base of every config model: frozen (hashable decisions, no layer edits config) and
strict (an unknown key is an error naming it, never silently ignored)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
