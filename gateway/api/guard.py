"""The control plane's gate: Host check, then key, then JSON-only state changes.

Everything outside ``/v2`` is control plane (default deny: a route added later is keyed
without anyone remembering to key it); ``/metrics`` also opens to a metrics key. In order:

1. ``Host`` (port ignored) must be in ``server.allowed_hosts``, else 421: a page that
   rebinds its own DNS name to this address cannot read ``/admin/state`` under its name.
2. ``Authorization: Bearer <key>`` (`ControlAccess`), else 401 with ``WWW-Authenticate``; a
   wrong key's 401 comes after a delay that grows with its address's failures, and an address
   with too many queued gets 429 before its key is read (`gateway.api.auth_failures`). Every
   refusal is counted by gate (``gateway_admin_auth_failures_total``). A request a worker
   forwarded (`forwarded`) is answered at once, its delay in `HOLD_HEADER`: the worker holds
   the answer on the client's own exchange, so that the delay never holds one of the few
   connections all control-plane requests share (`gateway.worker.http.proxy`).
3. A method other than GET/HEAD needs ``Content-Type: application/json``, else 415: a
   browser's cross-site "simple" request (text/plain, form) is never a state change, and
   no CORS header is ever sent, so no page may send the JSON one.

The data plane (``/v2/...``) is not checked here (see docs/access.md, "Who may call what"). A
request let through the admin gate carries its operator's name (never the key) in
``scope["state"]["operator"]`` for the audit trail (`operator_of`).
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Awaitable, Callable

from gateway.api.auth import LOOPBACK_NAMES, ControlAccess, Gate, bearer_token
from gateway.api.auth_failures import AuthFailures
from gateway.api.dashboard import PAGE_PATHS
from gateway.api.responses import Receive, Scope, Send, send_json
from gateway.clock import MonotonicClock

ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
# (gate, status): one refusal, for the metrics
Refused = Callable[[str, int], None]

SAFE_METHODS = frozenset({"GET", "HEAD"})
# seconds a forwarding worker holds the answer (read by `gateway.worker.http.proxy`)
HOLD_HEADER = b"x-gateway-hold-s"
# in ``scope["state"]``: a worker forwarded the request
FORWARDED = "forwarded"
WILDCARD_BINDS = frozenset({"", "0.0.0.0", "::", "[::]"})


def gate_of(path: str) -> Gate:
    if path == "/v2" or path.startswith("/v2/"):
        return Gate.OPEN
    if path in PAGE_PATHS:
        # the page and its files: a browser opens it, then fetches with a key
        return Gate.PAGE
    return Gate.METRICS if path == "/metrics" else Gate.ADMIN


def allowed_hosts(configured: tuple[str, ...] | None, bind_host: str) -> frozenset[str]:
    """``server.allowed_hosts``, or by default the loopback names plus a specific bind host."""
    if configured is not None:
        return frozenset(configured)
    hosts = set(LOOPBACK_NAMES)
    host = bind_host.lower()
    if host not in WILDCARD_BINDS:
        hosts.add(f"[{host}]" if ":" in host and not host.startswith("[") else host)
    return frozenset(hosts)


def host_name(header: bytes) -> str:
    """A ``Host`` header's name without its port: ``[::1]:8000`` -> ``[::1]``."""
    host = header.decode("latin-1").strip().lower()
    if host.startswith("["):
        return host[: host.find("]") + 1]
    return (host.rpartition(":")[0] if ":" in host else host).rstrip(".")


def mark_forwarded(scope: Scope, peer: str) -> None:
    """A request a worker forwarded for a client at ``peer``: its delays are the worker's."""
    scope["client"] = (peer, 0)
    scope.setdefault("state", {})[FORWARDED] = True


def forwarded(scope: Scope) -> bool:
    return bool(scope.get("state", {}).get(FORWARDED))


def client_address(scope: Scope) -> str:
    """Who sent the request, as the table of failures keys it: its IP address, an IPv6 one
    by its /64 (what one host is usually given)."""
    client = scope.get("client")
    host = str(client[0]) if client else "unknown"
    if ":" in host:
        try:
            return str(ipaddress.IPv6Network(f"{host}/64", strict=False))
        except ValueError:
            return host
    return host


