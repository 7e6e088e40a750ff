"""The gateway's ASGI application: infer on the raw fast path, the rest on FastAPI.

It also owns the lifespan, starting and stopping the `Gateway` with the server, reloads (all
or nothing: a reload that fails leaves the running gateway as it was and stops whatever the new
one had started), and is the last line against bare 500s: anything unexpected becomes a JSON
500 that says so.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from gateway.api.admin import build_admin_app
from gateway.api.auth import ControlAccess, refuse_unprotected
from gateway.api.auth_failures import AuthFailures
from gateway.api.guard import ControlPlaneGuard, allowed_hosts, mark_forwarded
from gateway.api.ids import AnswerIds
from gateway.api.infer import InferEndpoint
from gateway.api.parsing import RequestParser
from gateway.api.responses import Receive, Scope, Send, send_json
from gateway.api.tenants import TenantKeys
from gateway.call_count import install as install_call_count
from gateway.config import ConfigError, GatewayConfig
from gateway.config.loader import read_config
from gateway.control.carry_over import carry_over
from gateway.control.preflight import config_problems
from gateway.control.runtime import Gateway, OwnLevels
from gateway.errors import BadRequest, Conflict, GatewayError
from gateway.memory.heap_trim import HeapTrim
from gateway.memory.inflight_bytes import InflightBytes
from gateway.pipeline.build import build_edge
from gateway.pipeline.edge import Edge
from gateway.rollout.handover import promoted_config
from gateway.telemetry.audit import AuditEvent

log = logging.getLogger(__name__)

RETIRE_GRACE_S = 60.0
RETIRE_POLL_S = 0.05
# Server settings the running server holds (the socket, the protocol, the parser).
RESTART_FIELDS = (
    "host",
    "port",
    "grpc_port",
    "max_header_bytes",
    "header_timeout_s",
    "body_timeout_s",
    "parse_inline_max_bytes",
    "parse_fast_inline_max_bytes",
    "parse_offload",
    "parse_processes",
    "watch_config",
    "inflight_bytes",
    "inflight_wait_s",
    "inflight_small_bytes",
    "inflight_small_reserve",
    "inflight_peer_share",
    "grpc",
    "workers",
    "max_connections",
    "max_connections_per_peer",
)
DRAIN_SLACK_S = 1.0
_READS = frozenset({"GET", "HEAD"})
# a read waits this long at most for the workers' latest answers
READ_BARRIER_S = 0.5
# a change waits this long at most for the workers to take it in
WRITE_BARRIER_S = 10.0
Barrier = Callable[[float], Awaitable[object]]
# set by a worker's proxy (`gateway.worker.http.proxy`)
PEER_HEADER = b"x-gateway-peer"
INFER_PATH = re.compile(r"^/v2/models/([^/]+)(?:/versions/([^/]+))?/infer$")


# gateway, config text, promoted
Reloaded = Callable[[Gateway, str, tuple[str, ...]], None]


class GatewayApp:
    def __init__(
        self,
        gateway: Gateway,
        config_path: str | None = None,
        *,
        bind_host: str | None = None,
        config_text: str = "",
        parses: bool = True,
    ) -> None:
        """``bind_host``: where the server listens, when not ``server.host`` (``--host``);
        ``config_text``: the config file's text the gateway was built from; ``parses``: this
        process parses infer bodies itself (False in a control process: its workers do)."""
        self._config_path = config_path
        self.config_text = config_text
        # models handed over since the file was read
        self.promoted: tuple[str, ...] = ()
        self._parses = parses
        # who hears of each gateway a reload or a promotion swaps in (a control's workers)
        self.on_reload: list[Reloaded] = []
        # a control's workers flushed and up to date within a bound in seconds
        # (`ControlPlane.barrier`); None: no workers
        self.barrier: Barrier | None = None
        self._retiring: set[asyncio.Task[None]] = set()
        # one reload at a time (HTTP, SIGHUP, file watch)
        self._reloading = asyncio.Lock()
        # where and how to listen: fixed until a restart
        server = gateway.config.server
        self.bind_host = bind_host or server.host
        self.parser = RequestParser(
            server.parse_inline_max_bytes,
            server.parse_offload,
            server.parse_processes,
            server.parse_fast_inline_max_bytes,
        )
        # bytes in flight, across reloads: one per server
        self.memory = InflightBytes.from_config(server, HeapTrim().soon)
        # wrong keys by address, kept
        self.auth_failures = AuthFailures(gateway.clock)
        self._install(gateway, self._access(gateway.config))

    def _access(self, config: GatewayConfig) -> ControlAccess:
        """The control plane's keys as configured (read now); `ConfigError` if unusable."""
        refuse_unprotected(config.server.admin, self.bind_host)
        return ControlAccess.load(config.server.admin, self.bind_host)

    def _install(
        self, gateway: Gateway, access: ControlAccess, keys: TenantKeys | None = None
    ) -> None:
        """``keys``: the tenants' keys (None: read from ``gateway.config`` now)."""
        self.gateway = gateway
        keys = keys if keys is not None else TenantKeys.load(gateway.config.tenants)
        # what a promotion's swap keeps
        self._installed = (access, keys)
        # a promotion swaps the model's pool in
        gateway.rollouts.hand_over = self._hand_over
        if isinstance(gateway.levels, OwnLevels):
            # requests served here: their in-flight bytes are this app's
            gateway.levels.memory = self.memory
        # the steps before the pipeline, one edge for every door
        self.edge = build_edge(
            gateway.infer,
            gateway.clock,
            gateway.tracer,
            gateway.observe,
            tenant_of=keys.tenant,
            model_of=gateway.model,
            tenants=gateway.tenants,
            max_body_bytes=gateway.config.server.max_body_bytes,
            parser=self.parser,
            schema_of=gateway.schema,
            memory=self.memory,
        )
        self._infer = InferEndpoint(self.edge)
        hosts = allowed_hosts(gateway.config.server.allowed_hosts, self.bind_host)
        guarded = ControlPlaneGuard(
            build_admin_app(gateway, self.reload),
            access,
            hosts,
            self.auth_failures,
            gateway.metrics.admin_auth_failed,
        )
        self._admin = AnswerIds(guarded, gateway.config.tracing.enabled)

    async def reload(self, who: str = "unknown", reason: str = "") -> dict[str, Any]:
        """Re-reads the config file and swaps in a gateway built from it, without a restart.

        The new gateway starts (probes, fallback verification) before it takes traffic; the
        outgoing one finishes the requests it holds, then stops. What the outgoing one learned
        about replicas and models that stay is carried over (`carry_over`); the control plane's
        keys and allowed hosts are read afresh (a key rotation needs no restart). Where to
        listen (``server.host``/``port``), the client limits the protocol holds and the parser's
        settings need a restart to change (`RESTART_FIELDS`).

        Audited (`AuditEvent`, action ``reload``, target ``config``) as ``who`` asked for it
        (an operator's name, a signal, the file watch) and ``reason``: applied, or refused
        with the reason why, in the timeline of the gateway serving afterwards.
        """
        async with self._reloading:
            try:
                if self._config_path is None:
                    raise Conflict(
                        "this gateway was not started from a config file; nothing to reload"
                    )
                if self.gateway.draining is not None:
                    raise Conflict(f"not reloaded: {self.gateway.draining}")
                result = await self._reload(self._config_path)
            except GatewayError as exc:
                self._audit(who, reason, f"refused: {exc.message}")
                raise
            self._audit(who, reason, "applied")
            return result

    def _audit(self, who: str, reason: str, outcome: str) -> None:
        gateway = self.gateway
        shared = gateway.shared
        wall = gateway.clock.wall()
        shared.audit(AuditEvent(wall, who, "reload", "config", reason, outcome, shared.origin))

    async def _reload(self, path: str) -> dict[str, Any]:
        try:
            text, config = read_config(path)
            access = self._access(config)
            keys = TenantKeys.load(config.tenants)
        except ConfigError as exc:
            raise BadRequest(f"config not reloaded: {exc}") from exc
        problems = config_problems(config)
        if problems:
            raise BadRequest(f"config not reloaded: {path}: {'; '.join(problems)}")
        old = self.gateway
        try:
            carried = await self._swap(config, access, keys, text, ())
        except Exception as exc:
            log.warning("config not reloaded: the new gateway did not start", exc_info=True)
            raise BadRequest(f"config not reloaded: the new gateway did not start: {exc}") from exc
        log.info("config reloaded from %s", path)
        restart = [
            k for k in RESTART_FIELDS if getattr(config.server, k) != getattr(old.config.server, k)
        ]
        return {
            "reloaded": path,
            "models": sorted(config.models),
            "pools": sorted(config.pools),
            "needs_restart_for": [f"server.{k}" for k in restart],
            "carried_over": carried,
        }

    async def _swap(
        self,
        config: GatewayConfig,
        access: ControlAccess,
        keys: TenantKeys,
        text: str,
        promoted: tuple[str, ...],
    ) -> dict[str, list[str]]:
        """Starts a gateway built from ``config`` (on failure it stops whatever it started and
        this raises), carries the running one's state over and hands it the traffic; the
        outgoing one retires once the requests it admitted are answered. ``text``: the file's text
        ``config`` comes from, with ``promoted`` models handed over (for `on_reload`)."""
        old, old_edge = self.gateway, self.edge
        # one clock: carried deadlines stay valid
        fresh = Gateway(config, clock=old.clock)
        await fresh.start()
        # no await from here to the swap: nothing is missed
        carried = carry_over(old, fresh)
        self._install(fresh, access, keys)
        self.config_text, self.promoted = text, promoted
        for hear in self.on_reload:
            hear(fresh, text, promoted)
        task = asyncio.create_task(_retire(old, old_edge))
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)
        return carried

    def _hand_over(self) -> None:
        """A rollout was promoted: its candidate becomes the model's pool, in the running
        config (the file is not written), through the reload's swap."""
        task = asyncio.create_task(self._promote())
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def _promote(self) -> None:
        async with self._reloading:
            promoted = self.gateway.rollouts.promoted()
            if not promoted or self.gateway.draining is not None:
                return
            try:
                config = promoted_config(self.gateway.config, promoted)
                handed = (*self.promoted, *promoted)
                await self._swap(config, *self._installed, self.config_text, handed)
            except Exception:
                # the rollout still sends everything to the candidate
                log.warning(
                    "promotion of %s: the new gateway did not start", promoted, exc_info=True
                )
                return
            log.info(
                "rollout promoted: %s now served by the candidate pool (edit the config "
                "file to match; a reload keeps the promotion)",
                promoted,
            )

    def drain(self) -> float:
        """Readiness says "draining" from now on; returns how long in-flight requests may
        still need (the longest deadline a client may ask of any model, and a little)."""
        self.gateway.drain()
        longest_ms = max(m.max_timeout_ms for m in self.gateway.config.models.values())
        return longest_ms / 1000 + DRAIN_SLACK_S

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("client") is None:
            _client_from_worker(scope)
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] == "http" and scope["method"] == "POST":
            match = INFER_PATH.match(scope["path"])
            if match is not None:
                try:
                    await self._infer(scope, receive, send, match[1], match[2])
                except Exception:
                    # the one place an unexpected bug meets the client
                    log.exception("unexpected error on %s", scope["path"])
                    await send_json(send, 500, {"error": "internal gateway error (logged)"})
                return
        barrier = self.barrier
        if barrier is None or scope["type"] != "http":
            await self._admin(scope, receive, send)
        elif scope["method"] in _READS:
            # what it reads counts every worker's requests so far
            await barrier(READ_BARRIER_S)
            await self._admin(scope, receive, send)
        else:
            await self._admin(scope, receive, _after(barrier, send))

    async def statistics(self, name: str | None = None) -> dict[str, Any]:
        """Triton's statistics (for the gRPC door: `gateway.grpc_door.door_app.DoorApp`)."""
        return self.gateway.statistics(name)

    def _settle(self) -> None:
        """Folds the answers recorded so far into the running gateway's telemetry."""
        self.gateway.answers.fold()

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.gateway.start()
                    if self._parses:
                        await self.parser.start()
                    # a reload's activates in its carry-over
                    self.gateway.rollouts.activate()
                except Exception as exc:
                    log.exception("gateway failed to start")
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                _settle_garbage_collector()
                if self._parses:
                    # the requests are served here, not by workers
                    install_call_count(asyncio.get_running_loop(), self._settle)
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await asyncio.gather(*self._retiring, return_exceptions=True)
                await self.gateway.stop()
                await self.parser.close()
                await send({"type": "lifespan.shutdown.complete"})
                return


