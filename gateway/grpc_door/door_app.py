"""What the gRPC door reads of the application it serves: the control process's `GatewayApp`
in one process, a data-plane worker's `gateway.worker.app.WorkerApp` otherwise."""

from __future__ import annotations

from typing import Any, Protocol

from gateway.memory.inflight_bytes import InflightBytes
from gateway.pipeline.edge import Edge
from gateway.serving import Serving


class DoorApp(Protocol):
    """Read at each call: a reload's gateway and edge take over at once."""

    @property
    def gateway(self) -> Serving: ...

    @property
    def edge(self) -> Edge: ...

    @property
    def memory(self) -> InflightBytes: ...

    async def statistics(self, name: str | None = None) -> dict[str, Any]:
        """Triton's statistics of every model, or of model ``name``."""
        ...