class ControlPlaneGuard:
    def __init__(
        self,
        app: ASGIApp,
        access: ControlAccess,
        hosts: frozenset[str],
        failures: AuthFailures | None = None,
        refused: Refused | None = None,
    ) -> None:
        """``failures``: the addresses' wrong keys (kept across reloads by the app);
        ``refused``: told of each refusal for a key (the metrics)."""
        self._app = app
        self.access = access
        self._hosts = hosts
        self._any_host = "*" in hosts
        self.failures = failures if failures is not None else AuthFailures(MonotonicClock())
        self._refused: Refused = refused or (lambda gate, status: None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        gate = gate_of(scope["path"])
        if gate is Gate.OPEN:
            await self._app(scope, receive, send)
            return
        host = authorization = content_type = None
        for name, value in scope["headers"]:
            if name == b"host":
                host = value
            elif name == b"authorization":
                authorization = value
            elif name == b"content-type":
                content_type = value
        if not self._any_host and (host is None or host_name(host) not in self._hosts):
            shown = host.decode("latin-1")[:100] if host is not None else "(none)"
            message = f"Host {shown!r} is not allowed here (server.allowed_hosts)"
            await send_json(send, 421, {"error": message})
        elif gate is Gate.PAGE or self.access.anonymous:
            # no key to check
            await self._allowed(scope, receive, send, gate, content_type, authorization)
        else:
            await self._keyed(scope, receive, send, gate, content_type, authorization)

    async def _keyed(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        gate: Gate,
        content_type: bytes | None,
        authorization: bytes | None,
    ) -> None:
        """A gate that needs a key: 429 while the address is held back, 401 without the key."""
        address = client_address(scope)
        wait = self.failures.held_back(address)
        if wait is not None:
            self._refused(gate.value, 429)
            message = "too many wrong keys from this address: try again later"
            retry_after = str(math.ceil(wait)).encode()
            await send_json(send, 429, {"error": message}, [(b"retry-after", retry_after)])
        elif not self.access.allows(gate, authorization):
            await self._unauthorized(scope, send, gate, authorization, address)
        else:
            self.failures.succeeded(address)
            await self._allowed(scope, receive, send, gate, content_type, authorization)

    async def _unauthorized(
        self, scope: Scope, send: Send, gate: Gate, authorization: bytes | None, address: str
    ) -> None:
        """401; a wrong key's after its address's delay (a missing one is no guess: at once),
        waited here or, for a forwarded request, by the worker."""
        headers = [(b"www-authenticate", b'Bearer realm="gateway"')]
        if bearer_token(authorization) is not None:
            delay = self.failures.failed(address)
            if forwarded(scope):
                headers.append((HOLD_HEADER, f"{delay:.3f}".encode()))
            else:
                await self.failures.wait(delay)
        self._refused(gate.value, 401)
        which = "an admin or metrics key" if gate is Gate.METRICS else "an admin key"
        await send_json(
            send,
            401,
            {"error": f"this endpoint needs {which}: Authorization: Bearer <key>"},
            headers,
        )

    async def _allowed(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        gate: Gate,
        content_type: bytes | None,
        authorization: bytes | None,
    ) -> None:
        if scope["method"] not in SAFE_METHODS and not _is_json(content_type):
            message = f"{scope['method']} {scope['path']} takes Content-Type: application/json"
            await send_json(send, 415, {"error": message})
        else:
            if gate is Gate.ADMIN:
                who = self.access.operator(authorization)
                scope.setdefault("state", {})["operator"] = who or "unknown"
            await self._app(scope, receive, send)


def operator_of(scope: Scope) -> str:
    """The name of the operator whose key the guard accepted for this request."""
    return str(scope.get("state", {}).get("operator") or "unknown")


def _is_json(content_type: bytes | None) -> bool:
    if content_type is None:
        return False
    return content_type.split(b";", 1)[0].strip().lower() == b"application/json"
