"""A worker's doors' view of it: the runtime they serve from, its edge, and reloads.

The REST door (`gateway.worker.rest`) and the gRPC door read `runtime` and `edge` at each
request, so a reload takes over at once: `swap` starts a runtime built from the config the
control process sent (verifying its fallbacks first), makes it the one the doors read, applies
the latest snapshot to it, and retires the outgoing one once the requests it admitted are answered
(bounded). The parse processes and the in-flight bytes outlive reloads, as in one process.

Statistics (Triton's) are the control process's: every worker's answers are counted there, so
`statistics` asks it (`ControlReads`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Protocol

from gateway.api.parsing import RequestParser
from gateway.api.tenants import TenantKeys
from gateway.memory.inflight_bytes import InflightBytes
from gateway.pipeline.build import build_edge
from gateway.pipeline.edge import Edge
from gateway.snapshot.messages import Loads, Snapshot
from gateway.worker.runtime import WorkerRuntime

log = logging.getLogger(__name__)

RETIRE_GRACE_S = 60.0
RETIRE_POLL_S = 0.05


class ControlReads(Protocol):
    """What a worker asks its control process for (`gateway.worker.control_client`)."""

    async def get_json(self, path: str) -> tuple[int, Any]: ...


class WorkerApp:
    def __init__(
        self,
        runtime: WorkerRuntime,
        parser: RequestParser,
        memory: InflightBytes,
        control: ControlReads,
    ) -> None:
        self.parser = parser
        self.memory = memory
        self.control = control
        # the control's last snapshot
        self.latest: Snapshot | None = None
        self._retiring: set[asyncio.Task[None]] = set()
        self._install(runtime)

    @property
    def gateway(self) -> WorkerRuntime:
        """The runtime the doors serve from (named as the control's app names its gateway)."""
        return self.runtime

    def _install(self, runtime: WorkerRuntime) -> None:
        self.runtime = runtime
        config = runtime.config
        keys = TenantKeys.load(config.tenants)
        self.edge: Edge = build_edge(
            runtime.infer,
            runtime.clock,
            runtime.tracer,
            runtime.observe,
            tenant_of=keys.tenant,
            model_of=runtime.model,
            tenants=runtime.tenants,
            max_body_bytes=config.server.max_body_bytes,
            parser=self.parser,
            schema_of=runtime.schema,
            memory=self.memory,
        )

    def follow(self, snapshot: Snapshot) -> None:
        """The control's decisions, applied to the runtime the doors read."""
        self.latest = snapshot
        self.runtime.mirror.apply(snapshot)

    def follow_loads(self, loads: Loads) -> None:
        """Replicas' load readings alone, applied to the runtime the doors read (the next
        runtime a reload builds starts from `latest` and takes newer readings from answers)."""
        self.runtime.mirror.loads(loads)

    async def swap(self, build: Callable[[], WorkerRuntime]) -> None:
        """A reload: the new runtime started and serving, the outgoing one retired."""
        fresh = build()
        await fresh.start()
        if self.latest is not None:
            fresh.mirror.apply(self.latest)
        old, old_edge = self.runtime, self.edge
        self._install(fresh)
        task = asyncio.create_task(_retire(old, old_edge))
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)
        log.info("worker runtime replaced from the reloaded config")

    async def statistics(self, name: str | None = None) -> dict[str, Any]:
        """Triton's statistics of every model (or ``name``), as the control counted them."""
        path = "/v2/models/stats" if name is None else f"/v2/models/{name}/stats"
        status, doc = await self.control.get_json(path)
        if status != 200 or not isinstance(doc, dict):
            raise RuntimeError(f"the control process answered {status} for {path}")
        return doc

    async def stop(self) -> None:
        await asyncio.gather(*self._retiring, return_exceptions=True)
        await self.runtime.stop()


async def _retire(runtime: WorkerRuntime, edge: Edge, grace_s: float = RETIRE_GRACE_S) -> None:
    """Stops a replaced runtime once every request its edge took is answered (bounded):
    one still reading its body has not reached admission yet, but will use its transport."""
    loop = asyncio.get_running_loop()
    until = loop.time() + grace_s
    while edge.open > 0 or not runtime.pipeline.admission.idle.is_set():
        if loop.time() >= until:
            break
        await asyncio.sleep(RETIRE_POLL_S)
    await runtime.stop()
