"""The closest known key for a config key the schema does not know ("did you mean").

Why: ``helth:`` instead of ``health:`` is the most common config mistake, and pydantic only
says "Extra inputs are not permitted". The keys that place accepts are read from the models'
own fields (following dicts, lists, optionals and unions along the error's location), so the
suggestion can never name a key the schema lacks.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections import abc
from collections.abc import Iterable, Sequence

from pydantic import BaseModel

# difflib's ratio: "helth" ~ "health" 0.91, "sever" ~ "server" 0.91
CUTOFF = 0.6


def did_you_mean(root: type[BaseModel], loc: Sequence[int | str]) -> str:
    """`` (did you mean 'health'?)`` for the unknown key at ``loc``; ``""`` if none is close."""
    *parents, key = loc
    known = sorted({name for model in _models_at(root, parents) for name in model.model_fields})
    close = difflib.get_close_matches(str(key), known, n=1, cutoff=CUTOFF)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _models_at(root: type[BaseModel], path: Iterable[int | str]) -> list[type[BaseModel]]:
    """The models that may hold the keys at ``path`` (several where a union is undecided)."""
    kinds: list[object] = [root]
    for part in path:
        step: list[object] = []
        for kind in _expand(kinds):
            if isinstance(kind, type) and issubclass(kind, BaseModel):
                field = kind.model_fields.get(str(part))
                if field is not None:
                    step.append(field.annotation)
                elif part == kind.__name__:
                    # pydantic names the union member it tried
                    step.append(kind)
            elif typing.get_origin(kind) in (dict, abc.Mapping):
                step.append(typing.get_args(kind)[-1])
            elif typing.get_origin(kind) in (list, tuple, abc.Sequence) and isinstance(part, int):
                step.append(typing.get_args(kind)[0])
        kinds = step
    return [k for k in _expand(kinds) if isinstance(k, type) and issubclass(k, BaseModel)]


def _expand(kinds: Iterable[object]) -> list[object]:
    """Unions (``X | None``) and ``Annotated[X, ...]`` opened into their members."""
    out: list[object] = []
    for kind in kinds:
        origin = typing.get_origin(kind)
        if origin in (typing.Union, types.UnionType):
            out += _expand(typing.get_args(kind))
        elif origin is typing.Annotated:
            out += _expand(typing.get_args(kind)[:1])
        else:
            out.append(kind)
    return out
