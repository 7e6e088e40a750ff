"""The control plane's door: Host check, then key, then JSON-only state changes.

Everything outside ``/v2`` is control plane (default deny: a route added later is keyed
without anyone remembering to key it); ``/metrics`` also opens to a metrics key. In order:

1. ``Host`` (port ignored) must be in ``server.allowed_hosts``, else 421: a page that
   rebinds its own DNS name to this address cannot read ``/admin/state`` under its name.
2. ``Authorization: Bearer <key>`` (`ControlAccess`), else 401 with ``WWW-Authenticate``.
3. A method other than GET/HEAD needs ``Content-Type: application/json``, else 415: a
   browser's cross-site "simple" request (text/plain, form) is never a state change, and
   no CORS header is ever sent, so no page may send the JSON one.

The data plane (``/v2/...``) is not checked here (see docs/access.md, "Who may call what"). A
request let through the admin door carries its operator's name (never the key) in
``scope["state"]["operator"]`` for the audit trail (`operator_of`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from gateway.api.auth import LOOPBACK_NAMES, ControlAccess, Door
from gateway.api.dashboard import PAGE_PATHS
from gateway.api.responses import Receive, Scope, Send, send_json

ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

SAFE_METHODS = frozenset({"GET", "HEAD"})
WILDCARD_BINDS = frozenset({"", "0.0.0.0", "::", "[::]"})


def door_of(path: str) -> Door:
    if path == "/v2" or path.startswith("/v2/"):
        return Door.OPEN
    if path in PAGE_PATHS:  # the page and its files: a browser opens it, then fetches with a key
        return Door.PAGE
    return Door.METRICS if path == "/metrics" else Door.ADMIN


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


class ControlPlaneGuard:
    def __init__(self, app: ASGIApp, access: ControlAccess, hosts: frozenset[str]) -> None:
        self._app = app
        self.access = access
        self._hosts = hosts
        self._any_host = "*" in hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        door = door_of(scope["path"])
        if door is Door.OPEN:
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
        elif not self.access.allows(door, authorization):
            which = "an admin or metrics key" if door is Door.METRICS else "an admin key"
            await send_json(
                send, 401, {"error": f"this endpoint needs {which}: Authorization: Bearer <key>"},
                [(b"www-authenticate", b'Bearer realm="gateway"')],
            )  # fmt: skip
        elif scope["method"] not in SAFE_METHODS and not _is_json(content_type):
            message = f"{scope['method']} {scope['path']} takes Content-Type: application/json"
            await send_json(send, 415, {"error": message})
        else:
            if door is Door.ADMIN:
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
