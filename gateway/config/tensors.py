"""How a pool (or a fallback model) names and shapes a model's tensors, where it differs from
what clients use.

Clients speak one vocabulary per model: its input and output names and output shapes. A pool
of another V2 server may call the same tensors otherwise (MLServer's scikit-learn runtime
answers ``predict`` of shape [n, 1], a KServe model ``predict`` of shape [n], ours ``label`` of
shape [n]). A mapping says, in the client's names, what each is called on the pool and the
shape clients get (``-1`` for the batch dimension); tensors it does not name pass unchanged.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from gateway.frozen import Frozen


class OutputMapping(Frozen):
    name: str = Field(min_length=1, description="the output's name on the pool")
    shape: tuple[int, ...] | None = Field(
        None, description="the shape clients get (one -1 at most); None: the pool's own"
    )

    @field_validator("shape")
    @classmethod
    def _one_free_dimension(cls, shape: tuple[int, ...] | None) -> tuple[int, ...] | None:
        if shape is None:
            return None
        if sum(1 for d in shape if d == -1) > 1 or any(d < -1 or d == 0 for d in shape):
            raise ValueError("shape: positive sizes and at most one -1")
        return shape


class TensorMapping(Frozen):
    """Client name -> the pool's name (and, for outputs, the client's shape)."""

    inputs: dict[str, str] = Field(
        default_factory=dict, description="client input name -> the pool's name for it"
    )
    outputs: dict[str, OutputMapping] = Field(
        default_factory=dict, description="client output name -> the pool's name (and shape)"
    )

    @field_validator("outputs", mode="before")
    @classmethod
    def _short_form(cls, outputs: Any) -> Any:
        """``{label: predict}`` is short for ``{label: {name: predict}}``."""
        if isinstance(outputs, dict):
            return {k: {"name": v} if isinstance(v, str) else v for k, v in outputs.items()}
        return outputs

    @model_validator(mode="after")
    def _one_to_one(self) -> TensorMapping:
        for kind, names in (
            ("inputs", list(self.inputs.values())),
            ("outputs", [o.name for o in self.outputs.values()]),
        ):
            if len(set(names)) != len(names):
                raise ValueError(f"tensors.{kind}: two client names map to one pool name")
        return self

    @property
    def empty(self) -> bool:
        return not self.inputs and not self.outputs

    def pool_input(self, name: str) -> str:
        return self.inputs.get(name, name)

    def pool_output(self, name: str) -> str:
        output = self.outputs.get(name)
        return output.name if output is not None else name

    def client_output(self, pool_name: str) -> tuple[str, tuple[int, ...] | None]:
        """The client's name (and shape) of a pool output."""
        for client, output in self.outputs.items():
            if output.name == pool_name:
                return client, output.shape
        return pool_name, None

    def client_input(self, pool_name: str) -> str:
        for client, pool in self.inputs.items():
            if pool == pool_name:
                return client
        return pool_name