def _after(barrier: Barrier, send: Send) -> Send:
    """``send``, whose answer waits for ``barrier`` first: a state change made by the request
    (a drain, a reload) has reached every worker when the operator reads its answer."""

    async def sending(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            await barrier(WRITE_BARRIER_S)
        await send(message)

    return sending


def _client_from_worker(scope: Scope) -> None:
    """A request a data-plane worker forwarded (this server then listens on the control's
    private socket, which no client reaches): its client's address, as the worker says."""
    for name, value in scope["headers"]:
        if name == PEER_HEADER:
            mark_forwarded(scope, value.decode("latin-1"))
            return


async def _retire(gateway: Gateway, edge: Edge, grace_s: float = RETIRE_GRACE_S) -> None:
    """Stops a replaced gateway once every request its edge took is answered (bounded):
    one still reading its body has not reached admission yet, but will use its transport."""
    loop = asyncio.get_running_loop()
    until = loop.time() + grace_s
    while edge.open > 0 or not gateway.pipeline.admission.idle.is_set():
        if loop.time() >= until:
            break
        await asyncio.sleep(RETIRE_POLL_S)
    await gateway.stop()


def _settle_garbage_collector() -> None:
    """Moves start-up objects out of the collector's sight; keeps young collections short.

    Everything loaded at start-up (frameworks, config, models) would otherwise be re-walked
    by every older-generation collection, which showed as p99 under load. The young generation
    stays small: much of what a request allocates ends up as cyclic garbage, and a large young
    collection pauses every request in flight (loadtests/bench_overhead.py shows both).
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(2_000, 10, 100)
