"""A model's declared tensors (``models.<name>.signature``), for servers whose metadata lists none.

Requests are checked against it, and so is the fallback's signature, at load; apart from the
model's config because it is a V2 schema of its own, checked against V2's datatypes.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from gateway.frozen import Frozen
from v2proto.signature import DATATYPES


class TensorDecl(Frozen):
    name: str = Field(min_length=1, description="the tensor's name, as clients send it")
    datatype: str = Field(description="a V2 datatype: FP32, INT64, BYTES, ...")
    shape: tuple[int, ...] = Field(description="-1 for a dimension of any size")

    @field_validator("datatype")
    @classmethod
    def _v2_datatype(cls, datatype: str) -> str:
        if datatype not in DATATYPES:
            raise ValueError(f"datatype {datatype!r} is not a V2 datatype ({', '.join(DATATYPES)})")
        return datatype

    def metadata(self) -> dict[str, object]:
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape)}


class SignatureConfig(Frozen):
    """The model's tensors in the clients' names, for servers whose metadata lists none."""

    inputs: tuple[TensorDecl, ...] = Field(min_length=1, description="every input the model takes")
    outputs: tuple[TensorDecl, ...] = Field((), description="the outputs it answers")

    def metadata(self) -> dict[str, list[dict[str, object]]]:
        return {
            "inputs": [t.metadata() for t in self.inputs],
            "outputs": [t.metadata() for t in self.outputs],
        }
