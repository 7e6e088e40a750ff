"""One listed replica of a pool (``pools.<name>.replicas[]``) and how `gateway up` starts it.

Apart from the pool's own config because the replica registry, the launcher and the carried-over
state all name a replica by this value, without the pool's policies.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from gateway.config.endpoint import Endpoint
from gateway.frozen import Frozen

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"


class LocalLaunch(Frozen):
    """How `gateway up` starts this pool's replicas on this machine (``replica serve``)."""

    model_path: str = Field(description="the ONNX model file `replica serve` loads")
    device: Literal["cpu", "cuda"] = Field(
        "cpu", description="onnxruntime's provider: CPU, or CUDA (needs onnxruntime-gpu)"
    )
    enable_faults: bool = Field(
        False,
        description="replicas get --enable-faults; /admin/faults then takes the key in "
        "$REPLICA_FAULT_KEY, or else a new key per run, in a file whose path is logged",
    )
    startup_timeout_s: float = Field(
        60.0,
        gt=0,
        description="`gateway up` gives up when a replica is not ready this long after it starts",
    )


class ReplicaConfig(Frozen):
    id: str = Field(
        pattern=ID_PATTERN, description="the replica's name in answers, errors, metrics and /admin"
    )
    url: str = Field(
        description="http://, https://, grpc:// or grpcs:// host:port (the V2 server's address)"
    )
    zone: str | None = Field(
        None, description="failure domain: a vote's legs go to different zones where they can"
    )
    standby: bool = Field(False, description="hot spare: used only while actives are down")

    @field_validator("url")
    @classmethod
    def _url_is_http(cls, value: str) -> str:
        Endpoint.parse(value)
        return value.rstrip("/")

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint.parse(self.url)
