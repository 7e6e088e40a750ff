"""How many client connections each door (REST, gRPC) holds at once: ``server.max_connections``,
or a default derived from this process's file-descriptor limit.

Every client connection is a file descriptor, and so is every connection to a replica, every
probe, the parse processes' pipes, the log, the config and the models read at a reload. With no
cap, enough clients that connect and send nothing take every descriptor the process has: the
doors can no longer accept anyone, and the gateway can no longer reach its replicas. A door at
its cap refuses the next connection at once (it is closed), so a client sees a refusal it can
act on, never a connection that hangs unanswered.

The default, for a soft limit ``nofile`` (read when asked, after `gateway.cli` raised it to the
hard limit at start):

- `FIXED_RESERVE` descriptors are kept for the process itself (files, pipes, the event loop's
  own, the listening sockets, Redis, DNS);
- the replicas' connections get what their pools may open (each replica
  ``upstream.max_connections_per_replica`` plus `CONTROL_CONNECTIONS` for probes and metadata;
  a discovered pool counts ``discovery.max_members`` replicas), but at most half of the rest;
- the two doors share what is left equally, each between `MIN_DEFAULT` and `MAX_DEFAULT`
  (past that, a connection costs more memory than its descriptor: set it higher on purpose).

The REST server and the gRPC door both read their cap with `door_connections`.
"""

from __future__ import annotations

import resource

from gateway.config.models import GatewayConfig

# descriptors kept for the process itself, whatever the limit
FIXED_RESERVE = 128
# per replica, beside its infer pool: probes, metadata, readings
CONTROL_CONNECTIONS = 2
# REST and gRPC: each gets its share whether or not gRPC is served
DOORS = 2
# even at a tiny limit, a door takes this many
MIN_DEFAULT = 16
# the default's ceiling, however high the limit
MAX_DEFAULT = 16_384
# what RLIM_INFINITY counts as
UNLIMITED = 1 << 20


def fd_limit() -> int:
    """This process's soft limit on open file descriptors (`RLIMIT_NOFILE`)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return UNLIMITED if soft == resource.RLIM_INFINITY else soft


def upstream_connections(config: GatewayConfig) -> int:
    """The most connections the config's pools may hold open to their replicas at once."""
    per_replica = config.upstream.max_connections_per_replica + CONTROL_CONNECTIONS
    replicas = 0
    for pool in config.pools.values():
        replicas += pool.discovery.max_members if pool.discovery is not None else len(pool.replicas)
    return replicas * per_replica


def default_connections(config: GatewayConfig, nofile: int) -> int:
    """The derivation above, for a soft limit of ``nofile`` descriptors."""
    spare = max(0, nofile - FIXED_RESERVE)
    upstream = min(upstream_connections(config), spare // 2)
    share = (spare - upstream) // DOORS
    return max(MIN_DEFAULT, min(MAX_DEFAULT, share))


def door_connections(config: GatewayConfig, nofile: int | None = None) -> int:
    """The connections one door accepts at once: ``server.max_connections`` if set, else the
    default for ``nofile`` (None: this process's soft limit now)."""
    configured = config.server.max_connections
    if configured is not None:
        return configured
    return default_connections(config, fd_limit() if nofile is None else nofile)
